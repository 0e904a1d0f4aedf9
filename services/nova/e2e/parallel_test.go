package e2e

import (
	"context"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/engine"
	"github.com/novaflow/nova/services/nova/stack"
)

// Branches on the embedded servers: fan-out and join, joins after a
// decision, merges of the branches' contexts, maps over a list and
// sub-workflows.

// visits are the chain's visits of node.
func visits(nodes []chainstore.NodeDoc, node string) []chainstore.NodeDoc {
	var out []chainstore.NodeDoc
	for _, n := range nodes {
		if n.NodeID == node {
			out = append(out, n)
		}
	}
	return out
}

// overlap tells whether the two visits ran at the same time for a while.
func overlap(a, b chainstore.NodeDoc) bool {
	return a.StartedAt != nil && b.StartedAt != nil && a.CompletedAt != nil && b.CompletedAt != nil &&
		a.StartedAt.Before(*b.CompletedAt) && b.StartedAt.Before(*a.CompletedAt)
}

func TestFanOutAndJoin(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: fan-out
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "import time\ntime.sleep(0.4)\ncontext['a'] = context['n'] + 1"}
  - {id: b, type: action, code: "import time\ntime.sleep(0.4)\ncontext['b'] = context['n'] + 2"}
  - {id: c, type: action, code: "import time\ntime.sleep(0.4)\ncontext['c'] = context['n'] + 3"}
  - {id: join, type: join}
  - {id: total, type: action, code: "context['total'] = context['a'] + context['b'] + context['c']"}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: start, to: b}
  - {from: start, to: c}
  - {from: a, to: join}
  - {from: b, to: join}
  - {from: c, to: join}
  - {from: join, to: total}
  - {from: total, to: end}
`)
	wc := e.run(def, map[string]any{"n": 10})
	if wc.Status != "succeeded" {
		t.Fatalf("status %q: %s", wc.Status, wc.Error)
	}
	got := ctxMap(wc.Context)
	for k, want := range map[string]float64{"a": 11, "b": 12, "c": 13, "total": 36} {
		if got[k] != want {
			t.Errorf("context[%q] = %v, want %v (context %v)", k, got[k], want, got)
		}
	}
	nodes := e.chain(wc.ExecutionId)
	a, b, c := visits(nodes, "a"), visits(nodes, "b"), visits(nodes, "c")
	if len(a) != 1 || len(b) != 1 || len(c) != 1 {
		t.Fatalf("visits of a, b, c = %d, %d, %d; want one each (chain %v)", len(a), len(b), len(c), chainIDs(nodes))
	}
	// The three ran at once, each in a branch of its own.
	if !overlap(a[0], b[0]) || !overlap(b[0], c[0]) || !overlap(a[0], c[0]) {
		t.Errorf("branches did not overlap: a %v-%v, b %v-%v, c %v-%v", a[0].StartedAt, a[0].CompletedAt,
			b[0].StartedAt, b[0].CompletedAt, c[0].StartedAt, c[0].CompletedAt)
	}
	branches := []string{a[0].Branch, b[0].Branch, c[0].Branch}
	if slices.Contains(branches, "") || len(slices.Compact(slices.Sorted(slices.Values(branches)))) != 3 {
		t.Errorf("branches of a, b, c = %v, want three different ones", branches)
	}
	join := visits(nodes, "join")
	if len(join) != 1 || join[0].Status != "success" {
		t.Fatalf("join visits = %+v, want one, success", join)
	}
	if total := visits(nodes, "total"); len(total) != 1 || total[0].Branch != "" {
		t.Errorf("total ran in branch %q after the join, want the one line again", total[0].Branch)
	}
	if !slices.Equal(wc.Path[:1], []string{"start"}) || wc.Path[len(wc.Path)-1] != "end" {
		t.Errorf("path = %v", wc.Path)
	}
}

func TestJoinAfterDecision(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: join-after-decision
nodes:
  - {id: start, type: start}
  - {id: fetch, type: action, code: "context['fetched'] = True"}
  - {id: classify, type: decision, code: "context['branch_decision'] = context['kind']"}
  - {id: check, type: action, code: "context['checked'] = True"}
  - {id: alert, type: action, code: "context['alerted'] = True"}
  - {id: join, type: join}
  - {id: report, type: action, code: "context['reported'] = True"}
  - {id: end, type: end}
edges:
  - {from: start, to: fetch}
  - {from: start, to: classify}
  - {from: classify, to: check, condition: ok}
  - {from: classify, to: alert, condition: flagged}
  - {from: check, to: join}
  - {from: alert, to: end}
  - {from: fetch, to: join}
  - {from: join, to: report}
  - {from: report, to: end}
`)
	t.Run("the decision's path reaches the join", func(t *testing.T) {
		wc := e.run(def, map[string]any{"kind": "ok"})
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" || got["checked"] != true || got["fetched"] != true || got["reported"] != true {
			t.Fatalf("status %q (%s), context %v; want succeeded with fetched, checked, reported", wc.Status, wc.Error, got)
		}
		if _, ok := got["branch_decision"]; ok {
			t.Errorf("branch_decision %v left after the join; it belongs to its branch", got["branch_decision"])
		}
	})
	t.Run("the decision's path leaves the join: it goes on with the others", func(t *testing.T) {
		wc := e.run(def, map[string]any{"kind": "flagged"})
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" {
			t.Fatalf("status %q: %s", wc.Status, wc.Error)
		}
		if got["alerted"] != true || got["fetched"] != true || got["reported"] != true || got["checked"] != nil {
			t.Errorf("context %v; want alerted, fetched and reported, not checked", got)
		}
		nodes := e.chain(wc.ExecutionId)
		if j := visits(nodes, "join"); len(j) != 1 {
			t.Errorf("join visits %d, want 1 (chain %v)", len(j), chainIDs(nodes))
		}
	})
}

