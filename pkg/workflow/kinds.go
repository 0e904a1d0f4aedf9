package workflow

import (
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Kind is one node type in the table every part of NOVA reads it from: how
// users write it, what it runs, the fields only it has, how its edges go on
// and its own checks. Adding a node type is an entry here (and a file of
// its behaviour in the graph engine, behind its registry).
type Kind struct {
	Type novav1.NodeType
	// Name is how users write the type ("decision").
	Name string
	// Runs is what the node runs.
	Runs Runs
	// Fields are the fields only nodes of this type (and the others that
	// list them) have; a node of another type that sets one is refused.
	Fields []string
	// Edges is how the node goes on.
	Edges EdgeRule
	// Check checks the fields of a node of this type; nil when it has none.
	Check func(v *validator, n *novav1.Node)
}

// Runs is what a node runs.
type Runs int

const (
	// RunsNothing: the node runs no code (start, end, wait, sleep, join).
	RunsNothing Runs = iota
	// RunsCode: code as written or a prompt (an AI node), one of them.
	RunsCode
	// RunsBody: one body per item, code, prompt or workflow (Check says).
	RunsBody
	// RunsWorkflow: the registered workflow it names.
	RunsWorkflow
)

// EdgeRule is how a node goes on along its edges.
type EdgeRule int

const (
	// EdgesPlain: every edge without condition runs at once (one or
	// several: a fork); a join has exactly one.
	EdgesPlain EdgeRule = iota
	// EdgesDecide: one edge, picked by condition.
	EdgesDecide
	// EdgesWait: plain edges, or one per decide_on value, and a timeout edge.
	EdgesWait
	// EdgesNone: the line ends there.
	EdgesNone
)

// kinds is the table of node types, in the order users read them.
var kinds = []Kind{
	{Type: novav1.NodeType_NODE_TYPE_START, Name: "start", Runs: RunsNothing, Edges: EdgesPlain},
	{Type: novav1.NodeType_NODE_TYPE_ACTION, Name: "action", Runs: RunsCode, Edges: EdgesPlain, Fields: []string{"on", "lock"}},
	{Type: novav1.NodeType_NODE_TYPE_DECISION, Name: "decision", Runs: RunsCode, Edges: EdgesDecide,
		Fields: []string{"choose", "on", "lock"}},
	{Type: novav1.NodeType_NODE_TYPE_WAIT, Name: "wait", Runs: RunsNothing, Edges: EdgesWait,
		Fields: []string{"signal", "schema", "decide_on", "on", "lock"}, Check: (*validator).waitFields},
	{Type: novav1.NodeType_NODE_TYPE_SLEEP, Name: "sleep", Runs: RunsNothing, Edges: EdgesPlain,
		Fields: []string{"duration", "until", "on", "lock"}, Check: (*validator).sleepFields},
	{Type: novav1.NodeType_NODE_TYPE_JOIN, Name: "join", Runs: RunsNothing, Edges: EdgesPlain,
		Fields: []string{"wait", "merge", "cancel_remaining"}, Check: (*validator).joinFields},
	{Type: novav1.NodeType_NODE_TYPE_MAP, Name: "map", Runs: RunsBody, Edges: EdgesPlain,
		Fields: []string{"items", "concurrency", "on_item_failure", "workflow", "input", "complete_when", "max_depth", "on", "lock", "wait"}, Check: (*validator).mapFields},
	{Type: novav1.NodeType_NODE_TYPE_WORKFLOW, Name: "workflow", Runs: RunsWorkflow, Edges: EdgesPlain,
		Fields: []string{"workflow", "input", "max_depth", "on", "lock"}, Check: (*validator).workflowFields},
	{Type: novav1.NodeType_NODE_TYPE_END, Name: "end", Runs: RunsNothing, Edges: EdgesNone,
		Fields: []string{"terminate"}},
}

// KindOf is node type t's entry, nil for a type the table lacks.
func KindOf(t novav1.NodeType) *Kind {
	for i := range kinds {
		if kinds[i].Type == t {
			return &kinds[i]
		}
	}
	return nil
}

// Kinds are the node types, in the order users read them.
func Kinds() []Kind { return kinds }

// fieldSet tells whether node n sets the type-specific field named name.
var fieldSet = map[string]func(n *novav1.Node) bool{
	"signal":           func(n *novav1.Node) bool { return n.GetSignal() != "" },
	"schema":           func(n *novav1.Node) bool { return n.GetSchema() != "" },
	"decide_on":        func(n *novav1.Node) bool { return n.GetDecideOn() != "" },
	"duration":         func(n *novav1.Node) bool { return n.GetDurationSeconds() != 0 },
	"until":            func(n *novav1.Node) bool { return n.GetUntil() != "" },
	"wait":             func(n *novav1.Node) bool { return n.GetWait() != "" },
	"merge":            func(n *novav1.Node) bool { return n.GetMerge() != "" },
	"items":            func(n *novav1.Node) bool { return n.GetItems() != "" },
	"concurrency":      func(n *novav1.Node) bool { return n.GetConcurrency() != 0 },
	"on_item_failure":  func(n *novav1.Node) bool { return n.GetOnItemFailure() != "" },
	"workflow":         func(n *novav1.Node) bool { return n.GetWorkflow() != "" },
	"input":            func(n *novav1.Node) bool { return len(n.GetInput()) > 0 },
	"choose":           func(n *novav1.Node) bool { return n.GetChoose() != "" },
	"cancel_remaining": func(n *novav1.Node) bool { return n.GetCancelRemaining() },
	"terminate":        func(n *novav1.Node) bool { return n.GetTerminate() },
	"complete_when":    func(n *novav1.Node) bool { return n.GetCompleteWhen() != nil },
	"max_depth":        func(n *novav1.Node) bool { return n.GetMaxDepth() != 0 },
	"on":               func(n *novav1.Node) bool { return len(n.GetOn()) > 0 },
	"lock":             func(n *novav1.Node) bool { return n.GetLock() != "" },
}
