package flow

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/execution/execstate"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// waitKind: a wait node waits for its signal (signal), or for its timeout
// (a timer), then goes on along its edge, or the one its payload's
// decide_on value names.
type waitKind struct{ noCancel }

func (waitKind) enter(t *Transition, node *novav1.Node) {
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	t.nodeStarted(node, ns)
	t.enterWait(node, ns)
}

func (waitKind) timer(t *Transition, node *novav1.Node, ns *novav1.NodeState, tm *novav1.Timer) {
	if tm.Kind == timerWaitTimeout {
		t.waitTimedOut(node, ns)
		return
	}
	noTimer{}.timer(t, node, ns, tm)
}

// Signal applies a signal to the execution: the line waiting for it takes
// it (its payload merged, its edge followed); a running execution none of
// whose lines waits for it keeps it, when a wait node of its workflow waits
// for that signal, until one comes (keepSignal). Else, and when the payload
// does not do, it is rejected with why (SignalRejected). graceFrom is when
// its ControlGrace counts from (its sending, or the engine's start).
func (t *Transition) Signal(cmd *novav1.SignalExecution, eventID string, graceFrom time.Time) error {
	if err := execstate.CheckSignalTarget(t.st, cmd.Signal); err != nil {
		var nw *execstate.NotWaitingError
		if errors.As(err, &nw) && nw.Keeps {
			t.keepSignal(cmd, eventID)
			return nil
		}
		// A line may be entering a node that listens for it (a boundary
		// event's signal): the node's events are published before its
		// state is stored, and a sender that answers them at once can come
		// in between. Tried again until ControlGrace has passed.
		if nw != nil && workflow.BoundarySignal(t.st.Definition, cmd.Signal) && t.now.Sub(graceFrom) < ControlGrace {
			return fmt.Errorf("%w: %v", errSignalEarly, err)
		}
		t.rejectSignal(cmd.Signal, eventID, err.Error())
		return nil
	}
	if t.ln.WaitingFor != cmd.Signal {
		if arm := t.boundarySignal(cmd.Signal); arm != nil {
			if reason := t.signalBoundary(arm, cmd); reason != "" {
				t.rejectSignal(cmd.Signal, eventID, reason)
			}
			return nil
		}
	}
	node := t.graph.Node(t.ln.CurrentNode)
	if reason := t.takeSignal(node, cmd, t.now); reason != "" {
		t.rejectSignal(cmd.Signal, eventID, reason)
	}
	return nil
}

// rejectSignal says signal name (event eventID) was not taken, and why.
func (t *Transition) rejectSignal(name, eventID, reason string) {
	t.emit(busname.KindSignalRejected, t.st.ExecutionId+"/signal-rejected/"+eventID, busname.TypeSignalRejected, &novav1.SignalRejected{
		ExecutionId: t.st.ExecutionId, Signal: name, Reason: reason, WaitingFor: execstate.WaitingFor(t.st), SignalEventId: eventID,
	})
}

// takeSignal is the wait node the transition's line is at taking signal
// cmd: its payload checked and merged, the edge followed. It gives why it
// cannot ("" when it did).
func (t *Transition) takeSignal(node *novav1.Node, cmd *novav1.SignalExecution, sentAt time.Time) string {
	payload := jsonvalue.MustObject(cmd.Payload)
	decoded, err := payload.Decoded()
	if err != nil {
		return fmt.Sprintf("the payload must be a JSON object: %v", err)
	}
	if err := workflow.CheckPayload(node, decoded); err != nil {
		return err.Error()
	}
	var decision string
	var targets []string
	if node.DecideOn != "" {
		v, _ := workflow.DecisionString(decoded[node.DecideOn])
		next, err := t.graph.Decide(node.Id, v)
		if err != nil {
			return fmt.Sprintf("payload field %q: %v", node.DecideOn, err)
		}
		decision, targets = v, []string{next}
	} else if targets, err = t.graph.Targets(node.Id); err != nil {
		return err.Error()
	}
	ns := t.nodeState(node.Id)
	t.ctx.Merge(payload)
	t.SetContext()
	t.clearTimer()
	t.ln.WaitingFor = ""
	ns.Status, ns.Error = statusSucceeded, ""
	nc := t.nodeCompleted(node, ns.Visits, nodeSuccess, "", decision, strings.Join(targets, ","), nil)
	nc.Signal = &novav1.SignalReceived{Name: cmd.Signal, Payload: cmd.Payload, SentBy: cmd.SentBy, ReceivedAt: tsNow(sentAt)}
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	t.follow(node, targets)
	return ""
}

