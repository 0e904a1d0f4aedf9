package flow

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// joinKind: a line that arrives parks in the join's activation for its
// fork (arrive); the join's visit is when the lines it waits for are there
// (settle: tryJoin, passJoin), their contexts merged (mergeLines).
type joinKind struct {
	noTimer
	noCancel
}

func (joinKind) enter(t *Transition, node *novav1.Node) { t.arrive(node) }

// arrive parks the transition's line at join: it waits there in the
// activation of its fork, or ends there when the join went on without it.
func (t *Transition) arrive(join *novav1.Node) {
	l := t.ln
	t.KeepChanges()
	t.endLine(l)
	if slices.Contains(l.AbsorbedAt, join.Id) {
		return
	}
	js := t.st.Joins[join.Id]
	if js == nil {
		js = &novav1.JoinState{}
		if t.st.Joins == nil {
			t.st.Joins = map[string]*novav1.JoinState{}
		}
		t.st.Joins[join.Id] = js
	}
	rec := &novav1.Branch{Id: l.Id, Context: l.Context, ChangedKeys: l.ChangedKeys, ForkChanges: l.ForkChanges,
		FromNode: cmp.Or(t.prevNode, l.FromNode), NodeStartedAt: tsNow(t.now), AbsorbedAt: l.AbsorbedAt}
	scope := t.scopeOf(rec, join.Id)
	for _, a := range js.Activations {
		if a.Scope == scope {
			a.Arrived = append(a.Arrived, rec)
			return
		}
	}
	js.Activations = append(js.Activations, &novav1.JoinActivation{Scope: scope, Arrived: []*novav1.Branch{rec}})
}

// scopeOf is the fork whose lines l's activation at join waits for: the
// outermost fork in l's history that split lines which can reach the join
// ("" when none does).
func (t *Transition) scopeOf(l *novav1.Branch, join string) string {
	for _, f := range l.ForkChanges {
		if f.Fork != "" && t.splits(f.Node, join) {
			return f.Fork
		}
	}
	return ""
}

// splits tells whether node starts two or more lines that can reach join.
func (t *Transition) splits(node, join string) bool {
	key := node + "\x00" + join
	if v, ok := t.splitMemo[key]; ok {
		return v
	}
	n := 0
	if targets, err := t.graph.Targets(node); err == nil && len(targets) > 1 {
		for _, to := range targets {
			if to == join || t.graph.CanReach(to, join) {
				n++
			}
		}
	}
	if t.splitMemo == nil {
		t.splitMemo = map[string]bool{}
	}
	t.splitMemo[key] = n >= 2
	return n >= 2
}

// reaches tells whether a path leads from node from to node to without
// passing node avoid ("": any path).
func (t *Transition) reaches(from, to, avoid string) bool {
	if avoid == "" {
		return t.graph.CanReach(from, to)
	}
	key := from + "\x00" + to + "\x00" + avoid
	if v, ok := t.splitMemo[key]; ok {
		return v
	}
	v := workflow.ReachesAvoiding(t.graph, from, to, avoid)
	if t.splitMemo == nil {
		t.splitMemo = map[string]bool{}
	}
	t.splitMemo[key] = v
	return v
}

// inScope tells whether l descends from fork scope ("": every line does).
func inScope(l *novav1.Branch, scope string) bool {
	if scope == "" {
		return true
	}
	for _, f := range l.ForkChanges {
		if f.Fork == scope {
			return true
		}
	}
	return false
}

// reacher is a line that can still reach a join: one that runs (line), or
// one parked at another join's activation (at).
type reacher struct {
	line *novav1.Branch
	at   *novav1.JoinActivation
}

// reachers are the lines of activation a's fork that can still reach join
// id and have not been let go by it.
func (t *Transition) reachers(id string, a *novav1.JoinActivation) []reacher {
	counts := func(l *novav1.Branch) bool {
		return !l.IsItem && !slices.Contains(l.AbsorbedAt, id) && inScope(l, a.Scope)
	}
	// A path back through the scope's fork starts lines of a new scope,
	// which a later activation waits for.
	fork, _, _ := strings.Cut(a.Scope, "@")
	var out []reacher
	for _, l := range t.st.Branches {
		if l.CurrentNode != "" && counts(l) && t.reaches(l.CurrentNode, id, fork) {
			out = append(out, reacher{line: l})
		}
	}
	for other, js := range t.st.Joins {
		if other == id || !t.reaches(other, id, fork) {
			continue
		}
		for _, b := range js.Activations {
			for _, r := range b.Arrived {
				if counts(r) {
					out = append(out, reacher{line: r, at: b})
				}
			}
		}
	}
	return out
}

