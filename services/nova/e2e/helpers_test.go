package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/syncbuf"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/graph-engine/engine"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// testTimeout bounds every test, so that a workflow that never ends fails the
// test instead of hanging the run. A run of make test from a fresh clone
// builds the whole tree while the tests run: there the cluster test, with
// two leader elections under load, took past 90 s.
const testTimeout = 3 * time.Minute

// env is one running stack (embedded NATS and FerretDB, every module) and a
// client connected to it, as a producer of workflows would be.
type env struct {
	t      *testing.T
	ctx    context.Context
	s      *stack.Stack
	bus    *bus.Bus
	values *valueref.Store
	client *client.Client
	logs   *syncbuf.Buffer
	opts   stack.Options
	// afterClose runs once the stack is closed (e.g. a restarted NATS server).
	afterClose []func()
}

// startEnv starts a stack in a fresh data dir. The services' logs are kept and
// printed only when the test fails.
func startEnv(t *testing.T, configure ...func(*stack.Options)) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testTimeout)
	t.Cleanup(cancel)
	logs := &syncbuf.Buffer{}
	opts := stack.Options{
		DataDir: t.TempDir(),
		Logger:  slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	for _, c := range configure {
		c(&opts)
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		t.Fatalf("start stack: %v", err)
	}
	e := &env{t: t, ctx: ctx, s: s, logs: logs, opts: opts}
	t.Cleanup(func() {
		if e.bus != nil {
			e.bus.Close()
		}
		if err := s.Close(); err != nil {
			t.Errorf("close stack: %v", err)
		}
		for _, f := range e.afterClose {
			f()
		}
		if t.Failed() {
			t.Logf("services' logs:\n%s", logs.String())
		}
	})
	e.connect()
	return e
}

// connect opens the client's bus connection (again, after a NATS restart).
func (e *env) connect(opts ...bus.Option) {
	e.t.Helper()
	if e.bus != nil {
		e.bus.Close()
	}
	b, err := e.s.Connect(e.ctx, "e2e", opts...)
	if err != nil {
		e.t.Fatalf("connect: %v", err)
	}
	e.bus = b
	values, err := valueref.Open(e.ctx, b.JetStream(), 0, 0)
	if err != nil {
		e.t.Fatalf("open value store: %v", err)
	}
	e.values = values
	e.client = client.New(b, values)
}

// run runs a workflow to its end.
func (e *env) run(def *novav1.WorkflowDefinition, initial any) *novav1.WorkflowCompleted {
	e.t.Helper()
	wc, err := e.client.Run(e.ctx, def, initial)
	if err != nil {
		e.t.Fatalf("run %s: %v", def.GetName(), err)
	}
	return wc
}

// auditIdle waits until the audit service has stored every event published so far.
func (e *env) auditIdle() {
	e.t.Helper()
	if err := e.client.WaitConsumerIdle(e.ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
		e.t.Fatalf("wait for audit: %v", err)
	}
}

// chain returns the chain of work of an execution once the audit has caught up.
func (e *env) chain(executionID string) []chainstore.NodeDoc {
	e.t.Helper()
	e.auditIdle()
	nodes, err := e.s.Store.Chain(e.ctx, executionID)
	if err != nil {
		e.t.Fatalf("chain of %s: %v", executionID, err)
	}
	return nodes
}

// counts returns the audit documents of an execution by collection.
func (e *env) counts(executionID string) map[string]int64 {
	e.t.Helper()
	e.auditIdle()
	c, err := e.s.Store.Counts(e.ctx, executionID)
	if err != nil {
		e.t.Fatalf("counts of %s: %v", executionID, err)
	}
	return c
}

