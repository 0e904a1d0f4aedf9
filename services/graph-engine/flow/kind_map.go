package flow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref/refjson"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// mapKind: a map node runs its body once per item of a list, each item a
// line of its own (settle starts them, concurrency at a time: moveMap),
// collects their results in item order and goes on. An item whose body is
// a workflow is a child execution, which cancelling the item cancels.
type mapKind struct{ noTimer }

func (mapKind) enter(t *Transition, node *novav1.Node) {
	if node.Wait == workflow.MapNoWait {
		// wait: false: the items run on a line of their own; this one goes
		// on along the map's edges at once.
		targets, err := t.graph.Targets(node.Id)
		if err != nil {
			t.Fail(fmt.Sprintf("node %q failed: %v", node.Id, err))
			return
		}
		items := t.branchOff(node)
		t.on(items, func() { mapKind{}.run(t, node) })
		t.follow(node, targets)
		return
	}
	mapKind{}.run(t, node)
}

// run begins the transition's line's visit of map node: its items start.
func (mapKind) run(t *Transition, node *novav1.Node) {
	ns, ok := t.beginVisit(node)
	if !ok {
		return
	}
	t.nodeStarted(node, ns)
	t.startMap(node, ns)
}

func (mapKind) cancel(t *Transition, _ *novav1.Node, reason string) { t.cancelChild(reason) }

// startMap begins a visit of map node: the line waits at it while its
// items run as lines of their own (settle starts them, concurrency at a
// time).
func (t *Transition) startMap(node *novav1.Node, ns *novav1.NodeState) {
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
	if c := node.GetCompleteWhen(); c != nil && int(max(c.Succeeded, c.Failed)) > len(items) {
		what := map[bool]string{true: "succeeded", false: "failed"}[c.Succeeded > 0]
		t.nodeFailed(node, ns, fmt.Sprintf("complete_when %s: %d is more than the %d items of %q; it could never be reached",
			what, max(c.Succeeded, c.Failed), len(items), node.Items), nil)
		return
	}
	t.ln.CurrentNode, t.ln.PendingStepId = node.Id, ""
	t.ln.MapRun = &novav1.MapRun{Visit: ns.Visits, Total: int32(len(items))}
	t.changed = true
}

// itemList is the list raw holds (read back from the value store when it
// is kept there), as its items' JSON. The map visit named key reads and
// splits it once in this replica (Engine.items), not at each item.
func (t *Transition) itemList(key string, raw []byte) ([]json.RawMessage, error) {
	cache := t.itemCache()
	if list, ok := cache.get(key); ok {
		return list, nil
	}
	full := raw
	if _, ok := refjson.RawRef(raw); ok {
		if t.ReadValue == nil {
			return nil, fmt.Errorf("the list is kept in the value store, which this engine cannot read")
		}
		var err error
		if full, err = t.ReadValue(raw); err != nil {
			return nil, err
		}
	}
	list, err := splitList(full)
	if err == nil {
		cache.put(key, list)
	}
	return list, err
}

