package execution

import (
	"context"
	"maps"
	"slices"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// View is what a reader sees of an execution the graph engine holds: the
// gateway and the nova CLI read executions through it (ReadView), never
// through the fields of the engine's state, whose shape is the engine's to
// change (ViewOf is the one place that reads them).
type View struct {
	ID       string
	Workflow string
	Status   string
	Error    string
	// Definition is nil for a refinement, which runs no workflow.
	Definition *novav1.WorkflowDefinition
	Refinement bool
	// RefinementMessages counts the messages a refinement's stream has.
	RefinementMessages int32
	Context            *novav1.JSONValue
	Path               []string
	StartedAt          *timestamppb.Timestamp
	CompletedAt        *timestamppb.Timestamp
	CostUSD            float64
	ModelCalls         int32
	CancelledBy        string
	CancelReason       string
	RerunOf, RerunFrom string
	ScheduleID         string
	ScheduledAt        *timestamppb.Timestamp
	Parent             *novav1.ParentRef
	Nodes              []NodeView

	// While it runs: the node its one line is at ("" when it runs several
	// lines at once), every line when it runs several, and the signal it
	// waits for first.
	CurrentNode string
	Lines       []LineView
	Waiting     *Waiting
	// Kept are the signals it keeps until a wait node takes them, oldest
	// first.
	Kept []*novav1.KeptSignal

	state *novav1.ExecutionState
}

// NodeView is what an execution did at one node, over its visits.
type NodeView struct {
	ID         string
	Status     string
	Error      string
	Attempts   int32
	Visits     int32
	CostUSD    float64
	ModelCalls int32
}

// LineView is one line of control of a running execution.
type LineView struct {
	// ID is "" for the execution's one line, "b1", "b2", ... for branches
	// and map items.
	ID   string
	Node string
	// WaitingFor is the signal the line waits for, "" for none.
	WaitingFor string
	// Item is a map item's position, nil for a branch.
	Item *int32
	// Until is when the line's wait ends on its own, nil for never.
	Until *timestamppb.Timestamp
}

// Waiting is a line that waits for a signal, with its wait node.
type Waiting struct {
	Line LineView
	Node *novav1.Node
}

// ViewOf is the view of state st.
func ViewOf(st *novav1.ExecutionState) *View {
	v := &View{
		ID: st.GetExecutionId(), Workflow: WorkflowName(st), Status: st.GetStatus(), Error: st.GetError(),
		Refinement: st.GetRefine() != nil, RefinementMessages: st.GetRefine().GetMessages(),
		Context: st.GetContext(), Path: st.GetPath(), StartedAt: st.GetStartedAt(), CompletedAt: st.GetCompletedAt(),
		CostUSD: st.GetSpend().GetUsd(), ModelCalls: st.GetSpend().GetModelCalls(),
		CancelledBy: st.GetCancelledBy(), CancelReason: st.GetCancelReason(),
		RerunOf: st.GetRerun().GetExecutionId(), RerunFrom: st.GetRerun().GetNodeId(),
		ScheduleID: st.GetScheduleId(), ScheduledAt: st.GetScheduledAt(), Parent: st.GetParent(),
		state: st,
	}
	if !v.Refinement {
		v.Definition = st.GetDefinition()
	}
	for _, id := range slices.Sorted(maps.Keys(st.GetNodes())) {
		n := st.GetNodes()[id]
		v.Nodes = append(v.Nodes, NodeView{ID: id, Status: n.GetStatus(), Error: n.GetError(), Attempts: n.GetAttempts(),
			Visits: n.GetVisits(), CostUSD: n.GetSpend().GetUsd(), ModelCalls: n.GetSpend().GetModelCalls()})
	}
	if v.Status != StatusRunning {
		return v
	}
	v.CurrentNode = CurrentNode(st)
	v.Kept = st.GetKeptSignals()
	for _, l := range Forked(st) {
		lv := LineView{ID: l.GetId(), Node: l.GetCurrentNode(), WaitingFor: l.GetWaitingFor(), Until: WaitUntil(l)}
		if l.GetIsItem() {
			lv.Item, lv.Node = new(l.GetItem()), l.GetFromNode()
		}
		v.Lines = append(v.Lines, lv)
	}
	for _, l := range Lines(st) {
		if l.GetWaitingFor() != "" {
			v.Waiting = &Waiting{Line: LineView{ID: l.GetId(), Node: l.GetCurrentNode(), WaitingFor: l.GetWaitingFor(), Until: WaitUntil(l)},
				Node: WaitNode(st, l.GetWaitingFor())}
			break
		}
	}
	return v
}

// ReadView is the view of execution id in kv (the bucket
// bus.BucketExecutions), nil when the engine holds none.
func ReadView(ctx context.Context, kv jetstream.KeyValue, id string) (*View, error) {
	st, err := ReadState(ctx, kv, id)
	if err != nil || st == nil {
		return nil, err
	}
	return ViewOf(st), nil
}

// Completion is the completion event of the ended execution v shows.
func (v *View) Completion() *novav1.WorkflowCompleted { return Completion(v.state) }

// CheckCancel tells whether the execution can be cancelled (see
// CheckCancel).
func (v *View) CheckCancel() error { return CheckCancel(v.state) }

// CheckSignal tells whether the execution waits for signal name (see
// CheckSignalTarget).
func (v *View) CheckSignal(name string) error { return CheckSignalTarget(v.state, name) }

// WaitNode is the wait node that waits for signal name, nil when none does.
func (v *View) WaitNode(name string) *novav1.Node { return WaitNode(v.state, name) }

// Node is what the execution did at node id (zero when it has not been
// there).
func (v *View) Node(id string) NodeView {
	for _, n := range v.Nodes {
		if n.ID == id {
			return n
		}
	}
	return NodeView{ID: id}
}
