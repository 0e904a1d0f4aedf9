package flow

import (
	"cmp"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/codecache/cacheentry"
	"github.com/novaflow/nova/pkg/execution/execstate"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const (
	statusRunning   = execstate.StatusRunning
	statusSucceeded = execstate.StatusSucceeded
	statusFailed    = execstate.StatusFailed

	// Chain-of-work statuses of a node visit.
	nodeSuccess = execstate.NodeSuccess
	nodeFailed  = execstate.NodeFailed

	branchDecision = "branch_decision"

	errorKindSandboxFault = "sandbox_fault"
	ErrorKindDeadLetter   = "dead_letter"
	// errorKindRuntimeUnavailable: the sandbox cannot run the language at all.
	errorKindRuntimeUnavailable = "runtime_unavailable"
	// errorKindBudgetExceeded: a model call would not fit a budget (the
	// agent's refusal, llm.BudgetError).
	errorKindBudgetExceeded = "budget_exceeded"
)

// OutEvent is an event a transition decided to publish.
type OutEvent struct {
	Subject, ID, Type, Execution string
	Msg                          proto.Message
	// Due and Target make the event a durable timer: the shell keeps it on
	// Subject as a schedule that publishes it to Target at Due (zero: the
	// event is published at once).
	Due    time.Time
	Target string
}

// Config is what a transition reads of the engine's settings, with the
// cache of map lists the engine's transitions share.
type Config struct {
	// DefaultNodeTimeout applies when neither node nor workflow sets one.
	DefaultNodeTimeout time.Duration
	// SandboxAttempts bounds re-runs of a node whose sandbox failed (not its code).
	SandboxAttempts int
	// MaxAttempts bounds code generation attempts of an AI node.
	MaxAttempts int
	// MapResultsMaxBytes bounds one map's items' results together (0: no
	// bound).
	MapResultsMaxBytes int64
	// AnalysisTimeout bounds a run of analysis code.
	AnalysisTimeout time.Duration
	// Budget is the deployment's default budget: each limit a workflow
	// leaves unset (nil: none).
	Budget *novav1.Budget
	// Similarity is the cosine similarity a semantic hit of the code cache
	// reached at least (codecache.SemanticSettings.Similarity).
	Similarity float64
	// Items keeps the lists large maps run over, read back once (nil: a
	// throwaway cache for each transition).
	Items *ItemLists
	// Contexts keeps large contexts split into their members (nil: each
	// is split where it is read).
	Contexts *Contexts
}

// Transition applies one event to an execution's state and collects the
// events that follow from it. Its only I/O is reading the code cache
// (Lookup, and the semantic level's lookup, which may also ask the model API
// for a task's embedding and keep it: a write that is the same each time)
// and reading large values back from the value store (a refinement's
// output, a map's list and results), through the hooks the shell binds, so
// the same state, input, cache and values give the same events with the
// same ids; what it decides about the cache, the day counters, timers and
// map results is applied by the shell (the *Fx fields).
type Transition struct {
	cfg   Config
	st    *novav1.ExecutionState
	graph *workflow.Graph
	// ctx is st.Context split into its members.
	ctx     jsonvalue.Object
	now     time.Time
	out     []OutEvent
	changed bool
	// Lookup reads the code cache and Runtime is the sandbox runtime's
	// fingerprint; both unset when the cache cannot be used.
	Lookup  func(key string) *cacheentry.Entry
	Runtime string
	// RecheckRuntime, set when the runtime was not known as the transition
	// began, reads it again and binds the cache if it is there now.
	RecheckRuntime func()
	// Validator is the deployed code validator's fingerprint, "" when
	// unknown: a hit then sends its code to the validator.
	Validator string
	// Semantic looks a task up by its embedding after an exact miss, with
	// SemanticModel; unset when the semantic level is off.
	Semantic      func(SemanticQuery) SemanticResult
	SemanticModel string
	CacheFx       CacheEffects
	// BudgetFx are the day counters' shares to take and release, applied
	// before the events are published; budgetExceeded is the refusal that
	// failed the node.
	BudgetFx       BudgetEffects
	budgetExceeded *novav1.BudgetExceeded
	// Expand and ReadValue read large values back from the value store;
	// unset when there is none.
	Expand    func(jsonvalue.Object) error
	ReadValue func([]byte) ([]byte, error)
	// TimersFx are the subjects of the timers the transition dropped, whose
	// schedules are removed once the state is stored.
	TimersFx []string

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
	// ResultsFx are map items' results to keep in the map results bucket
	// and PurgeFx the map runs whose results are no longer needed, applied
	// before and after the state is stored; MapResults reads a map run's
	// kept results back, by item (mapresults.go).
	ResultsFx  []MapResult
	PurgeFx    []string
	MapResults func(prefix string) (map[int32][]byte, error)
}

// New begins a transition of st at now with cfg. A state an earlier engine
// wrote is read as this one writes it (upgradeState).
func New(st *novav1.ExecutionState, cfg Config, now time.Time) *Transition {
	t := &Transition{cfg: cfg, st: st, now: now}
	if st.Definition != nil {
		t.graph = workflow.NewGraph(st.Definition)
	}
	if st.Nodes == nil {
		st.Nodes = map[string]*novav1.NodeState{}
	}
	t.ctx = cfg.Contexts.object(st.Context)
	if st.Context == nil {
		st.Context = t.ctx.Proto()
	}
	upgradeState(st)
	return t
}

// State is the execution's state the transition changes.
func (t *Transition) State() *novav1.ExecutionState { return t.st }

// Graph is the graph of the execution's workflow, nil before it has one.
func (t *Transition) Graph() *workflow.Graph { return t.graph }

// SetDefinition makes def the execution's workflow.
func (t *Transition) SetDefinition(def *novav1.WorkflowDefinition) {
	t.st.Definition = def
	t.graph = workflow.NewGraph(def)
}

// Context is the context of the line the transition works on, by member;
// SetContext stores what was changed in it.
func (t *Transition) Context() jsonvalue.Object { return t.ctx }

// Out are the commands and events the transition decided to publish, in
// order.
func (t *Transition) Out() []OutEvent { return t.out }

// Changed tells whether the transition changed the state, which is then to
// be stored.
func (t *Transition) Changed() bool { return t.changed }

// Unbind leaves the line the transition worked on, so that what Settle
// then decides is the execution's, not that line's.
func (t *Transition) Unbind() { t.ln = nil }

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
	for _, l := range st.Branches {
		if l.Id == "" && l.Context == nil {
			// The first line's context, when it is the execution's, is
			// stored once, as the execution's (MarshalState).
			l.Context = st.Context
		}
		if l.InputIsContext {
			l.NodeInput, l.InputIsContext = l.Context, false
		}
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

// SetContext stores the transition's context in its line (or, before the
// execution has one, in the state). Context values are immutable text, so
// what an earlier snapshot (node input, an event) holds never changes.
func (t *Transition) SetContext() {
	if t.ln != nil {
		t.ln.Context = t.ctx.Proto()
		return
	}
	t.st.Context = t.ctx.Proto()
}

func (t *Transition) emit(kind, id, typ string, msg proto.Message) {
	t.out = append(t.out, OutEvent{
		Subject:   busname.EventSubject(t.st.ExecutionId, kind),
		ID:        id,
		Type:      typ,
		Execution: t.st.ExecutionId,
		Msg:       msg,
	})
	t.changed = true
}

// Started announces the execution's start (WorkflowStarted).
func (t *Transition) Started() {
	t.emit(busname.KindWorkflowStarted, t.st.ExecutionId+"/started", busname.TypeWorkflowStarted, &novav1.WorkflowStarted{
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

// Enter moves the transition's line to node id: what happens there is
// the node kind's (kinds.go).
func (t *Transition) Enter(id string) {
	if t.st.Status != statusRunning {
		return
	}
	node := t.graph.Node(id)
	if t.askLock(node) {
		return // its visit begins once the lock is granted
	}
	kindOf(node).enter(t, node)
	if len(node.On) > 0 && t.st.Status == statusRunning && t.ln != nil && t.live(t.ln) && t.ln.CurrentNode == node.Id && len(t.ln.Boundaries) == 0 {
		t.armBoundaries(node)
	}
}

// beginVisit counts a visit of node by the transition's line and records
// where it starts; it reports false when the node had its max_visits (the
// execution failed).
func (t *Transition) beginVisit(node *novav1.Node) (*novav1.NodeState, bool) {
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
func (t *Transition) countVisit(node *novav1.Node, ns *novav1.NodeState) bool {
	if limit := workflow.MaxVisits(node); int(ns.Visits-ns.Retried) >= limit {
		ns.Status, ns.Error = statusFailed, fmt.Sprintf("node %q exceeded its maximum of %d visits", node.Id, limit)
		t.Fail(ns.Error)
		return false
	}
	ns.Visits++
	ns.RetryAttempt = 1
	t.st.Sequence++
	t.st.Path = append(t.st.Path, node.Id)
	return true
}

// nodeStarted announces the visit of node that begins.
func (t *Transition) nodeStarted(node *novav1.Node, ns *novav1.NodeState) {
	started := &novav1.NodeStarted{
		ExecutionId: t.st.ExecutionId, NodeId: node.Id, NodeType: workflow.TypeName(node.Type), Visit: ns.Visits,
		Ai: node.Prompt != "", Sequence: t.st.Sequence, StartedAt: t.ln.NodeStartedAt,
	}
	started.Branch, started.Item = t.branchOf()
	t.emit(busname.KindNodeStarted, t.visitKey(node.Id, ns.Visits)+"/started", busname.TypeNodeStarted, started)
}

// branchOf is the branch the transition works on and, for a map's item,
// its position.
func (t *Transition) branchOf() (string, *int32) {
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
func (t *Transition) visitKey(node string, visit int32) string {
	key := fmt.Sprintf("%s/%s/%d", t.st.ExecutionId, node, visit)
	if t.isItem() {
		key += fmt.Sprintf("#%d", t.ln.Item)
	}
	return key
}

func (t *Transition) nodeState(id string) *novav1.NodeState {
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
func (t *Transition) command(node *novav1.Node, step, agent, typ string, msg func(seq int32) proto.Message) {
	t.st.Dispatch++
	t.ln.CurrentNode = node.Id
	t.ln.PendingStepId = step
	t.out = append(t.out, OutEvent{
		Subject:   busname.CommandSubject(agent),
		ID:        step + "/cmd",
		Type:      typ,
		Execution: t.st.ExecutionId,
		Msg:       msg(t.st.Dispatch),
	})
	t.changed = true
}

// CheckPending tells whether a result is for the pending step: nil when it
// is, ErrStale when it is older, errEarlyResult when its command's dispatch
// has not been stored yet.
func (t *Transition) CheckPending(stepID string, seq int32) error {
	if t.st.Status != statusRunning {
		// A redelivery or a late result.
		return &DroppedResult{Step: stepID, Reason: DroppedEnded}
	}
	if stepID == t.ln.PendingStepId {
		return nil
	}
	if seq > t.st.Dispatch {
		return errEarlyResult
	}
	// A redelivery of a result applied already, or one for a step this
	// execution never issued (a forged or misrouted result).
	return &DroppedResult{Step: stepID, Reason: DroppedNotPending}
}

// Why a result was dropped (DroppedResult.Reason).
const (
	// DroppedEnded: the execution had ended.
	DroppedEnded = "execution_ended"
	// DroppedNotPending: no line of the running execution waits for it.
	DroppedNotPending = "not_pending"
)

// DroppedResult is ErrStale for a result no line waits for: it is
// acknowledged and dropped, and the engine says so.
type DroppedResult struct {
	Step   string
	Reason string
}

func (e *DroppedResult) Error() string {
	return fmt.Sprintf("result of step %q dropped (%s)", e.Step, e.Reason)
}

// Is makes a DroppedResult ErrStale.
func (e *DroppedResult) Is(target error) bool { return target == ErrStale }

// errEarlyResult means a result arrived before the state that dispatched its
// command was stored (commands are published first); it is redelivered.
var errEarlyResult = errors.New("result arrived before its dispatch was stored")

// ErrStale marks a result for a step that is no longer pending; it is
// acknowledged and ignored.
var ErrStale = errors.New("stale result")

// route completes a node whose run succeeded and moves to the next node; a
// decision node's branch_decision must match an outgoing edge.
func (t *Transition) route(node *novav1.Node, ns *novav1.NodeState, r *novav1.CodeExecuted) {
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
		list, isList := value.([]any)
		switch {
		case isList && node.Choose == workflow.ChooseMany:
			// Each chosen edge starts a line (a fork of those alone).
			var decisions []string
			decisions, targets, err = t.graph.DecideMany(node.Id, list)
			decision = strings.Join(decisions, ",")
		case isList:
			err = fmt.Errorf("decision node %q: branch_decision is a list; a decision picks one edge unless it has choose: many", node.Id)
		default:
			v, ok := workflow.DecisionString(value)
			if !ok {
				v = ""
			}
			decision = v
			var next string
			next, err = t.graph.Decide(node.Id, v)
			targets = []string{next}
		}
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

func (t *Transition) nodeFailed(node *novav1.Node, ns *novav1.NodeState, msg string, r *novav1.CodeExecuted) {
	t.ReleaseHold()
	ns.Status, ns.Error = statusFailed, msg
	t.nodeCompleted(node, ns.Visits, nodeFailed, msg, "", "", r)
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.Ai = "", "", nil
	if t.isItem() {
		t.itemFailed(node, msg)
		return
	}
	t.Fail(fmt.Sprintf("node %q failed: %s", node.Id, msg))
}

func (t *Transition) nodeCompleted(node *novav1.Node, visit int32, status, errMsg, decision, pathTaken string, r *novav1.CodeExecuted) *novav1.NodeCompleted {
	if l := t.ln; l != nil && !l.IsItem && l.Visit > 0 && l.CurrentNode == node.Id {
		// The line's own visit: another line (a later loop round) may be at
		// the node in a later one.
		visit = l.Visit
	}
	if l := t.ln; l != nil && !l.IsItem {
		t.disarmBoundaries(node.Id)
		t.lockVisitEnded(node)
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
	t.emit(busname.KindNodeCompleted, t.visitKey(node.Id, visit)+"/completed", busname.TypeNodeCompleted, nc)
	return nc
}

// itemIndex is the position of the map item the transition works on, nil
// when it works on none.
func (t *Transition) itemIndex() *int32 {
	_, item := t.branchOf()
	return item
}

// Fail ends the execution as failed with msg. Its final context is the
// failing line's (a map item's map's), never an item's.
func (t *Transition) Fail(msg string) {
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

func (t *Transition) complete() {
	t.st.Status = statusSucceeded
	t.completed()
}

func (t *Transition) completed() {
	t.endLines(cmp.Or(t.st.Error, t.st.Status))
	t.rejectKept()
	t.st.CompletedAt = tsNow(t.now)
	done := execstate.Completion(t.st)
	t.emit(busname.KindWorkflowCompleted, t.st.ExecutionId+"/completed", busname.TypeWorkflowCompleted, done)
	if p := t.st.Parent; p != nil {
		// The parent's workflow (or map) node waits for this.
		t.out = append(t.out, OutEvent{
			Subject:   busname.EventSubject(p.ExecutionId, busname.KindChildCompleted),
			ID:        t.st.ExecutionId + "/child-completed",
			Type:      busname.TypeChildCompleted,
			Execution: p.ExecutionId,
			Msg: &novav1.ChildCompleted{Parent: p, ChildExecutionId: t.st.ExecutionId, WorkflowName: done.WorkflowName,
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
