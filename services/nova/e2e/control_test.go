package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Steering a running execution on the embedded servers: cancel, wait nodes
// resumed by signals or their timeout, durable sleeps and retry policies.

// cancelExec publishes a CancelExecution for id, as the gateway and the CLI do.
func (e *env) cancelExec(id, reason, by string) {
	e.t.Helper()
	err := e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), "cancel-"+uuid.NewString(), bus.TypeExecutionCancel,
		&novav1.CancelExecution{ExecutionId: id, Reason: reason, RequestedBy: by}, map[string]string{bus.ExtensionExecutionID: id})
	if err != nil {
		e.t.Fatal(err)
	}
}

// signalExec publishes a SignalExecution and returns its event id.
func (e *env) signalExec(id, name string, payload any) string {
	e.t.Helper()
	obj, err := jsonvalue.ObjectOf(payload)
	if err != nil {
		e.t.Fatal(err)
	}
	evID := "signal-" + uuid.NewString()
	err = e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), evID, bus.TypeExecutionSignal,
		&novav1.SignalExecution{ExecutionId: id, Signal: name, Payload: obj.Proto(), SentBy: "e2e"}, map[string]string{bus.ExtensionExecutionID: id})
	if err != nil {
		e.t.Fatal(err)
	}
	return evID
}

// rejection waits for the SignalRejected event of signal event evID.
func (e *env) rejection(id, evID string) *novav1.SignalRejected {
	e.t.Helper()
	var rej novav1.SignalRejected
	_, err := e.waitMsg(bus.StreamEvents, bus.EventSubject(id, bus.KindSignalRejected), func(m jetstream.Msg) bool {
		return decodeMsg(m, &rej) == nil && rej.SignalEventId == evID
	})
	if err != nil {
		e.t.Fatalf("no rejection of signal %s: %v", evID, err)
	}
	return &rej
}

// waitingFor waits until execution id's node waits (NodeWaiting of kind;
// "": of any kind).
func (e *env) waitingFor(id, node, kind string) *novav1.NodeWaiting {
	e.t.Helper()
	var w novav1.NodeWaiting
	_, err := e.waitMsg(bus.StreamEvents, bus.EventSubject(id, bus.KindNodeWaiting), func(m jetstream.Msg) bool {
		return decodeMsg(m, &w) == nil && w.NodeId == node && (kind == "" || w.Kind == kind)
	})
	if err != nil {
		e.t.Fatalf("node %s of %s does not wait (%s): %v", node, id, kind, err)
	}
	return &w
}

// decodeMsg reads the CloudEvent of a stream message into into.
func decodeMsg(m jetstream.Msg, into proto.Message) error {
	ev, err := bus.EventOf(m)
	if err != nil {
		return err
	}
	return bus.Decode(*ev, into)
}

// timerScheduled reports whether the timers stream holds a schedule for
// execution id.
func (e *env) timersOf(id string) map[string]uint64 {
	e.t.Helper()
	return e.subjects(bus.StreamTimers, "nova.timer.set."+id+".>")
}

const approvalWorkflow = `
name: approval
nodes:
  - {id: start, type: start}
  - {id: total, type: action, code: 'context["total"] = 1250'}
  - id: approval
    type: wait
    signal: approval
    description: Approve the payment of the invoice
    timeout: 1h
    decide_on: approved
    schema:
      type: object
      required: [approved]
      properties:
        approved: {type: boolean}
        reviewed_by: {type: string}
        limit: {type: number}
  - {id: pay, type: action, code: 'context["paid"] = True'}
  - {id: hold, type: action, code: 'context["paid"] = False'}
  - {id: done, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: approval}
  - {from: approval, to: pay, condition: "true"}
  - {from: approval, to: hold, condition: "false"}
  - {from: pay, to: done}
  - {from: hold, to: done}
`

