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
//
// A Graph is not safe for concurrent use: CanReach keeps what it computes
// in the Graph. Use each Graph from one goroutine (the engine builds one
// per transition).
type Graph struct {
	def   *novav1.WorkflowDefinition
	nodes map[string]*novav1.Node
	out   map[string][]*novav1.Edge
	in    map[string][]*novav1.Edge
	start *novav1.Node
	// reach holds, per node CanReach was asked about, the nodes a path of
	// one or more edges leads to from it.
	reach map[string]map[string]bool
}

// NewGraph indexes def. If def has duplicate node ids the first one wins.
func NewGraph(def *novav1.WorkflowDefinition) *Graph {
	g := &Graph{def: def, nodes: map[string]*novav1.Node{}, out: map[string][]*novav1.Edge{}, in: map[string][]*novav1.Edge{}}
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
		g.in[e.GetTo()] = append(g.in[e.GetTo()], e)
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

// Incoming returns the edges leading to id, in definition order.
func (g *Graph) Incoming(id string) []*novav1.Edge { return slices.Clone(g.in[id]) }

// Next returns the node that follows a start, action, sleep, join, map or
// workflow node, or the node a wait node without decide_on leads to when its
// signal comes (its edge without condition; the timeout edge is
// TimeoutEdge's), for callers that want exactly one: a node that fans out to
// several is an error, and Targets gives them.
func (g *Graph) Next(id string) (string, error) {
	n := g.nodes[id]
	if n == nil {
		return "", fmt.Errorf("next after %q: %w", id, ErrUnknownNode)
	}
	if !hasTargets(n.GetType()) {
		return "", fmt.Errorf("next after %q: it is %s node; only start, action, wait, sleep, join, map and workflow nodes have a single next node", id, withArticle(n.GetType()))
	}
	out := g.branches(n)
	if len(out) != 1 || out[0].GetCondition() != "" {
		if len(out) > 1 && !slices.ContainsFunc(out, func(e *novav1.Edge) bool { return e.GetCondition() != "" }) {
			return "", fmt.Errorf("next after %q: it has %d outgoing edges, whose targets run at once; use Targets", id, len(out))
		}
		return "", fmt.Errorf("next after %q: want exactly one unconditional outgoing edge, have %d edges", id, len(out))
	}
	return out[0].GetTo(), nil
}

// Targets returns the nodes that follow a start, action, sleep, join, map or
// workflow node, or a wait node without decide_on when its signal comes: the
// targets of its edges without condition (a wait node's timeout edge is
// TimeoutEdge's), in definition order. They all run at once. There is at
// least one; a node without is an error, as are decision nodes and wait
// nodes with decide_on (see Decide) and end nodes.
func (g *Graph) Targets(id string) ([]string, error) {
	n := g.nodes[id]
	if n == nil {
		return nil, fmt.Errorf("targets of %q: %w", id, ErrUnknownNode)
	}
	switch t := n.GetType(); {
	case t == novav1.NodeType_NODE_TYPE_WAIT && n.GetDecideOn() != "":
		return nil, fmt.Errorf("targets of %q: it is a wait node deciding on %q; its signal's payload chooses one edge (Decide)", id, n.GetDecideOn())
	case !hasTargets(t):
		return nil, fmt.Errorf("targets of %q: it is %s node; only start, action, sleep, join, map and workflow nodes and wait nodes without decide_on have targets", id, withArticle(t))
	}
	var to []string
	for _, e := range g.out[id] {
		if e.GetCondition() == "" {
			to = append(to, e.GetTo())
		}
	}
	if len(to) == 0 {
		return nil, fmt.Errorf("targets of %q: it has no outgoing edge without condition", id)
	}
	return to, nil
}

// How many sub-workflow calls deep an execution may run (Node.max_depth):
// a workflow may call itself, or one that calls it back, within it.
const (
	DefaultCallDepth = 10
	MaxCallDepth     = 100
)

// CallDepth is the max_depth of workflow (or map) node n.
func CallDepth(n *novav1.Node) int {
	if d := n.GetMaxDepth(); d > 0 {
		return int(d)
	}
	return DefaultCallDepth
}

// WaitsForSignal tells whether a wait node of def waits for signal name.
func WaitsForSignal(def *novav1.WorkflowDefinition, name string) bool {
	for _, n := range def.GetNodes() {
		if n.GetType() == novav1.NodeType_NODE_TYPE_WAIT && n.GetSignal() == name && name != "" {
			return true
		}
	}
	return false
}

// BoundarySignal tells whether a boundary event of a node of def takes
// signal name.
func BoundarySignal(def *novav1.WorkflowDefinition, name string) bool {
	for _, n := range def.GetNodes() {
		for _, b := range n.GetOn() {
			if name != "" && b.GetSignal() == name {
				return true
			}
		}
	}
	return false
}

// Defaults of what a running execution keeps of the signals no wait node
// takes yet (SignalKeep).
const (
	DefaultSignalKeep    = 100
	DefaultSignalKeepFor = time.Hour
	// MaxSignalKeep bounds keep.
	MaxSignalKeep = 10000
)

// SignalKeepLimits are how many signals an execution of def keeps, and for
// how long.
func SignalKeepLimits(def *novav1.WorkflowDefinition) (int, time.Duration) {
	n, d := DefaultSignalKeep, DefaultSignalKeepFor
	if k := def.GetSignals(); k != nil {
		if k.Keep > 0 {
			n = int(k.Keep)
		}
		if k.KeepForSeconds > 0 {
			d = secondsDuration(k.KeepForSeconds)
		}
	}
	return n, d
}

// DecideMany returns the targets of the edges a decision node with choose:
// many picks: one for each value of values (read as DecisionString reads
// it), each target once, in the order given; decisions are the values as
// strings. An empty list, a value that is no string, boolean or number,
// and one that matches no edge are errors naming the node.
func (g *Graph) DecideMany(id string, values []any) (decisions, targets []string, err error) {
	if len(values) == 0 {
		var allowed []string
		if n := g.nodes[id]; n != nil {
			for _, e := range g.branches(n) {
				allowed = append(allowed, fmt.Sprintf("%q", e.GetCondition()))
			}
		}
		slices.Sort(allowed)
		return nil, nil, fmt.Errorf("decision node %q: branch_decision is an empty list; with choose: many it names at least one edge (allowed: %s)",
			id, strings.Join(slices.Compact(allowed), ", "))
	}
	for i, v := range values {
		s, ok := DecisionString(v)
		if !ok {
			return nil, nil, fmt.Errorf("decision node %q: branch_decision[%d] must be a string, boolean or number, got %T", id, i, v)
		}
		to, err := g.Decide(id, s)
		if err != nil {
			return nil, nil, err
		}
		decisions = append(decisions, s)
		if !slices.Contains(targets, to) {
			targets = append(targets, to)
		}
	}
	return decisions, targets, nil
}

// hasTargets: nodes of type t go on along their edges without condition
// (a wait node's without decide_on; Targets tells those apart).
func hasTargets(t novav1.NodeType) bool {
	k := KindOf(t)
	return k != nil && (k.Edges == EdgesPlain || k.Edges == EdgesWait)
}

// CanReach reports whether a path of one or more edges, whatever their
// conditions, leads from node from to node to (so from reaches itself only
// through a cycle). The nodes reachable from from are computed the first
// time it is asked about and kept in g.
func (g *Graph) CanReach(from, to string) bool {
	r, ok := g.reach[from]
	if !ok {
		r = map[string]bool{}
		queue := []string{from}
		for len(queue) > 0 {
			id := queue[0]
			queue = queue[1:]
			for _, e := range g.out[id] {
				if next := e.GetTo(); !r[next] {
					r[next] = true
					queue = append(queue, next)
				}
			}
			for _, b := range g.nodes[id].GetOn() {
				// A boundary event of the node leads to its goto.
				if next := b.GetGoto(); !r[next] && g.nodes[next] != nil {
					r[next] = true
					queue = append(queue, next)
				}
			}
		}
		if g.reach == nil {
			g.reach = map[string]map[string]bool{}
		}
		g.reach[from] = r
	}
	return r[to]
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

// The values of a join node's wait besides a number of branches.
const (
	// JoinWaitAll waits for every incoming branch (the default).
	JoinWaitAll = "all"
	// JoinWaitAny goes on when the first branch arrives.
	JoinWaitAny = "any"
)

const joinWaitList = "all, any or a whole number of branches (at least 1)"

// JoinWait returns how many arrivals join node n waits for: 0 for all of its
// incoming branches (the default), 1 for "any", else the number it names.
func JoinWait(n *novav1.Node) int {
	switch w := n.GetWait(); w {
	case "", JoinWaitAll:
		return 0
	case JoinWaitAny:
		return 1
	default:
		if c, ok := branchCount(w); ok {
			return c
		}
		return 0
	}
}

// What a join node does with a context key that two branches both changed
// (Node.merge).
const (
	// MergeError fails the execution, naming the key and both branches (the
	// default).
	MergeError = "error"
	// MergeLast keeps the value of the branch that arrived last.
	MergeLast = "last"
	// MergeList makes the key the list of the values, in the order the
	// branches arrived.
	MergeList = "list"
)

var mergeModes = []string{MergeError, MergeLast, MergeList}

// MapNoWait is a map node's wait when it is false: the line goes on at
// once, and the items run on a line of their own, whose results reach the
// chain of work but not the context.
const MapNoWait = "false"

// How many edges a decision node picks (Node.choose).
const (
	// ChooseOne: branch_decision is one edge condition (the default).
	ChooseOne = "one"
	// ChooseMany: branch_decision may be a list of edge conditions; each
	// chosen edge starts a line of its own.
	ChooseMany = "many"
)

var chooseModes = []string{ChooseOne, ChooseMany}

const chooseList = "one or many"

const mergeList = "error, last or list"

// JoinMerge returns join node n's merge mode: MergeError, MergeLast or
// MergeList (MergeError when unset).
func JoinMerge(n *novav1.Node) string {
	if m := n.GetMerge(); m != "" {
		return m
	}
	return MergeError
}

// What a map node does when one of its items fails (Node.on_item_failure).
const (
	// OnItemFailureFail fails the node at the first failing item (the
	// default).
	OnItemFailureFail = "fail"
	// OnItemFailureCollect runs every item; a failed one's result is
	// {"error": ...}.
	OnItemFailureCollect = "collect"
)

var onItemFailures = []string{OnItemFailureFail, OnItemFailureCollect}

const onItemFailureList = "fail or collect"

// MapOnItemFailure returns map node n's on_item_failure: OnItemFailureFail
// or OnItemFailureCollect (OnItemFailureFail when unset).
func MapOnItemFailure(n *novav1.Node) string {
	if f := n.GetOnItemFailure(); f != "" {
		return f
	}
	return OnItemFailureFail
}

const (
	// DefaultMapConcurrency is how many items a map node runs at once when
	// it does not say.
	DefaultMapConcurrency = 4
	// MaxMapConcurrency is the most items a map node may run at once.
	MaxMapConcurrency = 1000
	// DefaultMapOutput is the context key that gets a map node's results
	// when it does not name one.
	DefaultMapOutput = "results"
)

var concurrencyRule = fmt.Sprintf("must be a whole number from 1 to %d (how many items run at once; leave it out for %d)", MaxMapConcurrency, DefaultMapConcurrency)

// MapConcurrency returns how many items map node n runs at once.
func MapConcurrency(n *novav1.Node) int {
	if c := n.GetConcurrency(); c > 0 {
		return int(c)
	}
	return DefaultMapConcurrency
}

// MapOutput returns the context key that gets the list of map node n's
// results.
func MapOutput(n *novav1.Node) string {
	if o := n.GetOutput(); o != "" {
		return o
	}
	return DefaultMapOutput
}
