package workflow

import (
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// stuckJoins refuses two joins of wait: all that would wait for each
// other: both on one cycle (each reaches the other), with one fork that
// starts a branch towards each without passing the other. The first branch
// parks at one join, which waits for the second (it can reach it through
// the cycle), and the second parks at the other, which waits for the
// first: neither ever goes on. The engine fails such an execution at once
// (naming the joins); this says so before anything runs.
func (v *validator) stuckJoins() {
	g := NewGraph(v.def)
	var joins []*novav1.Node
	for _, n := range v.order {
		if n.GetType() == novav1.NodeType_NODE_TYPE_JOIN && JoinWait(n) == 0 {
			joins = append(joins, n)
		}
	}
	for i, a := range joins {
		for _, b := range joins[i+1:] {
			J, K := a.GetId(), b.GetId()
			if !g.CanReach(J, K) || !g.CanReach(K, J) {
				continue
			}
			if fork := forkTowards(g, v.order, J, K); fork != "" {
				v.add(J, "", "joins %q and %q wait for each other: both lie on one cycle, and node %q starts a branch towards each, "+
					"so each would wait for the branch parked at the other; give one of them wait: any (or a number), or take it off the cycle",
					J, K, fork)
			}
		}
	}
}

// forkTowards is a node that starts two branches at once, one of which
// reaches J without passing K and another K without passing J, where J and
// K reach each other without passing it (a cycle through the fork starts
// new branches, which later activations of the joins wait for); "" when
// none does.
func forkTowards(g *Graph, nodes []*novav1.Node, J, K string) string {
	for _, n := range nodes {
		f := n.GetId()
		targets, err := g.Targets(f)
		if err != nil || len(targets) < 2 || !ReachesAvoiding(g, J, K, f) || !ReachesAvoiding(g, K, J, f) {
			continue
		}
		for x, tx := range targets {
			for y, ty := range targets {
				if x != y && (tx == J || ReachesAvoiding(g, tx, J, K)) && (ty == K || ReachesAvoiding(g, ty, K, J)) {
					return f
				}
			}
		}
	}
	return ""
}

// ReachesAvoiding reports whether a path of one or more edges leads from
// node from to node to without passing node avoid (to itself may be avoid).
func ReachesAvoiding(g *Graph, from, to, avoid string) bool {
	if from == avoid {
		return false
	}
	seen := map[string]bool{}
	queue := []string{from}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, e := range g.Outgoing(id) {
			next := e.GetTo()
			if next == to {
				return true
			}
			if next != avoid && !seen[next] {
				seen[next] = true
				queue = append(queue, next)
			}
		}
	}
	return false
}
