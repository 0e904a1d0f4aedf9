package engine

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Branches: an execution that forks (a node with several outgoing edges, a
// map's items) runs several lines of control at once. Each is a Branch in
// the state, with its own node, pending step, timer and copy of the
// context. The code that moves a line on (enter, route, the AI pipeline,
// wait and sleep) works on the fields of the current node of the state;
// while it works on a branch, that branch's fields are loaded there
// (runIn) and put back after. Between events those fields are empty, and
// the state's context is what the branches started from.
//
// A join waits for every branch that can still reach it: a branch whose
// decision took another path, or that ended, no longer counts (dead-path
// elimination by reachability). Its arrivals' contexts are merged: a key
// changed by one branch takes that branch's value; one changed by several
// (to different values) fails the execution unless the join's merge says
// "last" or "list".

// activeLine is what runIn saves of the line it leaves to run another.
type activeLine struct {
	br        *novav1.Branch
	lineStart jsonvalue.Object
	lineGone  bool
	line      *novav1.Branch
	context   *novav1.JSONValue
	ctx       jsonvalue.Object
}

// takeLine is the state's current-node fields as a Branch.
func (t *transition) takeLine() *novav1.Branch {
	st := t.st
	return &novav1.Branch{CurrentNode: st.CurrentNode, PendingStepId: st.PendingStepId, NodeStartedAt: st.NodeStartedAt,
		NodeInput: st.NodeInput, Ai: st.Ai, Timer: st.Timer, WaitingFor: st.WaitingFor, MapRun: st.MapRun, Context: st.Context}
}

// loadLine puts b's line in the state's current-node fields.
func (t *transition) loadLine(b *novav1.Branch) {
	st := t.st
	st.CurrentNode, st.PendingStepId, st.NodeStartedAt, st.NodeInput = b.CurrentNode, b.PendingStepId, b.NodeStartedAt, b.NodeInput
	st.Ai, st.Timer, st.WaitingFor, st.MapRun = b.Ai, b.Timer, b.WaitingFor, b.MapRun
	t.ctx = jsonvalue.MustObject(b.Context)
	st.Context = b.Context
	if st.Context == nil {
		st.Context = t.ctx.Proto()
	}
}

// saveLine puts the state's current-node fields in b.
func (t *transition) saveLine(b *novav1.Branch) {
	l := t.takeLine()
	b.CurrentNode, b.PendingStepId, b.NodeStartedAt, b.NodeInput = l.CurrentNode, l.PendingStepId, l.NodeStartedAt, l.NodeInput
	b.Ai, b.Timer, b.WaitingFor, b.MapRun, b.Context = l.Ai, l.Timer, l.WaitingFor, l.MapRun, l.Context
}

// clearLine empties the current-node fields; the context stays.
func (t *transition) clearLine() {
	st := t.st
	st.CurrentNode, st.PendingStepId, st.NodeStartedAt, st.NodeInput = "", "", nil, nil
	st.Ai, st.Timer, st.WaitingFor, st.MapRun = nil, nil, "", nil
}

// runIn runs fn on branch b's line, then puts the line back in b (or drops
// b, when its line ended) and returns to the line the transition was on.
func (t *transition) runIn(b *novav1.Branch, fn func()) {
	saved := activeLine{br: t.br, lineStart: t.lineStart, lineGone: t.lineGone, line: t.takeLine(), context: t.st.Context, ctx: t.ctx}
	t.loadLine(b)
	t.br, t.lineStart, t.lineGone = b, t.ctx.Clone(), false
	t.parallel = true
	fn()
	t.leave()
	t.loadLine(saved.line)
	t.st.Context, t.ctx = saved.context, saved.ctx
	t.br, t.lineStart, t.lineGone = saved.br, saved.lineStart, saved.lineGone
}

// leave ends the transition's work on its branch: the line goes back into
// it, or the branch is dropped when its line ended.
func (t *transition) leave() {
	b := t.br
	if t.lineGone {
		t.dropBranch(b)
		return
	}
	b.ChangedKeys = t.lineChanges()
	t.saveLine(b)
	t.changed = true
}

func (t *transition) dropBranch(b *novav1.Branch) {
	t.st.Branches = slices.DeleteFunc(t.st.Branches, func(x *novav1.Branch) bool { return x == b })
	t.changed = true
}

// onLine applies fn to the line match finds: the execution's one line, or
// the branch match picks. With no branch matching, fn sees no current node
// (and tells a stale or early event so).
func (t *transition) onLine(match func(*novav1.Branch) bool, fn func() error) error {
	if len(t.st.Branches) == 0 {
		return fn()
	}
	for _, b := range t.st.Branches {
		if match(b) {
			var err error
			t.runIn(b, func() { err = fn() })
			return err
		}
	}
	return fn()
}

// onStep is onLine for the result of step: the line waiting for it.
func (t *transition) onStep(step string, fn func() error) error {
	return t.onLine(func(b *novav1.Branch) bool { return b.PendingStepId == step }, fn)
}

// inBranches tells whether the execution runs branches (the transition may
// be working on one).
func (t *transition) inBranches() bool { return t.br != nil || len(t.st.Branches) > 0 }

func (t *transition) newBranch(b *novav1.Branch) *novav1.Branch {
	t.st.BranchSeq++
	b.Id = fmt.Sprintf("b%d", t.st.BranchSeq)
	t.st.Branches = append(t.st.Branches, b)
	t.changed = true
	return b
}

func (t *transition) branch(id string) *novav1.Branch {
	for _, b := range t.st.Branches {
		if b.Id == id {
			return b
		}
	}
	return nil
}

// lineChanges are the context keys the transition's branch set or deleted
// since the fork that made it.
func (t *transition) lineChanges() []string {
	keys := slices.Clone(t.br.GetChangedKeys())
	for k, raw := range t.ctx {
		if old, ok := t.lineStart[k]; !ok || !bytes.Equal(old, raw) {
			keys = append(keys, k)
		}
	}
	for k := range t.lineStart {
		if _, ok := t.ctx[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return slices.Compact(keys)
}

// toBranch makes the execution's one line a branch, the one the
// transition works on; settle puts it away.
func (t *transition) toBranch() {
	if t.br != nil {
		return
	}
	b := t.newBranch(&novav1.Branch{})
	t.br, t.lineStart, t.lineGone, t.parallel = b, t.ctx.Clone(), false, true
	t.openLine = true
}

// follow goes on from node to targets: the one next node, or a branch for
// each of several.
func (t *transition) follow(from *novav1.Node, targets []string) {
	if len(targets) == 1 {
		t.enter(targets[0])
		return
	}
	t.fork(from, targets)
}

// fork replaces the line with a branch for each target, each with a copy
// of its context.
func (t *transition) fork(from *novav1.Node, targets []string) {
	base := t.st.Context
	var stack []*novav1.KeyList
	if t.br != nil {
		stack = append(slices.Clone(t.br.ForkChanges), &novav1.KeyList{Keys: t.lineChanges()})
	} else {
		stack = []*novav1.KeyList{{}}
		t.clearLine()
	}
	t.lineGone, t.parallel = true, true
	for _, to := range targets {
		b := t.newBranch(&novav1.Branch{Context: base, ForkChanges: stack, FromNode: from.Id})
		t.runIn(b, func() { t.enter(to) })
	}
}

// arrive parks the line at join node: it waits there for the others.
func (t *transition) arrive(join *novav1.Node) {
	t.toBranch()
	b := t.br
	js := t.st.Joins[join.Id]
	if js == nil {
		js = &novav1.JoinState{}
		if t.st.Joins == nil {
			t.st.Joins = map[string]*novav1.JoinState{}
		}
		t.st.Joins[join.Id] = js
	}
	t.lineGone, t.changed = true, true
	if i := slices.Index(js.Absorb, b.Id); i >= 0 {
		// The join went on without it (wait: any, or a number).
		js.Absorb = slices.Delete(js.Absorb, i, i+1)
		return
	}
	t.saveLine(b)
	js.Arrived = append(js.Arrived, &novav1.Branch{Id: b.Id, Context: t.st.Context, ChangedKeys: t.lineChanges(),
		ForkChanges: b.ForkChanges, FromNode: cmp.Or(t.prevNode, b.FromNode), NodeStartedAt: tsNow(t.now)})
}

// branchEnded ends the line at an end node while other branches run: what
// it changed is merged into the execution's context when the transition
// settles.
func (t *transition) branchEnded() {
	t.toBranch()
	keys := t.lineChanges()
	for _, l := range t.br.ForkChanges {
		keys = append(keys, l.Keys...)
	}
	t.ended = append(t.ended, &novav1.Branch{Id: t.br.Id, Context: t.st.Context, ChangedKeys: keys, FromNode: t.prevNode})
	t.lineGone = true
}

// settle does what follows from the branches' moves: joins whose branches
// all came go on, maps start their next items or finish, ended branches'
// changes reach the context, and the execution ends when no line is left.
// An execution that follows one line is not touched.
func (t *transition) settle() {
	if t.openLine {
		t.openLine = false
		t.leave()
		t.clearLine()
		t.br, t.lineStart, t.lineGone = nil, nil, false
	}
	if !t.parallel && len(t.st.Branches) == 0 && len(t.st.Joins) == 0 {
		return
	}
	for range 100000 {
		if t.st.Status != statusRunning || !t.settleOnce() {
			break
		}
	}
	if t.st.Status != statusRunning {
		return
	}
	if len(t.ended) > 0 {
		t.mergeEnded()
		if t.st.Status != statusRunning {
			return
		}
	}
	switch {
	case len(t.st.Branches) == 0 && len(t.st.Joins) == 0:
		if t.st.CurrentNode == "" {
			t.complete()
		}
	case len(t.st.Branches) == 1 && len(t.st.Joins) == 0 && len(t.st.EndedKeys) == 0:
		// One line again: it goes back to the state's own fields.
		if b := t.st.Branches[0]; !b.IsItem && b.MapRun == nil {
			t.st.Branches = nil
			t.loadLine(b)
			t.changed = true
		}
	}
}

// settleOnce makes one move of settle; it reports whether it made one.
func (t *transition) settleOnce() bool {
	for _, b := range slices.Clone(t.st.Branches) {
		if b.MapRun != nil && t.branch(b.Id) != nil && t.moveMap(b) {
			return true
		}
	}
	ids := make([]string, 0, len(t.st.Joins))
	for id := range t.st.Joins {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		if t.tryJoin(id, t.st.Joins[id]) {
			return true
		}
	}
	return false
}

// reachers are the branches that can still reach join id: those at a node
// with a path to it, and those waiting at another join with one.
func (t *transition) reachers(id string, js *novav1.JoinState) []string {
	var out []string
	for _, b := range t.st.Branches {
		if b.IsItem || b.CurrentNode == "" || slices.Contains(js.Absorb, b.Id) {
			continue
		}
		if t.graph.CanReach(b.CurrentNode, id) {
			out = append(out, b.Id)
		}
	}
	for other, o := range t.st.Joins {
		if other == id || len(o.Arrived) == 0 || !t.graph.CanReach(other, id) {
			continue
		}
		for _, a := range o.Arrived {
			out = append(out, a.Id)
		}
	}
	slices.Sort(out)
	return out
}

// tryJoin lets join id go on when the branches it waits for are there; it
// reports whether it moved.
func (t *transition) tryJoin(id string, js *novav1.JoinState) bool {
	node := t.graph.Node(id)
	js.Absorb = slices.DeleteFunc(js.Absorb, func(b string) bool { return t.branch(b) == nil && !t.waitsAtJoin(b) })
	if len(js.Arrived) == 0 {
		if len(js.Absorb) == 0 {
			delete(t.st.Joins, id)
			t.changed = true
		}
		return false
	}
	reach := t.reachers(id, js)
	want := workflow.JoinWait(node)
	switch {
	case want == 0 && len(reach) > 0:
		return false
	case want > 0 && len(js.Arrived) < want:
		if len(js.Arrived)+len(reach) >= want {
			return false
		}
		arrivals := js.Arrived
		delete(t.st.Joins, id)
		t.passJoin(node, arrivals, fmt.Errorf("it waits for %d branches, but %d arrived and no other can reach it", want, len(arrivals)))
		return true
	}
	arrivals := js.Arrived
	js.Arrived = nil
	if want > 0 {
		js.Absorb = reach
	}
	if len(js.Absorb) == 0 {
		delete(t.st.Joins, id)
	}
	t.passJoin(node, arrivals, nil)
	return true
}

func (t *transition) waitsAtJoin(id string) bool {
	for _, js := range t.st.Joins {
		for _, a := range js.Arrived {
			if a.Id == id {
				return true
			}
		}
	}
	return false
}

// passJoin is the visit of a join node whose branches came: their contexts
// merged, a new line goes on along its edge (or the node fails).
func (t *transition) passJoin(node *novav1.Node, arrivals []*novav1.Branch, joinErr error) {
	merged, mergeErr := mergeArrivals(node, arrivals)
	if joinErr == nil {
		joinErr = mergeErr
	}
	first := arrivals[0]
	keys := []string{}
	stack := first.ForkChanges
	if n := len(stack); n > 0 {
		keys = append(keys, stack[n-1].Keys...)
		stack = stack[:n-1]
	}
	for _, a := range arrivals {
		keys = append(keys, a.ChangedKeys...)
	}
	slices.Sort(keys)
	visit := func() {
		ns := t.nodeState(node.Id)
		if limit := workflow.MaxVisits(node); int(ns.Visits-ns.Retried) >= limit {
			ns.Status, ns.Error = statusFailed, fmt.Sprintf("node %q exceeded its maximum of %d visits", node.Id, limit)
			t.fail(ns.Error)
			return
		}
		ns.Visits++
		ns.RetryAttempt = 1
		t.st.Sequence++
		t.st.Path = append(t.st.Path, node.Id)
		t.st.NodeStartedAt = first.NodeStartedAt
		t.st.NodeInput = first.Context
		t.nodeStarted(node, ns)
		if joinErr != nil {
			t.nodeFailed(node, ns, joinErr.Error(), nil)
			return
		}
		t.ctx = merged
		t.setContext()
		targets, err := t.graph.Targets(node.Id)
		if err != nil {
			t.nodeFailed(node, ns, err.Error(), nil)
			return
		}
		ns.Status, ns.Error = statusSucceeded, ""
		t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", strings.Join(targets, ","), nil)
		t.st.CurrentNode, t.st.PendingStepId = "", ""
		t.follow(node, targets)
	}
	t.changed = true
	if t.br == nil && len(t.st.Branches) == 0 && len(t.st.Joins) == 0 && len(t.st.EndedKeys) == 0 && len(t.ended) == 0 {
		// Nothing else runs: the execution follows one line again, from
		// the join on.
		t.loadLine(&novav1.Branch{Context: first.Context})
		visit()
		return
	}
	b := t.newBranch(&novav1.Branch{Context: first.Context, ForkChanges: stack, ChangedKeys: slices.Compact(keys), FromNode: node.Id})
	t.runIn(b, visit)
}

// mergeArrivals merges the contexts of the branches that came to join:
// each key one of them changed takes its value; a key several changed to
// different values follows the join's merge rule. branch_decision stays
// with each branch.
func mergeArrivals(join *novav1.Node, arrivals []*novav1.Branch) (jsonvalue.Object, error) {
	out := jsonvalue.MustObject(arrivals[0].Context).Clone()
	delete(out, branchDecision)
	type change struct {
		branch, from string
		raw          []byte // nil: deleted
	}
	changes := map[string][]change{}
	var keys []string
	for _, a := range arrivals {
		ctx := jsonvalue.MustObject(a.Context)
		for _, k := range a.ChangedKeys {
			if k == branchDecision {
				continue
			}
			if _, seen := changes[k]; !seen {
				keys = append(keys, k)
			}
			changes[k] = append(changes[k], change{branch: a.Id, from: a.FromNode, raw: ctx[k]})
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		cs := changes[k]
		last := cs[len(cs)-1]
		same := true
		for _, c := range cs[1:] {
			same = same && bytes.Equal(c.raw, cs[0].raw) && (c.raw == nil) == (cs[0].raw == nil)
		}
		switch {
		case len(cs) == 1 || same || join.Merge == workflow.MergeLast:
			if last.raw == nil {
				delete(out, k)
			} else {
				out[k] = last.raw
			}
		case join.Merge == workflow.MergeList:
			var list bytes.Buffer
			list.WriteByte('[')
			for i, c := range cs {
				if i > 0 {
					list.WriteByte(',')
				}
				if c.raw == nil {
					list.WriteString("null")
				} else {
					list.Write(c.raw)
				}
			}
			list.WriteByte(']')
			out[k] = list.Bytes()
		default:
			return nil, fmt.Errorf("branches %s (from node %q) and %s (from node %q) both changed context key %q; "+
				"give the join merge: last or merge: list to allow it", cs[0].branch, cs[0].from, cs[1].branch, cs[1].from, k)
		}
	}
	return out, nil
}

// mergeEnded merges into the execution's context what the branches that
// ended at an end node changed.
func (t *transition) mergeEnded() {
	ended := t.ended
	t.ended = nil
	for _, l := range ended {
		ctx := jsonvalue.MustObject(l.Context)
		keys := slices.Clone(l.ChangedKeys)
		slices.Sort(keys)
		for _, k := range slices.Compact(keys) {
			if k == branchDecision {
				continue
			}
			raw, has := ctx[k]
			old, had := t.ctx[k]
			if slices.Contains(t.st.EndedKeys, k) && (has != had || !bytes.Equal(raw, old)) {
				t.fail(fmt.Sprintf("branch %s (from node %q) ended changing context key %q, which a branch that ended before it changed too",
					l.Id, l.FromNode, k))
				return
			}
			if has {
				t.ctx[k] = raw
			} else {
				delete(t.ctx, k)
			}
			if !slices.Contains(t.st.EndedKeys, k) {
				t.st.EndedKeys = append(t.st.EndedKeys, k)
			}
		}
	}
	t.setContext()
	t.changed = true
}

// Map nodes.

// startMap begins a visit of map node: the line waits at it while its
// items run as branches (settle starts them, concurrency at a time).
func (t *transition) startMap(node *novav1.Node, ns *novav1.NodeState) {
	raw, ok := t.ctx[node.Items]
	if !ok {
		t.nodeFailed(node, ns, fmt.Sprintf("the context has no key %q (the list its items come from)", node.Items), nil)
		return
	}
	items, err := t.itemList(t.visitKey(node.Id, ns.Visits), raw)
	if err != nil {
		t.nodeFailed(node, ns, fmt.Sprintf("items %q: %v", node.Items, err), nil)
		return
	}
	t.toBranch()
	t.st.CurrentNode, t.st.PendingStepId = node.Id, ""
	t.st.MapRun = &novav1.MapRun{Visit: ns.Visits, Total: int32(len(items))}
	t.changed = true
}

// itemList is the list raw holds (read back from the value store when it
// is kept there), as its items' JSON. The map visit named key reads and
// splits it once in this replica (Engine.items), not at each item.
func (t *transition) itemList(key string, raw []byte) ([]json.RawMessage, error) {
	cache := t.e.itemCache()
	if list, ok := cache.get(key); ok {
		return list, nil
	}
	full := raw
	if _, ok := valueref.RawRef(raw); ok {
		if t.readValue == nil {
			return nil, fmt.Errorf("the list is kept in the value store, which this engine cannot read")
		}
		var err error
		if full, err = t.readValue(raw); err != nil {
			return nil, err
		}
	}
	list, err := splitList(full)
	if err == nil {
		cache.put(key, list)
	}
	return list, err
}

// itemCache is the engine's cache of map lists (a throwaway one for an
// Engine built by hand in tests).
func (e *Engine) itemCache() *itemLists {
	if e == nil || e.items == nil {
		return newItemLists(1)
	}
	return e.items
}

func splitList(raw []byte) ([]json.RawMessage, error) {
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil || list == nil && !bytes.Equal(bytes.TrimSpace(raw), []byte("[]")) {
		return nil, fmt.Errorf("want a list, got %s", jsonvalue.KindOf(raw))
	}
	return list, nil
}

// moveMap starts the next items of the map branch b runs, or finishes the
// map when every item finished; it reports whether it did either.
func (t *transition) moveMap(b *novav1.Branch) bool {
	mr := b.MapRun
	node := t.graph.Node(b.CurrentNode)
	if mr.Finished >= mr.Total {
		t.runIn(b, func() { t.finishMap(node) })
		return true
	}
	running := int32(0)
	for _, x := range t.st.Branches {
		if x.IsItem && x.MapBranch == b.Id {
			running++
		}
	}
	free := int32(workflow.MapConcurrency(node)) - running
	if node.Prompt != "" && workflow.CacheEnabled(t.st.Definition, node) && mr.Finished == 0 {
		// An AI body: the first item alone, so that its code, once it
		// passes, is in the cache for the others (no model call each).
		free = min(free, 1-running)
	}
	if free <= 0 || mr.Started >= mr.Total {
		return false
	}
	base := jsonvalue.MustObject(b.Context).Clone()
	items, err := t.itemList(fmt.Sprintf("%s/%s/%d", t.st.ExecutionId, node.Id, mr.Visit), base[node.Items])
	if err != nil || len(items) != int(mr.Total) {
		t.runIn(b, func() {
			t.nodeFailed(node, t.nodeState(node.Id), fmt.Sprintf("items %q could not be read back: %v", node.Items, err), nil)
		})
		return true
	}
	delete(base, node.Items)
	for ; free > 0 && mr.Started < mr.Total; free-- {
		i := mr.Started
		mr.Started++
		ctx := base.Clone()
		ctx["item"] = items[i]
		ctx["index"] = []byte(fmt.Sprint(i))
		item := t.newBranch(&novav1.Branch{IsItem: true, MapBranch: b.Id, Item: i, FromNode: node.Id, Context: ctx.Proto(),
			ItemNode: &novav1.NodeState{Visits: mr.Visit, RetryAttempt: 1}})
		t.runIn(item, func() { t.startItem(node) })
		if t.st.Status != statusRunning {
			break
		}
	}
	return true
}

// startItem runs the map node's body for the item the transition's branch
// is.
func (t *transition) startItem(node *novav1.Node) {
	ns := t.nodeState(node.Id)
	t.st.Sequence++
	t.st.NodeStartedAt = tsNow(t.now)
	t.st.NodeInput = t.st.Context
	t.nodeStarted(node, ns)
	switch {
	case node.Workflow != "":
		t.startChild(node, ns)
	case node.Prompt != "":
		t.startAI(node)
	default:
		ns.Attempts = 1
		t.dispatch(node, ns)
	}
}

// isItem tells whether the transition works on a map's item.
func (t *transition) isItem() bool { return t.br != nil && t.br.IsItem }

// itemFinished records the result of the transition's item, whose body
// succeeded: what it set as context["result"].
func (t *transition) itemFinished(node *novav1.Node, ns *novav1.NodeState, r *novav1.CodeExecuted) {
	ns.Status, ns.Error = statusSucceeded, ""
	t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", "", r)
	res, ok := t.ctx["result"]
	if !ok {
		res = []byte("null")
	}
	t.itemDone(res, false)
}

// itemFailed records a failed item: under on_item_failure collect its
// entry is {"error": msg}; else the map node, and the execution, fail.
func (t *transition) itemFailed(node *novav1.Node, msg string) {
	if node.OnItemFailure == workflow.OnItemFailureCollect {
		entry, _ := json.Marshal(map[string]string{"error": msg})
		t.itemDone(entry, true)
		return
	}
	item := t.br.Item
	owner := t.branch(t.br.MapBranch)
	t.lineGone = true
	msg = fmt.Sprintf("item %d failed: %s", item, msg)
	if owner != nil {
		t.runIn(owner, func() {
			ns := t.nodeState(node.Id)
			ns.Status, ns.Error = statusFailed, msg
			t.nodeCompleted(node, ns.Visits, nodeFailed, msg, "", "", nil)
		})
	}
	t.fail(fmt.Sprintf("node %q failed: %s", node.Id, msg))
}

func (t *transition) itemDone(result []byte, failed bool) {
	t.lineGone = true
	owner := t.branch(t.br.MapBranch)
	if owner == nil || owner.MapRun == nil || t.br.Item >= owner.MapRun.Total {
		return
	}
	mr := owner.MapRun
	if t.largeValue(result) {
		// Kept by reference (shrinkBranches stores it) once the event is
		// applied; here it is marked to be.
		t.largeResults = append(t.largeResults, largeResult{owner: owner, index: t.br.Item})
	}
	mr.Results = append(mr.Results, result...)
	mr.DoneIndex = append(mr.DoneIndex, t.br.Item)
	mr.DoneEnd = append(mr.DoneEnd, int32(len(mr.Results)))
	mr.Finished++
	if failed {
		mr.Failed++
	}
	t.changed = true
}

// finishMap ends the visit of map node whose items all finished: their
// results, in item order, go to its output key, and the line goes on.
func (t *transition) finishMap(node *novav1.Node) {
	mr := t.st.MapRun
	ns := t.nodeState(node.Id)
	byIndex := make([][]byte, mr.Total)
	start := int32(0)
	for i, idx := range mr.DoneIndex {
		if idx >= 0 && idx < mr.Total {
			byIndex[idx] = mr.Results[start:mr.DoneEnd[i]]
		}
		start = mr.DoneEnd[i]
	}
	var list bytes.Buffer
	list.WriteByte('[')
	for i, raw := range byIndex {
		if i > 0 {
			list.WriteByte(',')
		}
		if _, ok := valueref.RawRef(raw); ok && t.readValue != nil {
			full, err := t.readValue(raw)
			if err != nil {
				t.nodeFailed(node, ns, fmt.Sprintf("the result of item %d could not be read back: %v", i, err), nil)
				return
			}
			raw = full
		}
		if len(raw) == 0 {
			raw = []byte("null")
		}
		list.Write(raw)
	}
	list.WriteByte(']')
	t.ctx[workflow.MapOutput(node)] = list.Bytes()
	t.setContext()
	t.children = mr.Children
	t.st.MapRun = nil
	t.route(node, ns, nil)
}

// Sub-workflows.

// childID is the execution id of the child that a visit of node starts.
func (t *transition) childID(node *novav1.Node, visit int32) string {
	id := fmt.Sprintf("%s_%s_%d", t.st.ExecutionId, node.Id, visit)
	if t.isItem() {
		id += fmt.Sprintf("_%d", t.br.Item)
	}
	// A node id a key cannot hold makes the id a UUID derived from it, as
	// the child's start would.
	return execution.ID(id)
}

// startChild starts the workflow node's (or map item's) child execution:
// its context is the line's (or the keys input names), and the line waits
// for it.
func (t *transition) startChild(node *novav1.Node, ns *novav1.NodeState) {
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
	childID := t.childID(node, ns.Visits)
	ref := &novav1.ParentRef{ExecutionId: t.st.ExecutionId, NodeId: node.Id, StepId: childID, Visit: ns.Visits}
	if t.isItem() {
		ref.Item = new(t.br.Item)
		if owner := t.branch(t.br.MapBranch); owner != nil && owner.MapRun != nil {
			owner.MapRun.Children = append(owner.MapRun.Children, childID)
		}
	}
	t.command(node, childID, bus.AgentGraphEngine, bus.TypeWorkflowStart, func(seq int32) proto.Message {
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

// childCompleted takes the end of a child execution the line waits for: its
// final context (or the keys output names) comes back, or the node fails
// with the child's error.
func (t *transition) childCompleted(r *novav1.ChildCompleted) error {
	if err := t.checkPending(r.GetParent().GetStepId(), r.GetParent().GetSequence()); err != nil {
		return err
	}
	node := t.graph.Node(t.st.CurrentNode)
	if node == nil {
		return errStale
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
		if t.expand != nil {
			if err := t.expand(out); err != nil {
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
	t.setContext()
	t.route(node, ns, nil)
	return nil
}

// childOf is the child execution the line waits for, "" when none.
func (t *transition) childOf() string {
	if t.graph == nil || t.st.PendingStepId == "" {
		return ""
	}
	if n := t.graph.Node(t.st.CurrentNode); n != nil && n.Workflow != "" {
		return t.st.PendingStepId
	}
	return ""
}

// itemLists keeps the lists that maps run over, split into their items (read
// back from the value store when kept there), by map visit, so that
// starting an item neither reads nor splits the whole list again. It holds
// at most n lists; another replica, or this one after a restart, splits a
// list once more.
type itemLists struct {
	mu    sync.Mutex
	n     int
	lists map[string][]json.RawMessage
	order []string
}

func newItemLists(n int) *itemLists { return &itemLists{n: n, lists: map[string][]json.RawMessage{}} }

func (c *itemLists) get(digest string) ([]json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.lists[digest]
	return l, ok
}

func (c *itemLists) put(digest string, list []json.RawMessage) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.lists[digest]; ok {
		return
	}
	if len(c.order) >= c.n {
		delete(c.lists, c.order[0])
		c.order = c.order[1:]
	}
	c.lists[digest] = list
	c.order = append(c.order, digest)
}

// shrinkBranches keeps the large values of the branches' contexts, and
// large results of map items, in the value store, as shrink does for the
// context.
func (e *Engine) shrinkBranches(ctx context.Context, t *transition) error {
	shrinkValue := func(v *novav1.JSONValue) (*novav1.JSONValue, error) {
		nv, _, err := e.shrinkObject(ctx, t, jsonvalue.MustObject(v), v)
		return nv, err
	}
	for _, b := range t.st.Branches {
		nv, err := shrinkValue(b.Context)
		if err != nil {
			return err
		}
		if b.NodeInput == b.Context {
			b.NodeInput = nv
		}
		b.Context = nv

	}
	for _, lr := range t.largeResults {
		if err := e.shrinkResult(ctx, lr); err != nil {
			return err
		}
	}
	t.largeResults = nil
	for _, js := range t.st.Joins {
		for _, a := range js.Arrived {
			nv, err := shrinkValue(a.Context)
			if err != nil {
				return err
			}
			a.Context = nv
		}
	}
	return nil
}

// largeResult is a map item's result over the value store's threshold,
// kept by reference once the event is applied.
type largeResult struct {
	owner *novav1.Branch
	index int32
}

// largeValue tells whether raw goes to the value store.
func (t *transition) largeValue(raw []byte) bool {
	return t.e != nil && t.e.values != nil && len(raw) > t.e.values.Threshold()
}

// shrinkResult stores item lr.index's result of the map lr.owner runs in
// the value store and keeps its reference in its place.
func (e *Engine) shrinkResult(ctx context.Context, lr largeResult) error {
	mr := lr.owner.MapRun
	if mr == nil {
		return nil
	}
	start := int32(0)
	for i, idx := range mr.DoneIndex {
		end := mr.DoneEnd[i]
		if idx == lr.index {
			o := jsonvalue.Object{"v": slices.Clone(mr.Results[start:end])}
			if err := e.values.Shrink(ctx, o); err != nil {
				return err
			}
			ref := o["v"]
			delta := int32(len(ref)) - (end - start)
			mr.Results = slices.Concat(mr.Results[:start], ref, mr.Results[end:])
			for j := i; j < len(mr.DoneEnd); j++ {
				mr.DoneEnd[j] += delta
			}
			return nil
		}
		start = end
	}
	return nil
}
