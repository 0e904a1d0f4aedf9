package flow

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/execution/execstate"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Steering a running execution: cancel, signals for wait nodes, and the
// durable timers of wait timeouts, sleeps and retry backoff.

const (
	statusCancelled = execstate.StatusCancelled
	nodeCancelled   = execstate.NodeCancelled

	// Timer kinds.
	timerWaitTimeout = "wait_timeout"
	timerSleep       = "sleep"
	timerRetry       = "retry"

	// NodeWaiting kinds.
	waitingSignal = "signal"
	waitingSleep  = "sleep"
	waitingRetry  = "retry"
)

// errSignalEarly is a signal for a running execution that no line listens
// for yet: it is delivered again until ControlGrace has passed.
var errSignalEarly = errors.New("the execution listens for no such signal yet")

// ControlGrace is how long after it was sent a cancel or signal for an
// execution whose state is not stored yet is tried again: a producer may
// send one right behind the start, which the engine stores just after it
// publishes the first commands. Past it, the execution does not exist.
const ControlGrace = 5 * time.Second

// Cancel ends a running execution as cancelled: the running node's visit
// ends cancelled, its timer is removed, and ExecutionCancelled tells the
// sandbox and the agents to stop what they run for it. An execution that
// ended (cancelled already, or otherwise) is left as it is.
func (t *Transition) Cancel(cmd *novav1.CancelExecution) error {
	if t.st.Status != statusRunning {
		return ErrStale
	}
	by := cmp.Or(cmd.RequestedBy, "unknown")
	msg := "cancelled by " + by
	if cmd.Reason != "" {
		msg += ": " + cmd.Reason
	}
	t.st.CancelledBy, t.st.CancelReason = by, cmd.Reason
	var node string
	for _, l := range t.st.Branches {
		if l.CurrentNode != "" {
			node = l.CurrentNode
			break
		}
	}
	t.emit(busname.KindExecutionCancelled, t.st.ExecutionId+"/cancelled", busname.TypeExecutionCancelled, &novav1.ExecutionCancelled{
		ExecutionId: t.st.ExecutionId, Reason: cmd.Reason, RequestedBy: by, NodeId: node, CancelledAt: tsNow(t.now),
	})
	if t.st.Refine != nil {
		t.bindAny()
		t.ReleaseHold()
		t.clearTimer()
		t.RefineFail(msg) // refineFinish ends it cancelled
		return nil
	}
	if one := t.soleLine(); one != nil {
		t.st.Context = one.Context
	}
	t.st.Status, t.st.Error = statusCancelled, msg
	t.completed()
	return nil
}

// cancelLine ends the visit the transition's line is at as cancelled, with
// reason: its timer and budget holds are dropped, and the child execution
// it waits for is cancelled too. It reports whether the line had work in
// progress (a command whose result it waited for).
func (t *Transition) cancelLine(reason string) bool {
	if t.leaveLockQueue(reason) {
		return false // its visit had not begun
	}
	t.ReleaseHold()
	t.clearTimer()
	t.ln.WaitingFor = ""
	working := t.ln.PendingStepId != "" && t.childOf() == ""
	if t.graph != nil && t.ln.CurrentNode != "" {
		if node := t.graph.Node(t.ln.CurrentNode); node != nil {
			kindOf(node).cancel(t, node, reason)
			ns := t.nodeState(node.Id)
			ns.Status, ns.Error = statusCancelled, reason
			t.nodeCompleted(node, ns.Visits, nodeCancelled, reason, "", "", nil)
		}
	}
	t.dropMapRun(t.ln)
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.Ai = "", "", nil
	return working
}