// itemCache is the engine's cache of map lists (a throwaway one when the
// shell gives none).
func (t *Transition) itemCache() *ItemLists {
	if t.cfg.Items == nil {
		return NewItemLists(1)
	}
	return t.cfg.Items
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
func (t *Transition) moveMap(b *novav1.Branch) bool {
	mr := b.MapRun
	node := t.graph.Node(b.CurrentNode)
	if mr.Finished >= mr.Total || mr.CompletedEarly {
		t.on(b, func() { t.finishMap(node) })
		return true
	}
	running := int32(len(t.itemsOf(b)))
	free := int32(workflow.MapConcurrency(node)) - running
	if node.Prompt != "" && workflow.CacheEnabled(t.st.Definition, node) && mr.Finished == 0 {
		// An AI body: the first item alone, so that its code, once it
		// passes, is in the cache for the others (no model call each).
		free = min(free, 1-running)
	}
	if free <= 0 || mr.Started >= mr.Total {
		return false
	}
	// The map's line waits at the map with its context as it began: its
	// members but the list are each item's context (object gives a copy).
	base := t.cfg.Contexts.object(b.Context)
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
func (t *Transition) startItem(node *novav1.Node) {
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
func (t *Transition) isItem() bool { return t.ln != nil && t.ln.IsItem }

// itemFinished records the result of the transition's item, whose body
// succeeded: what it set as context["result"].
func (t *Transition) itemFinished(node *novav1.Node, ns *novav1.NodeState, r *novav1.CodeExecuted) {
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
func (t *Transition) itemFailed(node *novav1.Node, msg string) {
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
		t.Fail(fmt.Sprintf("node %q failed: %s", node.Id, msg))
		return
	}
	t.failMap(owner, node, msg)
}

// failMap fails map node, run by line owner, and with it the execution (the
// map's line fails it, so that its context is the execution's).
func (t *Transition) failMap(owner *novav1.Branch, node *novav1.Node, msg string) {
	t.on(owner, func() {
		ns := t.nodeState(node.Id)
		ns.Status, ns.Error = statusFailed, msg
		t.nodeCompleted(node, ns.Visits, nodeFailed, msg, "", "", nil)
		t.dropMapRun(t.ln)
		t.ln.CurrentNode, t.ln.PendingStepId = "", ""
		t.Fail(fmt.Sprintf("node %q failed: %s", node.Id, msg))
	})
}

func (t *Transition) itemDone(result []byte, failed bool) {
	t.endLine(t.ln)
	owner := t.line(t.ln.MapBranch)
	if owner == nil || owner.MapRun == nil || t.ln.Item >= owner.MapRun.Total {
		return
	}
	mr := owner.MapRun
	size := int64(len(result))
	if ref, ok := refjson.RawRef(result); ok {
		size = ref.Size
	}
	mr.ResultBytes += size
	if limit := t.cfg.MapResultsMaxBytes; limit > 0 && mr.ResultBytes > limit {
		msg := fmt.Sprintf("the results of its items add up to more than %d bytes (NOVA_MAP_RESULTS_MAX_BYTES) after %d of %d items; "+
			"return less from each item (a reference to data kept elsewhere), or map fewer items at once", limit, mr.Finished+1, mr.Total)
		t.failMap(owner, t.graph.Node(owner.CurrentNode), msg)
		return
	}
	// The result is kept in the map results bucket, not in the state, so
	// that an item's event reads and writes as much at the 10,000th item
	// as at the first (mapresults.go).
	t.ResultsFx = append(t.ResultsFx, MapResult{Key: mapItemKey(t.st.ExecutionId, owner.CurrentNode, mr.Visit, t.ln.Item), Value: result})
	mr.Finished++
	if failed {
		mr.Failed++
	}
	t.changed = true
	t.completeWhen(owner)
}

// completeWhen ends the map run of line owner early once its node's
// complete_when is reached: the items still running are cancelled, those
// not started never start, and settle finishes the map with the results of
// the items that finished.
func (t *Transition) completeWhen(owner *novav1.Branch) {
	mr := owner.MapRun
	node := t.graph.Node(owner.CurrentNode)
	c := node.GetCompleteWhen()
	if c == nil || mr.CompletedEarly || mr.Finished >= mr.Total {
		return
	}
	var reason string
	switch succeeded := mr.Finished - mr.Failed; {
	case c.Succeeded > 0 && succeeded >= c.Succeeded:
		reason = fmt.Sprintf("map %q completed: %d of its items succeeded (complete_when)", node.Id, succeeded)
	case c.Failed > 0 && mr.Failed >= c.Failed:
		reason = fmt.Sprintf("map %q completed: %d of its items failed (complete_when)", node.Id, mr.Failed)
	default:
		return
	}
	mr.CompletedEarly = true
	t.cancelLines(t.itemsOf(owner), reason)
}

// finishMap ends the visit of map node whose items all finished: their
// results, in item order, go to its output key, and the line goes on.
func (t *Transition) finishMap(node *novav1.Node) {
	mr := t.ln.MapRun
	ns := t.nodeState(node.Id)
	byIndex, err := t.itemResults(node, mr)
	if err != nil {
		t.nodeFailed(node, ns, err.Error(), nil)
		return
	}
	var list bytes.Buffer
	list.WriteByte('[')
	for i, raw := range byIndex {
		if i > 0 {
			list.WriteByte(',')
		}
		if _, ok := refjson.RawRef(raw); ok && t.ReadValue != nil {
			full, err := t.ReadValue(raw)
			if err != nil {
				t.nodeFailed(node, ns, fmt.Sprintf("the result of item %d could not be read back: %v", i, err), nil)
				return
			}
			raw = full
		}
		list.Write(raw)
	}
	list.WriteByte(']')
	if node.Wait == workflow.MapNoWait {
		// Nobody waits for it: its visit is in the chain of work, its
		// results go nowhere, and its line ends.
		ns.Status, ns.Error = statusSucceeded, ""
		t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", "", nil)
		t.children = mr.Children
		t.dropMapRun(t.ln)
		t.endLine(t.ln)
		return
	}
	t.ctx[workflow.MapOutput(node)] = list.Bytes()
	t.SetContext()
	t.children = mr.Children
	t.dropMapRun(t.ln)
	t.route(node, ns, nil)
}

// itemResults are the results of map run mr's items, by index: those an
// engine before the map results bucket kept in the state, the others read
// from the bucket (with the ones this transition is about to keep).
func (t *Transition) itemResults(node *novav1.Node, mr *novav1.MapRun) ([][]byte, error) {
	byIndex := make([][]byte, mr.Total)
	start, inline := int32(0), 0
	for i, idx := range mr.DoneIndex {
		if idx >= 0 && idx < mr.Total {
			byIndex[idx] = mr.Results[start:mr.DoneEnd[i]]
			inline++
		}
		start = mr.DoneEnd[i]
	}
	if int(mr.Total) > inline {
		prefix := mapResultsPrefix(t.st.ExecutionId, node.Id, mr.Visit)
		kept := map[int32][]byte{}
		if t.MapResults != nil {
			var err error
			if kept, err = t.MapResults(prefix); err != nil {
				return nil, fmt.Errorf("the results of its items could not be read back: %w", err)
			}
		}
		for _, r := range t.ResultsFx {
			if i, ok := ItemOfKey(prefix, r.Key); ok {
				kept[i] = r.Value
			}
		}
		for i, raw := range kept {
			if i >= 0 && i < mr.Total && byIndex[i] == nil {
				byIndex[i] = raw
			}
		}
	}
	if mr.CompletedEarly {
		// Completed early: the results of the items that finished.
		return slices.DeleteFunc(byIndex, func(raw []byte) bool { return raw == nil }), nil
	}
	for i, raw := range byIndex {
		if raw == nil {
			return nil, fmt.Errorf("the result of item %d is missing from the map results", i)
		}
	}
	return byIndex, nil
}

// dropMapRun ends the map run of line l: its items' results are removed
// from the bucket once the state is stored.
func (t *Transition) dropMapRun(l *novav1.Branch) {
	if mr := l.MapRun; mr != nil && l.CurrentNode != "" {
		t.PurgeFx = append(t.PurgeFx, mapResultsPrefix(t.st.ExecutionId, l.CurrentNode, mr.Visit))
	}
	l.MapRun = nil
}

// Sub-workflows.

// ItemLists keeps the lists that maps run over, split into their items (read
// back from the value store when kept there), by map visit, so that
// starting an item neither reads nor splits the whole list again. It holds
// at most n lists; another replica, or this one after a restart, splits a
// list once more.
type ItemLists struct {
	mu    sync.Mutex
	n     int
	lists map[string][]json.RawMessage
	order []string
}

// NewItemLists keeps at most n lists.
func NewItemLists(n int) *ItemLists { return &ItemLists{n: n, lists: map[string][]json.RawMessage{}} }

func (c *ItemLists) get(digest string) ([]json.RawMessage, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	l, ok := c.lists[digest]
	return l, ok
}

func (c *ItemLists) put(digest string, list []json.RawMessage) {
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
