// Package service connects the sandbox runner to the bus: it takes
// ExecuteCode commands from nova.cmd.sandbox, runs them and publishes the
// CodeExecuted result for the graph engine.
package service

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/jsrunner"
	"github.com/novaflow/nova/services/sandbox/outputschema"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// Consumer is the sandbox's durable consumer, shared by all replicas.
const Consumer = "sandbox"

// Deps are what the sandbox service needs.
type Deps struct {
	Bus    *bus.Bus
	Runner *runner.Runner
	// JS runs JavaScript nodes; nil answers them runtime_unavailable.
	JS     *jsrunner.Runner
	Values *valueref.Store
	Logger *slog.Logger
	// Workers is how many programs this replica runs at once.
	Workers int
	// Python is the runtime's interpreter, described at start-up for the
	// code validator and search_documentation (default /usr/bin/python3).
	Python string
	// RuntimeCacheDir caches runtime descriptions by the runtime's
	// fingerprint, so a runtime described once is published at once after a
	// restart or on a fresh NATS (default runtimeinfo.DefaultCacheDir()).
	RuntimeCacheDir string
	// Replicas of the runtime description's bucket when it is created.
	Replicas int
	// MeterProvider receives nova.sandbox.executions and
	// nova.sandbox.execution.duration; nil discards them.
	MeterProvider metric.MeterProvider
	// TracerProvider receives a "sandbox execute" span per program; nil
	// records none.
	TracerProvider trace.TracerProvider
}

// Run serves commands until ctx ends; programs already running finish.
func Run(ctx context.Context, d Deps) error {
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if err := d.Bus.EnsureStreams(ctx); err != nil {
		return err
	}
	m, err := newExecutionMetrics(d.MeterProvider)
	if err != nil {
		return err
	}
	tp := d.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	// Every replica hears every cancellation: the programs of a cancelled
	// execution are killed wherever they run.
	cancels, err := d.Bus.NewCancels(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer cancels.Close()
	results, err := openResults(ctx, d.Bus.JetStream(), d.Replicas)
	if err != nil {
		return err
	}
	s := &server{Deps: d, metrics: m, cancels: cancels, results: results, tracer: tp.Tracer("github.com/novaflow/nova/services/sandbox/service")}
	// Describing the runtime takes a second or two; programs are served meanwhile.
	pctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { publishRuntime(pctx, d) })
	defer func() { cancel(); wg.Wait() }()
	return d.Bus.Consume(ctx, ConsumerSpec(d.Workers), s.handle)
}

// publishRuntime publishes the modules and library documentation of the
// runtime. Without it the code validator skips its installed-module check and
// search_documentation has nothing to answer from, but programs still run, so
// a failure is logged, not fatal.
func publishRuntime(ctx context.Context, d Deps) {
	python := d.Python
	if python == "" {
		python = "/usr/bin/python3"
	}
	start := time.Now()
	info, cached, err := runtimeinfo.GenerateCached(ctx, python, cmp.Or(d.RuntimeCacheDir, runtimeinfo.DefaultCacheDir()))
	if err == nil {
		err = runtimeinfo.Publish(ctx, d.Bus.JetStream(), info, runtimeinfo.WithReplicas(d.Replicas))
	}
	if err != nil {
		if ctx.Err() == nil {
			d.Logger.Error("runtime description not published", "python", python, "err", err)
		}
		return
	}
	d.Logger.Info("runtime description published", "python", info.Python, "modules", len(info.Modules), "libraries", len(info.Libraries),
		"cached", cached, "took", time.Since(start).Round(time.Millisecond))
}

// ConsumerSpec describes the sandbox's work-queue consumer.
func ConsumerSpec(workers int) bus.Consumer {
	return bus.Consumer{
		Stream:  bus.StreamCommands,
		Durable: Consumer,
		Filters: []string{bus.CommandSubject(bus.AgentSandbox)},
		Workers: max(workers, 1),
		// Long programs are kept alive by in-progress acks; a replica that
		// dies mid-run gives its command back after bus.DefaultAckWait.
		MaxDeliver: 3,
	}
}

type server struct {
	Deps
	metrics executionMetrics
	// results keeps the result of a run whose publish failed, for the
	// command's next delivery (kept.go).
	results jetstream.KeyValue
	cancels *bus.Cancels
	tracer  trace.Tracer
}

