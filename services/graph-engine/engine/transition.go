package engine

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const (
	statusRunning   = execution.StatusRunning
	statusSucceeded = execution.StatusSucceeded
	statusFailed    = execution.StatusFailed

	// Chain-of-work statuses of a node visit.
	nodeSuccess = execution.NodeSuccess
	nodeFailed  = execution.NodeFailed

	branchDecision = "branch_decision"

	errorKindSandboxFault = "sandbox_fault"
	errorKindDeadLetter   = "dead_letter"
	// errorKindRuntimeUnavailable: the sandbox cannot run the language at all.
	errorKindRuntimeUnavailable = "runtime_unavailable"
	// errorKindBudgetExceeded: a model call would not fit a budget (the
	// agent's refusal, llm.BudgetError).
	errorKindBudgetExceeded = "budget_exceeded"
)

// outEvent is an event a transition decided to publish.
type outEvent struct {
	subject, id, typ, execution string
	msg                         proto.Message
	// headers are NATS headers besides the event's (a timer's schedule).
	headers map[string]string
}

// transition applies one event to an execution's state and collects the
// events that follow from it. Its only I/O is reading the code cache
// (lookup, and the semantic level's lookup, which may also ask the model API
// for a task's embedding and keep it: a write that is the same each time)
// and reading large values back from the value store (a refinement's
// output), so the same state, input, cache and values give the same events
// with the same ids; what it decides about the cache is applied after the
// state is stored (cacheFx).
type transition struct {
	e     *Engine
	st    *novav1.ExecutionState
	graph *workflow.Graph
	// ctx is st.Context split into its members.
	ctx     jsonvalue.Object
	now     time.Time
	out     []outEvent
	changed bool
	// lookup reads the code cache and runtime is the sandbox runtime's
	// fingerprint; both unset when the cache cannot be used.
	lookup  func(key string) *codecache.Entry
	runtime string
	// recheckRuntime, set when the runtime was not known as the transition
	// began, reads it again and binds the cache if it is there now.
	recheckRuntime func()
	// validator is the deployed code validator's fingerprint, "" when
	// unknown: a hit then sends its code to the validator.
	validator string
	// semantic looks a task up by its embedding after an exact miss, with
	// semanticModel; unset when the semantic level is off.
	semantic      func(semanticQuery) semanticResult
	semanticModel string
	cacheFx       cacheEffects
	// budgetFx are the day counters' shares to take and release, applied
	// before the events are published; budgetExceeded is the refusal that
	// failed the node.
	budgetFx       budgetEffects
	budgetExceeded *novav1.BudgetExceeded
	// expand and readValue read large values back from the value store;
	// unset when there is none.
	expand    func(jsonvalue.Object) error
	readValue func([]byte) ([]byte, error)
	// timersFx are the subjects of the timers the transition dropped, whose
	// schedules are removed once the state is stored.
	timersFx []string

	// ln is the line of control the transition works on (lines.go), and
	// lineStart its context as the work on it began (what it changed is
	// told from it; nil for the execution's one line).
	ln        *novav1.Branch
	lineStart jsonvalue.Object
	// splitMemo memoises splits and reaches.
	splitMemo map[string]bool
	// prevNode is the node whose visit completed last; children are the
	// child executions of the visit being completed.
	prevNode string
	children []string
	// resultsFx are map items' results to keep in the map results bucket
	// and purgeFx the map runs whose results are no longer needed, applied
	// before and after the state is stored; mapResults reads a map run's
	// kept results back, by item (mapresults.go).
	resultsFx  []mapResult
	purgeFx    []string
	mapResults func(prefix string) (map[int32][]byte, error)
}

func (e *Engine) newTransition(st *novav1.ExecutionState) *transition {
	t := &transition{e: e, st: st, now: e.now()}
	if st.Definition != nil {
		t.graph = workflow.NewGraph(st.Definition)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]*novav1.NodeState{}
	}
	t.ctx = jsonvalue.MustObject(st.Context)
	if st.Context == nil {
		st.Context = t.ctx.Proto()
	}
	upgradeState(st)
	return t
}