// pastDuplicateWindows makes the streams forget the ids published so far, as
// if their duplicate windows had passed: the windows are shortened to the
// least the server takes, waited out, and set back.
func (e *env) pastDuplicateWindows() {
	e.t.Helper()
	const short = 100 * time.Millisecond
	js := e.bus.JetStream()
	for _, name := range []string{bus.StreamCommands, bus.StreamEvents} {
		stream, err := js.Stream(e.ctx, name)
		if err != nil {
			e.t.Fatal(err)
		}
		cfg := stream.CachedInfo().Config
		window := cfg.Duplicates
		// Twice: an update makes the server purge its ids at once, but that
		// purge may run before the update sets the new window, and then
		// waits out the old one. The second update's purge finds the short
		// window the first one set.
		for _, d := range []time.Duration{short, short + time.Millisecond} {
			cfg.Duplicates = d
			if _, err := js.UpdateStream(e.ctx, cfg); err != nil {
				e.t.Fatalf("shorten the duplicate window of %s: %v", name, err)
			}
		}
		e.t.Cleanup(func() {
			cfg.Duplicates = window
			if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
				e.t.Errorf("set back the duplicate window of %s: %v", name, err)
			}
		})
		// The server forgets ids on a timer of its own: a probe published
		// again under its id is stored again once it has.
		probe := map[string]string{bus.StreamCommands: "nova.cmd.dedup-probe", bus.StreamEvents: "nova.evt.dedup-probe.probe"}[name]
		msg := &nats.Msg{Subject: probe, Header: nats.Header{nats.MsgIdHdr: []string{"dedup-probe-" + uuid.NewString()}}}
		if _, err := js.PublishMsg(e.ctx, msg); err != nil {
			e.t.Fatal(err)
		}
		e.eventually(10*time.Second, "the duplicate window of "+name+" has passed", func() bool {
			ack, err := js.PublishMsg(e.ctx, msg)
			return err == nil && !ack.Duplicate
		})
		if err := stream.Purge(e.ctx, jetstream.WithPurgeSubject(probe)); err != nil {
			e.t.Fatal(err)
		}
	}
}

