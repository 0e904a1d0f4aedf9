package flow

import (
	"fmt"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// nodeKind is what a node type does in the engine: each has a file of its
// own (kind_*.go) and one line in nodeKinds. pkg/workflow's kinds table says
// how the type is written and checked; this says how a line moves through
// it. The transition asks the registry, never a switch on the type.
type nodeKind interface {
	// enter: the transition's line arrives at node. The kind counts the
	// visit (beginVisit) when it has one, and moves the line on, dispatches
	// work, sets a timer or parks the line.
	enter(t *Transition, node *novav1.Node)
	// timer: timer tm of the line's visit of node fired.
	timer(t *Transition, node *novav1.Node, ns *novav1.NodeState, tm *novav1.Timer)
	// cancel: the line's visit of node ends before its time (a cancel, a
	// failure elsewhere) with reason; the line's timer, budget hold and
	// cancelled visit are cancelLine's, what the kind holds beside them
	// (a child execution) is this.
	cancel(t *Transition, node *novav1.Node, reason string)
}

// nodeKinds is the registry: one entry per node type.
var nodeKinds = map[novav1.NodeType]nodeKind{
	novav1.NodeType_NODE_TYPE_START:    startKind{},
	novav1.NodeType_NODE_TYPE_ACTION:   codeKind{},
	novav1.NodeType_NODE_TYPE_DECISION: codeKind{},
	novav1.NodeType_NODE_TYPE_WAIT:     waitKind{},
	novav1.NodeType_NODE_TYPE_SLEEP:    sleepKind{},
	novav1.NodeType_NODE_TYPE_JOIN:     joinKind{},
	novav1.NodeType_NODE_TYPE_MAP:      mapKind{},
	novav1.NodeType_NODE_TYPE_WORKFLOW: workflowKind{},
	novav1.NodeType_NODE_TYPE_END:      endKind{},
}

// kindOf is node's behaviour (a node of a type the registry lacks fails
// its execution: validation refuses such a definition first).
func kindOf(node *novav1.Node) nodeKind {
	if k, ok := nodeKinds[node.GetType()]; ok {
		return k
	}
	return unknownKind{}
}

// noTimer and noCancel are the parts of a kind that has no timer, or
// holds nothing beside its line.
type (
	noTimer  struct{}
	noCancel struct{}
)

func (noTimer) timer(t *Transition, node *novav1.Node, ns *novav1.NodeState, tm *novav1.Timer) {
	t.nodeFailed(node, ns, fmt.Sprintf("timer %s of kind %q: a %s node sets none", tm.Id, tm.Kind, node.GetType()), nil)
}

func (noCancel) cancel(*Transition, *novav1.Node, string) {}

type unknownKind struct {
	noTimer
	noCancel
}

func (unknownKind) enter(t *Transition, node *novav1.Node) {
	t.Fail(fmt.Sprintf("node %q is of type %s, which this graph engine does not run", node.Id, node.GetType()))
}
