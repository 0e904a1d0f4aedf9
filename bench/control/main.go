// Command benchcontrol measures the steering of running executions on
// `nova dev`, each figure beside a baseline measured in the same run:
//
//   - cancel: from a cancel command to the cancelled program's process gone
//     (polled in /proc) and to the completion event, p50/p99 over -cancels
//     runs; baseline: the same program's process killed with SIGKILL by
//     this program, until gone.
//   - waiting: CPU time and RSS of the nova dev process over -idle with
//     -waiting executions waiting at a wait node; baseline: the same span
//     before any was started.
//   - timers: lateness of -timers sleeps of 2 s started at once (a sleep
//     node's end after its deadline), p50/p99; baseline: as many bare
//     JetStream message schedules due 2 s out on the same server, read by a
//     plain consumer (what the server's scheduler itself takes).
//
// `make bench-control` builds the binaries and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

type config struct {
	bin     string
	cancels int
	waiting int
	idle    time.Duration
	timers  int
	keep    bool
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchcontrol", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	fs.IntVar(&cfg.cancels, "cancels", 20, "cancelled runs")
	fs.IntVar(&cfg.waiting, "waiting", 1000, "executions waiting at a wait node")
	fs.DurationVar(&cfg.idle, "idle", time.Minute, "how long the waiting executions (and the baseline) are measured")
	fs.IntVar(&cfg.timers, "timers", 200, "sleeps of 2 s started at once")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dir and nova dev's log")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchcontrol: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, cfg config) error {
	bin, err := filepath.Abs(cfg.bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "benchcontrol-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "benchcontrol: data and log in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	proc, natsPort, _, err := loadgen.NovaDev(bin, dir)
	if err != nil {
		return err
	}
	if err := proc.Start(); err != nil {
		return err
	}
	defer proc.Stop()
	running, cancel := proc.WhileRunning(ctx)
	defer cancel()
	b, err := loadgen.Connect(running, fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "benchcontrol")
	if err != nil {
		return loadgen.ExitedError(ctx, running, err)
	}
	defer b.Close()
	fmt.Printf("steering executions on nova dev (%s)\n\n", proc.Describe())
	if err := benchCancel(running, b, proc.Pid(), cfg.cancels); err != nil {
		return loadgen.ExitedError(ctx, running, err)
	}
	if err := benchWaiting(running, b, proc.Pid(), cfg); err != nil {
		return loadgen.ExitedError(ctx, running, err)
	}
	if err := benchTimers(running, b, cfg.timers); err != nil {
		return loadgen.ExitedError(ctx, running, err)
	}
	return nil
}

// start publishes the start of def as execution id.
func start(ctx context.Context, b *bus.Bus, def *novav1.WorkflowDefinition, id, contextJSON string) error {
	return b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+id, bus.TypeWorkflowStart,
		&novav1.StartWorkflow{ExecutionId: id, Definition: def, Context: &novav1.JSONValue{Raw: []byte(contextJSON)}},
		map[string]string{bus.ExtensionExecutionID: id})
}

func cancelExec(ctx context.Context, b *bus.Bus, id string) error {
	return b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "cancel-"+id, bus.TypeExecutionCancel,
		&novav1.CancelExecution{ExecutionId: id, Reason: "benchmark", RequestedBy: "benchcontrol"},
		map[string]string{bus.ExtensionExecutionID: id})
}

// The program a cancel stops: it names its process (PR_SET_NAME), so that
// this program finds it in /proc, and sleeps.
const sleeperWorkflow = `
name: bench-cancel
nodes:
  - {id: start, type: start}
  - id: sleeper
    type: action
    timeout: 120
    code: |
      import ctypes, time
      ctypes.CDLL(None).prctl(15, context["name"].encode(), 0, 0, 0)
      time.sleep(100)
  - {id: done, type: end}
edges: [{from: start, to: sleeper}, {from: sleeper, to: done}]
`

// findProc is the process named name (its comm), 0 when none.
func findProc(name string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile(filepath.Join("/proc", e.Name(), "comm"))
		if err == nil && strings.TrimSpace(string(comm)) == name {
			return pid
		}
	}
	return 0
}

// gone waits until process pid has exited (its /proc entry is gone or a
// zombie) and returns when.
func gone(ctx context.Context, pid int) (time.Time, error) {
	for ctx.Err() == nil {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return time.Now(), nil
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			return time.Now(), nil
		}
		time.Sleep(200 * time.Microsecond)
	}
	return time.Time{}, ctx.Err()
}

// waitProc waits for the process named name to run.
func waitProc(ctx context.Context, name string) (int, error) {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if pid := findProc(name); pid != 0 {
			return pid, nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("no process named %s ran", name)
}

// completion waits for execution id's completion event.
func completion(ctx context.Context, js jetstream.JetStream, id string) (*novav1.WorkflowCompleted, time.Time, error) {
	cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(id, bus.KindWorkflowCompleted)}})
	if err != nil {
		return nil, time.Time{}, err
	}
	for ctx.Err() == nil {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			continue
		}
		if err != nil {
			return nil, time.Time{}, err
		}
		at := time.Now()
		ev, err := bus.DecodeNATS(msg.Headers(), msg.Data())
		if err != nil {
			return nil, at, err
		}
		var wc novav1.WorkflowCompleted
		return &wc, at, bus.Decode(*ev, &wc)
	}
	return nil, time.Time{}, ctx.Err()
}

