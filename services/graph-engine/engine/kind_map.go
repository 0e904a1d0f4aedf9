package engine

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// mapKind: a map node runs its body once per item of a list, each item a
// line of its own (settle starts them, concurrency at a time: moveMap),
// collects their results in item order and goes on. An item whose body is
// a workflow is a child execution, which cancelling the item cancels.
type mapKind struct{ noTimer }

func (mapKind) enter(t *transition, node *novav1.Node) {
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	t.nodeStarted(node, ns)
	t.startMap(node, ns)
}

func (mapKind) cancel(t *transition, _ *novav1.Node, reason string) { t.cancelChild(reason) }

// startMap begins a visit of map node: the line waits at it while its
// items run as lines of their own (settle starts them, concurrency at a
// time).
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
	t.ln.CurrentNode, t.ln.PendingStepId = node.Id, ""
	t.ln.MapRun = &novav1.MapRun{Visit: ns.Visits, Total: int32(len(items))}
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
		t.on(b, func() { t.finishMap(node) })
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
		t.on(b, func() {
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
		item := t.newLine(&novav1.Branch{IsItem: true, MapBranch: b.Id, Item: i, FromNode: node.Id, Context: ctx.Proto(),
			ItemNode: &novav1.NodeState{Visits: mr.Visit, RetryAttempt: 1}})
		t.on(item, func() { t.startItem(node) })
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
	t.ln.NodeStartedAt = tsNow(t.now)
	t.ln.NodeInput = t.ln.Context
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
func (t *transition) isItem() bool { return t.ln != nil && t.ln.IsItem }

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
// entry is {"error": msg}; else the map node, and the execution, fail (the
// map's line fails it, so that its context is the execution's).
func (t *transition) itemFailed(node *novav1.Node, msg string) {
	if node.OnItemFailure == workflow.OnItemFailureCollect {
		entry, _ := json.Marshal(map[string]string{"error": msg})
		t.itemDone(entry, true)
		return
	}
	item := t.ln.Item
	t.endLine(t.ln)
	msg = fmt.Sprintf("item %d failed: %s", item, msg)
	owner := t.line(t.ln.MapBranch)
	if owner == nil {
		t.fail(fmt.Sprintf("node %q failed: %s", node.Id, msg))
		return
	}
	t.on(owner, func() {
		ns := t.nodeState(node.Id)
		ns.Status, ns.Error = statusFailed, msg
		t.nodeCompleted(node, ns.Visits, nodeFailed, msg, "", "", nil)
		t.ln.CurrentNode, t.ln.PendingStepId, t.ln.MapRun = "", "", nil
		t.fail(fmt.Sprintf("node %q failed: %s", node.Id, msg))
	})
}

func (t *transition) itemDone(result []byte, failed bool) {
	t.endLine(t.ln)
	owner := t.line(t.ln.MapBranch)
	if owner == nil || owner.MapRun == nil || t.ln.Item >= owner.MapRun.Total {
		return
	}
	mr := owner.MapRun
	if t.largeValue(result) {
		// Kept by reference (shrinkBranches stores it) once the event is
		// applied; here it is marked to be.
		t.largeResults = append(t.largeResults, largeResult{owner: owner, index: t.ln.Item})
	}
	mr.Results = append(mr.Results, result...)
	mr.DoneIndex = append(mr.DoneIndex, t.ln.Item)
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
	mr := t.ln.MapRun
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
	t.ln.MapRun = nil
	t.route(node, ns, nil)
}

// Sub-workflows.

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
