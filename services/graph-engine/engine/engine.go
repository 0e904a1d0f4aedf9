// Package engine is the graph engine's shell: it owns workflow and node
// state and is the only orchestrator. It reacts to start commands, agents'
// results, timers and steering commands, keeps every execution's state in
// JetStream KV (compare-and-set, so any replica can take any event), and
// runs each event through a transition of package flow, the pure state
// machine: it binds the transition's reads (the code cache, the value store,
// map results), applies its effects (cache writes, day-counter shares,
// timers, map results) and publishes the commands and events it decided.
// Registered workflows and schedules are the shell's own.
package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/eventjson"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// The engine's buckets and consumers, named in pkg/bus for their readers.
const (
	BucketExecutions    = bus.BucketExecutions
	BucketWorkflows     = bus.BucketWorkflows
	ConsumerCommands    = bus.ConsumerEngineCommands
	ConsumerResults     = bus.ConsumerEngineResults
	ConsumerDeadLetters = bus.ConsumerEngineDeadLetters
)

const statusRunning = execution.StatusRunning

// Config tunes the engine.
type Config struct {
	// DefaultNodeTimeout applies when neither node nor workflow sets one.
	DefaultNodeTimeout time.Duration
	// Workers is how many events each consumer handles at once (0:
	// DefaultWorkers).
	Workers int
	// AllowPrompt accepts AI (prompt) nodes; off until the AI pipeline runs.
	AllowPrompt bool
	// Replicas of the KV buckets (3 in production).
	Replicas int
	// SandboxAttempts bounds re-runs of a node whose sandbox failed (not its code).
	SandboxAttempts int
	// MaxAttempts bounds code generation attempts of an AI node (default 3).
	MaxAttempts int
	// MapResultsMaxBytes bounds one map's items' results together (0: no
	// bound).
	MapResultsMaxBytes int64
	// AnalysisTimeout bounds a run of analysis code (default 15s).
	AnalysisTimeout time.Duration
	// KeepEnded is how long an ended execution's state stays in
	// BucketExecutions after it ended (default DefaultKeepEnded); a running
	// execution's is kept until it ends. Within it a repeated start of the
	// execution is recognised and not run again.
	KeepEnded time.Duration
	// CodeCacheTTL is how long a cached code is kept (default 30 days);
	// CodeCacheMaxBytes caps the cache bucket (default 256 MiB).
	CodeCacheTTL      time.Duration
	CodeCacheMaxBytes int64
	// Semantic configures the code cache's semantic level (off by default;
	// on, it needs Deps.Embedder).
	Semantic codecache.SemanticSettings
	// Budget is the deployment's default budget: each limit a workflow
	// leaves unset (nil: none).
	Budget *novav1.Budget
}

// DefaultKeepEnded is how long an ended execution's state is kept by
// default: a week. Each key the bucket holds costs the NATS server some 190
// bytes and four objects of its heap for as long as it is kept, so kept for
// ever they grow with every execution; past the keep, a start naming the
// execution runs it again.
const DefaultKeepEnded = 7 * 24 * time.Hour

// KeepSettings is how long an ended execution's state is kept, as the
// graph-engine binary and nova dev read it from the environment. The tag's
// default is DefaultKeepEnded (a tag cannot name the constant; a test holds
// them together).
type KeepSettings struct {
	// KeepEnded is how long an ended execution's state stays in the
	// executions bucket; within it a repeated start is not run again.
	KeepEnded time.Duration `env:"NOVA_KEEP_ENDED_STATE" default:"168h"`
}

// Keep is the setting, or an error naming the variable when it is no
// positive duration.
func (k KeepSettings) Keep() (time.Duration, error) {
	if k.KeepEnded <= 0 {
		return 0, fmt.Errorf("NOVA_KEEP_ENDED_STATE=%v: want a positive duration (how long an ended execution's state is kept), e.g. 168h", k.KeepEnded)
	}
	return k.KeepEnded, nil
}

// stateMarkerTTL is how long the bucket keeps the marker the server leaves
// where an ended execution's state expired (the least it takes).
const stateMarkerTTL = time.Second

// Deps are what the engine needs, built by the caller.
type Deps struct {
	Bus            *bus.Bus
	Values         *valueref.Store
	Logger         *slog.Logger
	TracerProvider trace.TracerProvider
	// MeterProvider receives nova.codecache.{hits,misses,evictions}.
	MeterProvider metric.MeterProvider
	// Embedder is the client of the model API whose embeddings the code
	// cache's semantic level compares tasks with (Config.Semantic).
	Embedder *llm.Client
	Config   Config
}

// Engine runs workflows.
type Engine struct {
	bus    *bus.Bus
	execs  jetstream.KeyValue
	defs   jetstream.KeyValue
	values *valueref.Store
	log    *slog.Logger
	cfg    Config
	now    func() time.Time
	tracer trace.Tracer
	// codeCache and days are nil only in tests that build an Engine by hand.
	codeCache *codeCache
	days      *dayCounters
	// schedules is the KV bucket of workflow schedules.
	schedules jetstream.KeyValue
	// began is when this engine started (inGrace).
	began time.Time
	// nodeLocks holds the locks of nodes (locks.go).
	nodeLocks jetstream.KeyValue
	// locks serialise the events of one execution in this replica.
	locks [64]sync.Mutex
	// items keeps the lists large maps run over, read back once.
	items *flow.ItemLists
	// contexts keeps large contexts split, read back once.
	contexts *flow.Contexts
	// results keeps map items' results while their map runs
	// (mapresults.go); resultsStream is its stream, purged by map.
	results       jetstream.KeyValue
	resultsStream jetstream.Stream
	// parts keeps the context members running states keep apart
	// (parts.go), read back once.
	parts *partCache
	// states keeps the states this replica stored last (statecache.go).
	states *stateCache
	// dropped counts results no line waited for (nil in tests that build
	// an Engine by hand).
	dropped metric.Int64Counter
}

