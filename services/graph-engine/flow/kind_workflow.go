package flow

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/execution/execstate"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// workflowKind: a workflow node starts the registered workflow it names as
// a child execution (startChild) and waits for its end (ChildCompleted);
// cancelling its visit cancels the child.
type workflowKind struct{ noTimer }

func (workflowKind) enter(t *Transition, node *novav1.Node) {
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	t.nodeStarted(node, ns)
	t.startChild(node, ns)
}

func (workflowKind) cancel(t *Transition, _ *novav1.Node, reason string) { t.cancelChild(reason) }

// childID is the execution id of the child that a visit of node starts.
func (t *Transition) childID(node *novav1.Node, visit int32) string {
	id := fmt.Sprintf("%s_%s_%d", t.st.ExecutionId, node.Id, visit)
	if t.isItem() {
		id += fmt.Sprintf("_%d", t.ln.Item)
	}
	// A node id a key cannot hold makes the id a UUID derived from it, as
	// the child's start would.
	return execstate.ID(id)
}

// startChild starts the workflow node's (or map item's) child execution:
// its context is the line's (or the keys input names), and the line waits
// for it.
func (t *Transition) startChild(node *novav1.Node, ns *novav1.NodeState) {
	in := jsonvalue.Object{}
	if len(node.Input) == 0 {
		in = t.ctx.Clone()
		delete(in, branchDecision)
	} else {
		for _, child := range sortedKeys(node.Input) {
			parent := node.Input[child]
			raw, ok := t.ctx[parent]
			if !ok {
				t.nodeFailed(node, ns, fmt.Sprintf("input %q: the context has no key %q", child, parent), nil)
				return
			}
			in[child] = raw
		}
	}
	// The chain of calls down to the child, bounded by max_depth.
	calls := append(slices.Clone(t.st.GetParent().GetCalls()), t.st.GetDefinition().GetName())
	if limit := workflow.CallDepth(node); len(calls) > limit {
		t.nodeFailed(node, ns, fmt.Sprintf("workflow %q would run %d sub-workflow calls deep, past max_depth %d: %s",
			node.Workflow, len(calls), limit, strings.Join(append(calls, node.Workflow), " -> ")), nil)
		return
	}
	childID := t.childID(node, ns.Visits)
	ref := &novav1.ParentRef{ExecutionId: t.st.ExecutionId, NodeId: node.Id, StepId: childID, Visit: ns.Visits, Calls: calls}
	if t.isItem() {
		ref.Item = new(t.ln.Item)
		if owner := t.line(t.ln.MapBranch); owner != nil && owner.MapRun != nil {
			owner.MapRun.Children = append(owner.MapRun.Children, childID)
		}
	}
	t.command(node, childID, busname.AgentGraphEngine, busname.TypeWorkflowStart, func(seq int32) proto.Message {
		ref.Sequence = seq
		return &novav1.StartWorkflow{ExecutionId: childID, WorkflowName: node.Workflow, Context: in.Proto(), Parent: ref}
	})
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// ChildCompleted takes the end of a child execution the line waits for: its
// final context (or the keys output names) comes back, or the node fails
// with the child's error.
func (t *Transition) ChildCompleted(r *novav1.ChildCompleted) error {
	if err := t.CheckPending(r.GetParent().GetStepId(), r.GetParent().GetSequence()); err != nil {
		return err
	}
	node := t.graph.Node(t.ln.CurrentNode)
	if node == nil {
		return ErrStale
	}
	ns := t.nodeState(node.Id)
	t.children = []string{r.ChildExecutionId}
	if r.Status != statusSucceeded {
		t.nodeFailed(node, ns, fmt.Sprintf("sub-workflow %q (execution %s) %s: %s", r.WorkflowName, r.ChildExecutionId, r.Status,
			cmp.Or(r.Error, "no error given")), nil)
		return nil
	}
	out := jsonvalue.MustObject(r.Context)
	switch {
	case t.isItem():
		// The item's result is the child's final context, its large values
		// read back (they would stay references inside a list).
		if t.Expand != nil {
			if err := t.Expand(out); err != nil {
				return fmt.Errorf("read back the final context of %s: %w", r.ChildExecutionId, err)
			}
		}
		t.ctx["result"] = out.Proto().GetRaw()
	case len(node.OutputKeys) == 0:
		t.ctx.Merge(out)
	default:
		for _, parent := range sortedKeys(node.OutputKeys) {
			child := node.OutputKeys[parent]
			raw, ok := out[child]
			if !ok {
				t.nodeFailed(node, ns, fmt.Sprintf("output %q: the final context of sub-workflow %q (execution %s) has no key %q",
					parent, r.WorkflowName, r.ChildExecutionId, child), nil)
				return nil
			}
			t.ctx[parent] = raw
		}
	}
	t.SetContext()
	t.route(node, ns, nil)
	return nil
}

// childOf is the child execution the line waits for, "" when none.
func (t *Transition) childOf() string {
	if t.graph == nil || t.ln == nil || t.ln.PendingStepId == "" {
		return ""
	}
	if n := t.graph.Node(t.ln.CurrentNode); n != nil && n.Workflow != "" {
		return t.ln.PendingStepId
	}
	return ""
}

// cancelChild cancels the child execution the line waits for, if any.
func (t *Transition) cancelChild(reason string) {
	child := t.childOf()
	if child == "" {
		return
	}
	t.out = append(t.out, OutEvent{
		Subject:   busname.CommandSubject(busname.AgentGraphEngine),
		ID:        execstate.CancelEventID(child),
		Type:      busname.TypeExecutionCancel,
		Execution: child,
		Msg: &novav1.CancelExecution{ExecutionId: child, RequestedBy: "execution " + t.st.ExecutionId,
			Reason: fmt.Sprintf("its parent execution %s ended: %s", t.st.ExecutionId, reason)},
	})
	t.changed = true
}