// endLines closes, as the execution ends, every line still open: the visit
// each is at (a node, a map item) ends cancelled with why, its timers and
// budget holds are dropped, its child execution is cancelled, and work it
// ran (a program, an agent's step) is told to stop (ExecutionStopped; a
// cancel's ExecutionCancelled says so already).
func (t *Transition) endLines(reason string) {
	if len(t.st.Branches) == 0 && len(t.st.Joins) == 0 && len(t.st.Ended) == 0 {
		return
	}
	why := "the execution ended: " + reason
	if t.st.Status == statusCancelled {
		why = reason
	}
	// Items first, so that a map's own visit closes after its items'.
	lines := slices.Clone(t.st.Branches)
	slices.SortStableFunc(lines, func(a, b *novav1.Branch) int {
		switch {
		case a.IsItem == b.IsItem:
			return 0
		case a.IsItem:
			return -1
		}
		return 1
	})
	var stopped []string
	for _, l := range lines {
		t.on(l, func() {
			node := t.ln.CurrentNode
			if t.cancelLine(why) {
				stopped = append(stopped, node)
			}
		})
	}
	t.st.Branches, t.st.Joins, t.st.Ended = nil, nil, nil
	t.changed = true
	if len(stopped) > 0 && t.st.Status != statusCancelled {
		slices.Sort(stopped)
		t.emit(busname.KindExecutionStopped, t.st.ExecutionId+"/stopped", busname.TypeExecutionStopped, &novav1.ExecutionStopped{
			ExecutionId: t.st.ExecutionId, Reason: why, NodeIds: slices.Compact(stopped), StoppedAt: tsNow(t.now),
		})
	}
}

// cancelLines ends lines before their time while the execution runs on,
// with reason: each one's visit (a map's items first) ends cancelled, its
// timer and budget holds are dropped, its child execution is cancelled,
// and the work it ran is told to stop (StepsCancelled). The transition
// goes back to its own line.
func (t *Transition) cancelLines(lines []*novav1.Branch, reason string) {
	var all []*novav1.Branch
	for _, l := range lines {
		all = append(all, t.itemsOf(l)...)
	}
	all = append(all, lines...)
	var steps []string
	for _, l := range all {
		if !t.live(l) {
			continue
		}
		t.on(l, func() {
			step := t.ln.PendingStepId
			if t.cancelLine(reason) && step != "" {
				steps = append(steps, step)
			}
			t.endLine(t.ln)
		})
	}
	t.stopSteps(steps, reason)
}

// itemsOf are the map items line l runs, the lines of their own that
// its map node's items are.
func (t *Transition) itemsOf(l *novav1.Branch) []*novav1.Branch {
	var items []*novav1.Branch
	for _, x := range t.st.Branches {
		if x.IsItem && x.MapBranch == l.Id {
			items = append(items, x)
		}
	}
	return items
}

// stopSteps tells the sandbox and the agents to stop the work of steps
// (StepsCancelled), whose lines were cancelled while the execution runs
// on; none is nothing.
func (t *Transition) stopSteps(steps []string, reason string) {
	if len(steps) == 0 {
		return
	}
	slices.Sort(steps)
	t.emit(busname.KindStepsCancelled, fmt.Sprintf("%s/steps-cancelled/%s", t.st.ExecutionId, steps[0]), busname.TypeStepsCancelled,
		&novav1.StepsCancelled{ExecutionId: t.st.ExecutionId, StepIds: steps, Reason: reason, CancelledAt: tsNow(t.now)})
}

// waiting announces that the current node waits.
func (t *Transition) waiting(w *novav1.NodeWaiting) {
	t.emit(busname.KindNodeWaiting, fmt.Sprintf("%s/waiting/%s/%d", t.visitKey(w.NodeId, w.Visit), w.Kind, w.Attempt),
		busname.TypeNodeWaiting, w)
}

// timerID names a node visit's timer of kind, unique in the execution (a
// map's items by their position).
func (t *Transition) timerID(kind string, node *novav1.Node, ns *novav1.NodeState) string {
	id := fmt.Sprintf("%s-%d-%s", node.Id, ns.Visits, kind)
	if t.isItem() {
		id += fmt.Sprintf("-i%d", t.ln.Item)
	}
	return id
}

