// Package loadgen drives a NOVA deployment from outside, the way a producer
// does: it publishes the documented start event (io.nova.workflow.start.v1)
// for many workflows at a bounded number in flight, waits for each
// completion, and reads the outcomes back from the events stream. It also
// starts and kills the processes under test. The chaos and load benchmark
// programs share it.
package loadgen

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	return ds[min(len(ds)-1, int(float64(len(ds))*p))]
}

// Load starts workflows, inFlight at a time, each with a fixed execution
// and event id so that a start published again is the same start.
type Load struct {
	b   *bus.Bus
	def *novav1.WorkflowDefinition
	// completions is one consumer for the completions of every workflow,
	// as the client library waits (bus.Waits).
	completions *bus.Waits
	// IDs are the execution ids, one per workflow.
	IDs []string
	// Started is when each workflow's start was first published.
	Started []time.Time
	// Completed counts the workflows whose completion was seen.
	Completed atomic.Int64
	// Outcomes are the completions seen, one per workflow (nil: none
	// yet), as they were delivered: a run longer than the events stream
	// keeps an ended execution's events has them all.
	Outcomes []*Outcome
	// Context is each workflow's initial context, as JSON (nil:
	// {"n": i}).
	Context func(i int) string
}

func NewLoad(b *bus.Bus, def *novav1.WorkflowDefinition, n int) *Load {
	l := &Load{b: b, def: def, IDs: make([]string, n), Started: make([]time.Time, n),
		Outcomes: make([]*Outcome, n), completions: b.CompletionWaits()}
	for i := range n {
		l.IDs[i] = uuid.NewString()
	}
	return l
}

func (l *Load) Run(ctx context.Context, inFlight int) {
	var wg sync.WaitGroup
	next := make(chan int)
	for range inFlight {
		wg.Go(func() {
			for i := range next {
				if l.one(ctx, i) {
					l.Completed.Add(1)
				}
			}
		})
	}
	for i := range l.IDs {
		select {
		case next <- i:
		case <-ctx.Done():
		}
	}
	close(next)
	wg.Wait()
	l.completions.Close()
}

// one starts workflow i and waits for its completion.
func (l *Load) one(ctx context.Context, i int) bool {
	id := l.IDs[i]
	subject := bus.EventSubject(id, bus.KindWorkflowCompleted)
	done := make(chan struct{}, 1)
	var stop func()
	for ctx.Err() == nil {
		var err error
		stop, err = l.completions.Add(ctx, subject, func(ev *event.Event) {
			var wc novav1.WorkflowCompleted
			if bus.Decode(*ev, &wc) == nil && l.Outcomes[i] == nil {
				l.Outcomes[i] = &Outcome{Completion: &wc, At: ev.Time()}
			}
			select {
			case done <- struct{}{}:
			default:
			}
		})
		if err == nil {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if stop == nil {
		return false
	}
	defer stop()

	text := fmt.Sprintf(`{"n": %d}`, i)
	if l.Context != nil {
		text = l.Context(i)
	}
	initial, err := jsonvalue.ObjectOf(text)
	if err != nil {
		panic(err)
	}
	start := &novav1.StartWorkflow{ExecutionId: id, Definition: l.def, Context: initial.Proto()}
	l.Started[i] = time.Now()
	// Published again, with the same event id, until the stream has it:
	// the server may be down for a moment.
	for {
		err := l.b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+id, bus.TypeWorkflowStart, start,
			map[string]string{bus.ExtensionExecutionID: id})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(500 * time.Millisecond):
		}
	}
	select {
	case <-done:
		return true
	case <-ctx.Done():
		return false
	}
}

type Outcome struct {
	Completion *novav1.WorkflowCompleted
	At         time.Time
}

// Completions reads the workflow completions in the events stream, every
// one, or with since set those stored from then on (a run's, without reading
// the history before it); the time of a completion is its event's time.
func Completions(ctx context.Context, js jetstream.JetStream, since time.Time) (map[string]Outcome, error) {
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.EventFilter(bus.KindWorkflowCompleted)}}
	if !since.IsZero() {
		cfg.DeliverPolicy, cfg.OptStartTime = jetstream.DeliverByStartTimePolicy, &since
	}
	oc, err := js.OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return nil, fmt.Errorf("read completions: %w", err)
	}
	out := map[string]Outcome{}
	for {
		batch, err := oc.FetchNoWait(500)
		if err != nil {
			return nil, fmt.Errorf("read completions: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			ev, err := bus.DecodeNATS(m.Headers(), m.Data())
			if err != nil {
				return nil, fmt.Errorf("completion at %s: %w", m.Subject(), err)
			}
			var wc novav1.WorkflowCompleted
			if err := bus.Decode(*ev, &wc); err != nil {
				return nil, fmt.Errorf("completion at %s: %w", m.Subject(), err)
			}
			if _, seen := out[wc.ExecutionId]; !seen {
				out[wc.ExecutionId] = Outcome{Completion: &wc, At: ev.Time()}
			}
		}
		if err := batch.Error(); err != nil {
			return nil, fmt.Errorf("read completions: %w", err)
		}
		if n == 0 {
			return out, nil
		}
	}
}

