package e2e

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// Durable timers under kill -9 of the whole `nova dev`: a sleep, a wait's
// timeout and a retry's backoff set before the kill end after the restart,
// never before their deadline, whether the restart came before it or
// after; the test logs how late each ended.

// firstEvent reads the first event of subject in the events stream into m.
func firstEvent(ctx context.Context, js jetstream.JetStream, subject string, m proto.Message) error {
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return err
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			if ctx.Err() != nil {
				return fmt.Errorf("no event on %s: %w", subject, ctx.Err())
			}
			continue
		}
		if err != nil {
			return err
		}
		return decodeMsg(msg, m)
	}
}

// killWorkflows are a sleep, a wait that times out, and a code node whose
// first attempt fails (the flaky service at host) with its retry due after
// d each.
func killWorkflows(t *testing.T, d time.Duration, host string) map[string]*novav1.WorkflowDefinition {
	defs := map[string]string{
		"sleep": fmt.Sprintf(`
name: kill-sleep
nodes:
  - {id: start, type: start}
  - {id: timer, type: sleep, duration: %s}
  - {id: done, type: end}
edges: [{from: start, to: timer}, {from: timer, to: done}]
`, d),
		"wait": fmt.Sprintf(`
name: kill-wait
nodes:
  - {id: start, type: start}
  - {id: timer, type: wait, signal: never, timeout: %s}
  - {id: late, type: action, code: 'context["timed_out"] = True'}
  - {id: done, type: end}
edges: [{from: start, to: timer}, {from: timer, to: done}, {from: timer, to: late, condition: timeout}, {from: late, to: done}]
`, d),
		"retry": fmt.Sprintf(`
name: kill-retry
nodes:
  - {id: start, type: start}
  - id: timer
    type: action
    network: true
    allow_hosts: ["%s"]
    retry: {max_attempts: 2, initial_interval: %s}
    code: |
      import requests
      requests.get("http://%s/", timeout=10).raise_for_status()
  - {id: done, type: end}
edges: [{from: start, to: timer}, {from: timer, to: done}]
`, host, d, host),
	}
	out := map[string]*novav1.WorkflowDefinition{}
	for k, y := range defs {
		def, err := workflow.Parse([]byte(y))
		if err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		out[k] = def
	}
	return out
}

// startNovaDev builds nova and starts `nova dev` (no gateway) on a data
// dir of the test's, stopped when the test ends; url is its NATS server's.
func startNovaDev(t *testing.T) (proc *loadgen.Proc, url string) {
	t.Helper()
	bin := buildNova(t)
	proc, natsPort, _, err := loadgen.NovaDev(filepath.Dir(bin), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proc.Stop)
	return proc, fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
}

func TestTimersSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nova and kills `nova dev`")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	proc, url := startNovaDev(t)
	b, err := loadgen.Connect(ctx, url, "kill-test")
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	c := client.New(b, nil)

	// Each kind twice: due 8 s after it is set (the restart comes before)
	// and 2 s after (the restart comes after: the test waits past it).
	host, _ := flaky(t, 2)
	type timed struct {
		kind string
		id   string
		due  time.Time
	}
	var all []timed
	for _, d := range []time.Duration{8 * time.Second, 2 * time.Second} {
		for kind, def := range killWorkflows(t, d, host) {
			exec, err := c.Start(ctx, def, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			var w novav1.NodeWaiting
			if err := firstEvent(ctx, b.JetStream(), bus.EventSubject(exec.ID, bus.KindNodeWaiting), &w); err != nil {
				t.Fatalf("%s: %v", kind, err)
			}
			all = append(all, timed{kind: fmt.Sprintf("%s %s", kind, d), id: exec.ID, due: w.Until.AsTime()})
		}
	}
	c.Close()
	b.Close()
	if err := proc.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Past the short timers' deadlines, before the long ones'.
	for _, tm := range all {
		if d := time.Until(tm.due); d < 4*time.Second {
			time.Sleep(time.Until(tm.due.Add(500 * time.Millisecond)))
		}
	}
	restarted := time.Now()
	if err := proc.Start(); err != nil {
		t.Fatal(err)
	}
	b, err = loadgen.Connect(ctx, url, "kill-test-after")
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	defer b.Close()
	ready := time.Now()
	t.Logf("killed, restarted %s later, ready %s after the restart", restarted.Sub(killed).Round(time.Millisecond), ready.Sub(restarted).Round(time.Millisecond))

	for _, tm := range all {
		var wc novav1.WorkflowCompleted
		if err := firstEvent(ctx, b.JetStream(), bus.EventSubject(tm.id, bus.KindWorkflowCompleted), &wc); err != nil {
			t.Fatalf("%s: %v\n%s", tm.kind, err, proc.Describe())
		}
		if wc.Status != "succeeded" {
			t.Errorf("%s: %s %q, want succeeded", tm.kind, wc.Status, wc.Error)
			continue
		}
		ended := lastTimerEnd(ctx, t, b.JetStream(), tm.id)
		from := tm.due
		if ready.After(tm.due) {
			from = ready // due while everything was down: at once after the restart
		}
		late := ended.Sub(from)
		t.Logf("%s: due %s after the kill, ended %s after %s", tm.kind, tm.due.Sub(killed).Round(time.Millisecond),
			late.Round(time.Millisecond), map[bool]string{true: "the restart", false: "its deadline"}[ready.After(tm.due)])
		if ended.Before(tm.due) {
			t.Errorf("%s ended %s before its deadline", tm.kind, tm.due.Sub(ended))
		}
		// How late is a figure (logged above, and measured by make
		// bench-control), not a pass mark: on a loaded machine a restart's
		// first deliveries wait for the services to settle.
		_ = late
	}
}

// lastTimerEnd is when execution id's timer ended: the completion of the
// last visit of node "timer" (a sleep's or wait's end, a retry's attempt
// start).
func lastTimerEnd(ctx context.Context, t *testing.T, js jetstream.JetStream, id string) time.Time {
	t.Helper()
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(id, bus.KindNodeCompleted), bus.EventSubject(id, bus.KindNodeStarted)}})
	if err != nil {
		t.Fatal(err)
	}
	var end time.Time
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(500 * time.Millisecond))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			return end
		}
		if err != nil {
			t.Fatal(err)
		}
		ev, err := bus.DecodeNATS(msg.Headers(), msg.Data())
		if err != nil {
			t.Fatal(err)
		}
		switch ev.Type() {
		case bus.TypeNodeStarted:
			var ns novav1.NodeStarted
			if bus.Decode(*ev, &ns) == nil && ns.NodeId == "timer" && ns.Visit > 1 {
				end = ns.StartedAt.AsTime() // the retry's attempt began
			}
		case bus.TypeNodeCompleted:
			var nc novav1.NodeCompleted
			if bus.Decode(*ev, &nc) == nil && nc.NodeId == "timer" && nc.Status == "success" && nc.Visit == 1 {
				end = nc.CompletedAt.AsTime() // the sleep or the wait ended
			}
		}
	}
}