// upgradeState moves the one line of a state written before every line was
// a record of its own (its current-node fields) into its lines, and the
// arrivals of its joins into one activation each.
func upgradeState(st *novav1.ExecutionState) {
	if len(st.Branches) == 0 && (st.CurrentNode != "" || st.PendingStepId != "" || st.Timer != nil || st.MapRun != nil || st.Ai != nil) {
		st.Branches = []*novav1.Branch{{CurrentNode: st.CurrentNode, PendingStepId: st.PendingStepId, NodeStartedAt: st.NodeStartedAt,
			NodeInput: st.NodeInput, Ai: st.Ai, Timer: st.Timer, WaitingFor: st.WaitingFor, MapRun: st.MapRun, Context: st.Context}}
	}
	st.CurrentNode, st.PendingStepId, st.NodeStartedAt, st.NodeInput = "", "", nil, nil
	st.Ai, st.Timer, st.WaitingFor, st.MapRun = nil, nil, "", nil
	if len(st.Branches) == 1 && st.Branches[0].Id == "" && st.Branches[0].Context == nil {
		// The one line's context is stored once, as the execution's
		// (marshalState).
		st.Branches[0].Context = st.Context
	}
	for id, js := range st.Joins {
		if len(js.Arrived) > 0 {
			js.Activations = append(js.Activations, &novav1.JoinActivation{Arrived: js.Arrived})
		}
		for _, b := range js.Absorb {
			for _, l := range st.Branches {
				if l.Id == b {
					l.AbsorbedAt = append(l.AbsorbedAt, id)
				}
			}
		}
		js.Arrived, js.Absorb = nil, nil
		if len(js.Activations) == 0 {
			delete(st.Joins, id)
		}
	}
}

// setContext stores the transition's context in its line (or, before the
// execution has one, in the state). Context values are immutable text, so
// what an earlier snapshot (node input, an event) holds never changes.
func (t *transition) setContext() {
	if t.ln != nil {
		t.ln.Context = t.ctx.Proto()
		return
	}
	t.st.Context = t.ctx.Proto()
}

func (t *transition) emit(kind, id, typ string, msg proto.Message) {
	t.out = append(t.out, outEvent{
		subject:   bus.EventSubject(t.st.ExecutionId, kind),
		id:        id,
		typ:       typ,
		execution: t.st.ExecutionId,
		msg:       msg,
	})
	t.changed = true
}

func (t *transition) started() {
	t.emit(bus.KindWorkflowStarted, t.st.ExecutionId+"/started", bus.TypeWorkflowStarted, &novav1.WorkflowStarted{
		ExecutionId:  t.st.ExecutionId,
		WorkflowName: t.st.Definition.GetName(),
		Definition:   t.st.Definition,
		Context:      t.st.Context,
		StartedAt:    t.st.StartedAt,
		Rerun:        t.st.Rerun,
		ScheduleId:   t.st.ScheduleId,
		ScheduledAt:  t.st.ScheduledAt,
		Parent:       t.st.Parent,
	})
}

// enter moves the transition's line to node id: what happens there is
// the node kind's (kinds.go).
func (t *transition) enter(id string) {
	if t.st.Status != statusRunning {
		return
	}
	node := t.graph.Node(id)
	kindOf(node).enter(t, node)
}

// beginVisit counts a visit of node by the transition's line and records
// where it starts; it reports false when the node had its max_visits (the
// execution failed).
func (t *transition) beginVisit(node *novav1.Node) (*novav1.NodeState, bool) {
	ns := t.nodeState(node.Id)
	if !t.countVisit(node, ns) {
		return nil, false
	}
	t.ln.NodeStartedAt = tsNow(t.now)
	t.ln.NodeInput = t.ln.Context
	t.ln.Visit = ns.Visits
	return ns, true
}

// countVisit counts a visit of node, or fails the execution when the node
// has had its max_visits: checked before counting, so that visits says how
// often the node ran; a retry policy's attempts do not count.
func (t *transition) countVisit(node *novav1.Node, ns *novav1.NodeState) bool {
	if limit := workflow.MaxVisits(node); int(ns.Visits-ns.Retried) >= limit {
		ns.Status, ns.Error = statusFailed, fmt.Sprintf("node %q exceeded its maximum of %d visits", node.Id, limit)
		t.fail(ns.Error)
		return false
	}
	ns.Visits++
	ns.RetryAttempt = 1
	t.st.Sequence++
	t.st.Path = append(t.st.Path, node.Id)
	return true
}

// nodeStarted announces the visit of node that begins.
func (t *transition) nodeStarted(node *novav1.Node, ns *novav1.NodeState) {
	started := &novav1.NodeStarted{
		ExecutionId: t.st.ExecutionId, NodeId: node.Id, NodeType: workflow.TypeName(node.Type), Visit: ns.Visits,
		Ai: node.Prompt != "", Sequence: t.st.Sequence, StartedAt: t.ln.NodeStartedAt,
	}
	started.Branch, started.Item = t.branchOf()
	t.emit(bus.KindNodeStarted, t.visitKey(node.Id, ns.Visits)+"/started", bus.TypeNodeStarted, started)
}

