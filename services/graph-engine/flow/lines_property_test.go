package flow

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The property of the lines of control: a workflow of forks and joins
// (nested, behind decisions, inside loops) run with its sandbox results
// arriving in any order ends the same way every time: the same status, and
// on success the same final context and the same visits; a conflict of two
// branches' writes is found in every order.

// effect is what the sandbox "runs" for a node: keys it sets, and for a
// decision the edge it takes, computed from the context it gets.
type effect struct {
	set    map[string]any
	incr   string
	decide func(ctx jsonvalue.Object) string
}

// shapes builds random block-structured workflows.
type shapes struct {
	r       *rand.Rand
	nodes   []*novav1.Node
	edges   []*novav1.Edge
	effects map[string]effect
	n       int
	// shared writes collide when two branches set one to different values.
	shared bool
}

func (g *shapes) node(prefix string, typ novav1.NodeType) string {
	g.n++
	id := fmt.Sprintf("%s%d", prefix, g.n)
	n := &novav1.Node{Id: id, Type: typ}
	if typ == novav1.NodeType_NODE_TYPE_ACTION || typ == novav1.NodeType_NODE_TYPE_DECISION {
		n.Code = "pass"
	}
	g.nodes = append(g.nodes, n)
	return id
}

func (g *shapes) edge(from, to, cond string) {
	g.edges = append(g.edges, &novav1.Edge{From: from, To: to, Condition: cond})
}

// block adds a block of nodes and returns where it is entered and left.
func (g *shapes) block(depth int) (entry, exit string) {
	kind := g.r.IntN(5)
	if depth >= 3 {
		kind = 0
	}
	switch kind {
	case 0: // an action
		id := g.node("a", novav1.NodeType_NODE_TYPE_ACTION)
		e := effect{set: map[string]any{"k_" + id: g.n}}
		if g.shared && g.r.IntN(4) == 0 {
			e.set[fmt.Sprintf("s%d", g.r.IntN(2))] = g.r.IntN(3)
		}
		if g.shared && g.r.IntN(3) == 0 {
			e.set["last"] = id
		}
		g.effects[id] = e
		return id, id
	case 1: // two blocks in a row
		e1, x1 := g.block(depth + 1)
		e2, x2 := g.block(depth + 1)
		g.edge(x1, e2, "")
		return e1, x2
	case 2: // a fork into 2 or 3 blocks and their join
		fork := g.node("f", novav1.NodeType_NODE_TYPE_ACTION)
		g.effects[fork] = effect{set: map[string]any{"k_" + fork: g.n}}
		join := g.node("j", novav1.NodeType_NODE_TYPE_JOIN)
		for range 2 + g.r.IntN(2) {
			e, x := g.block(depth + 1)
			g.edge(fork, e, "")
			g.edge(x, join, "")
		}
		return fork, join
	case 3: // a decision between 2 blocks that meet again
		d := g.node("d", novav1.NodeType_NODE_TYPE_DECISION)
		g.effects[d] = effect{decide: func(ctx jsonvalue.Object) string { return fmt.Sprintf("c%d", len(ctx)%2) }}
		m := g.node("m", novav1.NodeType_NODE_TYPE_ACTION)
		g.effects[m] = effect{}
		for i := range 2 {
			e, x := g.block(depth + 1)
			g.edge(d, e, fmt.Sprintf("c%d", i))
			g.edge(x, m, "")
		}
		return d, m
	default: // a block run twice
		counter := g.node("l", novav1.NodeType_NODE_TYPE_ACTION)
		key := "round_" + counter
		g.effects[counter] = effect{incr: key}
		e, x := g.block(depth + 1)
		again := g.node("ld", novav1.NodeType_NODE_TYPE_DECISION)
		g.effects[again] = effect{decide: func(ctx jsonvalue.Object) string {
			if string(ctx[key]) == "1" {
				return "again"
			}
			return "out"
		}}
		out := g.node("lo", novav1.NodeType_NODE_TYPE_ACTION)
		g.effects[out] = effect{}
		g.edge(counter, e, "")
		g.edge(x, again, "")
		g.edge(again, counter, "again")
		g.edge(again, out, "out")
		return counter, out
	}
}

// randomWorkflow is a valid workflow of random blocks between a start and
// an end node.
func randomWorkflow(t *testing.T, seed uint64, shared bool) (*novav1.WorkflowDefinition, map[string]effect) {
	g := &shapes{r: rand.New(rand.NewPCG(seed, 7)), effects: map[string]effect{}, shared: shared}
	start := g.node("start", novav1.NodeType_NODE_TYPE_START)
	e, x := g.block(0)
	end := g.node("end", novav1.NodeType_NODE_TYPE_END)
	g.edge(start, e, "")
	g.edge(x, end, "")
	def := &novav1.WorkflowDefinition{Name: fmt.Sprintf("random-%d", seed), Nodes: g.nodes, Edges: g.edges}
	for _, n := range def.Nodes {
		n.MaxVisits = 100
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
		t.Fatalf("seed %d: generated an invalid workflow: %v", seed, err)
	}
	return def, g.effects
}

// outcome is how one run of a workflow ended.
type outcome struct {
	status, err, context string
	visits               []string
}

// runInOrder runs def, answering the sandbox's commands in the order r
// picks from those pending.
func runInOrder(t *testing.T, def *novav1.WorkflowDefinition, effects map[string]effect, r *rand.Rand) outcome {
	t.Helper()
	cfg := testConfig()
	st := &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: jsonvalue.Object{}.Proto(),
		StartedAt: tsNow(time.Now())}
	var pending []*novav1.ExecuteCode
	var visits []string
	collect := func(tr *Transition) {
		for _, o := range tr.out {
			switch m := o.Msg.(type) {
			case *novav1.ExecuteCode:
				pending = append(pending, m)
			case *novav1.NodeCompleted:
				if m.Status == nodeSuccess {
					visits = append(visits, m.NodeId)
				}
			}
		}
	}
	tr := New(st, cfg, time.Now())
	startIn(tr)
	collect(tr)
	for steps := 0; st.Status == statusRunning; steps++ {
		if len(pending) == 0 || steps > 10000 {
			t.Fatalf("%s: running with nothing pending after %d steps (lines %v, joins %v)", def.Name, steps, st.Branches, st.Joins)
		}
		i := r.IntN(len(pending))
		cmd := pending[i]
		pending = slices.Delete(pending, i, i+1)
		ctx := jsonvalue.MustObject(cmd.Context)
		updates := map[string]any{}
		eff := effects[cmd.NodeId]
		for k, v := range eff.set {
			updates[k] = v
		}
		if eff.incr != "" {
			n := 0
			_ = json.Unmarshal(ctx[eff.incr], &n)
			updates[eff.incr] = n + 1
		}
		if eff.decide != nil {
			updates[branchDecision] = eff.decide(ctx)
		}
		u, _ := jsonvalue.ObjectOf(updates)
		res := &novav1.CodeExecuted{ExecutionId: cmd.ExecutionId, NodeId: cmd.NodeId, StepId: cmd.StepId, Sequence: cmd.Sequence,
			Status: nodeSuccess, ContextUpdates: u.Proto()}
		tr := New(st, cfg, time.Now())
		if err := tr.OnStep(cmd.StepId, func() error { return tr.CodeExecuted(res) }); err != nil {
			t.Fatalf("%s: result of %s: %v", def.Name, cmd.StepId, err)
		}
		tr.Settle()
		collect(tr)
	}
	final := jsonvalue.MustObject(st.Context)
	delete(final, branchDecision)
	slices.Sort(visits)
	return outcome{status: st.Status, err: st.Error, context: string(final.Bytes()), visits: visits}
}

func TestLinesPropertyEveryArrivalOrder(t *testing.T) {
	const graphs, orders = 300, 12
	runs, conflicts, forks := 0, 0, 0
	for seed := range uint64(graphs) {
		def, effects := randomWorkflow(t, seed, seed%3 == 0)
		for _, n := range def.Nodes {
			if n.Type == novav1.NodeType_NODE_TYPE_JOIN {
				forks++
			}
		}
		var first outcome
		for o := range orders {
			got := runInOrder(t, def, effects, rand.New(rand.NewPCG(seed, uint64(o))))
			runs++
			if o == 0 {
				first = got
				if got.status == statusFailed {
					conflicts++
				}
				continue
			}
			if got.status != first.status {
				t.Fatalf("%s order %d: %s (%s), order 0: %s (%s)", def.Name, o, got.status, got.err, first.status, first.err)
			}
			if got.status == statusFailed {
				if !strings.Contains(got.err, "both changed context key") {
					t.Fatalf("%s order %d failed with %q, want a conflict of two branches", def.Name, o, got.err)
				}
				continue
			}
			if got.context != first.context {
				t.Fatalf("%s order %d: final context %s, order 0: %s", def.Name, o, got.context, first.context)
			}
			if !slices.Equal(got.visits, first.visits) {
				t.Fatalf("%s order %d: visits %v, order 0: %v", def.Name, o, got.visits, first.visits)
			}
		}
		if first.status == statusFailed && !strings.Contains(first.err, "both changed context key") {
			t.Fatalf("%s failed with %q, want success or a conflict of two branches", def.Name, first.err)
		}
		if first.status != statusSucceeded && seed%3 != 0 {
			// Each key written by one node only: no two branches can conflict,
			// whatever the nesting.
			t.Fatalf("%s, whose keys each have one writer, ended %s: %s", def.Name, first.status, first.err)
		}
	}
	t.Logf("%d random workflows (%d joins in all), %d arrival orders each: %d runs, %d workflows ending in the same conflict in every order",
		graphs, forks, orders, runs, conflicts)
}
