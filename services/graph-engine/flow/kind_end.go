package flow

import (
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// endKind: the line ends there (lineEnded); the execution ends with its
// last line.
type endKind struct {
	noTimer
	noCancel
}

func (endKind) enter(t *Transition, node *novav1.Node) {
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	ns.Status = statusSucceeded
	t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", "", nil)
	t.lineEnded()
}