func WaitConsumer(ctx context.Context, js jetstream.JetStream, stream, durable string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		// Each request bounded: on a cluster one may go unanswered.
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := js.Consumer(actx, stream, durable)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("consumer %s on %s not declared: %w", durable, stream, errors.Join(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitServices waits until the graph engine, the sandbox and the audit
// service have declared their durable consumers: from then on what a
// producer publishes is kept for them.
func WaitServices(ctx context.Context, js jetstream.JetStream) error {
	for _, c := range []struct{ stream, durable string }{
		{bus.StreamCommands, bus.ConsumerEngineCommands}, {bus.StreamEvents, bus.ConsumerEngineResults},
		{bus.StreamCommands, sandboxservice.Consumer}, {bus.StreamEvents, auditservice.Consumer},
	} {
		if err := WaitConsumer(ctx, js, c.stream, c.durable); err != nil {
			return err
		}
	}
	return nil
}

// WaitPulling waits until a consumer has a pull request waiting: the
// service that consumes it runs (after a restart of the server, the pull
// requests of processes gone are gone too).
func WaitPulling(ctx context.Context, js jetstream.JetStream, stream, durable string) error {
	return waitInfo(ctx, js, stream, durable, time.Minute, 50*time.Millisecond, "nobody pulls from "+durable,
		func(info *jetstream.ConsumerInfo) bool { return info.NumWaiting > 0 })
}

// WaitIdle waits until a consumer has nothing pending or unacknowledged.
func WaitIdle(ctx context.Context, js jetstream.JetStream, stream, durable string) error {
	return waitInfo(ctx, js, stream, durable, 2*time.Minute, 200*time.Millisecond, durable+" did not catch up",
		func(info *jetstream.ConsumerInfo) bool { return info.NumPending == 0 && info.NumAckPending == 0 })
}

// waitInfo reads a consumer's info every interval until done says so, or
// limit passes (then the error says what).
func waitInfo(ctx context.Context, js jetstream.JetStream, stream, durable string, limit, interval time.Duration, what string,
	done func(*jetstream.ConsumerInfo) bool) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	for {
		actx, cancel := context.WithTimeout(ctx, 3*time.Second)
		c, err := js.Consumer(actx, stream, durable)
		if err == nil {
			if info, err := c.Info(actx); err == nil && done(info) {
				cancel()
				return nil
			}
		}
		cancel()
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// WaitDial waits until the first server of url accepts connections.
func WaitDial(ctx context.Context, url string) error {
	first, _, _ := strings.Cut(url, ",")
	addr := strings.TrimPrefix(first, "nats://")
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil {
			return conn.Close()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nothing listens on %s (%v): %w", addr, err, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// FreePort returns a loopback port nobody listens on now.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// NovaDev is `nova dev` (the nova binary in bin) on free loopback ports,
// without its gateway, its data dir and log under dir; not started. It
// returns the ports of its NATS server and its store.
func NovaDev(bin, dir string) (p *Proc, natsPort, mongoPort int, err error) {
	if natsPort, err = FreePort(); err != nil {
		return nil, 0, 0, err
	}
	if mongoPort, err = FreePort(); err != nil {
		return nil, 0, 0, err
	}
	p = &Proc{Name: "nova dev", Path: filepath.Join(bin, "nova"), Log: filepath.Join(dir, "nova-dev.log"),
		Args: []string{"dev", "--data-dir", filepath.Join(dir, "data"), "--nats-port", fmt.Sprint(natsPort),
			"--mongo-port", fmt.Sprint(mongoPort), "--gateway-addr", "off"},
		Env: BaseEnv()}
	return p, natsPort, mongoPort, nil
}

// Proc is a child process in its own process group, so that SIGKILL takes
// its children (sandboxed programs) with it.
type Proc struct {
	Name string
	Path string
	Args []string
	Env  []string
	// Log is the file that gets its stdout and stderr.
	Log  string
	cmd  *exec.Cmd
	done chan struct{}
}

func (p *Proc) Start() error {
	f, err := os.OpenFile(p.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	cmd := exec.Command(p.Path, p.Args...)
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return fmt.Errorf("start %s: %w", p.Name, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); _ = f.Close(); close(p.done) }()
	return nil
}

// Kill sends SIGKILL to the process group and waits for the process.
func (p *Proc) Kill() error {
	if p.cmd == nil {
		return nil
	}
	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	<-p.done
	return nil
}

// Stop asks the process to stop and kills it if it has not within 10 s.
func (p *Proc) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.Kill()
	}
}

// WhileRunning returns a context that ends with ctx or when the process
// exits, whichever comes first: a wait for something the process should do
// (listen, answer) then stops at its exit instead of retrying until its own
// time runs out. cancel releases it.
func (p *Proc) WhileRunning(ctx context.Context) (context.Context, context.CancelFunc) {
	return WhileAllRunning(ctx, p)
}

// WhileAllRunning is WhileRunning for several processes: the context ends
// when the first of them exits, its cause naming that one.
func WhileAllRunning(ctx context.Context, procs ...*Proc) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	for _, p := range procs {
		if p.cmd == nil {
			cancel(fmt.Errorf("%s is not started", p.Name))
			break
		}
		cmd, done := p.cmd, p.done
		go func() {
			select {
			case <-done:
				cancel(errors.New(exitLine(p, cmd)))
			case <-ctx.Done():
			}
		}()
	}
	return ctx, func() { cancel(nil) }
}

// Exited says, of the processes that have exited, which and how; "" when
// none has.
func Exited(procs ...*Proc) string {
	var out []string
	for _, p := range procs {
		if p.cmd == nil {
			continue
		}
		select {
		case <-p.done:
			out = append(out, exitLine(p, p.cmd))
		default:
		}
	}
	return strings.Join(out, "; ")
}

// ExitedError is err, preceded by why running (a context WhileRunning
// made from ctx) ended when that was the process's exit rather than ctx;
// nil when err is.
func ExitedError(ctx, running context.Context, err error) error {
	if err != nil && running.Err() != nil && ctx.Err() == nil {
		return fmt.Errorf("%w: %w", context.Cause(running), err)
	}
	return err
}

// exitLine says that cmd, a run of p that has ended, exited: how, and the
// last line of p's log.
func exitLine(p *Proc, cmd *exec.Cmd) string {
	return fmt.Sprintf("%s (pid %d) exited (%v), its last output: %s", p.Name, cmd.Process.Pid, cmd.ProcessState, lastLine(p.Log))
}

// lastLine is the last line of the file at path, or what kept it from
// being read.
func lastLine(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	return strconv.Quote(lines[len(lines)-1])
}

func (p *Proc) Describe() string {
	if p.cmd == nil {
		return p.Name
	}
	return fmt.Sprintf("%s (pid %d)", p.Name, p.cmd.Process.Pid)
}

// BaseEnv is this process's environment without NOVA, NATS, MongoDB or
// OpenTelemetry settings, plus own.
func BaseEnv(own ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "NOVA_") || strings.HasPrefix(k, "NATS_") || strings.HasPrefix(k, "MONGODB_") ||
			strings.HasPrefix(k, "OTEL_") || strings.HasPrefix(k, "OPENAI_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, own...)
}

// Pid is the process id while it runs (0 before Start).
func (p *Proc) Pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Chain returns a workflow of n code nodes `context['x'] = 1` in a row.
func Chain(n int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: chain-%d\nnodes:\n  - {id: start, type: start}\n", n)
	for i := range n {
		fmt.Fprintf(&b, "  - {id: n%d, type: action, code: \"context['x'] = 1\"}\n", i)
	}
	b.WriteString("  - {id: done, type: end}\nedges:\n")
	prev := "start"
	for i := range n {
		fmt.Fprintf(&b, "  - {from: %s, to: n%d}\n", prev, i)
		prev = fmt.Sprintf("n%d", i)
	}
	fmt.Fprintf(&b, "  - {from: %s, to: done}\n", prev)
	return b.String()
}

// Connect connects to the NATS server at url, as name, once it accepts
// connections and NOVA's services have declared their consumers
// (WaitServices).
func Connect(ctx context.Context, url, name string) (*bus.Bus, error) {
	if err := WaitDial(ctx, url); err != nil {
		return nil, err
	}
	b, err := bus.Connect(ctx, url, bus.WithName(name), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if err := WaitServices(ctx, b.JetStream()); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

// Workflow parses and validates a benchmark's workflow, written in its
// source; one that does not parse is the benchmark's bug, and panics.
func Workflow(yaml string) *novav1.WorkflowDefinition {
	def, err := workflow.Parse([]byte(yaml))
	if err == nil {
		err = workflow.Validate(def, workflow.ValidateOptions{})
	}
	if err != nil {
		panic(err)
	}
	return def
}

// WaitJetStream waits until the NATS server (or cluster) at url answers
// JetStream requests: a cluster's first one waits for its meta leader.
func WaitJetStream(ctx context.Context, url string) error {
	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		actx, acancel := context.WithTimeout(ctx, 3*time.Second)
		_, err := js.AccountInfo(actx)
		acancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("JetStream at %s does not answer: %w", url, errors.Join(err, ctx.Err()))
		case <-time.After(200 * time.Millisecond):
		}
	}
}
