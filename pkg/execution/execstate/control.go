package execstate

import (
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// EndedError is a request that needs a running execution (a cancel, a
// signal) made to one that ended: the HTTP API answers 409 with it.
type EndedError struct {
	ID     string
	Status string
}

func (e *EndedError) Error() string {
	return fmt.Sprintf("execution %s is %s: only a running execution can be steered", e.ID, e.Status)
}

// NotWaitingError is a signal for an execution that does not wait for it:
// the HTTP API answers 409 with it, naming what the execution waits for.
type NotWaitingError struct {
	ID     string
	Signal string
	// WaitingFor is the signal the execution waits for; "" when its
	// current node waits for none.
	WaitingFor string
	// Node is the node running or waiting.
	Node string
	// Keeps: a wait node of the execution's workflow waits for the
	// signal, so the running execution keeps it until one takes it.
	Keeps bool
	// Workflow is the execution's workflow.
	Workflow string
}

func (e *NotWaitingError) Error() string {
	if !e.Keeps && e.Workflow != "" {
		now := ""
		switch {
		case e.WaitingFor != "":
			now = fmt.Sprintf(" (node %q waits for signal %q)", e.Node, e.WaitingFor)
		case e.Node != "":
			now = fmt.Sprintf(" (node %q is running)", e.Node)
		}
		return fmt.Sprintf("execution %s: no wait node of workflow %q waits for signal %q%s", e.ID, e.Workflow, e.Signal, now)
	}
	if e.WaitingFor == "" {
		if e.Node == "" {
			return fmt.Sprintf("execution %s waits for no signal (signal %q)", e.ID, e.Signal)
		}
		return fmt.Sprintf("execution %s waits for no signal: node %q is running (signal %q)", e.ID, e.Node, e.Signal)
	}
	return fmt.Sprintf("execution %s does not wait for signal %q: node %q waits for signal %q", e.ID, e.Signal, e.Node, e.WaitingFor)
}

// CheckCancel tells whether st can be cancelled: nil when it runs, an
// *EndedError when it ended. Cancelling an execution cancelled already is
// no error: cancel is idempotent.
func CheckCancel(st *novav1.ExecutionState) error {
	if st.GetStatus() == StatusRunning || st.GetStatus() == StatusCancelled {
		return nil
	}
	return &EndedError{ID: st.GetExecutionId(), Status: st.GetStatus()}
}

// Lines are st's lines of control, each with its node, pending step,
// timer and what it waits for: one (id "") while the execution follows one
// line, one per branch and map item once it forked. States written before
// every line was a record of its own held a one-line execution's line in
// their current-node fields; it is read from there.
func Lines(st *novav1.ExecutionState) []*novav1.Branch {
	if len(st.GetBranches()) > 0 {
		return st.GetBranches()
	}
	if st.GetCurrentNode() == "" {
		return nil
	}
	return []*novav1.Branch{{CurrentNode: st.GetCurrentNode(), PendingStepId: st.GetPendingStepId(), NodeStartedAt: st.GetNodeStartedAt(),
		Timer: st.GetTimer(), WaitingFor: st.GetWaitingFor(), MapRun: st.GetMapRun()}}
}

// Forked are st's lines when it runs several at once (branches, map
// items), nil while it follows one line.
func Forked(st *novav1.ExecutionState) []*novav1.Branch {
	lines := Lines(st)
	if len(lines) == 1 && lines[0].GetId() == "" {
		return nil
	}
	return lines
}

// CurrentNode is the node st's one line is at, "" when it runs several
// lines at once, or none.
func CurrentNode(st *novav1.ExecutionState) string {
	lines := Lines(st)
	if len(lines) == 1 && lines[0].GetId() == "" {
		return lines[0].GetCurrentNode()
	}
	return ""
}

// WaitingFor is the signal the first of st's lines that waits for one
// waits for, "" when none does.
func WaitingFor(st *novav1.ExecutionState) string {
	for _, l := range Lines(st) {
		if l.GetWaitingFor() != "" {
			return l.GetWaitingFor()
		}
	}
	return ""
}

// CheckSignalTarget tells whether st waits for signal name: nil when one of
// its lines waits at a node for it, an *EndedError when it ended, a
// *NotWaitingError naming what it waits for otherwise. The payload is
// checked against the wait node's schema by workflow.CheckPayload.
func CheckSignalTarget(st *novav1.ExecutionState, name string) error {
	if st.GetStatus() != StatusRunning {
		return &EndedError{ID: st.GetExecutionId(), Status: st.GetStatus()}
	}
	if WaitingLine(st, name) != nil {
		return nil
	}
	nerr := &NotWaitingError{ID: st.GetExecutionId(), Signal: name, Workflow: st.GetDefinition().GetName(),
		Keeps: workflow.WaitsForSignal(st.GetDefinition(), name)}
	for _, l := range Lines(st) {
		if nerr.Node == "" || (nerr.WaitingFor == "" && l.GetWaitingFor() != "") {
			nerr.Node, nerr.WaitingFor = l.GetCurrentNode(), l.GetWaitingFor()
		}
	}
	return nerr
}

// WaitingLine is the line of st that waits for signal name, nil when none
// does.
func WaitingLine(st *novav1.ExecutionState, name string) *novav1.Branch {
	if name == "" {
		return nil
	}
	for _, l := range Lines(st) {
		if ListensFor(l, name) {
			return l
		}
	}
	return nil
}

// ListensFor tells whether line l takes signal name now: the wait node it
// is at waits for it, or a boundary event of its node does.
func ListensFor(l *novav1.Branch, name string) bool {
	if name == "" {
		return false
	}
	if l.GetWaitingFor() == name {
		return true
	}
	for _, a := range l.GetBoundaries() {
		if a.GetSignal() == name {
			return true
		}
	}
	return false
}

// WaitNode is the wait node of st that waits for signal name, nil when
// none does.
func WaitNode(st *novav1.ExecutionState, name string) *novav1.Node {
	l := WaitingLine(st, name)
	if l == nil || l.GetWaitingFor() != name {
		return nil // none, or a boundary event's
	}
	for _, n := range st.GetDefinition().GetNodes() {
		if n.Id == l.GetCurrentNode() {
			return n
		}
	}
	return nil
}

// CancelEventID is the event id of the command that cancels execution id:
// one per execution, so that cancels repeated within the commands'
// duplicate window are stored once (and the engine ignores one that comes
// after the execution ended).
func CancelEventID(id string) string { return "cancel-" + id }

// WaitUntil is when line l's node stops waiting on its own (a wait node's
// timeout), nil when it waits for ever.
func WaitUntil(l *novav1.Branch) *timestamppb.Timestamp {
	if tm := l.GetTimer(); tm != nil && tm.GetNodeId() == l.GetCurrentNode() {
		return tm.GetDueAt()
	}
	return nil
}

// Parked are the lines of st that wait at a join for others, by join node:
// each line's id.
func Parked(st *novav1.ExecutionState) map[string][]string {
	out := map[string][]string{}
	for join, js := range st.GetJoins() {
		for _, l := range js.GetArrived() {
			out[join] = append(out[join], l.GetId())
		}
		for _, a := range js.GetActivations() {
			for _, l := range a.GetArrived() {
				out[join] = append(out[join], l.GetId())
			}
		}
	}
	return out
}
