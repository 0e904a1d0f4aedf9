package workflow

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// DefaultMaxVisits bounds how often one node may run in an execution when the
// node does not say, so a loop that never exits fails instead of running forever.
const DefaultMaxVisits = 10

// Graph answers the engine's questions about a definition. Build it from a
// definition that passed Validate; it does not re-check the graph.
type Graph struct {
	def   *novav1.WorkflowDefinition
	nodes map[string]*novav1.Node
	out   map[string][]*novav1.Edge
	start *novav1.Node
}

// NewGraph indexes def. If def has duplicate node ids the first one wins.
func NewGraph(def *novav1.WorkflowDefinition) *Graph {
	g := &Graph{def: def, nodes: map[string]*novav1.Node{}, out: map[string][]*novav1.Edge{}}
	for _, n := range def.GetNodes() {
		if _, dup := g.nodes[n.GetId()]; dup {
			continue
		}
		g.nodes[n.GetId()] = n
		if g.start == nil && n.GetType() == novav1.NodeType_NODE_TYPE_START {
			g.start = n
		}
	}
	for _, e := range def.GetEdges() {
		g.out[e.GetFrom()] = append(g.out[e.GetFrom()], e)
	}
	return g
}

// Definition returns the definition the graph was built from.
func (g *Graph) Definition() *novav1.WorkflowDefinition { return g.def }

// Node returns the node with the given id, or nil.
func (g *Graph) Node(id string) *novav1.Node { return g.nodes[id] }

// Start returns the start node, or nil if the definition has none.
func (g *Graph) Start() *novav1.Node { return g.start }

// Outgoing returns the edges leaving id, in definition order.
func (g *Graph) Outgoing(id string) []*novav1.Edge { return slices.Clone(g.out[id]) }

// Next returns the node that follows a start, action or sleep node, or the
// node a wait node without decide_on leads to when its signal comes (its
// edge without condition; the timeout edge is TimeoutEdge's).
func (g *Graph) Next(id string) (string, error) {
	n := g.nodes[id]
	if n == nil {
		return "", fmt.Errorf("next after %q: %w", id, ErrUnknownNode)
	}
	switch n.GetType() {
	case novav1.NodeType_NODE_TYPE_START, novav1.NodeType_NODE_TYPE_ACTION, novav1.NodeType_NODE_TYPE_SLEEP, novav1.NodeType_NODE_TYPE_WAIT:
	default:
		return "", fmt.Errorf("next after %q: it is %s node; only start, action, wait and sleep nodes have a single next node", id, withArticle(n.GetType()))
	}
	out := g.branches(n)
	if len(out) != 1 || out[0].GetCondition() != "" {
		return "", fmt.Errorf("next after %q: want exactly one unconditional outgoing edge, have %d edges", id, len(out))
	}
	return out[0].GetTo(), nil
}

// Decide returns the node a decision node leads to for the given
// branch_decision value (see DecisionString), or the node a wait node with
// decide_on leads to for the value of that payload field. When no edge's
// condition equals decision the error is a *NoMatchingEdgeError listing the
// allowed values. A wait node's timeout edge is never decided on.
func (g *Graph) Decide(id string, decision string) (string, error) {
	n := g.nodes[id]
	if n == nil {
		return "", fmt.Errorf("decide at %q: %w", id, ErrUnknownNode)
	}
	switch n.GetType() {
	case novav1.NodeType_NODE_TYPE_DECISION, novav1.NodeType_NODE_TYPE_WAIT:
	default:
		return "", fmt.Errorf("decide at %q: it is %s node, not a decision or wait node", id, withArticle(n.GetType()))
	}
	var allowed []string
	for _, e := range g.branches(n) {
		if e.GetCondition() == decision {
			return e.GetTo(), nil
		}
		allowed = append(allowed, e.GetCondition())
	}
	slices.Sort(allowed)
	nerr := &NoMatchingEdgeError{NodeID: id, Value: decision, Allowed: slices.Compact(allowed)}
	if n.GetType() == novav1.NodeType_NODE_TYPE_WAIT {
		nerr.DecideOn = n.GetDecideOn()
	}
	return "", nerr
}

// TimeoutEdge returns the node wait node id leads to when its timeout passes
// before its signal comes: the target of its edge with condition "timeout".
// It reports false for a node without one, and for other nodes.
func (g *Graph) TimeoutEdge(id string) (string, bool) {
	if n := g.nodes[id]; n == nil || n.GetType() != novav1.NodeType_NODE_TYPE_WAIT {
		return "", false
	}
	for _, e := range g.out[id] {
		if e.GetCondition() == TimeoutCondition {
			return e.GetTo(), true
		}
	}
	return "", false
}

// branches are the edges leaving n that its outcome chooses between: all of
// them, less a wait node's timeout edge.
func (g *Graph) branches(n *novav1.Node) []*novav1.Edge {
	out := g.out[n.GetId()]
	if n.GetType() != novav1.NodeType_NODE_TYPE_WAIT {
		return out
	}
	return slices.DeleteFunc(slices.Clone(out), func(e *novav1.Edge) bool { return e.GetCondition() == TimeoutCondition })
}

// DecisionString turns a branch_decision value from the context into the
// string compared with edge conditions: strings as they are, booleans as
// "true"/"false", numbers in their shortest form (1500.0 becomes "1500").
// It reports false for nil and for values that are none of these.
func DecisionString(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		return v, true
	case bool:
		return strconv.FormatBool(v), true
	case int:
		return strconv.FormatInt(int64(v), 10), true
	case int8:
		return strconv.FormatInt(int64(v), 10), true
	case int16:
		return strconv.FormatInt(int64(v), 10), true
	case int32:
		return strconv.FormatInt(int64(v), 10), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case uint:
		return strconv.FormatUint(uint64(v), 10), true
	case uint8:
		return strconv.FormatUint(uint64(v), 10), true
	case uint16:
		return strconv.FormatUint(uint64(v), 10), true
	case uint32:
		return strconv.FormatUint(uint64(v), 10), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	case float32:
		return formatFloat(float64(v))
	case float64:
		return formatFloat(v)
	case json.Number:
		if i, err := v.Int64(); err == nil {
			return strconv.FormatInt(i, 10), true
		}
		if !strings.ContainsAny(string(v), ".eE") {
			return string(v), true // an integer beyond int64: its digits
		}
		f, err := v.Float64()
		if err != nil {
			return "", false
		}
		return formatFloat(f)
	default:
		return "", false
	}
}

func formatFloat(f float64) (string, bool) {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return "", false
	}
	return strconv.FormatFloat(f, 'f', -1, 64), true
}

// MaxVisits returns how often node may run in one execution.
func MaxVisits(node *novav1.Node) int {
	if m := node.GetMaxVisits(); m > 0 {
		return int(m)
	}
	return DefaultMaxVisits
}

// NodeTimeout returns the time node may run: its own timeout, else the
// workflow's, else fallback.
func NodeTimeout(def *novav1.WorkflowDefinition, node *novav1.Node, fallback time.Duration) time.Duration {
	for _, s := range []float64{node.GetTimeoutSeconds(), def.GetTimeoutSeconds()} {
		if s > 0 {
			return time.Duration(s * float64(time.Second))
		}
	}
	return fallback
}