func TestJoinMerge(t *testing.T) {
	e := startEnv(t)
	def := func(merge string) *novav1.WorkflowDefinition {
		y := `
name: merge
nodes:
  - {id: start, type: start}
  - {id: left, type: action, code: "context['total'] = 1\ncontext['left'] = True"}
  - {id: right, type: action, code: "import time\ntime.sleep(1.5)\ncontext['total'] = 2\ncontext['right'] = True"}
  - {id: join, type: join MERGE}
  - {id: end, type: end}
edges:
  - {from: start, to: left}
  - {from: start, to: right}
  - {from: left, to: join}
  - {from: right, to: join}
  - {from: join, to: end}
`
		m := ""
		if merge != "" {
			m = ", merge: " + merge
		}
		return parse(t, strings.Replace(y, " MERGE", m, 1))
	}
	t.Run("conflict fails naming the key and both branches", func(t *testing.T) {
		wc := e.run(def(""), map[string]any{})
		if wc.Status != "failed" {
			t.Fatalf("status %q, want failed", wc.Status)
		}
		mustContain(t, "error", wc.Error, `"total"`, `"left"`, `"right"`, "merge: last", `node "join" failed`)
		nodes := e.chain(wc.ExecutionId)
		if j := visits(nodes, "join"); len(j) != 1 || j[0].Status != "failed" {
			t.Errorf("join visits %+v, want one, failed", j)
		}
	})
	t.Run("merge: list keeps both, in arrival order", func(t *testing.T) {
		wc := e.run(def("list"), map[string]any{})
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" {
			t.Fatalf("status %q: %s", wc.Status, wc.Error)
		}
		if l, ok := got["total"].([]any); !ok || len(l) != 2 || l[0] != float64(1) || l[1] != float64(2) {
			t.Errorf("total = %v, want [1 2]", got["total"])
		}
		if got["left"] != true || got["right"] != true {
			t.Errorf("context %v lost a branch's own key", got)
		}
	})
	t.Run("merge: last takes the branch that came last", func(t *testing.T) {
		wc := e.run(def("last"), map[string]any{})
		if got := ctxMap(wc.Context); wc.Status != "succeeded" || got["total"] != float64(2) {
			t.Fatalf("status %q (%s), total %v; want succeeded, 2", wc.Status, wc.Error, got["total"])
		}
	})
}