// setTimer makes a durable timer of kind for node the execution's timer:
// a message schedule on the timers stream, published with the transition's
// events, that comes back as TimerFired at due. The timer before it, if
// any, is removed once the state is stored.
func (t *Transition) setTimer(kind string, node *novav1.Node, ns *novav1.NodeState, due time.Time) {
	t.clearTimer()
	t.ln.Timer = t.scheduleTimer(t.timerID(kind, node, ns), kind, node, ns, due)
}

// scheduleTimer publishes, with the transition's events, the message
// schedule of timer id of kind for node, due at due.
func (t *Transition) scheduleTimer(id, kind string, node *novav1.Node, ns *novav1.NodeState, due time.Time) *novav1.Timer {
	tm := &novav1.Timer{Id: id, Kind: kind, NodeId: node.Id, DueAt: tsNow(due), Visit: ns.Visits, Attempt: ns.RetryAttempt}
	t.out = append(t.out, OutEvent{
		Subject:   busname.TimerSubject(t.st.ExecutionId, id),
		ID:        t.st.ExecutionId + "/timer/" + id,
		Type:      busname.TypeTimerFired,
		Execution: t.st.ExecutionId,
		Msg:       &novav1.TimerFired{ExecutionId: t.st.ExecutionId, TimerId: id, Kind: kind, NodeId: node.Id, DueAt: tm.DueAt},
		Due:       due,
		Target:    busname.TimerFiredSubject(t.st.ExecutionId, id),
	})
	t.changed = true
	return tm
}

// clearTimer drops the execution's timer; its schedule is removed once the
// state is stored (if that is missed, it fires and is ignored as stale).
func (t *Transition) clearTimer() {
	if tm := t.ln.Timer; tm != nil {
		t.TimersFx = append(t.TimersFx, busname.TimerSubject(t.st.ExecutionId, tm.Id))
		t.ln.Timer = nil
		t.changed = true
	}
}

// TimerFired applies the execution's pending timer; any other is stale (a
// wait that was signalled, a cancelled execution).
func (t *Transition) TimerFired(tf *novav1.TimerFired) error {
	if t.st.Status != statusRunning || t.graph == nil {
		return ErrStale
	}
	if arm := t.boundaryTimer(tf.TimerId); arm != nil {
		t.fireBoundary(arm, fmt.Sprintf("the time of its after (%s)", tf.GetDueAt().AsTime().Sub(t.ln.NodeStartedAt.AsTime()).Round(time.Millisecond)), nil)
		return nil
	}
	tm := t.ln.Timer
	if tm == nil || tm.Id != tf.TimerId {
		return ErrStale
	}
	node := t.graph.Node(tm.NodeId)
	if node == nil {
		return ErrStale
	}
	ns := t.nodeState(node.Id)
	t.ln.Timer = nil
	t.changed = true
	kindOf(node).timer(t, node, ns, tm)
	return nil
}

// CarryOver records the nodes a rerun takes from the execution it reruns:
// each a visit of status carried_over, run in that execution, not here.
func (t *Transition) CarryOver(r *novav1.RerunFrom) {
	for _, id := range r.CarriedOver {
		node := t.graph.Node(id)
		if node == nil {
			continue // a node of the revision the original ran, not of this one
		}
		ns := t.nodeState(id)
		ns.Visits++
		ns.Status = execstate.NodeCarriedOver
		t.st.Sequence++
		t.st.Path = append(t.st.Path, id)
		t.ln.NodeStartedAt = tsNow(t.now)
		t.ln.NodeInput = nil
		nc := t.nodeCompleted(node, ns.Visits, execstate.NodeCarriedOver, "", "", "", nil)
		nc.InputContext, nc.OutputResult, nc.CodeExecuted, nc.ExecutionTimeMs = nil, nil, "", 0
		nc.CarriedOverFrom = r.ExecutionId
	}
}