// lock is the mutex of execution id's events.
func (e *Engine) lock(id string) *sync.Mutex {
	h := fnv.New32a()
	h.Write([]byte(id))
	return &e.locks[h.Sum32()%uint32(len(e.locks))]
}

// newTransition begins a transition of st with the engine's settings, its
// cache of map lists and its clock.
func (e *Engine) newTransition(st *novav1.ExecutionState) *flow.Transition {
	cfg := flow.Config{DefaultNodeTimeout: e.cfg.DefaultNodeTimeout, SandboxAttempts: e.cfg.SandboxAttempts, MaxAttempts: e.cfg.MaxAttempts,
		MapResultsMaxBytes: e.cfg.MapResultsMaxBytes,
		AnalysisTimeout:    e.cfg.AnalysisTimeout, Budget: e.cfg.Budget, Similarity: e.cfg.Semantic.Similarity, Items: e.items,
		Contexts: e.contexts}
	return flow.New(st, cfg, e.now())
}

// Run builds the engine and serves until ctx ends.
func Run(ctx context.Context, deps Deps) error {
	e, err := New(ctx, deps)
	if err != nil {
		return err
	}
	return e.Run(ctx)
}

// New declares the streams, buckets and durable consumers the engine needs.
func New(ctx context.Context, deps Deps) (*Engine, error) {
	cfg := deps.Config.withDefaults()
	if deps.Logger == nil {
		deps.Logger = slog.Default()
	}
	if err := deps.Bus.EnsureStreams(ctx); err != nil {
		return nil, err
	}
	js := deps.Bus.JetStream()
	execs, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketExecutions,
		Description: "NOVA execution state, one key per execution",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
		// Lets a state carry its own expiry (Config.KeepEnded).
		LimitMarkerTTL: stateMarkerTTL,
	})
	if err != nil {
		return nil, err
	}
	defs, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketWorkflows,
		Description: "NOVA registered workflow definitions, by name",
		History:     5,
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, err
	}
	cache, err := openCodeCache(ctx, js, cfg, deps)
	if err != nil {
		return nil, err
	}
	days, err := openDayCounters(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	results, resultsStream, err := openMapResults(ctx, js, cfg)
	if err != nil {
		return nil, err
	}
	tp := deps.TracerProvider
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	mp := deps.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	dropped, err := mp.Meter("github.com/novaflow/nova/services/graph-engine/engine").Int64Counter("nova.engine.results.dropped",
		metric.WithDescription("Results no line of their execution waited for, dropped, by reason (execution_ended, not_pending)"))
	if err != nil {
		return nil, err
	}
	e := &Engine{bus: deps.Bus, execs: execs, defs: defs, values: deps.Values, log: deps.Logger, cfg: cfg, now: time.Now,
		tracer: tp.Tracer("github.com/novaflow/nova/services/graph-engine/engine"), codeCache: cache, days: days, items: flow.NewItemLists(8), contexts: flow.NewContexts(16),
		results: results, resultsStream: resultsStream, parts: newPartCache(partCacheBytes), states: newStateCache(stateCacheBytes), dropped: dropped, began: time.Now()}
	if err := e.openSchedules(ctx); err != nil {
		return nil, err
	}
	if err := e.openLocks(ctx); err != nil {
		return nil, err
	}
	for _, c := range e.consumers() {
		if _, err := deps.Bus.DeclareConsumer(ctx, c); err != nil {
			return nil, err
		}
	}
	return e, nil
}

// DefaultWorkers is how many events each consumer of the engine handles at
// once when Config.Workers is 0: two per CPU the process may use
// (GOMAXPROCS, which follows its CPU affinity and quota), at least 8. A
// handler mostly waits on NATS (the state's update, the events' acks), so
// it takes more than one per CPU to keep the CPUs busy; a fixed number
// would cap the throughput of a large machine.
func DefaultWorkers() int {
	return max(8, 2*runtime.GOMAXPROCS(0))
}

// withDefaults is cfg with every setting left zero at its default.
func (cfg Config) withDefaults() Config {
	if cfg.DefaultNodeTimeout <= 0 {
		cfg.DefaultNodeTimeout = 30 * time.Second
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers()
	}
	if cfg.SandboxAttempts <= 0 {
		cfg.SandboxAttempts = 3
	}
	if cfg.MaxAttempts <= 0 {
		cfg.MaxAttempts = 3
	}
	if cfg.AnalysisTimeout <= 0 {
		cfg.AnalysisTimeout = 15 * time.Second
	}
	if cfg.KeepEnded <= 0 {
		cfg.KeepEnded = DefaultKeepEnded
	}
	if cfg.CodeCacheTTL <= 0 {
		cfg.CodeCacheTTL = DefaultCodeCacheTTL
	}
	if cfg.CodeCacheMaxBytes <= 0 {
		cfg.CodeCacheMaxBytes = DefaultCodeCacheMaxBytes
	}
	return cfg
}

// openBucket creates or updates a KV bucket of the engine, retried while a
// cluster elects its leaders.
func openBucket(ctx context.Context, js jetstream.JetStream, cfg jetstream.KeyValueConfig) (kv jetstream.KeyValue, err error) {
	err = bus.Declare(ctx, "KV "+cfg.Bucket, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", cfg.Bucket, err)
	}
	return kv, nil
}