// busIdle waits until no durable consumer of the commands and the events has
// anything pending or unacknowledged, and nothing was published while it
// looked.
func (e *env) busIdle() {
	e.t.Helper()
	js := e.bus.JetStream()
	streams := []string{bus.StreamCommands, bus.StreamEvents}
	lastSeqs := func() []uint64 {
		var seqs []uint64
		for _, name := range streams {
			stream, err := js.Stream(e.ctx, name)
			if err != nil {
				e.t.Fatal(err)
			}
			seqs = append(seqs, stream.CachedInfo().State.LastSeq)
		}
		return seqs
	}
	for {
		seen := lastSeqs()
		busy, err := client.Backlog(e.ctx, js, streams...)
		if err != nil {
			e.t.Fatal(err)
		}
		if busy == "" && slices.Equal(lastSeqs(), seen) {
			return
		}
		select {
		case <-e.ctx.Done():
			e.t.Fatalf("the bus is still busy: %s", busy)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// subjects counts a stream's messages by subject, of the subjects filter
// matches.
func (e *env) subjects(stream, filter string) map[string]uint64 {
	e.t.Helper()
	s, err := e.bus.JetStream().Stream(e.ctx, stream)
	if err != nil {
		e.t.Fatal(err)
	}
	info, err := s.Info(e.ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		e.t.Fatal(err)
	}
	return info.State.Subjects
}

// consumerInfo reads a durable consumer's state.
func (e *env) consumerInfo(stream, durable string) *jetstream.ConsumerInfo {
	e.t.Helper()
	cons, err := e.bus.JetStream().Consumer(e.ctx, stream, durable)
	if err != nil {
		e.t.Fatalf("consumer %s: %v", durable, err)
	}
	info, err := cons.Info(e.ctx)
	if err != nil {
		e.t.Fatalf("consumer %s: %v", durable, err)
	}
	return info
}

// eventually polls cond every 20ms until it holds, failing the test after d.
func (e *env) eventually(d time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("timed out after %v waiting until %s", d, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// parse parses and validates a workflow written in a test.
func parse(t *testing.T, yaml string) *novav1.WorkflowDefinition {
	t.Helper()
	def, err := workflow.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return def
}

// codeOf returns the code of a node of def.
func codeOf(def *novav1.WorkflowDefinition, id string) string {
	for _, n := range def.Nodes {
		if n.Id == id {
			return n.Code
		}
	}
	return ""
}

// summaries indexes a completion's node summaries by node id.
func summaries(wc *novav1.WorkflowCompleted) map[string]*novav1.NodeSummary {
	m := map[string]*novav1.NodeSummary{}
	for _, n := range wc.Nodes {
		m[n.Id] = n
	}
	return m
}

// chainIDs lists the node ids of a chain in order.
func chainIDs(nodes []chainstore.NodeDoc) []string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.NodeID
	}
	return ids
}

// nodeDoc returns the chain document of a node's visit, failing the test when absent.
func nodeDoc(t *testing.T, nodes []chainstore.NodeDoc, id string, visit int) chainstore.NodeDoc {
	t.Helper()
	i := slices.IndexFunc(nodes, func(n chainstore.NodeDoc) bool { return n.NodeID == id && n.Visit == visit })
	if i < 0 {
		t.Fatalf("chain of work has no visit %d of node %q; it has %v", visit, id, chainIDs(nodes))
	}
	return nodes[i]
}

// checkChain asserts the shape every recorded chain must have: one document
// per step of the path, in sequence, each code node's visit with exactly one
// sandbox step and start and end nodes with none.
func checkChain(t *testing.T, def *novav1.WorkflowDefinition, wc *novav1.WorkflowCompleted, nodes []chainstore.NodeDoc) {
	t.Helper()
	if got := chainIDs(nodes); !slices.Equal(got, wc.Path) {
		t.Fatalf("chain of work nodes = %v, want the path %v", got, wc.Path)
	}
	visits := map[string]int{}
	for i, n := range nodes {
		visits[n.NodeID]++
		if n.Sequence != i+1 {
			t.Errorf("chain[%d] (%s) sequence = %d, want %d", i, n.NodeID, n.Sequence, i+1)
		}
		if n.Visit != visits[n.NodeID] {
			t.Errorf("chain[%d] (%s) visit = %d, want %d", i, n.NodeID, n.Visit, visits[n.NodeID])
		}
		if n.ExecutionID != wc.ExecutionId {
			t.Errorf("chain[%d] execution_id = %q, want %q", i, n.ExecutionID, wc.ExecutionId)
		}
		code := codeOf(def, n.NodeID)
		switch {
		case code == "" && len(n.Steps) != 0:
			t.Errorf("chain[%d] (%s, %s) has %d steps, want none", i, n.NodeID, n.NodeType, len(n.Steps))
		case code != "" && len(n.Steps) != 1:
			t.Errorf("chain[%d] (%s) has %d steps, want 1", i, n.NodeID, len(n.Steps))
		case code != "":
			st := n.Steps[0]
			if st.AgentName != "sandbox" || st.StepName != "code_execution" || st.AttemptNumber != 1 ||
				st.GeneratedCode != code || st.InputData["language"] != "python" {
				t.Errorf("chain[%d] (%s) step = agent %q, step %q, attempt %d, sandbox %q, code %q, input %v; "+
					"want sandbox/code_execution attempt 1 of python and the node's code",
					i, n.NodeID, st.AgentName, st.StepName, st.AttemptNumber, st.SandboxID, st.GeneratedCode, st.InputData)
			}
			// A node that succeeded ran its code successfully; a failed node
			// may have failed in its code or in routing afterwards.
			if n.Status == "success" && (st.Status != "success" || st.OutputData["status"] != "success" || st.SandboxID == "") {
				t.Errorf("chain[%d] (%s) succeeded but its step has status %q, sandbox %q, output %v",
					i, n.NodeID, st.Status, st.SandboxID, st.OutputData)
			}
			if n.CodeExecuted != code {
				t.Errorf("chain[%d] (%s) code_executed = %q, want the node's code", i, n.NodeID, n.CodeExecuted)
			}
		}
	}
}

// mustContain fails the test unless s contains every want.
func mustContain(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s = %q, want it to contain %q", what, s, w)
		}
	}
}

// waitMsg reads the first message of a stream's subject that match accepts,
// from the start of the stream.
func (e *env) waitMsg(stream, subject string, match func(jetstream.Msg) bool) (jetstream.Msg, error) {
	cons, err := bus.NewEventReader(e.ctx, e.bus.JetStream(), stream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) {
			if ctx.Err() != nil {
				return nil, fmt.Errorf("no matching message on %s: %w", subject, ctx.Err())
			}
			continue
		}
		if err != nil {
			return nil, err
		}
		if match(msg) {
			return msg, nil
		}
	}
}

// ctxMap decodes a context from an event or the engine's state with numbers
// as float64, for assertions about values that float64 holds exactly; the
// exactness tests compare the JSON text instead.
func ctxMap(v *novav1.JSONValue) map[string]any {
	m := map[string]any{}
	_ = json.Unmarshal(v.GetRaw(), &m)
	return m
}

// engineOf is the graph engine's settings of a stack's options, its
// defaults until a test changes one.
func engineOf(o *stack.Options) *engine.Settings {
	if o.Engine == nil {
		es := engine.DefaultSettings()
		o.Engine = &es
	}
	return o.Engine
}
