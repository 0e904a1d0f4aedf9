package flow

import (
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// startKind: the execution's first node. Its visit completes at once and
// the line goes on along its edges (several: a fork).
type startKind struct {
	noTimer
	noCancel
}

func (startKind) enter(t *Transition, node *novav1.Node) {
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	ns.Status = statusSucceeded
	t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", "", nil)
	targets, err := t.graph.Targets(node.Id)
	if err != nil {
		t.Fail(err.Error())
		return
	}
	t.follow(node, targets)
}