func benchCancel(ctx context.Context, b *bus.Bus, _ int, n int) error {
	def := loadgen.Workflow(sleeperWorkflow)
	var toGone, toDone, killed []time.Duration
	for i := range 2 * n {
		name := fmt.Sprintf("nvcancel-%d", i)
		id := "bench-cancel-" + uuid.NewString()
		if err := start(ctx, b, def, id, fmt.Sprintf(`{"name": %q}`, name)); err != nil {
			return err
		}
		pid, err := waitProc(ctx, name)
		if err != nil {
			return err
		}
		if i%2 == 1 { // the baseline: a bare SIGKILL of the same program
			sent := time.Now()
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
				return err
			}
			at, err := gone(ctx, pid)
			if err != nil {
				return err
			}
			killed = append(killed, at.Sub(sent))
			if _, _, err := completion(ctx, b.JetStream(), id); err != nil {
				return err
			}
			continue
		}
		sent := time.Now()
		if err := cancelExec(ctx, b, id); err != nil {
			return err
		}
		var wg sync.WaitGroup
		var goneAt time.Time
		var goneErr error
		wg.Go(func() { goneAt, goneErr = gone(ctx, pid) })
		wc, doneAt, err := completion(ctx, b.JetStream(), id)
		wg.Wait()
		if err != nil || goneErr != nil {
			return errors.Join(err, goneErr)
		}
		if wc.Status != "cancelled" {
			return fmt.Errorf("execution %s ended %s, want cancelled", id, wc.Status)
		}
		toGone = append(toGone, goneAt.Sub(sent))
		toDone = append(toDone, doneAt.Sub(sent))
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "cancel (%d runs each)\tp50\tp99\n", n)
	row(w, "cancel command -> program's process gone", toGone)
	row(w, "cancel command -> completion event (cancelled)", toDone)
	row(w, "baseline: SIGKILL of the same process -> gone", killed)
	fmt.Fprintln(w)
	return w.Flush()
}

func row(w *tabwriter.Writer, what string, ds []time.Duration) {
	fmt.Fprintf(w, "  %s\t%v\t%v\n", what, loadgen.Percentile(ds, 0.5).Round(10*time.Microsecond), loadgen.Percentile(ds, 0.99).Round(10*time.Microsecond))
}

// measure is the CPU nova dev used over d and its RSS at the end.
func measure(ctx context.Context, pid int, d time.Duration) (time.Duration, int64, error) {
	c0, _, err := loadgen.Usage(pid)
	if err != nil {
		return 0, 0, err
	}
	select {
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	case <-time.After(d):
	}
	c1, rss, err := loadgen.Usage(pid)
	return c1 - c0, rss, err
}

const waitWorkflow = `
name: bench-wait
nodes:
  - {id: start, type: start}
  - {id: approval, type: wait, signal: approval, timeout: 1h}
  - {id: done, type: end}
edges: [{from: start, to: approval}, {from: approval, to: done}]
`