func TestMap(t *testing.T) {
	e := startEnv(t)
	mapDef := func(policy string) *novav1.WorkflowDefinition {
		return parse(t, `
name: map-`+policy+`
nodes:
  - {id: start, type: start}
  - id: double
    type: map
    items: orders
    concurrency: 2
    output: doubled
    on_item_failure: `+policy+`
    code: |
      if context["item"] == 3:
          raise ValueError("no threes")
      context["result"] = {"index": context["index"], "value": context["item"] * 2, "has_orders": "orders" in context}
  - {id: end, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: end}
`)
	}
	t.Run("results in item order", func(t *testing.T) {
		wc := e.run(mapDef("fail"), map[string]any{"orders": []int{5, 1, 4, 2, 6}})
		if wc.Status != "succeeded" {
			t.Fatalf("status %q: %s", wc.Status, wc.Error)
		}
		got, _ := ctxMap(wc.Context)["doubled"].([]any)
		if len(got) != 5 {
			t.Fatalf("doubled = %v, want 5 results", ctxMap(wc.Context)["doubled"])
		}
		for i, want := range []float64{10, 2, 8, 4, 12} {
			r, _ := got[i].(map[string]any)
			if r["value"] != want || r["index"] != float64(i) || r["has_orders"] != false {
				t.Errorf("doubled[%d] = %v, want value %v, index %d, and no orders in the item's context", i, got[i], want, i)
			}
		}
		nodes := e.chain(wc.ExecutionId)
		items := visits(nodes, "double")
		if len(items) != 6 {
			t.Fatalf("visits of double = %d, want 5 items and the map's own", len(items))
		}
		seen := map[int]bool{}
		for _, n := range items {
			if n.Item != nil {
				seen[*n.Item] = true
				if n.Status != "success" || n.Visit != 1 || !strings.HasSuffix(n.ID, "#"+strconv.Itoa(*n.Item)) {
					t.Errorf("item %d: status %q, visit %d, id %q", *n.Item, n.Status, n.Visit, n.ID)
				}
			}
		}
		if len(seen) != 5 {
			t.Errorf("items found by index: %v, want 0..4", seen)
		}
	})
	t.Run("a failing item fails the map under on_item_failure fail", func(t *testing.T) {
		wc := e.run(mapDef("fail"), map[string]any{"orders": []int{1, 2, 3, 4}})
		if wc.Status != "failed" {
			t.Fatalf("status %q, want failed", wc.Status)
		}
		mustContain(t, "error", wc.Error, `node "double" failed`, "item 2 failed", "no threes")
	})
	t.Run("collect keeps each item's error", func(t *testing.T) {
		wc := e.run(mapDef("collect"), map[string]any{"orders": []int{1, 2, 3, 4}})
		if wc.Status != "succeeded" {
			t.Fatalf("status %q: %s", wc.Status, wc.Error)
		}
		got, _ := ctxMap(wc.Context)["doubled"].([]any)
		if len(got) != 4 {
			t.Fatalf("doubled = %v", got)
		}
		failed, _ := got[2].(map[string]any)
		if msg, _ := failed["error"].(string); !strings.Contains(msg, "no threes") {
			t.Errorf("doubled[2] = %v, want the item's error", got[2])
		}
		if ok, _ := got[3].(map[string]any); ok["value"] != float64(8) {
			t.Errorf("doubled[3] = %v, want value 8", got[3])
		}
		nodes := e.chain(wc.ExecutionId)
		for _, n := range visits(nodes, "double") {
			if n.Item != nil && *n.Item == 2 && n.Status != "failed" {
				t.Errorf("item 2's visit is %q, want failed", n.Status)
			}
		}
	})
	t.Run("an empty list", func(t *testing.T) {
		wc := e.run(mapDef("fail"), map[string]any{"orders": []int{}})
		if got, ok := ctxMap(wc.Context)["doubled"].([]any); wc.Status != "succeeded" || !ok || len(got) != 0 {
			t.Fatalf("status %q (%s), doubled %v; want succeeded, []", wc.Status, wc.Error, ctxMap(wc.Context)["doubled"])
		}
	})
	t.Run("items that are not a list", func(t *testing.T) {
		wc := e.run(mapDef("fail"), map[string]any{"orders": map[string]any{"a": 1}})
		if wc.Status != "failed" {
			t.Fatalf("status %q, want failed", wc.Status)
		}
		mustContain(t, "error", wc.Error, `items "orders"`, "want a list")
	})
}

