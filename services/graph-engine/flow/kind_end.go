package flow

import (
	"fmt"

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
	if node.Terminate {
		t.terminate(node)
		return
	}
	t.lineEnded()
}

// terminate ends the execution as succeeded at end node, which a line
// reached: its context is the execution's final one, and every other line,
// map item and child execution is cancelled (what they changed is not
// kept; their work stops).
func (t *Transition) terminate(node *novav1.Node) {
	l := t.ln
	t.KeepChanges()
	t.endLine(l)
	t.st.Context = l.Context
	t.st.Ended, t.st.EndedKeys = nil, nil
	t.st.Status = statusSucceeded
	t.endLines(fmt.Sprintf("end node %q terminated it", node.Id))
	t.completed()
}