func (e *Engine) consumers() []bus.Consumer {
	return []bus.Consumer{
		{Stream: bus.StreamCommands, Durable: ConsumerCommands, Filters: []string{bus.CommandSubject(bus.AgentGraphEngine)}, Workers: e.cfg.Workers},
		// A result can come before the state its dispatch stores (the engine
		// publishes first); with replicas, a store write can time out while the
		// bucket elects a leader and be stored at its redelivery, seconds
		// later. So a result for an execution not stored yet is tried for
		// about half a minute (deliveries after 0.1, 0.5 and 2 s, then every
		// 5 s) before it is dead-lettered and fails the execution.
		{Stream: bus.StreamEvents, Durable: ConsumerResults, Filters: []string{bus.EventFilter("result.>")}, Workers: e.cfg.Workers,
			MaxDeliver: 10},
		{Stream: bus.StreamDeadLetters, Durable: ConsumerDeadLetters, Workers: 1,
			Filters: []string{bus.DeadLetterSubject(bus.AgentSandbox), bus.DeadLetterSubject(ConsumerResults),
				bus.DeadLetterSubject(bus.AgentInputAnalyzer), bus.DeadLetterSubject(bus.AgentCodeGenerator),
				bus.DeadLetterSubject(bus.AgentCodeValidator), bus.DeadLetterSubject(bus.AgentOutputValidator)}},
		// Durable timers as they come due (wait timeouts, sleeps, retry
		// backoff).
		{Stream: bus.StreamTimers, Durable: bus.ConsumerEngineTimers, Filters: []string{bus.TimerFiredFilter}, Workers: e.cfg.Workers},
		// Ticks of workflow schedules.
		{Stream: bus.StreamTimers, Durable: bus.ConsumerEngineSchedules, Filters: []string{bus.ScheduleTickFilter}, Workers: 2},
	}
}

// Run consumes commands, results and dead letters until ctx ends.
func (e *Engine) Run(ctx context.Context) error {
	e.log.InfoContext(ctx, "engine workers", "workers", e.cfg.Workers, "cpus", runtime.GOMAXPROCS(0))
	g, ctx := errgroup.WithContext(ctx)
	handlers := []bus.Handler{e.handleCommand, e.handleResult, e.handleDeadLetter, e.handleTimer, e.handleTick}
	for i, c := range e.consumers() {
		h := handlers[i]
		g.Go(func() error { return e.bus.Consume(ctx, c, h) })
	}
	if e.codeCache != nil {
		g.Go(func() error { return e.codeCache.validators.Run(ctx) })
	}
	g.Go(func() error { e.catchUpSchedules(ctx); return nil })
	return g.Wait()
}

func (e *Engine) handleCommand(ctx context.Context, ev event.Event) error {
	switch ev.Type() {
	case bus.TypeWorkflowStart:
		return e.start(ctx, ev)
	case bus.TypeWorkflowRegister:
		return e.register(ctx, ev)
	case bus.TypeRefinementStart:
		return e.startRefinement(ctx, ev)
	case bus.TypeExecutionCancel:
		return e.cancel(ctx, ev)
	case bus.TypeExecutionSignal:
		return e.signal(ctx, ev)
	case bus.TypeSchedulePut:
		return e.putSchedule(ctx, ev)
	case bus.TypeScheduleDelete:
		return e.deleteSchedule(ctx, ev)
	case bus.TypeLockAcquire:
		return e.lockAcquire(ctx, ev)
	case bus.TypeLockRelease:
		return e.lockRelease(ctx, ev)
	default:
		return bus.Permanent(fmt.Errorf("graph engine does not handle event type %q", ev.Type()))
	}
}

func (e *Engine) register(ctx context.Context, ev event.Event) error {
	var cmd novav1.RegisterWorkflow
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	if cmd.Definition == nil {
		return bus.Permanent(errors.New("register: no definition"))
	}
	if err := workflow.Validate(cmd.Definition, workflow.ValidateOptions{AllowPrompt: e.cfg.AllowPrompt}); err != nil {
		return bus.Permanent(fmt.Errorf("register: %w", err))
	}
	if !execution.ValidKey(cmd.Definition.Name) {
		return bus.Permanent(fmt.Errorf("register: workflow name %q must be letters, digits, '-', '_' or '='", cmd.Definition.Name))
	}
	if err := e.checkRefs(ctx, cmd.Definition); err != nil {
		if errors.Is(err, errInvalidDefinition) {
			return bus.Permanent(fmt.Errorf("register: %w", err))
		}
		return err
	}
	// The same definition registered again (a producer's retry, a deploy
	// that registers at each start) is left as it is: another revision
	// would push an older, different one out of the bucket's history.
	if entry, err := e.defs.Get(ctx, cmd.Definition.Name); err == nil {
		var stored novav1.WorkflowDefinition
		if proto.Unmarshal(entry.Value(), &stored) == nil && proto.Equal(&stored, cmd.Definition) {
			e.log.InfoContext(ctx, "workflow registered already", "workflow", cmd.Definition.Name, "revision", entry.Revision())
			return e.syncDefinitionSchedules(ctx, cmd.Definition)
		}
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("read workflow %q: %w", cmd.Definition.Name, err)
	}
	data, err := proto.Marshal(cmd.Definition)
	if err != nil {
		return bus.Permanent(err)
	}
	if _, err := e.defs.Put(ctx, cmd.Definition.Name, data); err != nil {
		return fmt.Errorf("store workflow %q: %w", cmd.Definition.Name, err)
	}
	e.log.InfoContext(ctx, "workflow registered", "workflow", cmd.Definition.Name)
	return e.syncDefinitionSchedules(ctx, cmd.Definition)
}

func (e *Engine) start(ctx context.Context, ev event.Event) error {
	var cmd novav1.StartWorkflow
	if err := bus.Decode(ev, &cmd); err != nil {
		// Tell whoever waits for this execution before dead-lettering.
		// An execution of that id that exists already is left alone.
		if id, _ := ev.Extensions()[bus.ExtensionExecutionID].(string); execution.ID(id) == id {
			if _, gerr := e.execs.Get(ctx, id); errors.Is(gerr, jetstream.ErrKeyNotFound) {
				st := &novav1.ExecutionState{ExecutionId: id, Status: statusRunning, StartedAt: timestamppb.New(e.now())}
				if perr := e.failStart(ctx, e.newTransition(st), fmt.Sprintf("start event %s could not be read: %v", ev.ID(), err)); perr != nil {
					return perr
				}
			} else if gerr != nil {
				return fmt.Errorf("read execution %s: %w", id, gerr)
			}
		}
		return err
	}
	return e.startCommand(ctx, &cmd, ev.ID())
}