// tryJoin lets an activation of join id go on when the lines it waits for
// are there; it reports whether one did.
func (t *Transition) tryJoin(id string, js *novav1.JoinState) bool {
	node := t.graph.Node(id)
	want := workflow.JoinWait(node)
	for i, a := range js.Activations {
		reach := t.reachers(id, a)
		arrived := a.Arrived
		var joinErr error
		switch {
		case want == 0 && len(reach) > 0:
			continue
		case want > 0 && len(arrived) < want:
			if len(arrived)+len(reach) >= want {
				continue
			}
			joinErr = fmt.Errorf("it waits for %d branches, but %d arrived and no other can reach it", want, len(arrived))
		case want > 0:
			// Arrivals past the number it waits for end here; with
			// cancel_remaining the lines still on their way are cancelled.
			arrived = arrived[:want]
			var running []*novav1.Branch
			for _, r := range reach {
				r.line.AbsorbedAt = append(r.line.AbsorbedAt, id)
				if r.at == nil && node.CancelRemaining {
					running = append(running, r.line)
				}
			}
			if len(running) > 0 {
				t.cancelLines(running, fmt.Sprintf("join %q went on with %d of its branches", id, want))
			}
		}
		js.Activations = slices.Delete(js.Activations, i, i+1)
		if len(js.Activations) == 0 {
			delete(t.st.Joins, id)
		}
		t.changed = true
		t.passJoin(node, arrived, joinErr)
		return true
	}
	return false
}

// stuckJoins names the joins that can no longer go on, "" when every join
// can: an activation goes on only when a line still runs that can reach it,
// directly or through another join that can go on.
func (t *Transition) stuckJoins() string {
	if len(t.st.Joins) == 0 {
		return ""
	}
	type act struct {
		join  string
		a     *novav1.JoinActivation
		reach []reacher
	}
	var acts []act
	ids := make([]string, 0, len(t.st.Joins))
	for id := range t.st.Joins {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		for _, a := range t.st.Joins[id].Activations {
			acts = append(acts, act{join: id, a: a, reach: t.reachers(id, a)})
		}
	}
	live := map[*novav1.JoinActivation]bool{}
	for moved := true; moved; {
		moved = false
		for _, x := range acts {
			if live[x.a] {
				continue
			}
			for _, r := range x.reach {
				if r.at == nil || live[r.at] {
					live[x.a], moved = true, true
					break
				}
			}
		}
	}
	var joins, waits []string
	for _, x := range acts {
		if live[x.a] {
			continue
		}
		joins = append(joins, fmt.Sprintf("%q", x.join))
		for _, r := range x.a.Arrived {
			waits = append(waits, fmt.Sprintf("%s at %q", cmp.Or(r.Id, "the execution's line"), x.join))
		}
	}
	if len(joins) == 0 {
		return ""
	}
	joins, waits = slices.Compact(joins), slices.Compact(waits)
	return fmt.Sprintf("joins %s wait for each other and can no longer go on: each waits for a line parked at another (%s)",
		strings.Join(joins, ", "), strings.Join(waits, ", "))
}

// passJoin is the visit of a join node whose lines came: their contexts
// merged, a new line goes on along its edge (or the node fails).
func (t *Transition) passJoin(node *novav1.Node, arrivals []*novav1.Branch, joinErr error) {
	merged, history, changed, mergeErr := mergeLines(node.Merge, arrivals)
	if joinErr == nil {
		joinErr = mergeErr
	}
	first := arrivals[0]
	var absorbed []string
	for _, a := range arrivals {
		absorbed = append(absorbed, a.AbsorbedAt...)
	}
	slices.Sort(absorbed)
	l := &novav1.Branch{Context: first.Context, ForkChanges: history, ChangedKeys: changed, FromNode: node.Id,
		AbsorbedAt: slices.Compact(absorbed)}
	if len(t.st.Branches) == 0 && len(t.st.Joins) == 0 && len(t.st.Ended) == 0 && len(history) == 0 {
		// Nothing else runs: the execution follows one line again.
		t.st.Branches = append(t.st.Branches, l)
		t.changed = true
	} else {
		t.newLine(l)
	}
	t.on(l, func() {
		ns := t.nodeState(node.Id)
		if !t.countVisit(node, ns) {
			return
		}
		t.ln.NodeStartedAt = first.NodeStartedAt
		t.ln.NodeInput = first.Context
		t.nodeStarted(node, ns)
		if joinErr != nil {
			t.nodeFailed(node, ns, joinErr.Error(), nil)
			return
		}
		t.ctx = merged
		t.SetContext()
		targets, err := t.graph.Targets(node.Id)
		if err != nil {
			t.nodeFailed(node, ns, err.Error(), nil)
			return
		}
		ns.Status, ns.Error = statusSucceeded, ""
		t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", strings.Join(targets, ","), nil)
		t.ln.CurrentNode, t.ln.PendingStepId = "", ""
		t.follow(node, targets)
	})
}