// branchOf is the branch the transition works on and, for a map's item,
// its position.
func (t *transition) branchOf() (string, *int32) {
	if t.ln == nil {
		return "", nil
	}
	if t.ln.IsItem {
		return t.ln.Id, new(t.ln.Item)
	}
	return t.ln.Id, nil
}

// visitKey names a visit of node in event and step ids: a map's items,
// visits of one node visit, are told apart by their position.
func (t *transition) visitKey(node string, visit int32) string {
	key := fmt.Sprintf("%s/%s/%d", t.st.ExecutionId, node, visit)
	if t.isItem() {
		key += fmt.Sprintf("#%d", t.ln.Item)
	}
	return key
}

func (t *transition) nodeState(id string) *novav1.NodeState {
	if t.isItem() && id == t.ln.FromNode && t.ln.ItemNode != nil {
		// An item's own record of its map node.
		return t.ln.ItemNode
	}
	ns := t.st.Nodes[id]
	if ns == nil {
		ns = &novav1.NodeState{}
		t.st.Nodes[id] = ns
	}
	return ns
}

// command makes step the pending step and issues msg to agent. Every
// command gets the next dispatch number.
func (t *transition) command(node *novav1.Node, step, agent, typ string, msg func(seq int32) proto.Message) {
	t.st.Dispatch++
	t.ln.CurrentNode = node.Id
	t.ln.PendingStepId = step
	t.out = append(t.out, outEvent{
		subject:   bus.CommandSubject(agent),
		id:        step + "/cmd",
		typ:       typ,
		execution: t.st.ExecutionId,
		msg:       msg(t.st.Dispatch),
	})
	t.changed = true
}

// checkPending tells whether a result is for the pending step: nil when it
// is, errStale when it is older, errEarlyResult when its command's dispatch
// has not been stored yet.
func (t *transition) checkPending(stepID string, seq int32) error {
	if t.st.Status != statusRunning {
		return errStale // the execution ended: a redelivery or a late result
	}
	if stepID == t.ln.PendingStepId {
		return nil
	}
	if seq > t.st.Dispatch {
		return errEarlyResult
	}
	return errStale
}

// errEarlyResult means a result arrived before the state that dispatched its
// command was stored (commands are published first); it is redelivered.
var errEarlyResult = errors.New("result arrived before its dispatch was stored")

// errStale marks a result for a step that is no longer pending; it is
// acknowledged and ignored.
var errStale = errors.New("stale result")

// route completes a node whose run succeeded and moves to the next node; a
// decision node's branch_decision must match an outgoing edge.
func (t *transition) route(node *novav1.Node, ns *novav1.NodeState, r *novav1.CodeExecuted) {
	if t.isItem() {
		t.itemFinished(node, ns, r)
		return
	}
	var decision string
	var targets []string
	var err error
	if node.Type == novav1.NodeType_NODE_TYPE_DECISION {
		var value any
		if raw, ok := t.ctx[branchDecision]; ok {
			value, _ = jsonvalue.Decode(raw)
		}
		v, ok := workflow.DecisionString(value)
		if !ok {
			v = ""
		}
		decision = v
		var next string
		next, err = t.graph.Decide(node.Id, v)
		targets = []string{next}
	} else {
		targets, err = t.graph.Targets(node.Id)
	}
	if err != nil {
		t.nodeFailed(node, ns, err.Error(), r)
		return
	}
	ns.Status = statusSucceeded
	ns.Error = ""
	t.nodeCompleted(node, ns.Visits, nodeSuccess, "", decision, strings.Join(targets, ","), r)
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.Ai = "", "", nil
	t.follow(node, targets)
}

func (t *transition) nodeFailed(node *novav1.Node, ns *novav1.NodeState, msg string, r *novav1.CodeExecuted) {
	t.releaseHold()
	ns.Status, ns.Error = statusFailed, msg
	t.nodeCompleted(node, ns.Visits, nodeFailed, msg, "", "", r)
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.Ai = "", "", nil
	if t.isItem() {
		t.itemFailed(node, msg)
		return
	}
	t.fail(fmt.Sprintf("node %q failed: %s", node.Id, msg))
}