// startCommand starts the execution cmd asks for (eventID, the start
// event's id, is its id when cmd names none); an execution of that id that
// exists already is left as it is.
func (e *Engine) startCommand(ctx context.Context, cmd *novav1.StartWorkflow, eventID string) error {
	id := cmd.ExecutionId
	if id == "" {
		id = eventID
	}
	id = execution.ID(id)
	ctx, span := e.tracer.Start(ctx, "graph-engine start", trace.WithAttributes(attribute.String("execution.id", id)))
	defer span.End()
	if _, err := e.execs.Get(ctx, id); err == nil {
		return nil // already started: a redelivered or repeated start
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("read execution %s: %w", id, err)
	}

	st := &novav1.ExecutionState{
		ExecutionId: id,
		Status:      statusRunning,
		Context:     cmd.Context,
		StartedAt:   timestamppb.New(e.now()),
		Nodes:       map[string]*novav1.NodeState{},
		Traceparent: traceparentOf(ctx),
		Parent:      cmd.Parent,
	}
	t := e.newTransition(st)
	e.bindCache(ctx, t, embedMemo{})
	e.bindValues(ctx, t)
	if _, err := jsonvalue.FromProto(cmd.Context); err != nil {
		// A producer's mistake: the execution fails and says why.
		st.Context = nil
		return e.failStart(ctx, e.newTransition(st), fmt.Sprintf("the start event's context must be a JSON object: %v", err))
	}
	def, err := e.definition(ctx, cmd)
	if err != nil {
		if !errors.Is(err, errInvalidDefinition) {
			return err
		}
		// A failed execution, not a broken event. Its state names the
		// workflow asked for; the definition is left out.
		st.Definition = &novav1.WorkflowDefinition{Name: cmp.Or(cmd.WorkflowName, cmd.GetDefinition().GetName())}
		return e.failStart(ctx, t, err.Error())
	}
	t.SetDefinition(def)
	if r := cmd.Rerun; r != nil {
		if t.Graph().Node(r.NodeId) == nil {
			return e.failStart(ctx, t, fmt.Sprintf("rerun of %s from node %q: workflow %q has no such node", r.ExecutionId, r.NodeId, def.GetName()))
		}
		st.Rerun = r
		if err := e.restoreSecrets(ctx, t); err != nil {
			return err
		}
	}
	st.ScheduleId, st.ScheduledAt = cmd.ScheduleId, cmd.ScheduledAt
	if err := e.shrink(ctx, t); err != nil {
		return err
	}
	t.Started()
	t.StartLine()
	if r := st.Rerun; r != nil {
		t.CarryOver(r)
		t.Enter(r.NodeId)
	} else {
		t.Enter(t.Graph().Start().Id)
	}
	t.KeepChanges()
	t.Unbind()
	t.Settle()
	if err := e.applyBudget(ctx, t); err != nil {
		return err
	}
	if err := e.create(ctx, t); err != nil {
		return err
	}
	e.applyCache(ctx, t)
	return nil
}

// create publishes the events of a new execution's first transition, then
// stores its state; a state stored already (a redelivered start) is left
// as it is.
func (e *Engine) create(ctx context.Context, t *flow.Transition) error {
	// Under the execution's lock: a result of the work the first
	// transition sends, which can come back before the state is stored,
	// waits for it (updateTraced) instead of finding no execution and
	// trying again after a backoff.
	mu := e.lock(t.State().ExecutionId)
	mu.Lock()
	defer mu.Unlock()
	if err := e.publish(ctx, t.Out()); err != nil {
		return err
	}
	_, restore, err := e.compactParts(ctx, t.State(), nil)
	if err != nil {
		return err
	}
	data, err := flow.MarshalState(t.State())
	restore()
	if err != nil {
		return bus.Permanent(err)
	}
	id := t.State().ExecutionId
	revision, err := e.execs.Create(ctx, id, data, jetstream.KeyTTL(e.keep(t.State())))
	switch {
	case err == nil && t.State().GetStatus() == statusRunning:
		e.states.put(id, revision, data)
	case err != nil && !errors.Is(err, jetstream.ErrKeyExists):
		return fmt.Errorf("store execution %s: %w", id, err)
	}
	return nil
}

// failStart ends an execution that cannot start (its workflow unknown or
// invalid, its event unreadable) as failed with msg: its completion is
// published and its state stored, so that it reads as any ended execution
// (GET /v1/executions/{id}, nova watch once its events are purged).
func (e *Engine) failStart(ctx context.Context, t *flow.Transition, msg string) error {
	t.Fail(msg)
	return e.create(ctx, t)
}

var errInvalidDefinition = errors.New("invalid workflow")

// errUnknownExecution is a result, or a dead letter, for an execution that
// has no state.
var errUnknownExecution = errors.New("no such execution (not started, or its state expired)")

func (e *Engine) definition(ctx context.Context, cmd *novav1.StartWorkflow) (*novav1.WorkflowDefinition, error) {
	def := cmd.Definition
	if def == nil {
		if cmd.WorkflowName == "" {
			return nil, fmt.Errorf("%w: the start event has neither a definition nor a workflow_name", errInvalidDefinition)
		}
		if !execution.ValidKey(cmd.WorkflowName) {
			return nil, fmt.Errorf("%w: workflow name %q is not registered", errInvalidDefinition, cmd.WorkflowName)
		}
		entry, err := e.defs.Get(ctx, cmd.WorkflowName)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("%w: workflow %q is not registered", errInvalidDefinition, cmd.WorkflowName)
		}
		if err != nil {
			return nil, fmt.Errorf("read workflow %q: %w", cmd.WorkflowName, err)
		}
		def = &novav1.WorkflowDefinition{}
		if err := proto.Unmarshal(entry.Value(), def); err != nil {
			return nil, fmt.Errorf("%w: stored workflow %q is unreadable: %v", errInvalidDefinition, cmd.WorkflowName, err)
		}
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: e.cfg.AllowPrompt}); err != nil {
		return nil, fmt.Errorf("%w: %v", errInvalidDefinition, err)
	}
	if err := e.checkRefs(ctx, def); err != nil {
		return nil, err
	}
	return def, nil
}

// checkRefs checks the names of the workflows def's workflow and map
// nodes run. They need not be registered yet, and may lead back to def
// (recursion, mutual recursion registered in any order): a workflow not
// registered when a node starts it fails that node, naming it, and a
// node's max_depth bounds how deep the calls go. An error of the
// definition wraps errInvalidDefinition.
func (e *Engine) checkRefs(_ context.Context, def *novav1.WorkflowDefinition) error {
	for _, r := range workflow.WorkflowRefs(def) {
		if !execution.ValidKey(r) {
			return fmt.Errorf("%w: workflow %q runs workflow %q, which is not a name a workflow can have", errInvalidDefinition, def.GetName(), r)
		}
	}
	return nil
}

func (e *Engine) handleResult(ctx context.Context, ev event.Event) error {
	if ev.Type() == bus.TypeLockGranted {
		return e.lockGranted(ctx, ev)
	}
	ref, apply, err := decodeResult(ev.Type(), func(m proto.Message) error { return bus.Decode(ev, m) })
	if err != nil {
		return err
	}
	if err := sameExecution(bus.Subject(ctx), ref.GetExecutionId()); err != nil {
		return err
	}
	return e.update(ctx, ref.GetExecutionId(), ref.GetNodeId(), func(t *flow.Transition) error {
		return t.OnStep(ref.GetStepId(), func() error { return apply(t) })
	})
}

// decodeResult reads a result of type typ with decode: the step it
// answers and how it changes its execution.
func decodeResult(typ string, decode func(proto.Message) error) (*novav1.StepRef, func(*flow.Transition) error, error) {
	switch typ {
	case bus.TypeSandboxExecuted:
		return readResult(decode, &novav1.CodeExecuted{}, func(r *novav1.CodeExecuted) *novav1.StepRef {
			return &novav1.StepRef{ExecutionId: r.ExecutionId, NodeId: r.NodeId, StepId: r.StepId}
		}, (*flow.Transition).CodeExecuted)
	case bus.TypeInputAnalyzed:
		return readResult(decode, &novav1.InputAnalyzed{}, (*novav1.InputAnalyzed).GetRef, (*flow.Transition).InputAnalyzed)
	case bus.TypeCodeGenerated:
		return readResult(decode, &novav1.CodeGenerated{}, (*novav1.CodeGenerated).GetRef, (*flow.Transition).CodeGenerated)
	case bus.TypeCodeValidated:
		return readResult(decode, &novav1.CodeValidated{}, (*novav1.CodeValidated).GetRef, (*flow.Transition).CodeValidated)
	case bus.TypeOutputValidated:
		return readResult(decode, &novav1.OutputValidated{}, (*novav1.OutputValidated).GetRef, (*flow.Transition).OutputValidated)
	case bus.TypeChildCompleted:
		return readResult(decode, &novav1.ChildCompleted{}, func(r *novav1.ChildCompleted) *novav1.StepRef {
			p := r.GetParent()
			return &novav1.StepRef{ExecutionId: p.GetExecutionId(), NodeId: p.GetNodeId(), StepId: p.GetStepId(), Sequence: p.GetSequence()}
		}, (*flow.Transition).ChildCompleted)
	default:
		return nil, nil, bus.Permanent(fmt.Errorf("graph engine does not handle result type %q", typ))
	}
}

func readResult[T proto.Message](decode func(proto.Message) error, r T, ref func(T) *novav1.StepRef,
	apply func(*flow.Transition, T) error) (*novav1.StepRef, func(*flow.Transition) error, error) {
	if err := decode(r); err != nil {
		return nil, nil, err
	}
	return ref(r), func(t *flow.Transition) error { return apply(t, r) }, nil
}

// errTwoExecutions is an event whose subject and payload name different
// executions.
var errTwoExecutions = errors.New("the event names two executions")

// sameExecution checks that a result's payload names the execution its
// subject does (nova.evt.<execution id>.result...): the subject is where
// the bus lets the publisher write. An event that names two is refused for
// good, and neither execution is touched. Outside a delivery (subject "")
// there is nothing to compare.
func sameExecution(subject, payloadID string) error {
	if subject == "" {
		return nil
	}
	subjectID, _, ok := bus.ParseEventSubject(subject)
	if !ok || subjectID != payloadID {
		return bus.Permanent(fmt.Errorf("%w: its subject %s names execution %q, its payload execution %q; neither is touched",
			errTwoExecutions, subject, subjectID, payloadID))
	}
	return nil
}

// handleDeadLetter ends what a dead letter would otherwise leave waiting
// forever: a command the sandbox could not handle fails its node; a result
// the engine itself could not apply fails its execution.
func (e *Engine) handleDeadLetter(ctx context.Context, ev event.Event) error {
	var dl novav1.DeadLetter
	if err := bus.Decode(ev, &dl); err != nil {
		return err
	}
	if dl.Truncated {
		// A large message: its dead letter holds an excerpt, the whole
		// message is kept beside it.
		orig, err := e.bus.DeadLetterOriginal(ctx, &dl)
		if err != nil {
			e.log.ErrorContext(ctx, "dead letter of a large message: the message cannot be read back", "subject", dl.Subject,
				"stream", dl.Stream, "stream_sequence", dl.StreamSequence, "reason", dl.Reason, "err", err)
			return nil
		}
		dl.Data = orig.Data
	}
	switch dl.Consumer {
	case ConsumerResults:
		return e.resultDeadLettered(ctx, &dl)
	case bus.AgentInputAnalyzer, bus.AgentCodeGenerator, bus.AgentCodeValidator, bus.AgentOutputValidator:
		return e.agentCommandDeadLettered(ctx, &dl)
	default:
		return e.sandboxCommandDeadLettered(ctx, &dl)
	}
}

// resultDeadLettered fails the execution whose result the engine could not
// apply. A dead letter whose payload cannot be read, or names another
// execution than its subject, touches no execution: the execution the
// subject names still waits for its own result.
func (e *Engine) resultDeadLettered(ctx context.Context, dl *novav1.DeadLetter) error {
	subjectID, _, _ := bus.ParseEventSubject(dl.Subject)
	ref, _, err := decodeResult(dl.Headers["ce-type"], func(m proto.Message) error { return decodeData(dl.Data, m) })
	switch {
	case err != nil || ref.GetExecutionId() == "":
		e.log.WarnContext(ctx, "dead letter of a result without a readable execution; no execution is touched",
			"subject", dl.Subject, "subject_execution", subjectID, "reason", dl.Reason)
		return nil
	case sameExecution(dl.Subject, ref.GetExecutionId()) != nil:
		e.log.WarnContext(ctx, "dead letter of a result that names two executions; neither is touched",
			"subject", dl.Subject, "subject_execution", subjectID, "payload_execution", ref.GetExecutionId(), "reason", dl.Reason)
		return nil
	}
	return e.endDeadLettered(ctx, dl, ref.GetExecutionId(), ref.GetNodeId(), ref.GetStepId(), func(t *flow.Transition) error {
		if t.State().Status != statusRunning {
			return nil
		}
		msg := fmt.Sprintf("the graph engine could not apply the result of step %s: %s", ref.GetStepId(), dl.Reason)
		if t.State().Refine != nil {
			t.RefineFail(msg)
			return nil
		}
		t.ReleaseHold()
		t.Fail(msg)
		return nil
	})
}

// unknownExecutionGrace is how long after a dead letter was made the engine
// looks again for an execution it names that has no state: it stores a new
// execution's state just after it publishes the first commands, and an
// agent may refuse one at once. Past it (a dead letter replayed later, an
// execution that never was) the dead letter is logged and acknowledged.
const unknownExecutionGrace = 5 * time.Second

// endDeadLettered applies fn to the execution a dead letter names. Handling
// a dead letter is retried only for what may pass: reading or storing the
// state, an execution whose state may not be stored yet
// (unknownExecutionGrace); what never will is logged and acknowledged.
func (e *Engine) endDeadLettered(ctx context.Context, dl *novav1.DeadLetter, id, nodeID, stepID string, fn func(*flow.Transition) error) error {
	err := e.update(ctx, id, nodeID, func(t *flow.Transition) error { return t.OnStep(stepID, func() error { return fn(t) }) })
	if errors.Is(err, errUnknownExecution) {
		if dl.GetFailedAt() != nil && e.now().Sub(dl.GetFailedAt().AsTime()) < unknownExecutionGrace {
			return err // retried with the consumer's backoff
		}
		e.log.WarnContext(ctx, "dead letter of an execution that does not exist; nothing to end",
			"execution_id", id, "subject", dl.Subject, "consumer", dl.Consumer, "reason", dl.Reason)
		return nil
	}
	return err
}

// agentCommandDeadLettered fails the node (or ends the refinement) whose
// command an AI agent could not handle.
func (e *Engine) agentCommandDeadLettered(ctx context.Context, dl *novav1.DeadLetter) error {
	var agentCmd interface {
		proto.Message
		GetRef() *novav1.StepRef
	}
	switch dl.Headers["ce-type"] {
	case bus.TypeInputAnalyze:
		agentCmd = &novav1.AnalyzeInput{}
	case bus.TypeCodeGenerate:
		agentCmd = &novav1.GenerateCode{}
	case bus.TypeCodeValidate:
		agentCmd = &novav1.ValidateCode{}
	case bus.TypeOutputValidate:
		agentCmd = &novav1.ValidateOutput{}
	}
	if agentCmd == nil || decodeData(dl.Data, agentCmd) != nil || agentCmd.GetRef().GetExecutionId() == "" {
		e.log.WarnContext(ctx, "dead letter names no execution", "subject", dl.Subject, "reason", dl.Reason)
		return nil
	}
	ref := agentCmd.GetRef()
	msg := fmt.Sprintf("the %s could not handle the command after %d deliveries: %s", dl.Consumer, dl.Deliveries, dl.Reason)
	return e.endDeadLettered(ctx, dl, ref.ExecutionId, ref.NodeId, ref.GetStepId(), func(t *flow.Transition) error {
		if t.State().Refine != nil {
			if err := t.CheckPending(ref.GetStepId(), ref.GetSequence()); err != nil {
				return err
			}
			t.RefineFail(msg)
			return nil
		}
		if err := t.CheckAI(ref); err != nil {
			return err
		}
		t.AIInfraFailed(t.Graph().Node(ref.NodeId), msg, nil)
		return nil
	})
}

// sandboxCommandDeadLettered answers a program the sandbox could not run
// with a failed run of kind dead_letter.
func (e *Engine) sandboxCommandDeadLettered(ctx context.Context, dl *novav1.DeadLetter) error {
	var cmd novav1.ExecuteCode
	if err := decodeData(dl.Data, &cmd); err != nil || cmd.ExecutionId == "" {
		e.log.WarnContext(ctx, "dead letter names no execution", "subject", dl.Subject, "reason", dl.Reason)
		return nil
	}
	res := &novav1.CodeExecuted{
		ExecutionId: cmd.ExecutionId, NodeId: cmd.NodeId, StepId: cmd.StepId, Visit: cmd.Visit, Attempt: cmd.Attempt,
		Status:    "error",
		ErrorKind: flow.ErrorKindDeadLetter,
		Error:     fmt.Sprintf("the %s could not handle the command after %d deliveries: %s", dl.Consumer, dl.Deliveries, dl.Reason),
	}
	return e.endDeadLettered(ctx, dl, cmd.ExecutionId, cmd.NodeId, cmd.StepId, func(t *flow.Transition) error { return t.CodeExecuted(res) })
}