func TestSubWorkflows(t *testing.T) {
	e := startEnv(t)
	child := parse(t, `
name: double-it
nodes:
  - {id: start, type: start}
  - {id: work, type: action, code: "if context['x'] < 0:\n    raise ValueError('negative x')\ncontext['x'] = context['x'] * 2"}
  - {id: end, type: end}
edges:
  - {from: start, to: work}
  - {from: work, to: end}
`)
	if err := e.client.Register(e.ctx, child); err != nil {
		t.Fatal(err)
	}
	parent := parse(t, `
name: parent
nodes:
  - {id: start, type: start}
  - {id: call, type: workflow, workflow: double-it, input: {x: n}, output: {doubled: x}}
  - {id: end, type: end}
edges:
  - {from: start, to: call}
  - {from: call, to: end}
`)
	t.Run("a child's result comes back", func(t *testing.T) {
		wc := e.run(parent, map[string]any{"n": 21})
		if got := ctxMap(wc.Context); wc.Status != "succeeded" || got["doubled"] != float64(42) {
			t.Fatalf("status %q (%s), context %v; want doubled 42", wc.Status, wc.Error, got)
		}
		nodes := e.chain(wc.ExecutionId)
		call := visits(nodes, "call")
		if len(call) != 1 || len(call[0].ChildExecutionIDs) != 1 {
			t.Fatalf("call visits %+v, want one naming its child", call)
		}
		childID := call[0].ChildExecutionIDs[0]
		st := e.state(childID)
		if st == nil || st.GetParent().GetExecutionId() != wc.ExecutionId || st.GetParent().GetNodeId() != "call" || st.Status != "succeeded" {
			t.Fatalf("child %s state: parent %v, status %q", childID, st.GetParent(), st.GetStatus())
		}
		e.auditIdle()
		doc, err := e.s.Store.Execution(e.ctx, childID)
		if err != nil {
			t.Fatal(err)
		}
		if doc.ParentExecutionID != wc.ExecutionId || doc.ParentNode != "call" {
			t.Errorf("child's audit document: parent %q node %q, want %s call", doc.ParentExecutionID, doc.ParentNode, wc.ExecutionId)
		}
	})
	t.Run("a failing child fails the node with its error", func(t *testing.T) {
		wc := e.run(parent, map[string]any{"n": -1})
		if wc.Status != "failed" {
			t.Fatalf("status %q, want failed", wc.Status)
		}
		mustContain(t, "error", wc.Error, `node "call" failed`, `sub-workflow "double-it"`, "negative x")
	})
	t.Run("a map over a sub-workflow", func(t *testing.T) {
		def := parse(t, `
name: map-children
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, workflow: double-it, input: {x: item}, output: out, concurrency: 3}
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`)
		wc := e.run(def, map[string]any{"xs": []int{1, 2, 3, 4}})
		if wc.Status != "succeeded" {
			t.Fatalf("status %q: %s", wc.Status, wc.Error)
		}
		out, _ := ctxMap(wc.Context)["out"].([]any)
		if len(out) != 4 {
			t.Fatalf("out = %v", ctxMap(wc.Context)["out"])
		}
		for i, r := range out {
			if m, _ := r.(map[string]any); m["x"] != float64(2*(i+1)) {
				t.Errorf("out[%d] = %v, want the child's final context with x %d", i, r, 2*(i+1))
			}
		}
	})
	t.Run("an unknown workflow fails the node that runs it", func(t *testing.T) {
		// Registration takes a workflow that runs one not registered yet
		// (mutually recursive workflows register in either order); the run
		// fails at the node, naming it.
		bad := parse(t, `
name: calls-nobody
nodes:
  - {id: start, type: start}
  - {id: call, type: workflow, workflow: not-there}
  - {id: end, type: end}
edges:
  - {from: start, to: call}
  - {from: call, to: end}
`)
		if err := e.client.Register(e.ctx, bad); err != nil {
			t.Fatal(err)
		}
		exec, err := e.client.Start(e.ctx, nil, "calls-nobody", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status != "failed" {
			t.Fatalf("status %q, want failed", wc.Status)
		}
		mustContain(t, "error", wc.Error, `node "call" failed`, `"not-there"`, "not registered")
	})
}

func TestCancelParentCancelsChildren(t *testing.T) {
	e := startEnv(t)
	child := parse(t, `
name: waits
nodes:
  - {id: start, type: start}
  - {id: approve, type: wait, signal: approve}
  - {id: end, type: end}
edges:
  - {from: start, to: approve}
  - {from: approve, to: end}
`)
	if err := e.client.Register(e.ctx, child); err != nil {
		t.Fatal(err)
	}
	parent := parse(t, `
name: parent-of-waits
nodes:
  - {id: start, type: start}
  - {id: call, type: workflow, workflow: waits}
  - {id: end, type: end}
edges:
  - {from: start, to: call}
  - {from: call, to: end}
`)
	exec, err := e.client.Start(e.ctx, parent, "", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	childID := exec.ID + "_call_1"
	e.waitingFor(childID, "approve", "signal")
	e.cancelExec(exec.ID, "no longer needed", "e2e")
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != "cancelled" {
		t.Fatalf("parent status %q, want cancelled", wc.Status)
	}
	e.eventually(testTimeout/3, "the child is cancelled", func() bool {
		st := e.state(childID)
		return st != nil && st.Status == "cancelled"
	})
	st := e.state(childID)
	mustContain(t, "child's cancel", st.CancelReason, exec.ID)
}

// A map over a list kept by reference (a large value): each item's
// context carries its item, not the list, and the results come back
// whole.
func TestMapOverLargeList(t *testing.T) {
	e := startEnv(t, func(o *stack.Options) { o.ValueThreshold = 1024 })
	def := parse(t, `
name: map-large
nodes:
  - {id: start, type: start}
  - id: each
    type: map
    items: docs
    concurrency: 4
    output: sizes
    code: |
      context["result"] = {"i": context["index"], "len": len(context["item"]), "keys": sorted(context.keys()), "echo": context["item"] * 10}
  - {id: end, type: end}
edges: [{from: start, to: each}, {from: each, to: end}]
`)
	docs := make([]string, 40)
	for i := range docs {
		docs[i] = strings.Repeat(string(rune('a'+i%26)), 100+i)
	}
	wc := e.run(def, map[string]any{"docs": docs})
	if wc.Status != "succeeded" {
		t.Fatalf("status %q: %s", wc.Status, wc.Error)
	}
	// The list went to the value store: the start event's context holds a
	// reference, not the list.
	st := e.state(wc.ExecutionId)
	if raw := string(st.GetContext().GetRaw()); !strings.Contains(raw, `"$ref"`) {
		t.Errorf("the state's context holds the list inline (%d bytes), want a reference", len(raw))
	}
	final := jsonvalue.MustObject(wc.Context)
	if err := e.values.Expand(e.ctx, final); err != nil {
		t.Fatal(err)
	}
	got, _ := ctxMap(final.Proto())["sizes"].([]any)
	if len(got) != len(docs) {
		t.Fatalf("sizes = %d results, want %d", len(got), len(docs))
	}
	for i, r := range got {
		m, _ := r.(map[string]any)
		keys, _ := m["keys"].([]any)
		if echo, _ := m["echo"].(string); echo != strings.Repeat(docs[i], 10) {
			t.Errorf("sizes[%d].echo is %d characters, want the item 10 times (%d): a result over the threshold, kept by reference, comes back whole", i, len(echo), 10*len(docs[i]))
		}
		if m["i"] != float64(i) || m["len"] != float64(100+i) || len(keys) != 2 || keys[0] != "index" || keys[1] != "item" {
			t.Errorf("sizes[%d] = %v, want index %d, length %d, and only item and index in the item's context", i, r, i, 100+i)
		}
	}
}

// A map whose items' results add up to more than a NATS message: the
// results are kept one per key while the map runs, not in the execution's
// state (which one write could no longer hold), and removed once it
// finishes.
func TestMapResultsLargerThanAMessage(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: map-large-results
nodes:
  - {id: start, type: start}
  - id: each
    type: map
    items: xs
    concurrency: 4
    output: ys
    code: |
      context["result"] = str(context["item"]) * 25000
  - {id: end, type: end}
edges: [{from: start, to: each}, {from: each, to: end}]
`)
	xs := make([]int, 50)
	for i := range xs {
		xs[i] = i % 10
	}
	wc := e.run(def, map[string]any{"xs": xs})
	if wc.Status != "succeeded" {
		t.Fatalf("status %q: %s", wc.Status, wc.Error)
	}
	final := jsonvalue.MustObject(wc.Context)
	if err := e.values.Expand(e.ctx, final); err != nil {
		t.Fatal(err)
	}
	got, _ := ctxMap(final.Proto())["ys"].([]any)
	if len(got) != len(xs) {
		t.Fatalf("ys = %d results, want %d", len(got), len(xs))
	}
	for i, r := range got {
		if s, _ := r.(string); s != strings.Repeat(strconv.Itoa(xs[i]), 25000) {
			t.Errorf("ys[%d] is %d characters, want %q 25000 times", i, len(s), strconv.Itoa(xs[i]))
		}
	}
	e.eventually(10*time.Second, "the map's results removed from "+engine.BucketMapResults, func() bool {
		return len(e.subjects("KV_"+engine.BucketMapResults, "$KV."+engine.BucketMapResults+"."+wc.ExecutionId+".>")) == 0
	})
}

// Two graph engines take one execution's events: a map's items and a
// fan-out's branches finish on either, their state updated with
// compare-and-set, and nothing is lost.
func TestBranchesAcrossEngineReplicas(t *testing.T) {
	e := startEnv(t, func(o *stack.Options) {
		o.Sandbox = stack.SandboxConfig(false)
		o.Sandbox.Workers = 8
	})
	b2, err := e.s.Connect(e.ctx, "engine-2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b2.Close)
	values, err := valueref.Open(e.ctx, b2.JetStream(), 0, 1)
	if err != nil {
		t.Fatal(err)
	}
	spans := tracetest.NewInMemoryExporter()
	second, err := engine.New(e.ctx, engine.Deps{Bus: b2, Values: values, Logger: slog.New(slog.DiscardHandler),
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans)), Config: engine.Config{Workers: 8}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(e.ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = second.Run(ctx) }()
	t.Cleanup(func() { stop(); <-done })

	def := parse(t, `
name: two-engines
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: 8, output: ys, code: 'context["result"] = context["item"] + 1'}
  - {id: side, type: action, code: 'context["side"] = True'}
  - {id: join, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: start, to: side}
  - {from: each, to: join}
  - {from: side, to: join}
  - {from: join, to: end}
`)
	xs := make([]int, 40)
	for i := range xs {
		xs[i] = i
	}
	var ids []string
	for range 2 {
		wc := e.run(def, map[string]any{"xs": xs})
		if wc.Status != "succeeded" {
			t.Fatalf("status %q: %s", wc.Status, wc.Error)
		}
		got := ctxMap(wc.Context)
		ys, _ := got["ys"].([]any)
		if len(ys) != len(xs) || got["side"] != true {
			t.Fatalf("ys %d results, side %v", len(ys), got["side"])
		}
		for i, y := range ys {
			if y != float64(i+1) {
				t.Errorf("ys[%d] = %v, want %d", i, y, i+1)
			}
		}
		ids = append(ids, wc.ExecutionId)
	}
	// The second replica applied some of their events.
	n := 0
	for _, s := range spans.GetSpans() {
		for _, a := range s.Attributes {
			if string(a.Key) == "execution.id" && slices.Contains(ids, a.Value.AsString()) {
				n++
			}
		}
	}
	if n == 0 {
		t.Error("the second engine applied none of the executions' events")
	}
	t.Logf("the second engine applied %d of the events", n)
}

func TestJoinWaitAnyAndLoops(t *testing.T) {
	e := startEnv(t)
	t.Run("wait: any goes on with the first branch", func(t *testing.T) {
		def := parse(t, `
name: race
nodes:
  - {id: start, type: start}
  - {id: fast, type: action, code: "context['winner'] = 'fast'"}
  - {id: slow, type: action, code: "import time\ntime.sleep(0.5)\ncontext['winner'] = 'slow'"}
  - {id: first, type: join, wait: any}
  - {id: after, type: action, code: "context['seen'] = context['winner']"}
  - {id: end, type: end}
edges:
  - {from: start, to: fast}
  - {from: start, to: slow}
  - {from: fast, to: first}
  - {from: slow, to: first}
  - {from: first, to: after}
  - {from: after, to: end}
`)
		wc := e.run(def, map[string]any{})
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" || got["seen"] != "fast" || got["winner"] != "fast" {
			t.Fatalf("status %q (%s), context %v; want the fast branch's context only", wc.Status, wc.Error, got)
		}
		nodes := e.chain(wc.ExecutionId)
		if j := visits(nodes, "first"); len(j) != 1 {
			t.Errorf("join visits %d, want 1: the slow branch ends at it", len(j))
		}
		if a := visits(nodes, "after"); len(a) != 1 {
			t.Errorf("after ran %d times, want once", len(a))
		}
	})
	t.Run("a fan-out inside a loop", func(t *testing.T) {
		def := parse(t, `
name: loop-fan-out
nodes:
  - {id: start, type: start}
  - {id: round, type: action, code: "context['round'] = context.get('round', 0) + 1"}
  - {id: a, type: action, code: "context['a'] = context.get('a', 0) + 1"}
  - {id: b, type: action, code: "context['b'] = context.get('b', 0) + 10"}
  - {id: join, type: join}
  - {id: again, type: decision, code: "context['branch_decision'] = 'yes' if context['round'] < 3 else 'no'"}
  - {id: end, type: end}
edges:
  - {from: start, to: round}
  - {from: round, to: a}
  - {from: round, to: b}
  - {from: a, to: join}
  - {from: b, to: join}
  - {from: join, to: again}
  - {from: again, to: round, condition: "yes"}
  - {from: again, to: end, condition: "no"}
`)
		wc := e.run(def, map[string]any{})
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" || got["round"] != float64(3) || got["a"] != float64(3) || got["b"] != float64(30) {
			t.Fatalf("status %q (%s), context %v; want three rounds of a and b", wc.Status, wc.Error, got)
		}
		nodes := e.chain(wc.ExecutionId)
		if j := visits(nodes, "join"); len(j) != 3 || j[2].Visit != 3 {
			t.Errorf("join visits %d, want 3", len(j))
		}
	})
	t.Run("max_visits counts a branch's visits", func(t *testing.T) {
		def := parse(t, `
name: loop-limit
nodes:
  - {id: start, type: start}
  - {id: a, type: action, max_visits: 2, code: "context['n'] = context.get('n', 0) + 1"}
  - {id: b, type: action, code: "pass"}
  - {id: join, type: join}
  - {id: more, type: decision, code: "context['branch_decision'] = 'yes'"}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: start, to: b}
  - {from: a, to: join}
  - {from: b, to: join}
  - {from: join, to: more}
  - {from: more, to: a, condition: "yes"}
  - {from: more, to: end, condition: "no"}
`)
		wc := e.run(def, map[string]any{})
		if wc.Status != "failed" {
			t.Fatalf("status %q, want failed", wc.Status)
		}
		mustContain(t, "error", wc.Error, `node "a" exceeded its maximum of 2 visits`)
	})
}

// A wait node in one branch takes its signal while another branch works;
// cancelling a forked execution ends every branch.
func TestSignalAndCancelInBranches(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: approve-while-working
nodes:
  - {id: start, type: start}
  - {id: approve, type: wait, signal: approve}
  - {id: work, type: action, code: "context['worked'] = True"}
  - {id: join, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: approve}
  - {from: start, to: work}
  - {from: approve, to: join}
  - {from: work, to: join}
  - {from: join, to: end}
`)
	t.Run("signal", func(t *testing.T) {
		exec, err := e.client.Start(e.ctx, def, "", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		e.waitingFor(exec.ID, "approve", "signal")
		e.eventually(testTimeout/3, "work is done", func() bool {
			st := e.state(exec.ID)
			return st != nil && len(execution.Parked(st)["join"]) == 1
		})
		e.signalExec(exec.ID, "approve", map[string]any{"approved": true})
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got := ctxMap(wc.Context); wc.Status != "succeeded" || got["approved"] != true || got["worked"] != true {
			t.Fatalf("status %q (%s), context %v", wc.Status, wc.Error, got)
		}
	})
	t.Run("cancel", func(t *testing.T) {
		exec, err := e.client.Start(e.ctx, def, "", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		e.waitingFor(exec.ID, "approve", "signal")
		e.cancelExec(exec.ID, "not needed", "e2e")
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status != "cancelled" {
			t.Fatalf("status %q, want cancelled", wc.Status)
		}
		// The engine publishes the end, then stores the state.
		var st *novav1.ExecutionState
		e.eventually(testTimeout/3, "the cancelled state is stored", func() bool {
			st = e.state(exec.ID)
			return st.GetStatus() == "cancelled"
		})
		if len(st.Branches) != 0 || len(st.Joins) != 0 || st.Timer != nil {
			t.Errorf("a cancelled execution keeps branches %v, joins %v", st.Branches, st.Joins)
		}
		nodes := e.chain(wc.ExecutionId)
		if a := visits(nodes, "approve"); len(a) != 1 || a[0].Status != "cancelled" {
			t.Errorf("approve's visit %+v, want cancelled", a)
		}
	})
}