// keepSignal keeps a signal no line waits for yet (a redelivery of one
// kept already changes nothing): the oldest beyond the workflow's keep,
// and those older than its keep_for, are dropped, each with a
// SignalRejected that says so.
func (t *Transition) keepSignal(cmd *novav1.SignalExecution, eventID string) {
	for _, k := range t.st.KeptSignals {
		if k.EventId == eventID {
			return
		}
	}
	limit, keepFor := workflow.SignalKeepLimits(t.st.Definition)
	t.dropExpiredSignals(keepFor)
	t.st.KeptSignals = append(t.st.KeptSignals, &novav1.KeptSignal{Signal: cmd.Signal, Payload: cmd.Payload, SentBy: cmd.SentBy,
		EventId: eventID, KeptAt: tsNow(t.now)})
	for len(t.st.KeptSignals) > limit {
		old := t.st.KeptSignals[0]
		t.st.KeptSignals = t.st.KeptSignals[1:]
		t.rejectSignal(old.Signal, old.EventId, fmt.Sprintf("dropped: the execution keeps at most %d signals no wait node took (signals.keep), and newer ones came", limit))
	}
	t.changed = true
	t.emit(busname.KindSignalKept, t.st.ExecutionId+"/signal-kept/"+eventID, busname.TypeSignalKept, &novav1.SignalKept{
		ExecutionId: t.st.ExecutionId, Signal: cmd.Signal, SignalEventId: eventID, Kept: int32(len(t.st.KeptSignals)),
		ExpiresAt: tsNow(t.now.Add(keepFor)),
	})
}

// dropExpiredSignals drops the kept signals older than keepFor.
func (t *Transition) dropExpiredSignals(keepFor time.Duration) {
	t.st.KeptSignals = slices.DeleteFunc(t.st.KeptSignals, func(k *novav1.KeptSignal) bool {
		if t.now.Sub(k.KeptAt.AsTime()) < keepFor {
			return false
		}
		t.rejectSignal(k.Signal, k.EventId, fmt.Sprintf("dropped: kept %s (signals.keep_for) and no wait node took it", keepFor))
		t.changed = true
		return true
	})
}

// takeKept has the wait node the transition's line is at take the oldest
// signal kept for it, if any; a kept one whose payload does not do is
// rejected and the next tried. It reports whether one was taken.
func (t *Transition) takeKept(node *novav1.Node) bool {
	if len(t.st.KeptSignals) == 0 {
		return false
	}
	_, keepFor := workflow.SignalKeepLimits(t.st.Definition)
	t.dropExpiredSignals(keepFor)
	for i := 0; i < len(t.st.KeptSignals); {
		k := t.st.KeptSignals[i]
		if k.Signal != node.Signal {
			i++
			continue
		}
		t.st.KeptSignals = slices.Delete(t.st.KeptSignals, i, i+1)
		t.changed = true
		cmd := &novav1.SignalExecution{ExecutionId: t.st.ExecutionId, Signal: k.Signal, Payload: k.Payload, SentBy: k.SentBy}
		if reason := t.takeSignal(node, cmd, k.KeptAt.AsTime()); reason != "" {
			t.rejectSignal(k.Signal, k.EventId, "kept, then not taken by wait node "+fmt.Sprintf("%q", node.Id)+": "+reason)
			continue
		}
		return true
	}
	return false
}

// rejectKept rejects, as the execution ends, the signals it kept.
func (t *Transition) rejectKept() {
	for _, k := range t.st.KeptSignals {
		t.rejectSignal(k.Signal, k.EventId, fmt.Sprintf("kept, and the execution ended (%s) before a wait node took it", t.st.Status))
	}
	t.st.KeptSignals = nil
}

// enterWait starts a wait node: it waits for its signal, and for its
// timeout when it has one.
func (t *Transition) enterWait(node *novav1.Node, ns *novav1.NodeState) {
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.WaitingFor = node.Id, "", node.Signal
	if t.takeKept(node) {
		return // a signal that came before it
	}
	w := &novav1.NodeWaiting{
		ExecutionId: t.st.ExecutionId, NodeId: node.Id, Visit: ns.Visits, Kind: waitingSignal, Signal: node.Signal,
		Description: node.Description, Schema: node.Schema, DecideOn: node.DecideOn, Sequence: t.st.Sequence,
	}
	if d := workflow.WaitTimeout(node); d > 0 {
		due := t.now.Add(d)
		t.setTimer(timerWaitTimeout, node, ns, due)
		w.Until = tsNow(due)
	}
	t.waiting(w)
}

// waitTimedOut ends a wait node whose signal did not come in time: it takes
// the node's timeout edge, or fails the node when it has none.
func (t *Transition) waitTimedOut(node *novav1.Node, ns *novav1.NodeState) {
	t.ln.WaitingFor = ""
	next, ok := t.graph.TimeoutEdge(node.Id)
	if !ok {
		t.nodeFailed(node, ns, fmt.Sprintf("no signal %q came within %s", node.Signal, workflow.WaitTimeout(node)), nil)
		return
	}
	ns.Status, ns.Error = statusSucceeded, ""
	nc := t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", next, nil)
	nc.TimedOut = true
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	t.Enter(next)
}
