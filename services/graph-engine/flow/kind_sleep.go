package flow

import (
	"fmt"
	"strings"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// sleepKind: a sleep node waits for a timer (its duration, or the time a
// context key holds), then goes on.
type sleepKind struct{ noCancel }

func (sleepKind) enter(t *Transition, node *novav1.Node) {
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	t.nodeStarted(node, ns)
	t.enterSleep(node, ns)
}

func (sleepKind) timer(t *Transition, node *novav1.Node, ns *novav1.NodeState, tm *novav1.Timer) {
	if tm.Kind == timerSleep {
		t.sleepEnded(node, ns)
		return
	}
	noTimer{}.timer(t, node, ns, tm)
}

// enterSleep starts a sleep node: a timer for its end, or the next node at
// once when that time has passed.
func (t *Transition) enterSleep(node *novav1.Node, ns *novav1.NodeState) {
	t.ln.CurrentNode, t.ln.PendingStepId = node.Id, ""
	due, err := t.sleepUntil(node)
	if err != nil {
		t.nodeFailed(node, ns, err.Error(), nil)
		return
	}
	if !due.After(t.now) {
		t.sleepEnded(node, ns)
		return
	}
	t.setTimer(timerSleep, node, ns, due)
	t.waiting(&novav1.NodeWaiting{ExecutionId: t.st.ExecutionId, NodeId: node.Id, Visit: ns.Visits, Kind: waitingSleep,
		Description: node.Description, Until: tsNow(due), Sequence: t.st.Sequence})
}

// sleepUntil is when a sleep node ends: after its duration, or at the time
// its until key holds in the context.
func (t *Transition) sleepUntil(node *novav1.Node) (time.Time, error) {
	if node.Until == "" {
		return t.now.Add(workflow.SleepFor(node)), nil
	}
	raw, ok := t.ctx[node.Until]
	if !ok {
		return time.Time{}, fmt.Errorf("sleep until %q: the context has no key %q", node.Until, node.Until)
	}
	v, _ := jsonvalue.Decode(raw)
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("sleep until %q: want an RFC 3339 time (e.g. 2026-12-01T09:00:00Z), got %s", node.Until, jsonvalue.KindOf(raw))
	}
	due, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("sleep until %q: %q is not an RFC 3339 time (e.g. 2026-12-01T09:00:00Z)", node.Until, s)
	}
	return due, nil
}

func (t *Transition) sleepEnded(node *novav1.Node, ns *novav1.NodeState) {
	if t.isItem() {
		t.route(node, ns, nil)
		return
	}
	targets, err := t.graph.Targets(node.Id)
	if err != nil {
		t.nodeFailed(node, ns, err.Error(), nil)
		return
	}
	ns.Status, ns.Error = statusSucceeded, ""
	t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", strings.Join(targets, ","), nil)
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	t.follow(node, targets)
}
