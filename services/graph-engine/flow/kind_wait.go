package flow

import (
	"fmt"
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

// Signal resumes the wait node that waits for cmd's signal: the payload's
// keys are merged into the context and the node's edge is taken (by the
// payload's decide_on value when it names one). A signal nobody waits for,
// or whose payload fails the node's schema, is rejected with a
// SignalRejected event that says why; the execution is not changed.
func (t *Transition) Signal(cmd *novav1.SignalExecution, eventID string, sent time.Time) error {
	reject := func(reason string) error {
		t.emit(busname.KindSignalRejected, t.st.ExecutionId+"/signal-rejected/"+eventID, busname.TypeSignalRejected, &novav1.SignalRejected{
			ExecutionId: t.st.ExecutionId, Signal: cmd.Signal, Reason: reason, WaitingFor: execstate.WaitingFor(t.st), SignalEventId: eventID,
		})
		return nil
	}
	if err := execstate.CheckSignalTarget(t.st, cmd.Signal); err != nil {
		// The execution may be entering the wait node: its NodeWaiting
		// event is published before its state is stored, and a sender
		// that answers that event at once can come in between.
		if t.st.Status == statusRunning && execstate.WaitingFor(t.st) == "" && t.now.Sub(sent) < ControlGrace {
			return fmt.Errorf("%w: %v", errSignalEarly, err)
		}
		return reject(err.Error())
	}
	node := t.graph.Node(t.ln.CurrentNode)
	payload := jsonvalue.MustObject(cmd.Payload)
	decoded, err := payload.Decoded()
	if err != nil {
		return reject(fmt.Sprintf("the payload must be a JSON object: %v", err))
	}
	if err := workflow.CheckPayload(node, decoded); err != nil {
		return reject(err.Error())
	}
	var decision string
	var targets []string
	if node.DecideOn != "" {
		v, _ := workflow.DecisionString(decoded[node.DecideOn])
		next, err := t.graph.Decide(node.Id, v)
		if err != nil {
			return reject(fmt.Sprintf("payload field %q: %v", node.DecideOn, err))
		}
		decision, targets = v, []string{next}
	} else if targets, err = t.graph.Targets(node.Id); err != nil {
		return reject(err.Error())
	}
	ns := t.nodeState(node.Id)
	t.ctx.Merge(payload)
	t.SetContext()
	t.clearTimer()
	t.ln.WaitingFor = ""
	ns.Status, ns.Error = statusSucceeded, ""
	nc := t.nodeCompleted(node, ns.Visits, nodeSuccess, "", decision, strings.Join(targets, ","), nil)
	nc.Signal = &novav1.SignalReceived{Name: cmd.Signal, Payload: cmd.Payload, SentBy: cmd.SentBy, ReceivedAt: tsNow(t.now)}
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	t.follow(node, targets)
	return nil
}

// enterWait starts a wait node: it waits for its signal, and for its
// timeout when it has one.
func (t *Transition) enterWait(node *novav1.Node, ns *novav1.NodeState) {
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.WaitingFor = node.Id, "", node.Signal
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