func (t *transition) nodeCompleted(node *novav1.Node, visit int32, status, errMsg, decision, pathTaken string, r *novav1.CodeExecuted) *novav1.NodeCompleted {
	if l := t.ln; l != nil && !l.IsItem && l.Visit > 0 && l.CurrentNode == node.Id {
		// The line's own visit: another line (a later loop round) may be at
		// the node in a later one.
		visit = l.Visit
	}
	nc := &novav1.NodeCompleted{
		ExecutionId:     t.st.ExecutionId,
		NodeId:          node.Id,
		NodeType:        workflow.TypeName(node.Type),
		Visit:           visit,
		Status:          status,
		CodeExecuted:    node.Code,
		InputContext:    t.ln.NodeInput,
		OutputResult:    t.ln.Context,
		ErrorMessage:    errMsg,
		DecisionResult:  decision,
		PathTaken:       pathTaken,
		Sequence:        t.st.Sequence,
		StartedAt:       t.ln.NodeStartedAt,
		CompletedAt:     tsNow(t.now),
		ExecutionTimeMs: float64(t.now.Sub(t.ln.NodeStartedAt.AsTime()).Microseconds()) / 1000,
	}
	if node.Code == "" {
		nc.CodeExecuted = node.Prompt
	}
	if r != nil {
		nc.Stdout, nc.Stderr, nc.Traceback = r.Stdout, r.Stderr, r.Traceback
		nc.OutputAnalysis = r.OutputAnalysis
	}
	if t.ln.Ai != nil {
		nc.AiMetadata = t.aiMetadata(node, status, errMsg)
		if t.ln.Ai.Code != "" {
			nc.CodeExecuted = t.ln.Ai.Code
		}
		for _, s := range t.ln.Ai.Steps {
			for _, c := range s.ModelCalls {
				nc.CostUsd += c.CostUsd
				nc.ModelCalls++
			}
		}
	}
	if t.budgetExceeded != nil && status != nodeSuccess {
		nc.ErrorKind = errorKindBudgetExceeded
	}
	if workflow.RetryPolicyOf(t.st.Definition, node) != nil {
		nc.Attempt = max(t.nodeState(node.Id).RetryAttempt, 1)
	}
	nc.Branch, nc.Item = t.branchOf()
	nc.ChildExecutionIds, t.children = t.children, nil
	t.prevNode = node.Id
	t.emit(bus.KindNodeCompleted, t.visitKey(node.Id, visit)+"/completed", bus.TypeNodeCompleted, nc)
	return nc
}

// itemIndex is the position of the map item the transition works on, nil
// when it works on none.
func (t *transition) itemIndex() *int32 {
	_, item := t.branchOf()
	return item
}

// fail ends the execution as failed with msg. Its final context is the
// failing line's (a map item's map's), never an item's.
func (t *transition) fail(msg string) {
	t.st.Status = statusFailed
	t.st.Error = msg
	if l := t.ln; l != nil {
		if l.IsItem {
			l = t.line(l.MapBranch)
		}
		if l != nil && l.Context != nil {
			t.st.Context = l.Context
		}
	}
	t.completed()
}

func (t *transition) complete() {
	t.st.Status = statusSucceeded
	t.completed()
}

func (t *transition) completed() {
	t.endLines(cmp.Or(t.st.Error, t.st.Status))
	t.st.CompletedAt = tsNow(t.now)
	done := execution.Completion(t.st)
	t.emit(bus.KindWorkflowCompleted, t.st.ExecutionId+"/completed", bus.TypeWorkflowCompleted, done)
	if p := t.st.Parent; p != nil {
		// The parent's workflow (or map) node waits for this.
		t.out = append(t.out, outEvent{
			subject:   bus.EventSubject(p.ExecutionId, bus.KindChildCompleted),
			id:        t.st.ExecutionId + "/child-completed",
			typ:       bus.TypeChildCompleted,
			execution: p.ExecutionId,
			msg: &novav1.ChildCompleted{Parent: p, ChildExecutionId: t.st.ExecutionId, WorkflowName: done.WorkflowName,
				Status: t.st.Status, Error: t.st.Error, Context: t.st.Context, CostUsd: done.CostUsd, ModelCalls: done.ModelCalls},
		})
	}
}

func languageOf(n *novav1.Node) string {
	if n.Language == "" {
		return "python"
	}
	return strings.ToLower(n.Language)
}

func stringsToAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func newStruct(m map[string]any) (*structpb.Struct, error) { return structpb.NewStruct(m) }

func tsNow(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }
