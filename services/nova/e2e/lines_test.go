package e2e

import (
	"fmt"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/workflow"
)

// Lines of control composed as real workflows compose them: nested forks,
// joins in loops, joins on one cycle, maps that fail and branches that
// fail while others run.

// nestedForks is the shape whose merge used to depend on arrival order: s1
// sets k=1 and forks into a and s2; s2 sets k=2 and m=1 and forks into b1
// and b2; a, b1 and b2 meet at one join. aSleep and bSleep set which
// arrives last.
func nestedForks(name string, aSleep, bSleep float64) string {
	return fmt.Sprintf(`
name: %s
nodes:
  - {id: start, type: start}
  - {id: s1, type: action, code: "context['k'] = 1"}
  - {id: a, type: action, code: "import time\ntime.sleep(%v)\ncontext['a_done'] = True"}
  - {id: s2, type: action, code: "context['k'] = 2\ncontext['m'] = 1"}
  - {id: b1, type: action, code: "import time\ntime.sleep(%v)"}
  - {id: b2, type: action, code: "import time\ntime.sleep(%v)"}
  - {id: join, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: s1}
  - {from: s1, to: a}
  - {from: s1, to: s2}
  - {from: s2, to: b1}
  - {from: s2, to: b2}
  - {from: a, to: join}
  - {from: b1, to: join}
  - {from: b2, to: join}
  - {from: join, to: end}
`, name, aSleep, bSleep, bSleep)
}

func TestNestedForksMergeInEveryArrivalOrder(t *testing.T) {
	e := startEnv(t)
	for _, order := range []struct {
		name           string
		aSleep, bSleep float64
	}{{"a-arrives-last", 0.8, 0}, {"a-arrives-first", 0, 0.8}} {
		t.Run(order.name, func(t *testing.T) {
			wc := e.run(parse(t, nestedForks("nested-"+order.name, order.aSleep, order.bSleep)), map[string]any{})
			if wc.Status != "succeeded" {
				t.Fatalf("status %q: %s", wc.Status, wc.Error)
			}
			got := ctxMap(wc.Context)
			if got["k"] != 2.0 || got["m"] != 1.0 || got["a_done"] != true {
				t.Errorf("context %v, want k 2 and m 1 (s2's writes, made after its branches parted from a) and a_done", got)
			}
		})
	}
	t.Run("map-body-that-forks", func(t *testing.T) {
		child := parse(t, nestedForks("nested-child", 0.2, 0))
		if err := e.client.Register(e.ctx, child); err != nil {
			t.Fatal(err)
		}
		wc := e.run(parse(t, `
name: nested-map
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, workflow: nested-child, concurrency: 3}
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`), map[string]any{"xs": []any{1, 2, 3}})
		if wc.Status != "succeeded" {
			t.Fatalf("status %q: %s", wc.Status, wc.Error)
		}
		results, _ := ctxMap(wc.Context)["results"].([]any)
		if len(results) != 3 {
			t.Fatalf("results %v, want 3", ctxMap(wc.Context)["results"])
		}
		for i, r := range results {
			m, _ := r.(map[string]any)
			if m["k"] != 2.0 || m["m"] != 1.0 {
				t.Errorf("item %d's result %v, want k 2 and m 1", i, r)
			}
		}
	})
}

// joinInLoop runs two rounds of a fork whose branches meet at a join that
// waits for fewer than all of them; one branch is slow enough that round
// 1's copy arrives during round 2.
func joinInLoop(name, wait string, branches int) string {
	var nodes, edges strings.Builder
	for i := range branches {
		sleep := 0.0
		if i == branches-1 {
			sleep = 1.2
		}
		fmt.Fprintf(&nodes, "  - {id: w%d, type: action, code: \"import time\\ntime.sleep(%v)\\ncontext['w%d'] = context['round']\"}\n", i, sleep, i)
		fmt.Fprintf(&edges, "  - {from: fork, to: w%d}\n  - {from: w%d, to: join}\n", i, i)
	}
	return fmt.Sprintf(`
name: %s
nodes:
  - {id: start, type: start}
  - {id: fork, type: action, code: "context['round'] = context.get('round', 0) + 1"}
%s  - {id: join, type: join, wait: %s, merge: last}
  - {id: again, type: decision, code: "context['fired'] = context.get('fired', 0) + 1\ncontext['branch_decision'] = 'again' if context['round'] < 2 else 'done'"}
  - {id: done, type: end}
edges:
  - {from: start, to: fork}
%s  - {from: join, to: again}
  - {from: again, to: fork, condition: again}
  - {from: again, to: done, condition: done}
`, name, nodes.String(), wait, edges.String())
}

func TestJoinsThatWaitForFewerInALoop(t *testing.T) {
	e := startEnv(t)
	for _, tc := range []struct {
		wait     string
		branches int
	}{{"any", 2}, {"2", 3}} {
		t.Run("wait-"+tc.wait, func(t *testing.T) {
			wc := e.run(parse(t, joinInLoop("loop-join-"+tc.wait, tc.wait, tc.branches)), map[string]any{})
			if wc.Status != "succeeded" {
				t.Fatalf("status %q: %s", wc.Status, wc.Error)
			}
			got := ctxMap(wc.Context)
			if got["round"] != 2.0 || got["fired"] != 2.0 {
				t.Errorf("context %v: want 2 rounds and the join fired twice", got)
			}
			nodes := e.chain(wc.ExecutionId)
			if n := len(visits(nodes, "join")); n != 2 {
				t.Errorf("join visits %d, want 2 (chain %v)", n, chainIDs(nodes))
			}
			if n := len(visits(nodes, "fork")); n != 2 {
				t.Errorf("fork visits %d, want 2", n)
			}
		})
	}
}

func TestJoinsWaitingForEachOtherAreRefused(t *testing.T) {
	e := startEnv(t)
	// J -> K -> d -> J, with p -> J and q -> K: each join would wait for
	// the line parked at the other.
	def, err := workflow.Parse([]byte(`
name: two-joins-one-cycle
nodes:
  - {id: start, type: start}
  - {id: p, type: action, code: "context['p'] = True"}
  - {id: q, type: action, code: "context['q'] = True"}
  - {id: J, type: join}
  - {id: K, type: join}
  - {id: d, type: decision, code: "context['branch_decision'] = 'back' if not context.get('p') else 'out'"}
  - {id: end, type: end}
edges:
  - {from: start, to: p}
  - {from: start, to: q}
  - {from: p, to: J}
  - {from: q, to: K}
  - {from: J, to: K}
  - {from: K, to: d}
  - {from: d, to: J, condition: back}
  - {from: d, to: end, condition: out}
`))
	if err != nil {
		t.Fatal(err)
	}
	// Refused before anything runs, and at registration.
	if wc, err := e.client.Run(e.ctx, def, map[string]any{}); err != nil {
		mustContain(t, "client's refusal", err.Error(), `joins "J" and "K" wait for each other`, `node "start"`)
	} else if wc.Status != "failed" {
		t.Fatalf("status %q, want failed before anything ran", wc.Status)
	} else {
		mustContain(t, "the engine's refusal", wc.Error, `joins "J" and "K" wait for each other`, `node "start"`)
		if len(wc.Path) != 0 {
			t.Errorf("path %v, want nothing run", wc.Path)
		}
	}
	if err := e.client.Register(e.ctx, def); err == nil {
		t.Fatal("registered; want it refused")
	} else {
		mustContain(t, "registration's refusal", err.Error(), `joins "J" and "K" wait for each other`)
	}
}

func TestFailingMapClosesItsItems(t *testing.T) {
	e := startEnv(t)
	orders := make([]any, 20)
	for i := range orders {
		orders[i] = map[string]any{"id": i}
	}
	wc := e.run(parse(t, `
name: failing-map
nodes:
  - {id: start, type: start}
  - id: each
    type: map
    items: orders
    concurrency: 4
    code: |
      import time
      if context['index'] == 13:
          raise ValueError('item 13 is broken')
      time.sleep(1.5 if context['index'] > 13 else 0.05)
      context['result'] = context['item']['id']
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`), map[string]any{"orders": orders})
	if wc.Status != "failed" {
		t.Fatalf("status %q, want failed", wc.Status)
	}
	got := ctxMap(wc.Context)
	if _, ok := got["orders"]; !ok {
		t.Errorf("final context %v: want the execution's (with orders), not an item's", got)
	}
	if _, ok := got["index"]; ok {
		t.Errorf("final context %v has an item's index", got)
	}
	e.auditIdle()
	nodes := e.chain(wc.ExecutionId)
	cancelled := 0
	for _, n := range visits(nodes, "each") {
		switch n.Status {
		case "success", "failed":
		case "cancelled":
			cancelled++
			mustContain(t, "cancelled item's error", n.ErrorMessage, "item 13 failed")
		default:
			t.Errorf("visit %s of the map is %q after the execution ended", n.ID, n.Status)
		}
	}
	if cancelled == 0 {
		t.Errorf("no item was cancelled; items running when item 13 failed should be (chain %v)", chainIDs(nodes))
	}
	if s := summaries(wc)["each"]; s == nil || s.Status != "failed" {
		t.Errorf("the map's summary %v, want failed", s)
	}
}

func TestBranchThatFailsClosesItsSiblings(t *testing.T) {
	e := startEnv(t)
	wc := e.run(parse(t, `
name: sibling-fails
nodes:
  - {id: start, type: start}
  - {id: broken, type: action, code: "raise RuntimeError('no')"}
  - {id: nap, type: sleep, duration: 30s}
  - {id: end, type: end}
edges:
  - {from: start, to: broken}
  - {from: start, to: nap}
  - {from: broken, to: end}
  - {from: nap, to: end}
`), map[string]any{})
	if wc.Status != "failed" {
		t.Fatalf("status %q, want failed", wc.Status)
	}
	if s := summaries(wc)["nap"]; s == nil || s.Status != "cancelled" {
		t.Errorf("the sleep's summary %v, want cancelled", s)
	}
	e.auditIdle()
	nodes := e.chain(wc.ExecutionId)
	nap := visits(nodes, "nap")
	if len(nap) != 1 || nap[0].Status != "cancelled" {
		t.Fatalf("visits of nap %+v, want one, cancelled (chain %v)", nap, chainIDs(nodes))
	}
	mustContain(t, "the sleep's reason", nap[0].ErrorMessage, `node "broken" failed`)
}
