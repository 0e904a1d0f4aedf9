package workflow

import (
	"fmt"
	"math"
	"strings"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ValidateOptions are the deployment-dependent parts of validation.
type ValidateOptions struct {
	// AllowPrompt accepts AI nodes (nodes with a prompt). A deployment without
	// the code-generation pipeline leaves it false so such workflows fail
	// before they start rather than halfway through.
	AllowPrompt bool
}

// Validate checks that def is a runnable graph and returns a *ValidationError
// listing every problem found, or nil.
func Validate(def *novav1.WorkflowDefinition, opts ValidateOptions) error {
	if def == nil {
		return &ValidationError{Problems: []Problem{{Message: "workflow definition is missing"}}}
	}
	v := &validator{def: def, opts: opts, byID: map[string]*novav1.Node{}}
	v.workflow()
	v.nodes()
	v.edges()
	v.reachability()
	if len(v.problems) > 0 {
		return &ValidationError{Workflow: def.GetName(), Problems: v.problems}
	}
	return nil
}

type validator struct {
	def      *novav1.WorkflowDefinition
	opts     ValidateOptions
	problems []Problem

	byID   map[string]*novav1.Node
	order  []*novav1.Node // unique nodes with an id, in definition order
	starts []*novav1.Node
	// out holds the indexes of edges whose both ends exist, per source node.
	out map[string][]int
}

func (v *validator) add(nodeID, field, format string, args ...any) {
	v.problems = append(v.problems, Problem{NodeID: nodeID, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) workflow() {
	if strings.TrimSpace(v.def.GetName()) == "" {
		v.add("", "name", "is required")
	}
	if t := v.def.GetTimeoutSeconds(); !(t >= 0) { // also catches NaN
		v.add("", "timeout", "must not be negative, got %g", t)
	}
	if !validCacheValidate(v.def.GetCacheValidate()) {
		v.add("", "cache_validate", "must be rules or model, got %q", v.def.GetCacheValidate())
	}
	v.budget("", v.def.GetBudget())
	if len(v.def.GetNodes()) == 0 {
		v.add("", "nodes", "at least one node is required: a start node, the work, and an end node")
	}
}

func (v *validator) nodes() {
	ends := 0
	for i, n := range v.def.GetNodes() {
		id := n.GetId()
		if strings.TrimSpace(id) == "" {
			v.add("", fmt.Sprintf("nodes[%d].id", i), "is required")
			continue
		}
		if _, dup := v.byID[id]; dup {
			v.add(id, "id", "duplicate node id (nodes[%d]); node ids must be unique", i)
			continue
		}
		v.byID[id] = n
		v.order = append(v.order, n)
		v.node(n)
		switch n.GetType() {
		case novav1.NodeType_NODE_TYPE_START:
			v.starts = append(v.starts, n)
		case novav1.NodeType_NODE_TYPE_END:
			ends++
		}
	}
	if len(v.def.GetNodes()) == 0 {
		return // already reported; "no start node" would only repeat it
	}
	switch len(v.starts) {
	case 0:
		v.add("", "nodes", "no start node; exactly one node must have type start")
	case 1:
	default:
		v.add("", "nodes", "%d start nodes (%s); exactly one is allowed", len(v.starts), nodeList(v.starts))
	}
	if ends == 0 {
		v.add("", "nodes", "no end node; at least one node must have type end")
	}
}

func (v *validator) node(n *novav1.Node) {
	id := n.GetId()
	hasCode, hasPrompt := strings.TrimSpace(n.GetCode()) != "", strings.TrimSpace(n.GetPrompt()) != ""
	switch t := n.GetType(); t {
	case novav1.NodeType_NODE_TYPE_UNSPECIFIED:
		v.add(id, "type", "is required: start, action, decision or end")
	case novav1.NodeType_NODE_TYPE_START, novav1.NodeType_NODE_TYPE_END:
		if hasCode || hasPrompt {
			v.add(id, "", "%s node runs nothing, but it has code or a prompt; put the work in an action node", withArticle(t))
		}
	case novav1.NodeType_NODE_TYPE_ACTION, novav1.NodeType_NODE_TYPE_DECISION:
		switch {
		case hasCode && hasPrompt:
			v.add(id, "", "has both code and prompt; a node runs either code as written or a prompt (AI node), not both")
		case !hasCode && !hasPrompt:
			v.add(id, "", "has neither code nor prompt; %s node needs one of them", withArticle(t))
		}
	default:
		v.add(id, "type", "unknown node type %d", int32(t))
	}
	if hasPrompt && !v.opts.AllowPrompt {
		v.add(id, "prompt", "AI (prompt) nodes need a model, and this deployment has none: give the AI agents OPENAI_API_KEY or OPENAI_BASE_URL and set NOVA_ALLOW_PROMPT=true on the graph engine")
	}
	if t := n.GetTimeoutSeconds(); !(t >= 0) {
		v.add(id, "timeout", "must not be negative, got %g", t)
	}
	if n.GetMaxVisits() < 0 {
		v.add(id, "max_visits", "must not be negative, got %d", n.GetMaxVisits())
	}
	switch n.GetLanguage() {
	case "", "python", "javascript":
	default:
		v.add(id, "language", "must be python or javascript, got %q", n.GetLanguage())
	}
	if !validCacheValidate(n.GetCacheValidate()) {
		v.add(id, "cache_validate", "must be rules or model, got %q", n.GetCacheValidate())
	}
	v.budget(id, n.GetBudget())
}

// budget reports negative limits (and amounts that are not numbers, which a
// definition built in code rather than parsed may hold).
func (v *validator) budget(nodeID string, b *novav1.Budget) {
	if b == nil {
		return
	}
	for _, f := range []struct {
		name string
		usd  *float64
	}{{"max_usd", b.MaxUsd}, {"max_usd_per_day", b.MaxUsdPerDay}} {
		if f.usd == nil {
			continue
		}
		if x := *f.usd; !(x >= 0) || math.IsInf(x, 0) {
			v.add(nodeID, "budget."+f.name, "must be a number of US dollars, 0 or more, got %g", x)
		}
	}
	if b.MaxModelCalls != nil && *b.MaxModelCalls < 0 {
		v.add(nodeID, "budget.max_model_calls", "must be a whole number of calls, 0 or more, got %d", *b.MaxModelCalls)
	}
}

func (v *validator) edges() {
	v.out = map[string][]int{}
	for i, e := range v.def.GetEdges() {
		field := fmt.Sprintf("edges[%d]", i)
		ok := true
		for _, end := range []struct{ name, id, verb string }{{"from", e.GetFrom(), "starts at"}, {"to", e.GetTo(), "leads to"}} {
			switch {
			case end.id == "":
				v.add("", field+"."+end.name, "is required (edge %s -> %s)", orQ(e.GetFrom()), orQ(e.GetTo()))
				ok = false
			case v.byID[end.id] == nil:
				v.add("", field+"."+end.name, "edge %s -> %s %s unknown node %q", e.GetFrom(), e.GetTo(), end.verb, end.id)
				ok = false
			}
		}
		if ok {
			v.out[e.GetFrom()] = append(v.out[e.GetFrom()], i)
		}
	}

	edges := v.def.GetEdges()
	for _, n := range v.order {
		id, out := n.GetId(), v.out[n.GetId()]
		switch t := n.GetType(); t {
		case novav1.NodeType_NODE_TYPE_START, novav1.NodeType_NODE_TYPE_ACTION:
			switch {
			case len(out) == 0:
				v.add(id, "", "has no outgoing edge; %s node needs exactly one", withArticle(t))
			case len(out) > 1:
				v.add(id, "", "has %d outgoing edges (to %s); %s node has exactly one, use a decision node to branch",
					len(out), targets(edges, out), withArticle(t))
			}
			for _, i := range out {
				if c := edges[i].GetCondition(); c != "" {
					v.add(id, fmt.Sprintf("edges[%d].condition", i),
						"edge %s -> %s has condition %q; only edges leaving a decision node have conditions", id, edges[i].GetTo(), c)
				}
			}
		case novav1.NodeType_NODE_TYPE_DECISION:
			if len(out) == 0 {
				v.add(id, "", "decision node has no outgoing edges; add one edge per branch_decision value, each with a condition")
			}
			seen := map[string]string{}
			for _, i := range out {
				c, to := edges[i].GetCondition(), edges[i].GetTo()
				if c == "" {
					v.add(id, fmt.Sprintf("edges[%d].condition", i),
						"edge %s -> %s has no condition; every edge leaving a decision node needs one", id, to)
					continue
				}
				if prev, dup := seen[c]; dup {
					v.add(id, fmt.Sprintf("edges[%d].condition", i),
						"condition %q is used by more than one edge (to %s and to %s)", c, prev, to)
					continue
				}
				seen[c] = to
			}
		case novav1.NodeType_NODE_TYPE_END:
			if len(out) > 0 {
				v.add(id, "", "end node has outgoing edges (to %s); an end node finishes the execution", targets(edges, out))
			}
		}
	}
}

// reachability reports nodes no path from the start node leads to: they would
// never run, which is almost always a missing or misspelt edge.
func (v *validator) reachability() {
	if len(v.starts) != 1 {
		return // no single place to start from; already reported
	}
	start := v.starts[0].GetId()
	seen := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, i := range v.out[id] {
			if to := v.def.GetEdges()[i].GetTo(); !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	for _, n := range v.order {
		if !seen[n.GetId()] {
			v.add(n.GetId(), "", "unreachable: no path leads to it from start node %q", start)
		}
	}
}

func nodeList(nodes []*novav1.Node) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.GetId()
	}
	return strings.Join(ids, ", ")
}

func targets(edges []*novav1.Edge, idx []int) string {
	to := make([]string, len(idx))
	for i, j := range idx {
		to[i] = edges[j].GetTo()
	}
	return strings.Join(to, ", ")
}

// withArticle gives "a start", "an action", ...
func withArticle(t novav1.NodeType) string {
	name := TypeName(t)
	if strings.ContainsRune("aeiou", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}

func orQ(id string) string {
	if id == "" {
		return "?"
	}
	return id
}