func (s *server) handle(ctx context.Context, ev event.Event) error {
	var cmd novav1.ExecuteCode
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	trace.SpanFromContext(ctx).SetAttributes(
		attribute.String("execution.id", cmd.ExecutionId),
		attribute.String("node.id", cmd.NodeId),
		attribute.Int("attempt", int(cmd.Attempt)))
	if cmd.ExecutionId == "" || cmd.StepId == "" {
		return bus.Permanent(errors.New("execute command without execution_id or step_id"))
	}
	ctx, span := s.tracer.Start(ctx, "sandbox execute", trace.WithAttributes(
		attribute.String("execution.id", cmd.ExecutionId),
		attribute.String("node.id", cmd.NodeId),
		attribute.Int("attempt", int(cmd.Attempt)),
		attribute.Int("step.number", int(cmd.StepNumber)),
		attribute.String("language", cmd.Language),
		attribute.String("stage", cmd.Stage)))
	subject, err := bus.ResultSubject(cmd.ExecutionId, bus.AgentSandbox, cmd.ReplyKind)
	if err != nil {
		span.End()
		return bus.Permanent(err)
	}
	if bus.Delivered(ctx) > 1 {
		// Delivered again: a result this command's run kept is published
		// rather than the program run again.
		kept, err := s.keptResult(ctx, &cmd)
		if err != nil {
			span.End()
			return err
		}
		if kept != nil {
			s.Logger.InfoContext(ctx, "command delivered again: its kept result is published, the program is not run again",
				"execution_id", cmd.ExecutionId, "step_id", cmd.StepId, "deliveries", bus.Delivered(ctx))
			span.SetAttributes(attribute.Bool("result.kept", true))
			span.End()
			return s.publish(ctx, subject, &cmd, kept)
		}
	}
	start := time.Now()
	// The program runs under a context that the cancellation of its
	// execution ends, which kills it and every process it started; its
	// result is still published (with ctx, which the cancellation does not
	// end), so the command is settled and not run again.
	runCtx, release := s.cancels.StartStep(cmd.ExecutionId, cmd.StepId, ctx)
	var res *novav1.CodeExecuted
	if cancelled(runCtx) {
		res = cancelledResult(&cmd)
	} else {
		res, err = s.execute(runCtx, &cmd)
		if err != nil && cancelled(runCtx) {
			res, err = cancelledResult(&cmd), nil
			res.DurationMs = float64(time.Since(start).Microseconds()) / 1000
		}
	}
	release()
	if err == nil {
		err = s.fit(ctx, res)
	}
	outcome := outcomeOf(res, err)
	s.metrics.record(ctx, cmd.Language, outcome, time.Since(start))
	span.SetAttributes(attribute.String("outcome", outcome))
	span.End()
	if err != nil {
		return err // a fault of this replica: redelivered, elsewhere if possible
	}
	if err := s.publishResult(ctx, subject, &cmd, res); err != nil {
		// A publish that fails is not a reason to run the program again:
		// the result is kept, and the command's next delivery publishes it.
		s.keep(ctx, &cmd, res)
		return err
	}
	return nil
}

// publishResult publishes res, the result of a run of cmd, unless a test
// refuses it first (refusePublish).
func (s *server) publishResult(ctx context.Context, subject string, cmd *novav1.ExecuteCode, res *novav1.CodeExecuted) error {
	if refusePublish != nil {
		if err := refusePublish(ctx, cmd); err != nil {
			return err
		}
	}
	return s.publish(ctx, subject, cmd, res)
}

// publish sends res, the result of cmd, on subject; its event id is the
// step's, so a result published twice within the stream's duplicate
// window is stored once.
func (s *server) publish(ctx context.Context, subject string, cmd *novav1.ExecuteCode, res *novav1.CodeExecuted) error {
	return s.Bus.PublishProto(ctx, subject, cmd.StepId+"/result", bus.TypeSandboxExecuted, res, map[string]string{"executionid": cmd.ExecutionId})
}

// refusePublish, when set (by tests), runs before the publish of a run's
// result; an error it returns is the publish's, as when the stream refused
// the result.
var refusePublish func(context.Context, *novav1.ExecuteCode) error

// cancelled tells whether ctx ended because its execution was cancelled.
func cancelled(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), bus.ErrExecutionCancelled)
}

// cancelledResult answers a command whose execution was cancelled: its
// program was killed, or never started.
func cancelledResult(cmd *novav1.ExecuteCode) *novav1.CodeExecuted {
	out := newResult(cmd)
	out.Status, out.ErrorKind, out.Error = runner.StatusError, runner.KindCancelled, bus.ErrExecutionCancelled.Error()
	return out
}

// newResult is the result of cmd with what it echoes of the command.
func newResult(cmd *novav1.ExecuteCode) *novav1.CodeExecuted {
	return &novav1.CodeExecuted{
		ExecutionId: cmd.ExecutionId,
		NodeId:      cmd.NodeId,
		StepId:      cmd.StepId,
		Visit:       cmd.Visit,
		Attempt:     cmd.Attempt,
		StepNumber:  cmd.StepNumber,
		Sequence:    cmd.Sequence,
	}
}