func decodeData(data []byte, msg proto.Message) error {
	return eventjson.Unmarshal(data, msg)
}

// update applies fn to the execution's current state and stores the result
// with compare-and-set. Outgoing events are published before the state is
// stored, with ids derived from the state, so a crash in between is repaired
// by the redelivery: it computes the same events (deduplicated by JetStream)
// and stores the state.
func (e *Engine) update(ctx context.Context, id, nodeID string, fn func(*flow.Transition) error) error {
	return e.updateTraced(ctx, id, nodeID, false, fn)
}

// steer is update for a command that steers the execution from outside (a
// signal, a cancel): what follows from it continues the execution's own
// trace, with a link to the sender's, so that one execution stays one
// trace.
func (e *Engine) steer(ctx context.Context, id string, fn func(*flow.Transition) error) error {
	return e.updateTraced(ctx, id, "", true, fn)
}

func (e *Engine) updateTraced(ctx context.Context, id, nodeID string, rejoin bool, fn func(*flow.Transition) error) error {
	if !execution.ValidKey(id) {
		return bus.Permanent(fmt.Errorf("result names an invalid execution id %q", id))
	}
	// Events of one execution are applied one at a time in this replica
	// (branches that finish together would otherwise lose most races);
	// compare-and-set orders them across replicas. The span below is the
	// work, not the wait for the lock.
	mu := e.lock(id)
	mu.Lock()
	defer mu.Unlock()
	opts := []trace.SpanStartOption{trace.WithAttributes(attribute.String("execution.id", id), attribute.String("node.id", nodeID))}
	// A steering command reads the state first, for the execution's trace;
	// that read is the one the first pass below applies fn to.
	var first jetstream.KeyValueEntry
	if rejoin {
		if entry, err := e.execs.Get(ctx, id); err == nil {
			first = entry
			var st novav1.ExecutionState
			if proto.Unmarshal(entry.Value(), &st) == nil && st.Traceparent != "" {
				var links []trace.Link
				ctx, links = rejoinTrace(ctx, st.Traceparent)
				opts = append(opts, trace.WithLinks(links...))
			}
		}
	}
	ctx, span := e.tracer.Start(ctx, "graph-engine advance", opts...)
	defer span.End()
	memo := embedMemo{}
	for range 50 {
		value, revision, err := e.readState(ctx, id, first)
		first = nil
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			// The start that dispatched this may not be stored yet (it
			// publishes first); redelivery retries, and after MaxDeliver the
			// event is dead-lettered.
			return fmt.Errorf("result for execution %s: %w", id, errUnknownExecution)
		}
		if err != nil {
			return fmt.Errorf("read execution %s: %w", id, err)
		}
		st := &novav1.ExecutionState{}
		if err := proto.Unmarshal(value, st); err != nil {
			return bus.Permanent(fmt.Errorf("execution %s state unreadable: %w", id, err))
		}
		read, err := e.expandParts(ctx, id, st)
		if err != nil {
			return fmt.Errorf("read execution %s: %w", id, err)
		}
		t := e.newTransition(st)
		e.bindCache(ctx, t, memo)
		e.bindValues(ctx, t)
		e.bindMapResults(ctx, t)
		if err := fn(t); errors.Is(err, flow.ErrStale) {
			e.droppedResult(ctx, id, nodeID, err)
			return nil
		} else if err != nil {
			return err
		}
		t.Settle()
		if !t.Changed() {
			return nil
		}
		if err := e.shrink(ctx, t); err != nil {
			return err
		}
		if err := e.applyBudget(ctx, t); err != nil {
			return err
		}
		if err := e.keepResults(ctx, t); err != nil {
			return err
		}
		if err := e.publish(ctx, t.Out()); err != nil {
			return err
		}
		named, restore, err := e.compactParts(ctx, st, read)
		if err != nil {
			return err
		}
		data, err := flow.MarshalState(st)
		restore()
		if err != nil {
			return bus.Permanent(err)
		}
		stored, err := e.store(ctx, id, data, revision, e.keep(st))
		if err == nil {
			if st.GetStatus() == statusRunning {
				e.states.put(id, stored, data)
			} else {
				e.states.drop(id)
			}
			e.applyCache(ctx, t)
			e.applyTimers(ctx, t)
			e.dropResults(ctx, t)
			e.dropParts(ctx, id, read, named)
			return nil
		}
		if !bus.LostRace(err) {
			return fmt.Errorf("store execution %s: %w", id, err)
		}
		// Another replica moved this execution on; look again.
		e.states.drop(id)
	}
	return fmt.Errorf("execution %s: too many concurrent updates", id)
}

// keep is how long st is to be kept once stored: an ended execution's
// Config.KeepEnded, a running one's until it changes (0).
func (e *Engine) keep(st *novav1.ExecutionState) time.Duration {
	if st.GetStatus() == statusRunning {
		return 0
	}
	return e.cfg.KeepEnded
}

// readState returns the state of execution id and its revision: first's
// when given (a read already made), else the one this replica stored last,
// else the bucket's.
func (e *Engine) readState(ctx context.Context, id string, first jetstream.KeyValueEntry) ([]byte, uint64, error) {
	if first != nil {
		return first.Value(), first.Revision(), nil
	}
	if s, ok := e.states.get(id); ok {
		return s.data, s.revision, nil
	}
	entry, err := e.execs.Get(ctx, id)
	if err != nil {
		return nil, 0, err
	}
	return entry.Value(), entry.Revision(), nil
}

