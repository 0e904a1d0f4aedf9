package flow

import (
	"fmt"

	"github.com/novaflow/nova/pkg/bus/busname"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Locks (Node.lock): a line that reaches a node with a lock asks the graph
// engine for it (LockAcquire, a command) and waits at the node until it is
// granted (LockGranted); its visit begins then. It holds the lock until
// that visit ends, however it ends (LockRelease); a line cancelled while it
// waits leaves the queue. The engine keeps each lock in KV nova_locks, the
// holder and the lines waiting in the order they asked, across every
// execution of the deployment (engine/locks.go).

// waitingLock is the NodeWaiting kind of a line waiting for a lock.
const waitingLock = "lock"

// holderOf is the transition's line at node as a lock holder.
func (t *Transition) holderOf(node string) *novav1.LockHolder {
	return &novav1.LockHolder{ExecutionId: t.st.ExecutionId, LineId: t.ln.Id, NodeId: node, Sequence: t.st.Sequence, AskedAt: tsNow(t.now)}
}

// askLock has the transition's line, arriving at node, ask for node's lock
// unless it holds it; it reports whether the line waits for it.
func (t *Transition) askLock(node *novav1.Node) bool {
	if node.Lock == "" || t.ln.LockHeld == node.Lock {
		return false
	}
	t.st.Sequence++
	h := t.holderOf(node.Id)
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.LockWait = node.Id, "", node.Lock
	t.ln.NodeStartedAt = tsNow(t.now)
	t.out = append(t.out, OutEvent{
		Subject:   busname.CommandSubject(busname.AgentGraphEngine),
		ID:        fmt.Sprintf("%s/lock/%s/%s/%d", t.st.ExecutionId, node.Lock, node.Id, h.Sequence),
		Type:      busname.TypeLockAcquire,
		Execution: t.st.ExecutionId,
		Msg:       &novav1.LockAcquire{Lock: node.Lock, Line: h},
	})
	t.waiting(&novav1.NodeWaiting{ExecutionId: t.st.ExecutionId, NodeId: node.Id, Visit: t.nodeState(node.Id).Visits + 1, Kind: waitingLock,
		Description: fmt.Sprintf("waits for lock %q", node.Lock), Sequence: t.st.Sequence})
	t.changed = true
	return true
}

// LockGranted lets the transition's line, which waited for lock g.Lock at
// its node, in: its visit begins. A grant for a line that no longer waits
// for it (cancelled meanwhile) gives the lock back at once.
func (t *Transition) LockGranted(g *novav1.LockGranted) error {
	l := t.ln
	if l.LockHeld == g.Lock && l.CurrentNode == g.GetLine().GetNodeId() {
		return ErrStale // granted already (a redelivery)
	}
	if t.st.Status != statusRunning || l.LockWait != g.Lock || l.CurrentNode != g.GetLine().GetNodeId() || t.graph == nil {
		t.releaseLock(g.Lock, g.GetLine(), "granted to a line that no longer waits for it")
		return nil
	}
	node := t.graph.Node(l.CurrentNode)
	if node == nil {
		return ErrStale
	}
	l.LockWait, l.LockHeld, l.CurrentNode = "", g.Lock, ""
	t.changed = true
	t.Enter(node.Id)
	return nil
}

// releaseLock gives lock back for holder h (or takes h out of its queue).
func (t *Transition) releaseLock(lock string, h *novav1.LockHolder, reason string) {
	t.out = append(t.out, OutEvent{
		Subject:   busname.CommandSubject(busname.AgentGraphEngine),
		ID:        fmt.Sprintf("%s/lock-release/%s/%s/%s/%d", t.st.ExecutionId, lock, h.GetLineId(), h.GetNodeId(), t.st.Sequence),
		Type:      busname.TypeLockRelease,
		Execution: t.st.ExecutionId,
		Msg:       &novav1.LockRelease{Lock: lock, Line: h, Reason: reason},
	})
	t.changed = true
}

// lockVisitEnded gives back the lock the transition's line held for its
// visit of node, which ended.
func (t *Transition) lockVisitEnded(node *novav1.Node) {
	l := t.ln
	if l == nil || l.IsItem || l.LockHeld == "" || node.Lock != l.LockHeld {
		return
	}
	t.releaseLock(l.LockHeld, t.holderOf(node.Id), fmt.Sprintf("the visit of node %q ended", node.Id))
	l.LockHeld = ""
}

// leaveLockQueue takes the transition's line, cancelled while it waited
// for a lock, out of its queue; it reports whether it waited.
func (t *Transition) leaveLockQueue(reason string) bool {
	l := t.ln
	if l.LockWait == "" {
		return false
	}
	t.releaseLock(l.LockWait, t.holderOf(l.CurrentNode), reason)
	l.LockWait, l.CurrentNode = "", ""
	return true
}