func benchWaiting(ctx context.Context, b *bus.Bus, pid int, cfg config) error {
	if err := loadgen.WaitIdle(ctx, b.JetStream(), bus.StreamEvents, "audit"); err != nil {
		return err
	}
	idleCPU, idleRSS, err := measure(ctx, pid, cfg.idle)
	if err != nil {
		return err
	}
	def := loadgen.Workflow(waitWorkflow)
	ids := make([]string, cfg.waiting)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-wait-%d-%s", i, uuid.NewString()[:8])
		if err := start(ctx, b, def, ids[i], "{}"); err != nil {
			return err
		}
	}
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if err != nil {
		return err
	}
	// Every one waits once its state says so.
	for _, id := range ids {
		for {
			entry, err := kv.Get(ctx, id)
			if err == nil && waiting(entry.Value()) {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if err := loadgen.WaitIdle(ctx, b.JetStream(), bus.StreamEvents, "audit"); err != nil {
		return err
	}
	waitCPU, waitRSS, err := measure(ctx, pid, cfg.idle)
	if err != nil {
		return err
	}
	for _, id := range ids {
		if err := cancelExec(ctx, b, id); err != nil {
			return err
		}
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "nova dev over %s\tCPU time\tCPU %%\tRSS\n", cfg.idle)
	fmt.Fprintf(w, "  %d executions waiting at a wait node\t%v\t%.2f%%\t%.1f MiB\n", cfg.waiting, waitCPU, 100*waitCPU.Seconds()/cfg.idle.Seconds(), float64(waitRSS)/1024)
	fmt.Fprintf(w, "  baseline: none running\t%v\t%.2f%%\t%.1f MiB\n", idleCPU, 100*idleCPU.Seconds()/cfg.idle.Seconds(), float64(idleRSS)/1024)
	fmt.Fprintln(w)
	return w.Flush()
}

// waiting tells whether a stored execution state waits for a signal.
func waiting(state []byte) bool {
	var st novav1.ExecutionState
	return proto.Unmarshal(state, &st) == nil && execution.WaitingFor(&st) != ""
}

const sleepWorkflow = `
name: bench-sleep
nodes:
  - {id: start, type: start}
  - {id: nap, type: sleep, duration: 2s}
  - {id: done, type: end}
edges: [{from: start, to: nap}, {from: nap, to: done}]
`

func benchTimers(ctx context.Context, b *bus.Bus, n int) error {
	js := b.JetStream()
	// The sleeps: the deadline each NodeWaiting names, the end each
	// NodeCompleted records.
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventFilter(bus.KindNodeWaiting), bus.EventFilter(bus.KindNodeCompleted)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: info.State.LastSeq + 1})
	if err != nil {
		return err
	}
	def := loadgen.Workflow(sleepWorkflow)
	prefix := "bench-sleep-" + uuid.NewString()[:8]
	for i := range n {
		if err := start(ctx, b, def, fmt.Sprintf("%s-%d", prefix, i), "{}"); err != nil {
			return err
		}
	}
	due := map[string]time.Time{}
	ended := map[string]time.Time{}
	for len(ended) < n {
		msg, err := cons.Next(jetstream.FetchMaxWait(30 * time.Second))
		if err != nil {
			return fmt.Errorf("sleeps: %d of %d ended: %w", len(ended), n, err)
		}
		ev, err := bus.EventOf(msg)
		if err != nil {
			return err
		}
		switch ev.Type() {
		case bus.TypeNodeWaiting:
			var w novav1.NodeWaiting
			if err := bus.Decode(*ev, &w); err != nil {
				return err
			}
			if strings.HasPrefix(w.ExecutionId, prefix) {
				due[w.ExecutionId] = w.Until.AsTime()
			}
		case bus.TypeNodeCompleted:
			var nc novav1.NodeCompleted
			if bus.Decode(*ev, &nc) == nil && nc.NodeId == "nap" && strings.HasPrefix(nc.ExecutionId, prefix) {
				ended[nc.ExecutionId] = nc.CompletedAt.AsTime()
			}
		}
	}
	var late []time.Duration
	for id, end := range ended {
		d, ok := due[id]
		if !ok {
			return fmt.Errorf("sleep %s ended with no deadline seen (%d deadlines, %d ends)", id, len(due), len(ended))
		}
		late = append(late, end.Sub(d))
	}
	base, err := bareSchedules(ctx, b, n)
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "timer lateness (%d due 2 s after they were set, at once)\tp50\tp99\tmax\n", n)
	fmt.Fprintf(w, "  sleep node: its end after its deadline\t%v\t%v\t%v\n", loadgen.Percentile(late, 0.5).Round(time.Millisecond),
		loadgen.Percentile(late, 0.99).Round(time.Millisecond), slices.Max(late).Round(time.Millisecond))
	fmt.Fprintf(w, "  baseline: bare message schedule, read after its time\t%v\t%v\t%v\n", loadgen.Percentile(base, 0.5).Round(time.Millisecond),
		loadgen.Percentile(base, 0.99).Round(time.Millisecond), slices.Max(base).Round(time.Millisecond))
	return w.Flush()
}

// bareSchedules publishes n message schedules due 2 s out to the timers
// stream and reads what they publish: lateness of each after its time.
func bareSchedules(ctx context.Context, b *bus.Bus, n int) ([]time.Duration, error) {
	js := b.JetStream()
	run := uuid.NewString()[:8]
	cons, err := js.CreateOrUpdateConsumer(ctx, bus.StreamTimers, jetstream.ConsumerConfig{
		Durable: "benchcontrol-" + run, FilterSubject: "nova.timer.bench." + run + ".fired.>", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		return nil, err
	}
	defer js.DeleteConsumer(context.WithoutCancel(ctx), bus.StreamTimers, "benchcontrol-"+run)
	at := time.Now().Add(2 * time.Second)
	for i := range n {
		msg := &nats.Msg{Subject: fmt.Sprintf("nova.timer.bench.%s.set.%d", run, i), Header: nats.Header{}, Data: []byte(at.Format(time.RFC3339Nano))}
		for k, v := range bus.ScheduleAt(at, fmt.Sprintf("nova.timer.bench.%s.fired.%d", run, i)) {
			msg.Header.Set(k, v)
		}
		if _, err := js.PublishMsg(ctx, msg); err != nil {
			return nil, err
		}
	}
	var late []time.Duration
	for len(late) < n {
		batch, err := cons.Fetch(n-len(late), jetstream.FetchMaxWait(10*time.Second))
		if err != nil {
			return nil, err
		}
		got := 0
		for m := range batch.Messages() {
			got++
			now := time.Now()
			due, err := time.Parse(time.RFC3339Nano, string(m.Data()))
			if err != nil {
				return nil, err
			}
			late = append(late, now.Sub(due))
			_ = m.Ack()
		}
		if got == 0 {
			return nil, fmt.Errorf("bare schedules: %d of %d came", len(late), n)
		}
	}
	return late, nil
}