// store replaces the state of execution id at revision with data, which
// expires after ttl (0: never), and returns the new revision. It is
// KeyValue.Update with the message TTL that Update does not take.
func (e *Engine) store(ctx context.Context, id string, data []byte, revision uint64, ttl time.Duration) (uint64, error) {
	if ttl <= 0 {
		return e.execs.Update(ctx, id, data, revision)
	}
	msg := &nats.Msg{Subject: execution.StateSubject(id), Data: data}
	ack, err := e.bus.JetStream().PublishMsg(ctx, msg,
		jetstream.WithExpectLastSequencePerSubject(revision), jetstream.WithMsgTTL(ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

func (e *Engine) publish(ctx context.Context, out []flow.OutEvent) error {
	constructEvents(trace.SpanFromContext(ctx), out)
	evs := make([]bus.Outgoing, 0, len(out))
	for _, o := range out {
		ev, err := e.bus.ProtoEvent(o.ID, o.Type, o.Msg, map[string]string{bus.ExtensionExecutionID: o.Execution})
		if err != nil {
			return err
		}
		var headers map[string]string
		if !o.Due.IsZero() {
			// A durable timer: a message schedule, which publishes the event
			// to its target when it comes due.
			headers = bus.ScheduleAt(o.Due, o.Target)
		}
		evs = append(evs, bus.Outgoing{Subject: o.Subject, Event: ev, Headers: headers})
	}
	// Sent together, acknowledged together: one round trip per transition.
	return e.bus.PublishAll(ctx, evs)
}

// shrink keeps large values of the contexts the state holds (the
// execution's, each line's, those parked at joins or ended) in the object
// store before the transition's events are published. Only members over
// the threshold are looked at, so small contexts cost nothing here; a
// context several hold is shrunk once. Contexts are NOVA's own (checked
// when they entered), so a large one is split without checking it again.
func (e *Engine) shrink(ctx context.Context, t *flow.Transition) error {
	if e.values == nil {
		return nil
	}
	done := map[*novav1.JSONValue]*novav1.JSONValue{}
	shrinkValue := func(v **novav1.JSONValue) error {
		old := *v
		if old == nil {
			return nil
		}
		if nv, ok := done[old]; ok {
			*v = nv
			return nil
		}
		if len(old.GetRaw()) <= e.values.Threshold() {
			// No member of a context this small is over the threshold:
			// a map's list read at each item is not split again here.
			done[old] = old
			return nil
		}
		nv, _, err := e.shrinkObject(ctx, t, jsonvalue.OwnObject(old), old)
		if err != nil {
			return err
		}
		done[old], *v = nv, nv
		return nil
	}
	if err := shrinkValue(&t.State().Context); err != nil {
		return err
	}
	for _, l := range t.State().Branches {
		if err := shrinkValue(&l.Context); err != nil {
			return err
		}
		if nv, ok := done[l.NodeInput]; ok {
			// The node input shares the old context; it gets the shrunk one.
			l.NodeInput = nv
		}
	}
	for _, js := range t.State().Joins {
		for _, a := range js.Activations {
			for _, r := range a.Arrived {
				if err := shrinkValue(&r.Context); err != nil {
					return err
				}
			}
		}
	}
	for _, r := range t.State().Ended {
		if err := shrinkValue(&r.Context); err != nil {
			return err
		}
	}
	return nil
}

// shrinkObject keeps the members of context o (whose proto is old) over
// the threshold in the value store, in place, and reports whether any
// was. The events t built before share old; they get the shrunk one,
// which it returns (old when nothing was shrunk).
func (e *Engine) shrinkObject(ctx context.Context, t *flow.Transition, o jsonvalue.Object, old *novav1.JSONValue) (*novav1.JSONValue, bool, error) {
	large := false
	for _, raw := range o {
		if len(raw) > e.values.Threshold() {
			large = true
			break
		}
	}
	if !large {
		return old, false, nil
	}
	if err := e.values.Shrink(ctx, o); err != nil {
		return nil, false, err
	}
	nv := o.Proto()
	for _, out := range t.Out() {
		replaceValue(out.Msg.ProtoReflect(), old, nv)
	}
	return nv, true, nil
}

// replaceValue points every top-level JSONValue field of m that is old at new.
func replaceValue(m protoreflect.Message, old, new *novav1.JSONValue) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		if fd.Message() != nil && !fd.IsList() && !fd.IsMap() {
			if jv, ok := v.Message().Interface().(*novav1.JSONValue); ok && jv == old {
				m.Set(fd, protoreflect.ValueOfMessage(new.ProtoReflect()))
			}
		}
		return true
	})
}

// traceparentOf is the W3C traceparent of ctx's span, "" when it has none.
func traceparentOf(ctx context.Context) string {
	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	return carrier.Get("traceparent")
}

// rejoinTrace is ctx with the span traceparent names as its parent, linked
// to ctx's own span: the work a steering command starts belongs to the
// execution's trace, and says which request started it.
func rejoinTrace(ctx context.Context, traceparent string) (context.Context, []trace.Link) {
	sender := trace.SpanContextFromContext(ctx)
	exec := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(),
		propagation.MapCarrier{"traceparent": traceparent}))
	if !exec.IsValid() || exec.TraceID() == sender.TraceID() {
		return ctx, nil
	}
	ctx = trace.ContextWithRemoteSpanContext(ctx, exec)
	if !sender.IsValid() {
		return ctx, nil
	}
	return ctx, []trace.Link{{SpanContext: sender, Attributes: []attribute.KeyValue{attribute.String("nova.link", "steered by")}}}
}

// droppedResult says that a result of execution id was dropped because no
// line waits for it: a redelivery, a late result of an ended execution, or
// one for a step the execution never issued. Other stale events (a timer
// or a cancel that came late) are ignored quietly.
func (e *Engine) droppedResult(ctx context.Context, id, nodeID string, err error) {
	var d *flow.DroppedResult
	if !errors.As(err, &d) {
		return
	}
	e.log.WarnContext(ctx, "result dropped: no line of the execution waits for it",
		"execution_id", id, "node_id", nodeID, "step_id", d.Step, "reason", d.Reason)
	if e.dropped != nil {
		e.dropped.Add(ctx, 1, metric.WithAttributes(attribute.String("reason", d.Reason)))
	}
}
