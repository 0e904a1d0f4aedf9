package natsauth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/deploy/test/internal/kedascaler"
	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/syncbuf"
	"github.com/novaflow/nova/pkg/telemetry"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/graph-engine/engine"
	"github.com/novaflow/nova/services/nova/client"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

// largeValue is over the 256 KiB threshold, so it travels through the
// object store: the producer stores it, the sandbox resolves it and stores
// the large value the code returns.
const largeValue = 300 << 10

const blobWorkflow = `
name: blob-length
nodes:
  - id: start
    type: start
  - id: measure
    type: action
    code: |
      context["blob_len"] = len(context["blob"])
      context["echo"] = context["blob"] + "!"
      context["xs"] = [1, 2, 3]
  - id: size
    type: decision
    code: |
      context["branch_decision"] = "large" if context["blob_len"] > 262144 else "small"
  - id: each
    type: map
    items: xs
    output: ys
    code: |
      context["result"] = context["item"] * 2
  - id: done
    type: end
edges:
  - {from: start, to: measure}
  - {from: measure, to: size}
  - {from: size, to: each, condition: large}
  - {from: size, to: each, condition: small}
  - {from: each, to: done}
`

// TestWorkflowRunsWithEveryServiceAsItsOwnUser runs the real graph engine,
// sandbox and audit service, each connected as its own user of
// deploy/nats, and a producer as user "nova": a workflow is registered,
// started by name with a large value, runs, completes and lands in the
// chain of work, and no connection is refused anything on the way.
func TestWorkflowRunsWithEveryServiceAsItsOwnUser(t *testing.T) {
	if !bwrapAvailable() {
		t.Skip("bubblewrap is not installed (make deps): the sandbox cannot run code")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := startServer(t)
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("services' logs:\n%s", logs.String())
		}
	})

	mongo, err := devstack.StartMongo(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatalf("start FerretDB: %v", err)
	}
	t.Cleanup(func() { _ = mongo.Close() })
	st, err := chainstore.Open(ctx, mongo.URI(), "nova")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })

	conns := map[string]*violations{}
	connect := func(user string) *bus.Bus {
		b, v := s.connectBus(t, ctx, user, bus.WithLogger(log.With("service", user)))
		conns[user] = v
		return b
	}

	// Each service starts as its main does, declaring what it needs first
	// so that the producer's events are kept for it.
	svcCtx, stopServices := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(svcCtx)
	t.Cleanup(func() {
		stopServices()
		if err := g.Wait(); err != nil {
			t.Errorf("a service failed: %v", err)
		}
	})

	engineBus := connect(userGraphEngine)
	e, err := engine.Start(ctx, engine.DefaultSettings(), service.NewEnv(engineBus, nil, log.With("service", userGraphEngine), 1))
	if err != nil {
		t.Fatalf("graph-engine opens the object store and declares its streams, buckets and consumers: %v", err)
	}
	g.Go(func() error { return e.Run(gctx) })

	sandboxBus := connect(userSandbox)
	sandboxMetrics := sdkmetric.NewManualReader()
	sandboxTel := &telemetry.Telemetry{TracerProvider: tracenoop.NewTracerProvider(),
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(sandboxMetrics))}
	sbCfg := sandboxservice.DefaultConfig()
	sbCfg.Warm, sbCfg.JavaScript = false, false
	sb, err := sandboxservice.Start(ctx, sbCfg, service.NewEnv(sandboxBus, sandboxTel, log.With("service", userSandbox), 1))
	if err != nil {
		t.Fatalf("sandbox opens the object store and declares the streams and its consumer: %v", err)
	}
	t.Cleanup(func() { _ = sb.Close() })
	g.Go(func() error { return sb.Run(gctx) })

	auditBus := connect(userAudit)
	a, err := auditservice.Start(ctx, auditservice.Config{KeepEnded: 500 * time.Millisecond},
		service.NewEnv(auditBus, nil, log.With("service", userAudit), 1), auditservice.WithStore(st), auditservice.WithPurgeEvery(100*time.Millisecond))
	if err != nil {
		t.Fatalf("audit declares the streams and its consumer: %v", err)
	}
	g.Go(func() error { return a.Run(gctx) })

	producer := connect(userProducer)
	values, err := valueref.Open(ctx, producer.JetStream(), 0, 1)
	if err != nil {
		t.Fatalf("producer opens the object store: %v", err)
	}
	c := client.New(producer, values)
	def, err := workflow.Parse([]byte(blobWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Register(ctx, def); err != nil {
		t.Fatalf("register as producer: %v", err)
	}
	exec, err := c.Start(ctx, nil, def.GetName(), map[string]any{"blob": strings.Repeat("x", largeValue)})
	if err != nil {
		t.Fatalf("start as producer: %v", err)
	}
	done, err := exec.Wait(ctx)
	if err != nil {
		t.Fatalf("wait as producer: %v", err)
	}
	if done.GetStatus() != "succeeded" {
		t.Fatalf("workflow %s: %s", done.GetStatus(), done.GetError())
	}
	final := jsonvalue.MustObject(done.GetContext())
	if got := string(final["blob_len"]); got != strconv.Itoa(largeValue) {
		t.Errorf("blob_len = %s, want %d (the sandbox did not see the stored value)", got, largeValue)
	}
	if _, isRef := valueref.RawRef(final["echo"]); !isRef {
		t.Errorf("echo is not a reference: the sandbox did not store its large result")
	}
	// The map's items' results went through the engine's map results
	// bucket.
	if got := string(final["ys"]); got != "[2,4,6]" {
		t.Errorf("ys = %s, want [2,4,6]", got)
	}

	if err := c.WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
		t.Fatal(err)
	}
	doc, err := st.Execution(ctx, exec.ID)
	if err != nil {
		t.Fatalf("chain of work of %s: %v", exec.ID, err)
	}
	if doc.Status != "succeeded" || strings.Join(doc.Path, ",") != "start,measure,size,each,done" {
		t.Errorf("chain of work: status %q path %v", doc.Status, doc.Path)
	}

	// The audit service purges the ended execution's events once every
	// durable consumer has read them; a producer (nova watch) then gets its
	// completion from the engine's state.
	for {
		wc, err := c.Purged(ctx, exec.ID)
		if err != nil {
			t.Fatalf("the ended execution as producer: %v", err)
		}
		if wc != nil {
			if wc.GetStatus() != "succeeded" || wc.GetExecutionId() != exec.ID {
				t.Errorf("the purged execution's completion: %v", wc)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the ended execution's events were not purged")
		case <-time.After(100 * time.Millisecond):
		}
	}

	// The sandbox publishes its runtime's description; the code validator
	// and the code generator read it as themselves.
	for _, reader := range []string{userCodeValidator, userCodeGenerator} {
		b := connect(reader)
		info, err := waitRuntimeInfo(ctx, b)
		if err != nil {
			t.Errorf("%s reads the runtime description: %v", reader, err)
		} else if len(info.Modules) == 0 {
			t.Errorf("%s: the runtime description lists no modules", reader)
		}
	}

	// Operators see the five programs (two nodes, three items) as
	// successful Python runs.
	if n := counterValue(t, sandboxMetrics, "nova.sandbox.executions", "outcome", "success", "language", "python"); n != 5 {
		t.Errorf("nova.sandbox.executions{outcome=success,language=python} = %d, want 5", n)
	}

	for user, v := range conns {
		if got := v.list(); len(got) > 0 {
			t.Errorf("%s was refused while doing its work: %v", user, got)
		}
	}
}

// TestAgentsWorkAsTheirOwnUsers runs every agent through pkg/agent (the
// shape each agent service serves with) as its own user: the graph engine
// sends it commands, KEDA's lag for its consumer counts them, the agent
// answers, and the engine's results consumer receives the answers.
func TestAgentsWorkAsTheirOwnUsers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := startServer(t)
	const perAgent = 3

	engineBus, engineViolations := s.connectBus(t, ctx, userGraphEngine)
	if err := engineBus.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	results := bus.Consumer{Stream: bus.StreamEvents, Durable: bus.ConsumerEngineResults, Filters: []string{bus.EventFilter("result.>")}}
	if _, err := engineBus.DeclareConsumer(ctx, results); err != nil {
		t.Fatalf("graph-engine declares its results consumer: %v", err)
	}

	agentViolations := map[string]*violations{}
	for _, a := range agents {
		b, v := s.connectBus(t, ctx, a)
		agentViolations[a] = v
		spec := agentSpec(a)
		if err := b.EnsureStreams(ctx); err != nil {
			t.Fatalf("%s declares the streams: %v", a, err)
		}
		if _, err := b.DeclareConsumer(ctx, spec.Consumer()); err != nil {
			t.Fatalf("%s declares its consumer: %v", a, err)
		}
		for i := range perAgent {
			ref := &novav1.StepRef{ExecutionId: "exec-" + a, NodeId: "task", StepId: fmt.Sprintf("exec-%s/task/1/%d", a, i), Visit: 1, Attempt: 1}
			if err := engineBus.PublishProto(ctx, bus.CommandSubject(a), ref.StepId, spec.CommandType, command(a, ref),
				map[string]string{"executionid": ref.ExecutionId}); err != nil {
				t.Fatalf("graph-engine sends %s a command: %v", a, err)
			}
		}
		if lag := waitLag(t, s, bus.StreamCommands, a, perAgent); lag != perAgent {
			t.Errorf("KEDA lag of %s = %d, want %d", a, lag, perAgent)
		}
	}

	serveCtx, stopAgents := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(serveCtx)
	for _, a := range agents {
		b, v := s.connectBus(t, ctx, a)
		agentViolations[a+" (serving)"] = v
		g.Go(func() error { return serveAgent(gctx, b, a) })
	}

	var mu sync.Mutex
	got := map[string]int{}
	consumeCtx, stopConsuming := context.WithCancel(ctx)
	err := engineBus.Consume(consumeCtx, results, func(_ context.Context, ev event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		for _, a := range agents {
			if ev.Type() == agentSpec(a).ResultType {
				got[a]++
			}
		}
		total := 0
		for _, n := range got {
			total += n
		}
		if total == perAgent*len(agents) {
			stopConsuming()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("graph-engine reads results: %v", err)
	}
	stopAgents()
	if err := g.Wait(); err != nil {
		t.Errorf("an agent failed: %v", err)
	}
	for _, a := range agents {
		if got[a] != perAgent {
			t.Errorf("%s: %d results, want %d", a, got[a], perAgent)
		}
		if lag := waitLag(t, s, bus.StreamCommands, a, 0); lag != 0 {
			t.Errorf("KEDA lag of %s after the work = %d, want 0", a, lag)
		}
	}
	if v := engineViolations.list(); len(v) > 0 {
		t.Errorf("graph-engine was refused: %v", v)
	}
	for a, v := range agentViolations {
		if got := v.list(); len(got) > 0 {
			t.Errorf("%s was refused: %v", a, got)
		}
	}
}

func agentSpec(name string) agent.Spec {
	switch name {
	case userInputAnalyzer:
		return agent.Spec{Name: name, Verb: "analyze", CommandType: bus.TypeInputAnalyze, ResultType: bus.TypeInputAnalyzed}
	case userCodeGenerator:
		return agent.Spec{Name: name, Verb: "generate", CommandType: bus.TypeCodeGenerate, ResultType: bus.TypeCodeGenerated}
	case userCodeValidator:
		return agent.Spec{Name: name, Verb: "validate", CommandType: bus.TypeCodeValidate, ResultType: bus.TypeCodeValidated}
	default:
		return agent.Spec{Name: name, Verb: "validate", CommandType: bus.TypeOutputValidate, ResultType: bus.TypeOutputValidated}
	}
}

func command(name string, ref *novav1.StepRef) proto.Message {
	switch name {
	case userInputAnalyzer:
		return &novav1.AnalyzeInput{Ref: ref}
	case userCodeGenerator:
		return &novav1.GenerateCode{Ref: ref, Stage: "TASK"}
	case userCodeValidator:
		return &novav1.ValidateCode{Ref: ref, Code: "pass"}
	default:
		return &novav1.ValidateOutput{Ref: ref}
	}
}

// serveAgent answers every command with a successful result.
func serveAgent(ctx context.Context, b *bus.Bus, name string) error {
	tp := tracenoop.NewTracerProvider()
	ok := &novav1.AgentOutcome{Status: "success"}
	spec := agentSpec(name)
	switch name {
	case userInputAnalyzer:
		return agent.Serve(ctx, b, tp, spec, func() *novav1.AnalyzeInput { return &novav1.AnalyzeInput{} },
			func(_ context.Context, c *novav1.AnalyzeInput) (proto.Message, error) {
				return &novav1.InputAnalyzed{Ref: c.Ref, Outcome: ok}, nil
			})
	case userCodeGenerator:
		return agent.Serve(ctx, b, tp, spec, func() *novav1.GenerateCode { return &novav1.GenerateCode{} },
			func(_ context.Context, c *novav1.GenerateCode) (proto.Message, error) {
				return &novav1.CodeGenerated{Ref: c.Ref, Outcome: ok, Code: "pass"}, nil
			})
	case userCodeValidator:
		return agent.Serve(ctx, b, tp, spec, func() *novav1.ValidateCode { return &novav1.ValidateCode{} },
			func(_ context.Context, c *novav1.ValidateCode) (proto.Message, error) {
				return &novav1.CodeValidated{Ref: c.Ref, Outcome: ok, Valid: true}, nil
			})
	default:
		return agent.Serve(ctx, b, tp, spec, func() *novav1.ValidateOutput { return &novav1.ValidateOutput{} },
			func(_ context.Context, c *novav1.ValidateOutput) (proto.Message, error) {
				return &novav1.OutputValidated{Ref: c.Ref, Outcome: ok, Valid: true}, nil
			})
	}
}

// consumerLag is what KEDA's nats-jetstream trigger computes for account
// NOVA, stream and consumer on this single server: pending plus
// unacknowledged messages, read from /jsz?acc=NOVA&consumers=true&config=true.
func consumerLag(t *testing.T, s *natsServer, stream, consumer string) int {
	t.Helper()
	scaler, err := kedascaler.New(map[string]string{
		"natsServerMonitoringEndpoint": s.monitoringEndpoint(),
		"account":                      "NOVA",
		"stream":                       stream,
		"consumer":                     consumer,
	}, http.DefaultClient)
	if err != nil {
		t.Fatal(err)
	}
	lag, err := scaler.Lag(t.Context())
	if err != nil {
		t.Fatalf("KEDA's lag of %s on %s: %v", consumer, stream, err)
	}
	return int(lag)
}

// waitLag polls the lag until it is want (the server updates consumer state
// asynchronously, and KEDA polls too) or two seconds pass; it returns the last lag.
func waitLag(t *testing.T, s *natsServer, stream, consumer string, want int) int {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		lag := consumerLag(t, s, stream, consumer)
		if lag == want || time.Now().After(deadline) {
			return lag
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitRuntimeInfo reads the runtime description once the sandbox has
// published it (it describes its interpreter in the background at start-up).
func waitRuntimeInfo(ctx context.Context, b *bus.Bus) (*runtimeinfo.Info, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		info, err := runtimeinfo.Load(ctx, b.JetStream())
		if !errors.Is(err, runtimeinfo.ErrNotPublished) {
			return info, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// counterValue is the sum of an Int64 counter's points whose attributes
// include the given key/value pairs.
func counterValue(t *testing.T, r *sdkmetric.ManualReader, name string, kv ...string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var total int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != name || !ok {
				continue
			}
		points:
			for _, p := range sum.DataPoints {
				for i := 0; i+1 < len(kv); i += 2 {
					if v, ok := p.Attributes.Value(attribute.Key(kv[i])); !ok || v.AsString() != kv[i+1] {
						continue points
					}
				}
				total += p.Value
			}
		}
	}
	return total
}

// TestLargeValuesAsTheirOwnUsers moves a value of several megabytes through
// the object store the way NOVA does: a producer stores it, the sandbox and
// the engine read it (enough chunks for JetStream flow control to engage).
func TestLargeValuesAsTheirOwnUsers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	s := startServer(t)
	big := strings.Repeat("0123456789abcdef", 1<<19) // 8 MiB

	open := func(user string) (*valueref.Store, *violations) {
		b, v := s.connectBus(t, ctx, user)
		st, err := valueref.Open(ctx, b.JetStream(), 0, 1)
		if err != nil {
			t.Fatalf("%s opens the object store: %v", user, err)
		}
		return st, v
	}
	producer, pv := open(userProducer)
	bigJSON, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]json.RawMessage{"big": bigJSON}
	if err := producer.Shrink(ctx, m); err != nil {
		t.Fatalf("producer stores the value: %v", err)
	}
	ref := m["big"]
	for _, user := range []string{userSandbox, userGraphEngine} {
		st, v := open(user)
		got := map[string]json.RawMessage{"big": ref}
		if err := st.Expand(ctx, got); err != nil {
			t.Fatalf("%s reads the value: %v", user, err)
		}
		if string(got["big"]) != string(bigJSON) {
			t.Errorf("%s read a different value", user)
		}
		if errs := v.list(); len(errs) > 0 {
			t.Errorf("%s was refused: %v", user, errs)
		}
	}
	if errs := pv.list(); len(errs) > 0 {
		t.Errorf("producer was refused: %v", errs)
	}
	// Agents never see the bytes: they cannot open the store.
	b, v := s.connectBus(t, ctx, userCodeGenerator)
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if _, err := valueref.Open(short, b.JetStream(), 0, 1); err == nil {
		t.Error("code-generator opened the object store")
	}
	wantViolation(t, v, "$JS.API.STREAM.UPDATE.OBJ_nova_values")
}

// steeredWorkflow sleeps (a durable timer), then waits for a signal with a
// timeout (another timer, removed when the signal comes or the execution
// is cancelled). It runs no code, so it needs no sandbox.
const steeredWorkflow = `
name: steered
nodes:
  - {id: start, type: start}
  - {id: nap, type: sleep, duration: 1s}
  - {id: approve, type: wait, signal: approval, timeout: 5m}
  - {id: done, type: end}
edges:
  - {from: start, to: nap}
  - {from: nap, to: approve}
  - {from: approve, to: done}
`

// tickingWorkflow is what a schedule starts.
const tickingWorkflow = `
name: ticking
nodes:
  - {id: start, type: start}
  - {id: done, type: end}
edges:
  - {from: start, to: done}
`

// listedKinds are the kinds of events the gateway's GET
// /v1/executions/events reads, with one ordered consumer of several
// filters (services/gateway/gateway/liststream.go).
var listedKinds = []string{bus.KindWorkflowStarted, bus.KindNodeWaiting, bus.KindExecutionCancelled, bus.KindSignalRejected,
	bus.KindWorkflowCompleted}

// TestTimersSignalsCancelsAndSchedulesAsTheirOwnUsers steers executions
// the way NOVA does, each party connected as its own user: the graph engine
// sleeps (a message schedule it sets on NOVA_TIMERS, which the server fires
// and the engine consumes), waits for a signal with a timeout (a timer it
// purges once the signal came or the execution was cancelled) and keeps
// schedules in nova_schedules, whose ticks it consumes; the gateway follows
// the executions' list stream, sends a signal, a cancel and schedule
// changes and reads what comes of them (the schedules bucket, the engine's
// refusals, the registered workflows); the nova CLI waits for the signal's
// outcome and lists the schedules; the sandbox and every agent hear the
// cancellation. No connection is refused anything on the way.
func TestTimersSignalsCancelsAndSchedulesAsTheirOwnUsers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := startServer(t)
	logs := &syncbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("services' logs:\n%s", logs.String())
		}
	})
	conns := map[string]*violations{}
	connect := func(user string) *bus.Bus {
		b, v := s.connectBus(t, ctx, user, bus.WithLogger(log.With("service", user)))
		conns[user] = v
		return b
	}
	defer func() {
		for user, v := range conns {
			if got := v.list(); len(got) > 0 {
				t.Errorf("%s was refused while doing its work: %v", user, got)
			}
		}
	}()

	svcCtx, stopServices := context.WithCancel(ctx)
	g, gctx := errgroup.WithContext(svcCtx)
	t.Cleanup(func() {
		stopServices()
		if err := g.Wait(); err != nil {
			t.Errorf("a service failed: %v", err)
		}
	})
	engineBus := connect(userGraphEngine)
	e, err := engine.Start(ctx, engine.DefaultSettings(), service.NewEnv(engineBus, nil, log.With("service", userGraphEngine), 1))
	if err != nil {
		t.Fatalf("graph-engine declares its streams, buckets and consumers: %v", err)
	}
	g.Go(func() error { return e.Run(gctx) })

	// The sandbox and the agents hear cancellations as they serve
	// (bus.Cancels, a core subscription).
	hearers := map[string]*bus.Cancels{}
	for _, u := range append([]string{userSandbox}, agents...) {
		b := connect(u)
		if err := b.EnsureStreams(ctx); err != nil {
			t.Fatalf("%s declares the streams: %v", u, err)
		}
		c, err := b.NewCancels(ctx)
		if err != nil {
			t.Fatalf("%s hears cancellations: %v", u, err)
		}
		t.Cleanup(c.Close)
		hearers[u] = c
	}

	producer := connect(userProducer)
	c := client.New(producer, nil)
	for _, src := range []string{steeredWorkflow, tickingWorkflow} {
		def, err := workflow.Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Register(ctx, def); err != nil {
			t.Fatalf("register %s as producer: %v", def.GetName(), err)
		}
	}

	gw := connect(userGateway)
	list := followExecutions(t, ctx, gw)
	executions, err := gw.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if err != nil {
		t.Fatalf("gateway opens the execution states: %v", err)
	}
	// waiting waits until execution id waits at its wait node, as the
	// list stream and the engine's state (which the gateway checks before
	// it signals or cancels) say.
	waiting := func(id string) {
		t.Helper()
		list.wait(t, ctx, bus.EventSubject(id, bus.KindNodeWaiting)+" approve")
		for {
			st, err := execution.ReadState(ctx, executions, id)
			if err != nil {
				t.Fatalf("gateway reads the state of %s: %v", id, err)
			}
			if st != nil && execution.CheckSignalTarget(st, "approval") == nil {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s does not wait for its signal: %v", id, st)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	admin, _ := s.connectBus(t, ctx, userAdmin)
	// timersGone waits until NOVA_TIMERS keeps nothing on the subjects
	// matching filter: the engine purged what it no longer needs.
	timersGone := func(filter string) {
		t.Helper()
		deadline := time.After(steerWait)
		for {
			st, err := admin.JetStream().Stream(ctx, bus.StreamTimers)
			if err != nil {
				t.Fatal(err)
			}
			info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
			if err != nil {
				t.Fatal(err)
			}
			if len(info.State.Subjects) == 0 {
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("NOVA_TIMERS still keeps %v", info.State.Subjects)
			case <-deadline:
				t.Fatalf("NOVA_TIMERS still keeps %v after %v", info.State.Subjects, steerWait)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	// A signal: the gateway sends it, nova signal waits for its outcome
	// (one ordered consumer of three filters).
	// Its context holds a list large enough that the engine keeps it apart
	// from the running state (<execution>.part.<digest>), which the
	// gateway reads back with the state, and removes at the end.
	xs := make([]int, 3000)
	for i := range xs {
		xs[i] = i
	}
	approved, err := c.Start(ctx, nil, "steered", map[string]any{"xs": xs})
	if err != nil {
		t.Fatalf("start as producer: %v", err)
	}
	waiting(approved.ID)
	if st, err := execution.ReadState(ctx, executions, approved.ID); err != nil {
		t.Fatalf("gateway reads the state of %s: %v", approved.ID, err)
	} else if raw := st.GetContext().GetRaw(); !strings.Contains(string(raw), ",2999]") {
		t.Fatalf("gateway read the context %.80s...; want the list whole", raw)
	}
	outcome := &eventLog{}
	watchCtx, cancelWatch := context.WithTimeout(ctx, 15*time.Second)
	stopWatch, err := producer.Watch(watchCtx, "nova signal", bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{
		bus.EventSubject(approved.ID, bus.KindNodeCompleted),
		bus.EventSubject(approved.ID, bus.KindSignalRejected),
		bus.EventSubject(approved.ID, bus.KindWorkflowCompleted),
	}}, func(m jetstream.Msg, _ *event.Event) { outcome.add(m.Subject()) })
	cancelWatch()
	if err != nil {
		t.Fatalf("nova signal watches the signal's outcome: %v", err)
	}
	defer stopWatch()
	err = execution.PublishSignal(ctx, gw, "signal-wrong-"+approved.ID,
		&novav1.SignalExecution{ExecutionId: approved.ID, Signal: "other", SentBy: "natsauth"})
	if err != nil {
		t.Fatalf("gateway sends a signal: %v", err)
	}
	outcome.wait(t, ctx, bus.EventSubject(approved.ID, bus.KindSignalRejected))
	list.wait(t, ctx, bus.EventSubject(approved.ID, bus.KindSignalRejected))
	err = execution.PublishSignal(ctx, gw, "signal-"+approved.ID,
		&novav1.SignalExecution{ExecutionId: approved.ID, Signal: "approval", SentBy: "natsauth"})
	if err != nil {
		t.Fatalf("gateway sends a signal: %v", err)
	}
	if done, err := approved.Wait(ctx); err != nil || done.GetStatus() != execution.StatusSucceeded {
		t.Fatalf("the signalled execution: %v, %v", done, err)
	}
	outcome.wait(t, ctx, bus.EventSubject(approved.ID, bus.KindNodeCompleted))
	outcome.wait(t, ctx, bus.EventSubject(approved.ID, bus.KindWorkflowCompleted))
	timersGone("nova.timer.*." + approved.ID + ".>")

	// A cancel: the gateway sends it; the sandbox and every agent hear it.
	cancelled, err := c.Start(ctx, nil, "steered", nil)
	if err != nil {
		t.Fatalf("start as producer: %v", err)
	}
	waiting(cancelled.ID)
	err = execution.PublishCancel(ctx, gw, &novav1.CancelExecution{ExecutionId: cancelled.ID, Reason: "natsauth", RequestedBy: "natsauth"})
	if err != nil {
		t.Fatalf("gateway cancels: %v", err)
	}
	if done, err := cancelled.Wait(ctx); err != nil || done.GetStatus() != execution.StatusCancelled {
		t.Fatalf("the cancelled execution: %v, %v", done, err)
	}
	list.wait(t, ctx, bus.EventSubject(cancelled.ID, bus.KindExecutionCancelled))
	for u, h := range hearers {
		for !h.Cancelled(cancelled.ID) {
			select {
			case <-ctx.Done():
				t.Fatalf("%s did not hear the cancellation", u)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	timersGone("nova.timer.*." + cancelled.ID + ".>")

	// Schedules: the gateway (and nova schedule) reads them and sends the
	// engine commands, waiting for the engine's write or its refusal.
	schedules, err := gw.JetStream().KeyValue(ctx, bus.BucketSchedules)
	if err != nil {
		t.Fatalf("gateway opens the schedules: %v", err)
	}
	if _, err := schedules.Get(ctx, "ticking.s1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("gateway reads a schedule there is not: %v", err)
	}
	refusal := watchRefusals(t, ctx, gw)
	err = gw.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "schedule-unregistered", bus.TypeSchedulePut,
		&novav1.PutSchedule{Workflow: "unregistered", Schedule: &novav1.Schedule{Id: "s1", EverySeconds: 1}}, nil)
	if err != nil {
		t.Fatalf("gateway sends a schedule: %v", err)
	}
	refusal.wait(t, ctx, "schedule-unregistered")

	put := changeSchedule(t, ctx, gw, schedules, "ticking.s1", bus.TypeSchedulePut,
		&novav1.PutSchedule{Workflow: "ticking", Schedule: &novav1.Schedule{Id: "s1", EverySeconds: 1}})
	if put.Operation() != jetstream.KeyValuePut {
		t.Fatalf("the engine's write of the schedule: %v", put.Operation())
	}
	tick := list.waitFunc(t, ctx, func(subject string) bool {
		return strings.HasPrefix(subject, "nova.evt.ticking-s1-") && strings.HasSuffix(subject, "."+bus.KindWorkflowCompleted)
	})
	t.Logf("a tick ran: %s", tick)
	// GET /v1/schedules: a watch of the bucket's keys.
	if n := countKeys(t, ctx, schedules, "ticking.*"); n != 1 {
		t.Errorf("gateway lists %d schedules of ticking, want 1", n)
	}
	// nova schedule list: the keys, then each.
	cliSchedules, err := producer.JetStream().KeyValue(ctx, bus.BucketSchedules)
	if err != nil {
		t.Fatalf("nova opens the schedules: %v", err)
	}
	keys, err := cliSchedules.ListKeysFiltered(ctx, "ticking.>")
	if err != nil {
		t.Fatalf("nova lists the schedules: %v", err)
	}
	for k := range keys.Keys() {
		if _, err := cliSchedules.Get(ctx, k); err != nil {
			t.Errorf("nova reads schedule %s: %v", k, err)
		}
	}
	removed := changeSchedule(t, ctx, gw, schedules, "ticking.s1", bus.TypeScheduleDelete,
		&novav1.DeleteSchedule{Workflow: "ticking", ScheduleId: "s1"})
	if removed.Operation() == jetstream.KeyValuePut {
		t.Fatal("the engine did not remove the schedule")
	}
	timersGone(bus.ScheduleSubject("ticking", "s1"))

	// GET /v1/workflows (a watch of every definition) and a workflow's
	// revisions (its history).
	workflows, err := gw.JetStream().KeyValue(ctx, bus.BucketWorkflows)
	if err != nil {
		t.Fatalf("gateway opens the workflows: %v", err)
	}
	if n := countKeys(t, ctx, workflows, ">"); n != 2 {
		t.Errorf("gateway lists %d workflows, want 2", n)
	}
	if history, err := workflows.History(ctx, "steered"); err != nil || len(history) != 1 {
		t.Errorf("gateway reads the revisions of steered: %d, %v", len(history), err)
	}
}

// steerWait bounds each wait of TestTimersSignalsCancelsAndSchedulesAsTheirOwnUsers.
const steerWait = 30 * time.Second

// eventLog records the subjects of the events an ordered consumer
// delivers (a node.waiting's also as "<subject> <node>").
type eventLog struct {
	mu       sync.Mutex
	subjects []string
}

func (l *eventLog) add(subjects ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.subjects = append(l.subjects, subjects...)
}

func (l *eventLog) wait(t *testing.T, ctx context.Context, subject string) {
	t.Helper()
	l.waitFunc(t, ctx, func(s string) bool { return s == subject })
}

// waitFunc waits for a subject that match accepts and returns it.
func (l *eventLog) waitFunc(t *testing.T, ctx context.Context, match func(string) bool) string {
	t.Helper()
	deadline := time.After(steerWait)
	for {
		l.mu.Lock()
		i := slices.IndexFunc(l.subjects, match)
		var got string
		if i >= 0 {
			got = l.subjects[i]
		}
		seen := slices.Clone(l.subjects)
		l.mu.Unlock()
		if i >= 0 {
			return got
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no such event; got %v", seen)
		case <-deadline:
			t.Fatalf("no such event within %v; got %v", steerWait, seen)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// followExecutions follows the events stream as the gateway's GET
// /v1/executions/events does: from the stream's end, one ordered consumer
// of several filters.
func followExecutions(t *testing.T, ctx context.Context, b *bus.Bus) *eventLog {
	t.Helper()
	s, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatalf("gateway reads the events stream: %v", err)
	}
	filters := make([]string, len(listedKinds))
	for i, k := range listedKinds {
		filters[i] = bus.EventFilter(k)
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := b.JetStream().OrderedConsumer(cctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters, DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: s.CachedInfo().State.LastSeq + 1,
	})
	if err != nil {
		t.Fatalf("gateway follows the executions: %v", err)
	}
	l := &eventLog{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		l.add(m.Subject())
		if _, kind, _ := bus.ParseEventSubject(m.Subject()); kind == bus.KindNodeWaiting {
			var w novav1.NodeWaiting
			if ev, err := bus.DecodeNATS(m.Headers(), m.Data()); err == nil && bus.Decode(*ev, &w) == nil {
				l.add(m.Subject() + " " + w.GetNodeId())
			}
		}
	})
	if err != nil {
		t.Fatalf("gateway follows the executions: %v", err)
	}
	t.Cleanup(cc.Stop)
	return l
}

// watchRefusals reads the dead letters of the engine's commands as the
// gateway does to answer a refused change (an ordered consumer of
// nova.dlq.graph-engine, from now on), by the refused event's id.
func watchRefusals(t *testing.T, ctx context.Context, b *bus.Bus) *eventLog {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	cons, err := b.JetStream().OrderedConsumer(cctx, bus.StreamDeadLetters, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.DeadLetterSubject(bus.ConsumerEngineCommands)}, DeliverPolicy: jetstream.DeliverNewPolicy,
	})
	if err != nil {
		t.Fatalf("watch the engine's refusals: %v", err)
	}
	l := &eventLog{}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var dl novav1.DeadLetter
		if ev, err := bus.DecodeNATS(m.Headers(), m.Data()); err == nil && bus.Decode(*ev, &dl) == nil {
			l.add(dl.GetHeaders()["ce-id"])
		}
	})
	if err != nil {
		t.Fatalf("watch the engine's refusals: %v", err)
	}
	t.Cleanup(cc.Stop)
	return l
}

// changeSchedule sends a schedule command as the gateway does and returns
// the engine's write of key that follows.
func changeSchedule(t *testing.T, ctx context.Context, b *bus.Bus, kv jetstream.KeyValue, key, typ string, cmd proto.Message) jetstream.KeyValueEntry {
	t.Helper()
	stored, err := kv.Watch(ctx, key, jetstream.UpdatesOnly())
	if err != nil {
		t.Fatalf("watch schedule %s: %v", key, err)
	}
	defer func() { _ = stored.Stop() }()
	if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), typ+"-"+key, typ, cmd, nil); err != nil {
		t.Fatalf("send %s: %v", typ, err)
	}
	for {
		select {
		case entry := <-stored.Updates():
			// A removal is the first entry that is not a put: a tick
			// just before it may still update the schedule's entry.
			if entry != nil && (typ != bus.TypeScheduleDelete || entry.Operation() != jetstream.KeyValuePut) {
				return entry
			}
		case <-ctx.Done():
			t.Fatalf("the engine did not store %s of %s", typ, key)
		}
	}
}

// countKeys counts the live keys of kv matching filter as the gateway's
// lists do: a watch that hands over each key's latest value, then nil.
func countKeys(t *testing.T, ctx context.Context, kv jetstream.KeyValue, filter string) int {
	t.Helper()
	w, err := kv.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		t.Fatalf("watch %s: %v", filter, err)
	}
	defer func() { _ = w.Stop() }()
	n := 0
	for {
		select {
		case entry := <-w.Updates():
			if entry == nil {
				return n
			}
			n++
		case <-ctx.Done():
			t.Fatalf("watch %s: %v", filter, ctx.Err())
		}
	}
}