func (s *server) execute(ctx context.Context, cmd *novav1.ExecuteCode) (*novav1.CodeExecuted, error) {
	out := newResult(cmd)
	input, err := jsonvalue.FromProto(cmd.GetContext())
	if err != nil {
		out.Status, out.ErrorKind = "error", "code_error"
		out.Error = fmt.Sprintf("the command's context must be a JSON object: %v", err)
		return out, nil
	}
	if s.Values != nil {
		if err := s.Values.Expand(ctx, input); err != nil {
			if errors.Is(err, valueref.ErrBadRef) {
				out.Status, out.ErrorKind, out.Error = "error", "code_error", err.Error()
				return out, nil
			}
			return nil, fmt.Errorf("resolve context references: %w", err)
		}
	}
	res, js, err := s.run(ctx, runner.Request{
		Code:       cmd.Code,
		Context:    input,
		Timeout:    time.Duration(cmd.TimeoutSeconds * float64(time.Second)),
		Stage:      cmd.Stage,
		Network:    cmd.Network,
		AllowHosts: cmd.AllowHosts,
		Language:   cmd.Language,
	})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", cmd.StepId, err)
	}
	out.Status = res.Status
	out.Error = res.Error
	out.ErrorKind = res.ErrorKind
	out.Limit = res.Limit
	out.Traceback = truncate(res.Traceback, maxTraceback)
	out.Stdout, out.Stderr = res.Stdout, res.Stderr
	out.StdoutDroppedBytes, out.StderrDroppedBytes = res.StdoutDropped, res.StderrDropped
	out.DurationMs = float64(res.Duration.Microseconds()) / 1000
	out.SandboxId = res.SandboxID
	out.DeletedKeys = res.Deleted
	if js != nil {
		s.addJavaScript(out, js)
	}
	if res.Status != "success" {
		return out, nil
	}
	if err := s.addUpdates(ctx, out, res.Updates, js); err != nil {
		return nil, err
	}
	return out, nil
}

// run runs req on the runner of its language; js is the JavaScript runner's
// full result, nil for Python. Without a JavaScript runtime a JavaScript
// program gets a runtime_unavailable result.
func (s *server) run(ctx context.Context, req runner.Request) (res runner.Result, js *jsrunner.Result, err error) {
	switch strings.ToLower(req.Language) {
	case "javascript", "js", "node":
		if s.JS == nil {
			return runner.Result{Status: "error", ErrorKind: runner.KindRuntimeUnavailable,
				Error: "this sandbox has no JavaScript runtime"}, nil, nil
		}
		r, err := s.JS.Run(ctx, req)
		return r.Result, &r, err
	default:
		res, err = s.Runner.Run(ctx, req)
		return res, nil, err
	}
}

// addUpdates carries a successful run's context updates, large values by
// reference, and the analysis of its output's shape.
func (s *server) addUpdates(ctx context.Context, out *novav1.CodeExecuted, updates jsonvalue.Object, js *jsrunner.Result) error {
	var analysis outputschema.Analysis
	if js != nil && js.HasValue {
		v, _ := jsonvalue.Decode(js.Value)
		analysis = outputschema.ForValue(v)
	} else if decoded, err := updates.Decoded(); err == nil {
		analysis = outputschema.ForUpdates(decoded)
	}
	if a, err := analysis.ToStruct(); err == nil {
		out.OutputAnalysis = a
	}
	if s.Values != nil {
		if err := s.Values.Shrink(ctx, updates); err != nil {
			return fmt.Errorf("store large results: %w", err)
		}
	}
	out.ContextUpdates = updates.Proto()
	return nil
}

// maxValueBytes bounds the JavaScript value carried in the result event;
// the value also reaches the context through the updates, by reference when
// large.
const maxValueBytes = 256 << 10

// addJavaScript carries what only JavaScript runs have: the value the code
// gave, its items, and its console logs (which are its stdout too, for the
// chain of work).
func (s *server) addJavaScript(out *novav1.CodeExecuted, js *jsrunner.Result) {
	out.Logs = js.Logs
	if len(js.Logs) > 0 {
		out.Stdout = strings.Join(js.Logs, "\n") + "\n" + out.Stdout
	}
	if !js.HasValue {
		return
	}
	if len(js.Value) > maxValueBytes {
		return
	}
	out.Result, out.Items = jsonvalue.Proto(js.Value), jsonvalue.Proto(js.Items)
}

// maxTraceback keeps a runaway traceback (deep recursion) from making the
// result event larger than the bus accepts.
const maxTraceback = 32 << 10

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n/2] + "\n... [truncated] ...\n" + s[len(s)-n/2:]
}
