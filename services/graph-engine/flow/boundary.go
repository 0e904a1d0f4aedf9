package flow

import (
	"fmt"
	"slices"
	"time"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Boundary events (Node.on): while a line is at a node that has them, each
// is armed (an after entry's timer, a signal entry's signal). When one
// comes, the node's visit is cancelled (its program killed, its timer
// removed, its map items or child execution cancelled) and the line goes on
// at the entry's goto; an entry with interrupt false starts a new line at
// goto instead and lets the node go on. They are disarmed when the visit
// ends, however it ends.

// timerBoundary is the kind of an after entry's timer.
const timerBoundary = "boundary"

// armBoundaries arms node's boundary events for the transition's line,
// which has just begun its visit of node.
func (t *Transition) armBoundaries(node *novav1.Node) {
	ns := t.nodeState(node.Id)
	for i, b := range node.On {
		arm := &novav1.BoundaryArm{Index: int32(i), NodeId: node.Id, Visit: ns.Visits, Signal: b.Signal}
		if b.AfterSeconds > 0 {
			arm.TimerId = fmt.Sprintf("%s-%d-%s%d", node.Id, ns.Visits, timerBoundary, i)
			t.scheduleTimer(arm.TimerId, timerBoundary, node, ns, t.now.Add(time.Duration(b.AfterSeconds*float64(time.Second))))
		}
		t.ln.Boundaries = append(t.ln.Boundaries, arm)
	}
	t.changed = true
}

// disarmBoundaries drops the boundary events of the transition's line,
// whose visit of their node ended: their timers are removed once the state
// is stored.
func (t *Transition) disarmBoundaries(node string) {
	l := t.ln
	if l == nil || len(l.Boundaries) == 0 || l.Boundaries[0].NodeId != node {
		return
	}
	for _, a := range l.Boundaries {
		if a.TimerId != "" {
			t.TimersFx = append(t.TimersFx, busname.TimerSubject(t.st.ExecutionId, a.TimerId))
		}
	}
	l.Boundaries = nil
	t.changed = true
}

// boundaryTimer is the armed boundary event of the transition's line whose
// timer is id, nil when none is.
func (t *Transition) boundaryTimer(id string) *novav1.BoundaryArm {
	for _, a := range t.ln.Boundaries {
		if a.TimerId == id {
			return a
		}
	}
	return nil
}

// boundarySignal is the armed boundary event of the transition's line for
// signal name, nil when none is.
func (t *Transition) boundarySignal(name string) *novav1.BoundaryArm {
	for _, a := range t.ln.Boundaries {
		if a.Signal == name {
			return a
		}
	}
	return nil
}

// fireBoundary applies boundary event arm of the transition's line: what
// came (its timer, or its signal with payload).
func (t *Transition) fireBoundary(arm *novav1.BoundaryArm, what string, payload jsonvalue.Object) {
	node := t.graph.Node(arm.NodeId)
	if node == nil || int(arm.Index) >= len(node.On) {
		return
	}
	b := node.On[arm.Index]
	if b.Interrupt != nil && !*b.Interrupt {
		// Non-interrupting: the node goes on; a new line, with the
		// context as it is (and the payload), goes on at goto. Each entry
		// fires once per visit.
		t.ln.Boundaries = slices.DeleteFunc(t.ln.Boundaries, func(a *novav1.BoundaryArm) bool { return a == arm })
		l := t.branchOff(node)
		t.on(l, func() {
			if len(payload) > 0 {
				t.ctx.Merge(payload)
				t.SetContext()
			}
			t.Enter(b.Goto)
		})
		t.changed = true
		return
	}
	reason := fmt.Sprintf("%s came: the line goes on at %q (boundary of node %q)", what, b.Goto, node.Id)
	t.cancelLines(t.itemsOf(t.ln), reason)
	step := t.ln.PendingStepId
	if t.cancelLine(reason) && step != "" {
		t.stopSteps([]string{step}, reason)
	}
	if len(payload) > 0 {
		t.ctx.Merge(payload)
		t.SetContext()
	}
	t.Enter(b.Goto)
}

// branchOff starts a line beside the transition's, at node: like a fork,
// both get it in their history, so that what each changes from here on
// merges at a join or at the end. The transition's line goes on as it was.
func (t *Transition) branchOff(node *novav1.Node) *novav1.Branch {
	parent := t.ln
	fork := &novav1.KeyList{Fork: fmt.Sprintf("%s@%d", node.Id, t.st.Sequence), Node: node.Id, Keys: t.lineChanges()}
	history := append(slices.Clone(parent.ForkChanges), fork)
	if parent.Id == "" {
		t.st.BranchSeq++
		parent.Id = fmt.Sprintf("b%d", t.st.BranchSeq)
	}
	parent.ForkChanges, parent.ChangedKeys = history, nil
	t.lineStart = t.ctx.Clone()
	t.changed = true
	return t.newLine(&novav1.Branch{Context: parent.Context, ForkChanges: slices.Clone(history), FromNode: node.Id,
		AbsorbedAt: slices.Clone(parent.AbsorbedAt)})
}

// signalBoundary takes signal cmd at the boundary event the transition's
// line armed for it; it gives why it cannot ("" when it did).
func (t *Transition) signalBoundary(arm *novav1.BoundaryArm, cmd *novav1.SignalExecution) string {
	payload := jsonvalue.MustObject(cmd.Payload)
	if _, err := payload.Decoded(); err != nil {
		return fmt.Sprintf("the payload must be a JSON object: %v", err)
	}
	t.fireBoundary(arm, fmt.Sprintf("signal %q", cmd.Signal), payload)
	return ""
}