func TestWaitForSignal(t *testing.T) {
	e := startEnv(t)
	def := parse(t, approvalWorkflow)
	exec, err := e.client.Start(e.ctx, def, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	w := e.waitingFor(exec.ID, "approval", "signal")
	if w.Signal != "approval" || w.Description != "Approve the payment of the invoice" || w.Until == nil || !strings.Contains(w.Schema, `"approved"`) {
		t.Errorf("waiting = %v; want signal approval with its description, schema and a deadline", w)
	}
	// The timer goes to its own stream in the same batch as the event
	// that says the node waits: it may be stored a moment after.
	e.eventually(testTimeout/3, "the waiting execution has its timeout's schedule, and only it", func() bool { return len(e.timersOf(exec.ID)) == 1 })

	// Signals the node does not take leave it waiting, each rejected with why.
	rej := e.rejection(exec.ID, e.signalExec(exec.ID, "payment", map[string]any{"approved": true}))
	mustContain(t, "wrong signal's rejection", rej.Reason, `no wait node of workflow`, `signal "payment"`, `waits for signal "approval"`)
	rej = e.rejection(exec.ID, e.signalExec(exec.ID, "approval", map[string]any{"approved": "yes"}))
	mustContain(t, "bad payload's rejection", rej.Reason, "approved")
	rej = e.rejection(exec.ID, e.signalExec(exec.ID, "approval", map[string]any{"reviewed_by": "manager_1"}))
	mustContain(t, "missing field's rejection", rej.Reason, "approved")
	if st := e.state(exec.ID); st.Status != "running" || execution.WaitingFor(st) != "approval" {
		t.Fatalf("after rejected signals: %s waiting for %q; want running, waiting for approval", st.Status, execution.WaitingFor(st))
	}

	// A result for a step the execution never issued changes nothing; it
	// is dropped, logged and counted.
	forged := &novav1.CodeExecuted{ExecutionId: exec.ID, NodeId: "approval", StepId: "forged-" + uuid.NewString(), Sequence: 1,
		Status: "success", ContextUpdates: jsonvalue.Object{"approved": json.RawMessage("true")}.Proto()}
	subject := bus.EventSubject(exec.ID, bus.KindSandboxResult)
	if err := e.bus.PublishProto(e.ctx, subject, forged.StepId, bus.TypeSandboxExecuted, forged,
		map[string]string{bus.ExtensionExecutionID: exec.ID}); err != nil {
		t.Fatal(err)
	}
	events, err := e.bus.JetStream().Stream(e.ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	sent, err := events.GetLastMsgForSubject(e.ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	e.eventually(10*time.Second, "the engine acknowledges the forged result", func() bool {
		return e.consumerInfo(bus.StreamEvents, bus.ConsumerEngineResults).AckFloor.Stream >= sent.Sequence
	})
	if n := counterBy(t, e, "nova_engine_results_dropped_total", "reason")["not_pending"]; n != 1 {
		t.Errorf("nova_engine_results_dropped_total{reason=not_pending} = %v, want 1", n)
	}
	mustContain(t, "the engine's log", e.logs.String(), "result dropped", forged.StepId)
	if st := e.state(exec.ID); st.Status != "running" || execution.WaitingFor(st) != "approval" {
		t.Fatalf("after a forged result: %s waiting for %q; want running, waiting for approval", st.Status, execution.WaitingFor(st))
	}

	e.signalExec(exec.ID, "approval", `{"approved": true, "reviewed_by": "manager_1", "limit": 1500.0}`)
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	succeeded(t, wc)
	if want := "start total approval pay done"; strings.Join(wc.Path, " ") != want {
		t.Errorf("path = %v, want %s", wc.Path, want)
	}
	if !strings.Contains(string(wc.Context.GetRaw()), `"limit":1500.0`) || ctxMap(wc.Context)["reviewed_by"] != "manager_1" {
		t.Errorf("context = %s; want the payload merged, 1500.0 kept", wc.Context.GetRaw())
	}
	doc := nodeDoc(t, e.chain(exec.ID), "approval", 1)
	if doc.Status != "success" || doc.DecisionResult != "true" || doc.PathTaken != "pay" {
		t.Errorf("approval's chain of work: status %s, decision %q, path %q", doc.Status, doc.DecisionResult, doc.PathTaken)
	}
	e.eventually(5*time.Second, "the timeout's schedule is removed", func() bool { return len(e.timersOf(exec.ID)) == 0 })

	// A signal for the ended execution is rejected, naming its status.
	rej = e.rejection(exec.ID, e.signalExec(exec.ID, "approval", map[string]any{"approved": true}))
	mustContain(t, "late signal's rejection", rej.Reason, "succeeded")

	// A signal for an execution that does not exist is kept as a dead
	// letter naming why, and writes no event under that id.
	ghost := uuid.NewString()
	evID := e.signalExec(ghost, "approval", map[string]any{"approved": true})
	var dl novav1.DeadLetter
	_, err = e.waitMsg(bus.StreamDeadLetters, bus.DeadLetterSubject(bus.ConsumerEngineCommands), func(m jetstream.Msg) bool {
		ev, err := bus.EventOf(m)
		return err == nil && bus.Decode(*ev, &dl) == nil && slices.Contains(slices.Collect(maps.Values(dl.Headers)), evID)
	})
	if err != nil {
		t.Fatalf("no dead letter of the signal for execution %s: %v", ghost, err)
	}
	mustContain(t, "dead letter of a signal for no execution", dl.Reason, "does not exist", ghost, `"approval"`)
	info, err := events.Info(e.ctx, jetstream.WithSubjectFilter(bus.ExecutionFilter(ghost)))
	if err != nil {
		t.Fatal(err)
	}
	if len(info.State.Subjects) != 0 {
		t.Errorf("events written under %s, which no execution has: %v", ghost, info.State.Subjects)
	}
}

func TestWaitTimeout(t *testing.T) {
	e := startEnv(t)
	t.Run("timeout edge", func(t *testing.T) {
		def := parse(t, `
name: wait-timeout
nodes:
  - {id: start, type: start}
  - {id: ask, type: wait, signal: go, timeout: 1s}
  - {id: went, type: action, code: 'context["how"] = "signal"'}
  - {id: late, type: action, code: 'context["how"] = "timeout"'}
  - {id: done, type: end}
edges:
  - {from: start, to: ask}
  - {from: ask, to: went}
  - {from: ask, to: late, condition: timeout}
  - {from: went, to: done}
  - {from: late, to: done}
`)
		start := time.Now()
		wc := e.run(def, nil)
		succeeded(t, wc)
		if ctxMap(wc.Context)["how"] != "timeout" {
			t.Errorf("how = %v, want timeout", ctxMap(wc.Context)["how"])
		}
		if d := time.Since(start); d < time.Second {
			t.Errorf("the wait ended after %s, before its timeout", d)
		}
		doc := nodeDoc(t, e.chain(wc.ExecutionId), "ask", 1)
		if !doc.TimedOut || doc.PathTaken != "late" {
			t.Errorf("ask's chain of work: timed_out %v, path %q; want the timeout edge", doc.TimedOut, doc.PathTaken)
		}
	})
	t.Run("no timeout edge fails the node", func(t *testing.T) {
		def := parse(t, `
name: wait-fails
nodes:
  - {id: start, type: start}
  - {id: ask, type: wait, signal: go, timeout: 1s}
  - {id: done, type: end}
edges:
  - {from: start, to: ask}
  - {from: ask, to: done}
`)
		wc := e.run(def, nil)
		if wc.Status != "failed" || !strings.Contains(wc.Error, `no signal "go" came within 1s`) {
			t.Errorf("status %s, error %q; want failed, no signal within 1s", wc.Status, wc.Error)
		}
	})
}

func TestSleep(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: sleeper
nodes:
  - {id: start, type: start}
  - {id: nap, type: sleep, duration: 2s}
  - {id: until, type: sleep, until: wake_at}
  - {id: done, type: end}
edges:
  - {from: start, to: nap}
  - {from: nap, to: until}
  - {from: until, to: done}
`)
	start := time.Now()
	exec, err := e.client.Start(e.ctx, def, "", map[string]any{"wake_at": start.Add(-time.Hour).Format(time.RFC3339)})
	if err != nil {
		t.Fatal(err)
	}
	w := e.waitingFor(exec.ID, "nap", "sleep")
	due := w.Until.AsTime()
	if d := due.Sub(start); d < 2*time.Second || d > 4*time.Second {
		t.Errorf("nap sleeps until %s after the start, want 2s", d)
	}
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	succeeded(t, wc)
	nap := nodeDoc(t, e.chain(exec.ID), "nap", 1)
	if late := nap.CompletedAt.Sub(due); late < 0 || late > time.Second {
		t.Errorf("nap ended %s after its deadline; want within a second, never before", late)
	}

	bad, err := e.client.Run(e.ctx, def, map[string]any{"wake_at": "tomorrow"})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Status != "failed" || !strings.Contains(bad.Error, `"tomorrow" is not an RFC 3339 time`) {
		t.Errorf("until = tomorrow: status %s, error %q; want failed naming the value", bad.Status, bad.Error)
	}
}

// flaky is a service on the host's loopback that fails its first requests.
func flaky(t *testing.T, failures int32) (host string, calls *atomic.Int32) {
	calls = &atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := calls.Add(1); n <= failures {
			http.Error(w, fmt.Sprintf("flaky: call %d fails", n), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprint(w, "ok")
	}))
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return u.Host, calls
}

func retryWorkflow(host, retry string) string {
	return fmt.Sprintf(`
name: flaky-call
nodes:
  - {id: start, type: start}
  - id: call
    type: action
    network: true
    allow_hosts: ["%s"]
    retry: %s
    code: |
      import requests
      r = requests.get("http://%s/", timeout=10)
      r.raise_for_status()
      context["answer"] = r.text
  - {id: done, type: end}
edges:
  - {from: start, to: call}
  - {from: call, to: done}
`, host, retry, host)
}

func TestRetryPolicy(t *testing.T) {
	e := startEnv(t)
	t.Run("two failures, third attempt passes", func(t *testing.T) {
		host, calls := flaky(t, 2)
		def := parse(t, retryWorkflow(host, "{max_attempts: 3, initial_interval: 500ms, backoff_coefficient: 2}"))
		wc := e.run(def, nil)
		succeeded(t, wc)
		if calls.Load() != 3 || ctxMap(wc.Context)["answer"] != "ok" {
			t.Errorf("%d calls, answer %v; want 3 calls and ok", calls.Load(), ctxMap(wc.Context)["answer"])
		}
		chain := e.chain(wc.ExecutionId)
		var prev time.Time
		for i, want := range []struct {
			status string
			wait   time.Duration
		}{{"failed", 0}, {"failed", 500 * time.Millisecond}, {"success", time.Second}} {
			doc := nodeDoc(t, chain, "call", i+1)
			if doc.Status != want.status || doc.Attempt != i+1 {
				t.Errorf("visit %d: status %s, attempt %d; want %s, attempt %d", i+1, doc.Status, doc.Attempt, want.status, i+1)
			}
			if want.status == "failed" && !strings.Contains(doc.ErrorMessage, "503") {
				t.Errorf("visit %d: error %q, want the service's 503", i+1, doc.ErrorMessage)
			}
			if i > 0 && doc.StartedAt.Sub(prev) < want.wait {
				t.Errorf("attempt %d began %s after attempt %d ended; want at least %s", i+1, doc.StartedAt.Sub(prev), i, want.wait)
			}
			prev = *doc.CompletedAt
		}
	})
	t.Run("attempts run out", func(t *testing.T) {
		host, calls := flaky(t, 5)
		def := parse(t, retryWorkflow(host, "{max_attempts: 2, initial_interval: 100ms}"))
		wc := e.run(def, nil)
		if wc.Status != "failed" || calls.Load() != 2 || !strings.Contains(wc.Error, "503") {
			t.Errorf("status %s after %d calls, error %q; want failed after 2 calls with the 503", wc.Status, calls.Load(), wc.Error)
		}
	})
	t.Run("kinds not listed are not retried", func(t *testing.T) {
		host, calls := flaky(t, 5)
		def := parse(t, retryWorkflow(host, "{max_attempts: 3, initial_interval: 100ms, on: [timeout]}"))
		wc := e.run(def, nil)
		if wc.Status != "failed" || calls.Load() != 1 {
			t.Errorf("status %s after %d calls; want failed after one call (errors are not retried)", wc.Status, calls.Load())
		}
	})
}

func TestCancel(t *testing.T) {
	e := startEnv(t)
	t.Run("running node", func(t *testing.T) {
		def := parse(t, `
name: long
nodes:
  - {id: start, type: start}
  - {id: first, type: action, code: 'context["a"] = 1'}
  - {id: slow, type: action, timeout: 120s, code: 'import time; time.sleep(100)'}
  - {id: done, type: end}
edges:
  - {from: start, to: first}
  - {from: first, to: slow}
  - {from: slow, to: done}
`)
		exec, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.waitRunning(exec.ID, "slow")
		e.cancelExec(exec.ID, "wrong invoice", "alice")
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status != "cancelled" || wc.CancelledBy != "alice" || wc.CancelReason != "wrong invoice" {
			t.Fatalf("completion: %s by %q for %q; want cancelled by alice for wrong invoice", wc.Status, wc.CancelledBy, wc.CancelReason)
		}
		// The sandbox stops the program: its command is answered long
		// before the program's 100 s.
		e.eventually(10*time.Second, "the sandbox let go of the cancelled run", func() bool {
			return e.consumerInfo(bus.StreamCommands, bus.AgentSandbox).NumAckPending == 0
		})
		doc := nodeDoc(t, e.chain(exec.ID), "slow", 1)
		if doc.Status != "cancelled" || !strings.Contains(doc.ErrorMessage, "cancelled by alice: wrong invoice") {
			t.Errorf("slow's chain of work: %s %q; want cancelled by alice", doc.Status, doc.ErrorMessage)
		}
		before := e.state(exec.ID)
		// Again: nothing changes.
		e.cancelExec(exec.ID, "again", "bob")
		if err := e.client.WaitConsumerIdle(e.ctx, bus.StreamCommands, bus.ConsumerEngineCommands); err != nil {
			t.Fatal(err)
		}
		if after := e.state(exec.ID); after.CancelledBy != "alice" || after.CompletedAt.AsTime() != before.CompletedAt.AsTime() {
			t.Errorf("a second cancel changed the execution: cancelled by %q at %v", after.CancelledBy, after.CompletedAt.AsTime())
		}
	})
	t.Run("waiting node", func(t *testing.T) {
		exec, err := e.client.Start(e.ctx, parse(t, approvalWorkflow), "", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.waitingFor(exec.ID, "approval", "signal")
		e.cancelExec(exec.ID, "", "api")
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status != "cancelled" || wc.Error != "cancelled by api" {
			t.Errorf("completion: %s %q; want cancelled by api", wc.Status, wc.Error)
		}
		e.eventually(5*time.Second, "the wait's timeout schedule is removed", func() bool { return len(e.timersOf(exec.ID)) == 0 })
	})
}
