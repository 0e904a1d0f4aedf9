package workflow_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// parallelYAML fans out to a map node and a workflow node, joins them, and
// runs a sub-workflow for each item.
const parallelYAML = `
name: orders
nodes:
  - {id: start, type: start}
  - id: fetch
    type: action
    code: context["orders"] = [1, 2, 3]
  - id: each
    type: map
    items: orders
    concurrency: 8
    output: totals
    on_item_failure: Collect
    code: context["result"] = context["item"] * 2
  - id: notify
    type: workflow
    workflow: notify-team
    input: {message: summary, who: owner}
    output: {notified: sent}
  - {id: both, type: join, wait: all, merge: LIST}
  - {id: audit, type: MapNode, items: orders, workflow: audit-order}
  - {id: done, type: end}
edges:
  - {from: start, to: fetch}
  - {from: fetch, to: each}
  - {from: fetch, to: notify}
  - {from: each, to: both}
  - {from: notify, to: both}
  - {from: both, to: audit}
  - {from: audit, to: done}
`

const parallelJSON = `{
  "name": "orders",
  "nodes": [
    {"id": "start", "type": "start"},
    {"id": "fetch", "type": "action", "code": "context[\"orders\"] = [1, 2, 3]"},
    {"id": "each", "type": "map", "items": "orders", "concurrency": 8, "output": "totals", "on_item_failure": "collect",
     "code": "context[\"result\"] = context[\"item\"] * 2"},
    {"id": "notify", "type": "workflow", "workflow": "notify-team", "input": {"who": "owner", "message": "summary"},
     "output": {"notified": "sent"}},
    {"id": "both", "type": "join", "wait": "all", "merge": "list"},
    {"id": "audit", "type": "map", "items": "orders", "workflow": "audit-order"},
    {"id": "done", "type": "end"}
  ],
  "edges": [
    {"from": "start", "to": "fetch"}, {"from": "fetch", "to": "each"}, {"from": "fetch", "to": "notify"},
    {"from": "each", "to": "both"}, {"from": "notify", "to": "both"}, {"from": "both", "to": "audit"},
    {"from": "audit", "to": "done"}
  ]
}`

func TestParseParallel(t *testing.T) {
	def := mustParse(t, parallelYAML)
	want := &novav1.WorkflowDefinition{
		Name: "orders",
		Nodes: []*novav1.Node{
			{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
			{Id: "fetch", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: `context["orders"] = [1, 2, 3]`},
			{Id: "each", Type: novav1.NodeType_NODE_TYPE_MAP, Items: "orders", Concurrency: 8, Output: "totals",
				OnItemFailure: "collect", Code: `context["result"] = context["item"] * 2`},
			{Id: "notify", Type: novav1.NodeType_NODE_TYPE_WORKFLOW, Workflow: "notify-team",
				Input: map[string]string{"message": "summary", "who": "owner"}, OutputKeys: map[string]string{"notified": "sent"}},
			{Id: "both", Type: novav1.NodeType_NODE_TYPE_JOIN, Wait: "all", Merge: "list"},
			{Id: "audit", Type: novav1.NodeType_NODE_TYPE_MAP, Items: "orders", Workflow: "audit-order"},
			{Id: "done", Type: novav1.NodeType_NODE_TYPE_END},
		},
		Edges: []*novav1.Edge{
			{From: "start", To: "fetch"}, {From: "fetch", To: "each"}, {From: "fetch", To: "notify"},
			{From: "each", To: "both"}, {From: "notify", To: "both"}, {From: "both", To: "audit"},
			{From: "audit", To: "done"},
		},
	}
	if !proto.Equal(def, want) {
		t.Errorf("Parse(yaml) =\n%v\nwant\n%v", def, want)
	}
	if fromJSON := mustParse(t, parallelJSON); !proto.Equal(fromJSON, def) {
		t.Errorf("YAML and JSON differ:\nyaml: %v\njson: %v", def, fromJSON)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if got := workflow.WorkflowRefs(def); !slices.Equal(got, []string{"audit-order", "notify-team"}) {
		t.Errorf("WorkflowRefs = %q, want [audit-order notify-team]", got)
	}
}

func TestParseNodeTypesJoinMapWorkflow(t *testing.T) {
	for in, want := range map[string]novav1.NodeType{
		"join": novav1.NodeType_NODE_TYPE_JOIN, "JoinNode": novav1.NodeType_NODE_TYPE_JOIN,
		"map": novav1.NodeType_NODE_TYPE_MAP, " Map_Node ": novav1.NodeType_NODE_TYPE_MAP,
		"workflow": novav1.NodeType_NODE_TYPE_WORKFLOW, "WorkflowNode": novav1.NodeType_NODE_TYPE_WORKFLOW,
		"fork": novav1.NodeType_NODE_TYPE_UNSPECIFIED,
	} {
		if got := workflow.ParseNodeType(in); got != want {
			t.Errorf("ParseNodeType(%q) = %v, want %v", in, got, want)
		}
	}
	for _, tt := range []struct {
		t    novav1.NodeType
		name string
	}{{novav1.NodeType_NODE_TYPE_JOIN, "join"}, {novav1.NodeType_NODE_TYPE_MAP, "map"}, {novav1.NodeType_NODE_TYPE_WORKFLOW, "workflow"}} {
		if got := workflow.TypeName(tt.t); got != tt.name {
			t.Errorf("TypeName(%v) = %q, want %q", tt.t, got, tt.name)
		}
	}
}

func TestParseJoinWait(t *testing.T) {
	for in, want := range map[string]string{
		`2`: "2", `"02"`: "2", `" 3 "`: "3", `2.0`: "2", `1e1`: "10", `+4`: "4",
		`all`: "all", `" ANY "`: "any", `All`: "all", `""`: "", `null`: "",
	} {
		def, err := workflow.Parse([]byte("name: w\nnodes:\n  - {id: j, type: join, wait: " + in + "}\n"))
		if err != nil {
			t.Errorf("wait: %s: %v", in, err)
			continue
		}
		if got := def.GetNodes()[0].GetWait(); got != want {
			t.Errorf("wait: %s is stored as %q, want %q", in, got, want)
		}
	}
	for in, kind := range map[string]string{
		`0`: "number 0", `-1`: "number -1", `1.5`: "number 1.5", `some`: `string "some"`, `"0"`: `string "0"`,
		`true`: "boolean true", `[2]`: "a list", `3000000000`: "number 3000000000",
		`"2.0"`: `string "2.0"`, `nan`: `string "nan"`, `"0x1p3"`: `string "0x1p3"`,
	} {
		_, err := workflow.Parse([]byte("name: w\nnodes:\n  - {id: j, type: join, wait: " + in + "}\n"))
		want := workflow.Problem{NodeID: "j", Field: "wait", Message: "must be all, any or a whole number of branches (at least 1), got " + kind}
		var verr *workflow.ValidationError
		if !errors.As(err, &verr) || !slices.Contains(verr.Problems, want) {
			t.Errorf("wait: %s: error %v, want a problem %+v", in, err, want)
		}
	}
}

func TestParseParallelFieldErrors(t *testing.T) {
	const (
		joinNode     = "name: w\nnodes:\n  - {id: a, type: join, "
		mapNode      = "name: w\nnodes:\n  - {id: a, type: map, "
		workflowNode = "name: w\nnodes:\n  - {id: a, type: workflow, "
	)
	tests := []struct {
		name string
		src  string
		want workflow.Problem
	}{
		{"type close to join", "name: w\nnodes:\n  - {id: a, type: jion}\n",
			workflow.Problem{NodeID: "a", Field: "type", Message: `unknown node type "jion"; did you mean "join"? (use start, action, decision, wait, sleep, join, map, workflow or end)`}},
		{"merge misspelt", joinNode + "merge: lst}\n",
			workflow.Problem{NodeID: "a", Field: "merge", Message: `must be error, last or list, got string "lst"; did you mean "last"?`}},
		{"merge a number", joinNode + "merge: 1}\n",
			workflow.Problem{NodeID: "a", Field: "merge", Message: `must be error, last or list, got number 1`}},
		{"on_item_failure unknown", mapNode + "on_item_failure: skip}\n",
			workflow.Problem{NodeID: "a", Field: "on_item_failure", Message: `must be fail or collect, got string "skip"`}},
		{"on_item_failure a boolean", mapNode + "on_item_failure: true}\n",
			workflow.Problem{NodeID: "a", Field: "on_item_failure", Message: `must be fail or collect, got boolean true`}},
		{"concurrency 0", mapNode + "concurrency: 0}\n",
			workflow.Problem{NodeID: "a", Field: "concurrency", Message: "must be a whole number from 1 to 1000 (how many items run at once; leave it out for 4), got 0"}},
		{"concurrency 1001", mapNode + "concurrency: 1001}\n",
			workflow.Problem{NodeID: "a", Field: "concurrency", Message: "must be a whole number from 1 to 1000 (how many items run at once; leave it out for 4), got 1001"}},
		{"concurrency a string", mapNode + "concurrency: \"4\"}\n",
			workflow.Problem{NodeID: "a", Field: "concurrency", Message: `must be a whole number, got string "4"`}},
		{"items a number", mapNode + "items: 3}\n",
			workflow.Problem{NodeID: "a", Field: "items", Message: "must be a string, got number 3"}},
		{"map output a mapping", mapNode + "output: {a: b}}\n",
			workflow.Problem{NodeID: "a", Field: "output", Message: "must be a string: the context key that gets the list of the items' results (default results), got a mapping"}},
		{"workflow output a string", workflowNode + "output: sent}\n",
			workflow.Problem{NodeID: "a", Field: "output", Message: `must be a mapping of parent context key: child context key, got string "sent"`}},
		{"workflow output value a number", workflowNode + "output: {sent: 1}}\n",
			workflow.Problem{NodeID: "a", Field: "output.sent", Message: "must be a string (a mapping of parent context key: child context key), got number 1"}},
		{"input a list", workflowNode + "input: [a]}\n",
			workflow.Problem{NodeID: "a", Field: "input", Message: "must be a mapping of child context key: parent context key, got a list"}},
		{"input value null", workflowNode + "input: {a: null}}\n",
			workflow.Problem{NodeID: "a", Field: "input.a", Message: "must be a string (a mapping of child context key: parent context key), got null"}},
		{"workflow a number", workflowNode + "workflow: 7}\n",
			workflow.Problem{NodeID: "a", Field: "workflow", Message: "must be a string, got number 7"}},
		{"output a list on an action node", "name: w\nnodes:\n  - {id: a, type: action, output: [x]}\n",
			workflow.Problem{NodeID: "a", Field: "output", Message: "must be a string (a map node's context key for its results) or a mapping of parent context key: child context key (a workflow node's), got a list"}},
		{"field misspelt", mapNode + "on_item_failur: fail}\n",
			workflow.Problem{NodeID: "a", Field: "on_item_failur", Message: `unknown field; did you mean "on_item_failure"? (known fields: id, type, description, code, prompt, executor, model, timeout, max_visits, language, network, allow_hosts, cache, cache_validate, budget, retry, signal, schema, decide_on, duration, until, wait, merge, items, concurrency, output, on_item_failure, workflow, input, terminate, cancel_remaining, choose, complete_when, max_depth, on, lock)`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := workflow.Parse([]byte(tt.src))
			var verr *workflow.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse error = %v, want *ValidationError", err)
			}
			if !slices.Contains(verr.Problems, tt.want) {
				t.Errorf("no problem %+v in\n%v", tt.want, err)
			}
		})
	}

	// Outside map and workflow nodes output is kept as written, for
	// Validate to report.
	def := mustParse(t, "name: w\nnodes:\n  - {id: a, type: action, output: x}\n  - {id: b, output: {p: c}}\n")
	if got := def.GetNodes()[0].GetOutput(); got != "x" {
		t.Errorf("action output = %q, want x", got)
	}
	if got := def.GetNodes()[1].GetOutputKeys(); len(got) != 1 || got["p"] != "c" {
		t.Errorf("untyped node's output keys = %v, want p: c", got)
	}
}

func TestValidateParallel(t *testing.T) {
	node := func(def *novav1.WorkflowDefinition, id string) *novav1.Node {
		for _, n := range def.GetNodes() {
			if n.GetId() == id {
				return n
			}
		}
		t.Fatalf("no node %q", id)
		return nil
	}
	const concurrency = "must be a whole number from 1 to 1000 (how many items run at once; leave it out for 4)"
	tests := []struct {
		name        string
		edit        func(def *novav1.WorkflowDefinition)
		allowPrompt bool
		want        []string // Problem.String() of each problem, in order
	}{
		{"valid", func(*novav1.WorkflowDefinition) {}, false, nil},

		// Fan-out.
		{"start, map and workflow nodes fan out", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges,
				&novav1.Edge{From: "start", To: "audit"},
				&novav1.Edge{From: "each", To: "done"},
				&novav1.Edge{From: "notify", To: "audit"},
				&novav1.Edge{From: "audit", To: "both"})
		}, false, nil},
		{"fan-out twice to one node", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges, &novav1.Edge{From: "fetch", To: "each"})
		}, false, []string{`node "fetch": has 2 edges to each (edges[1], edges[7]); the branches leaving a node lead to different nodes: remove the repeated edge`}},
		{"map edge with a condition", func(def *novav1.WorkflowDefinition) { def.Edges[3].Condition = "timeout" },
			false, []string{`node "each", field "edges[3].condition": edge each -> both has condition "timeout"; only a wait node with a timeout has a timeout edge`}},
		{"workflow node without outgoing edge", func(def *novav1.WorkflowDefinition) { def.Edges[4].From = "fetch" },
			false, []string{`node "notify": has no outgoing edge; a workflow node needs one (or several, whose targets run at once)`}},

		// Join.
		{"join with one incoming edge", func(def *novav1.WorkflowDefinition) { def.Edges[4].To = "audit" },
			false, []string{`node "both": join node "both" has 1 incoming edge; a join waits for several branches: give it at least two`}},
		{"join with two outgoing edges", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges, &novav1.Edge{From: "both", To: "done"})
		}, false, []string{`node "both": has 2 outgoing edges (to audit, done); a join node has exactly one: the branches it merges go on as one`}},
		{"join without outgoing edge", func(def *novav1.WorkflowDefinition) { def.Edges[5].From = "each" },
			false, []string{`node "both": has no outgoing edge; a join node needs exactly one`}},
		{"join edge with a condition", func(def *novav1.WorkflowDefinition) { def.Edges[5].Condition = "ok" },
			false, []string{`node "both", field "edges[5].condition": edge both -> audit has condition "ok"; only edges leaving a decision or wait node have conditions`}},
		{"join with code", func(def *novav1.WorkflowDefinition) { node(def, "both").Code = "pass" },
			false, []string{`node "both": a join node runs nothing, but it has code or a prompt; put the work in an action node`}},
		{"join waiting for more branches than it has", func(def *novav1.WorkflowDefinition) { node(def, "both").Wait = "3" },
			false, []string{`node "both", field "wait": join node "both" waits for 3 branches, but 2 edges lead to it; wait must be all, any or a number from 1 to 2`}},
		{"join waiting for one branch of one", func(def *novav1.WorkflowDefinition) {
			def.Edges[4].To = "audit"
			node(def, "both").Wait = "2"
		}, false, []string{
			`node "both": join node "both" has 1 incoming edge; a join waits for several branches: give it at least two`,
			`node "both", field "wait": join node "both" waits for 2 branches, but 1 edge leads to it; wait must be all, any or a number from 1 to 1`,
		}},
		{"join waiting for 2 of 2", func(def *novav1.WorkflowDefinition) { node(def, "both").Wait = "2" }, false, nil},
		{"join waiting for any", func(def *novav1.WorkflowDefinition) { node(def, "both").Wait = "any" }, false, nil},
		{"join wait unknown", func(def *novav1.WorkflowDefinition) { node(def, "both").Wait = "most" },
			false, []string{`node "both", field "wait": must be all, any or a whole number of branches (at least 1), got "most"`}},
		{"join merge unknown", func(def *novav1.WorkflowDefinition) { node(def, "both").Merge = "first" },
			false, []string{`node "both", field "merge": must be error, last or list, got "first"`}},

		// Map.
		{"map without items", func(def *novav1.WorkflowDefinition) { node(def, "each").Items = " " },
			false, []string{`node "each", field "items": map node "each" needs items: the context key of the list it runs over`}},
		{"map without body", func(def *novav1.WorkflowDefinition) { node(def, "each").Code = "" },
			false, []string{`node "each": map node "each" has no body; give it code, prompt or workflow: what runs for each item`}},
		{"map with code and workflow", func(def *novav1.WorkflowDefinition) { node(def, "each").Workflow = "audit-order" },
			false, []string{`node "each": map node "each" has both code and workflow; a map node runs one body for each item: code, prompt or workflow, not several`}},
		{"map with three bodies", func(def *novav1.WorkflowDefinition) {
			n := node(def, "each")
			n.Prompt, n.Workflow = "Double the item", "audit-order"
		}, true, []string{`node "each": map node "each" has code, prompt and workflow; a map node runs one body for each item: code, prompt or workflow, not several`}},
		{"map with a prompt", func(def *novav1.WorkflowDefinition) {
			n := node(def, "each")
			n.Code, n.Prompt = "", "Double the item"
		}, true, nil},
		{"map with a prompt where prompts are not allowed", func(def *novav1.WorkflowDefinition) {
			n := node(def, "each")
			n.Code, n.Prompt = "", "Double the item"
		}, false, []string{`node "each", field "prompt": AI (prompt) nodes need a model, and this deployment has none: give the AI agents OPENAI_API_KEY or OPENAI_BASE_URL and set NOVA_ALLOW_PROMPT=true on the graph engine`}},
		{"map concurrency too high", func(def *novav1.WorkflowDefinition) { node(def, "each").Concurrency = 1001 },
			false, []string{`node "each", field "concurrency": ` + concurrency + `, got 1001`}},
		{"map concurrency negative", func(def *novav1.WorkflowDefinition) { node(def, "each").Concurrency = -1 },
			false, []string{`node "each", field "concurrency": ` + concurrency + `, got -1`}},
		{"map concurrency 1000", func(def *novav1.WorkflowDefinition) { node(def, "each").Concurrency = 1000 }, false, nil},
		{"map on_item_failure unknown", func(def *novav1.WorkflowDefinition) { node(def, "each").OnItemFailure = "skip" },
			false, []string{`node "each", field "on_item_failure": must be fail or collect, got "skip"`}},
		{"map running the workflow it is in (recursion, bounded at run time)", func(def *novav1.WorkflowDefinition) { node(def, "audit").Workflow = "orders" },
			false, nil},
		{"max_depth out of range", func(def *novav1.WorkflowDefinition) { node(def, "notify").MaxDepth = 101 },
			false, []string{`node "notify", field "max_depth": must be from 0 (the default, 10) to 100 sub-workflow calls deep, got 101`}},
		{"max_depth on a map of code", func(def *novav1.WorkflowDefinition) { node(def, "each").MaxDepth = 3 },
			false, []string{`node "each", field "max_depth": bounds the sub-workflow calls of a workflow body; map node "each" runs code or a prompt`}},
		{"map with retry", func(def *novav1.WorkflowDefinition) { node(def, "each").Retry = &novav1.RetryPolicy{MaxAttempts: 2} },
			false, []string{`node "each", field "retry": retry applies to action nodes and to decision nodes with code, not to a map node's items; set on_item_failure: collect to run every item whatever fails`}},
		{"map output a mapping", func(def *novav1.WorkflowDefinition) { node(def, "each").OutputKeys = map[string]string{"a": "b"} },
			false, []string{`node "each", field "output": a map node's output is the context key that gets its results, not a mapping; only a workflow node's output maps keys`}},

		// Workflow.
		{"workflow node without workflow", func(def *novav1.WorkflowDefinition) { node(def, "notify").Workflow = "" },
			false, []string{`node "notify", field "workflow": workflow node "notify" needs workflow: the name of the registered workflow it runs`}},
		{"workflow node calling itself (recursion, bounded at run time)", func(def *novav1.WorkflowDefinition) { node(def, "notify").Workflow = "orders" },
			false, nil},
		{"workflow node with code", func(def *novav1.WorkflowDefinition) { node(def, "notify").Code = "pass" },
			false, []string{`node "notify": a workflow node runs the workflow it names, but it has code or a prompt; put the work in an action node`}},
		{"workflow node with empty keys", func(def *novav1.WorkflowDefinition) {
			n := node(def, "notify")
			n.Input[""] = "x"
			n.OutputKeys["a"] = " "
		}, false, []string{
			`node "notify", field "input": maps child key "" to parent key "x"; input maps child context keys to parent context keys, and neither may be empty`,
			`node "notify", field "output": maps parent key "a" to child key " "; output maps parent context keys to child context keys, and neither may be empty`,
		}},
		{"workflow node with a single output key", func(def *novav1.WorkflowDefinition) { node(def, "notify").Output = "sent" },
			false, []string{`node "notify", field "output": a workflow node's output maps parent context keys to child context keys, got the single key "sent"; only a map node's output is one context key`}},

		// Fields of other node types.
		{"join, map and workflow fields on an action node", func(def *novav1.WorkflowDefinition) {
			n := node(def, "fetch")
			n.Wait, n.Merge, n.Items, n.Concurrency, n.OnItemFailure = "all", "list", "orders", 2, "fail"
			n.Workflow, n.Input, n.Output = "x", map[string]string{"a": "b"}, "out"
		}, false, []string{
			`node "fetch", field "wait": only a join or map node has wait; this is an action node`,
			`node "fetch", field "merge": only a join node has merge; this is an action node`,
			`node "fetch", field "items": only a map node has items; this is an action node`,
			`node "fetch", field "concurrency": only a map node has concurrency; this is an action node`,
			`node "fetch", field "on_item_failure": only a map node has on_item_failure; this is an action node`,
			`node "fetch", field "workflow": only a workflow or map node has workflow; this is an action node`,
			`node "fetch", field "input": only a workflow node (or a map over a workflow) has input; this is an action node`,
			`node "fetch", field "output": only a map node has output as a context key; this is an action node`,
		}},
		{"output keys on an end node", func(def *novav1.WorkflowDefinition) { node(def, "done").OutputKeys = map[string]string{"a": "b"} },
			false, []string{`node "done", field "output": only a workflow node has output as a mapping; this is an end node`}},
		{"input on a map over a workflow", func(def *novav1.WorkflowDefinition) { node(def, "audit").Input = map[string]string{"order": "item"} },
			false, nil},
		{"input on a map over code", func(def *novav1.WorkflowDefinition) { node(def, "each").Input = map[string]string{"a": "b"} },
			false, []string{`node "each", field "input": map node "each" has input but no workflow: input maps the keys a sub-workflow gets, for a map whose body is workflow`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := mustParse(t, parallelYAML)
			tt.edit(def)
			checkProblems(t, workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: tt.allowPrompt}), tt.want)
		})
	}
}

func TestWorkflowRefs(t *testing.T) {
	def := &novav1.WorkflowDefinition{Name: "w", Nodes: []*novav1.Node{
		{Id: "a", Type: novav1.NodeType_NODE_TYPE_WORKFLOW, Workflow: "billing"},
		{Id: "b", Type: novav1.NodeType_NODE_TYPE_MAP, Workflow: "audit"},
		{Id: "c", Type: novav1.NodeType_NODE_TYPE_WORKFLOW, Workflow: "billing"},
		{Id: "d", Type: novav1.NodeType_NODE_TYPE_MAP, Code: "pass"},
		{Id: "e", Type: novav1.NodeType_NODE_TYPE_ACTION, Workflow: "not-run"},
		{Id: "f", Type: novav1.NodeType_NODE_TYPE_WORKFLOW, Workflow: " "},
	}}
	if got := workflow.WorkflowRefs(def); !slices.Equal(got, []string{"audit", "billing"}) {
		t.Errorf("WorkflowRefs = %q, want [audit billing]", got)
	}
	if got := workflow.WorkflowRefs(mustParse(t, routingYAML)); len(got) != 0 {
		t.Errorf("WorkflowRefs of a workflow without workflow nodes = %q, want none", got)
	}
	if got := workflow.WorkflowRefs(nil); len(got) != 0 {
		t.Errorf("WorkflowRefs(nil) = %q, want none", got)
	}
}

func TestParallelGraph(t *testing.T) {
	g := workflow.NewGraph(mustParse(t, parallelYAML))

	t.Run("Targets", func(t *testing.T) {
		for id, want := range map[string][]string{
			"start": {"fetch"}, "fetch": {"each", "notify"}, "each": {"both"}, "notify": {"both"}, "both": {"audit"}, "audit": {"done"},
		} {
			if got, err := g.Targets(id); err != nil || !slices.Equal(got, want) {
				t.Errorf("Targets(%s) = %q, %v; want %q", id, got, err, want)
			}
		}
		if _, err := g.Targets("done"); err == nil || !strings.Contains(err.Error(), "it is an end node") {
			t.Errorf("Targets(done) error = %v, want one saying it is an end node", err)
		}
		if _, err := g.Targets("missing"); !errors.Is(err, workflow.ErrUnknownNode) {
			t.Errorf("Targets(missing) error = %v, want ErrUnknownNode", err)
		}
		rg := workflow.NewGraph(mustParse(t, routingYAML))
		if _, err := rg.Targets("check_amount"); err == nil || !strings.Contains(err.Error(), "it is a decision node") {
			t.Errorf("Targets(check_amount) error = %v, want one saying it is a decision node", err)
		}
	})

	t.Run("Targets of wait nodes", func(t *testing.T) {
		def := mustParse(t, approvalYAML)
		ag := workflow.NewGraph(def)
		if _, err := ag.Targets("approve"); err == nil || !strings.Contains(err.Error(), `deciding on "approved"`) {
			t.Errorf("Targets of a wait node with decide_on: error %v", err)
		}
		def.GetNodes()[1].DecideOn = ""
		def.Edges = []*novav1.Edge{{From: "start", To: "approve"}, {From: "approve", To: "cool_off"},
			{From: "approve", To: "done", Condition: "timeout"}, {From: "approve", To: "charge"}}
		ag = workflow.NewGraph(def)
		if got, err := ag.Targets("approve"); err != nil || !slices.Equal(got, []string{"cool_off", "charge"}) {
			t.Errorf("Targets(approve) = %q, %v; want [cool_off charge] (not the timeout edge's)", got, err)
		}
		if _, err := ag.Next("approve"); err == nil || !strings.Contains(err.Error(), "use Targets") {
			t.Errorf("Next of a wait node with two edges: error %v, want one saying to use Targets", err)
		}
		def.Edges = def.Edges[:1]
		if _, err := workflow.NewGraph(def).Targets("approve"); err == nil || !strings.Contains(err.Error(), "no outgoing edge without condition") {
			t.Errorf("Targets of a wait node without edges: error %v", err)
		}
	})

	t.Run("Next", func(t *testing.T) {
		for id, want := range map[string]string{"each": "both", "notify": "both", "both": "audit", "audit": "done"} {
			if got, err := g.Next(id); err != nil || got != want {
				t.Errorf("Next(%s) = %q, %v; want %q", id, got, err, want)
			}
		}
		if got, err := g.Next("fetch"); err == nil || err.Error() != `next after "fetch": it has 2 outgoing edges, whose targets run at once; use Targets` {
			t.Errorf("Next(fetch) = %q, %v; want an error saying to use Targets", got, err)
		}
	})

	t.Run("Incoming", func(t *testing.T) {
		var from []string
		for _, e := range g.Incoming("both") {
			from = append(from, e.GetFrom())
		}
		if !slices.Equal(from, []string{"each", "notify"}) {
			t.Errorf("Incoming(both) comes from %q, want [each notify]", from)
		}
		if in := g.Incoming("start"); len(in) != 0 {
			t.Errorf("Incoming(start) = %v, want none", in)
		}
		// The caller's slice is its own.
		g.Incoming("both")[0] = nil
		if g.Incoming("both")[0] == nil {
			t.Error("Incoming returned the graph's own slice")
		}
	})

	t.Run("CanReach", func(t *testing.T) {
		for _, tt := range []struct {
			from, to string
			want     bool
		}{
			{"start", "done", true}, {"fetch", "both", true}, {"each", "audit", true}, {"start", "notify", true},
			{"each", "notify", false}, {"done", "start", false}, {"both", "each", false},
			{"start", "start", false}, {"each", "each", false}, {"missing", "done", false}, {"start", "missing", false},
		} {
			if got := g.CanReach(tt.from, tt.to); got != tt.want {
				t.Errorf("CanReach(%s, %s) = %v, want %v", tt.from, tt.to, got, tt.want)
			}
		}
		// A node reaches itself through a cycle, whatever the conditions.
		rg := workflow.NewGraph(&novav1.WorkflowDefinition{Edges: []*novav1.Edge{
			{From: "a", To: "b"}, {From: "b", To: "c", Condition: "again"}, {From: "c", To: "a"}, {From: "b", To: "d", Condition: "done"},
		}})
		for _, tt := range []struct {
			from, to string
			want     bool
		}{{"a", "a", true}, {"b", "a", true}, {"c", "d", true}, {"d", "a", false}, {"d", "d", false}} {
			if got := rg.CanReach(tt.from, tt.to); got != tt.want {
				t.Errorf("CanReach(%s, %s) in a cycle = %v, want %v", tt.from, tt.to, got, tt.want)
			}
		}
	})
}

func TestJoinAndMapSettings(t *testing.T) {
	for wait, want := range map[string]int{"": 0, "all": 0, "any": 1, "1": 1, "3": 3, "bogus": 0, "0": 0} {
		if got := workflow.JoinWait(&novav1.Node{Wait: wait}); got != want {
			t.Errorf("JoinWait(wait %q) = %d, want %d", wait, got, want)
		}
	}
	if got := workflow.JoinWait(nil); got != 0 {
		t.Errorf("JoinWait(nil) = %d, want 0", got)
	}
	if got := workflow.JoinMerge(&novav1.Node{}); got != workflow.MergeError || workflow.MergeError != "error" {
		t.Errorf("JoinMerge default = %q, want error", got)
	}
	if got := workflow.JoinMerge(&novav1.Node{Merge: workflow.MergeList}); got != "list" {
		t.Errorf("JoinMerge(list) = %q", got)
	}
	if workflow.MergeLast != "last" || workflow.OnItemFailureCollect != "collect" || workflow.OnItemFailureFail != "fail" {
		t.Error("merge or on_item_failure constants are not the words users write")
	}
	if got := workflow.MapOnItemFailure(&novav1.Node{}); got != "fail" {
		t.Errorf("MapOnItemFailure default = %q, want fail", got)
	}
	if got := workflow.MapOnItemFailure(&novav1.Node{OnItemFailure: "collect"}); got != "collect" {
		t.Errorf("MapOnItemFailure(collect) = %q", got)
	}
	if got := workflow.MapConcurrency(&novav1.Node{}); got != 4 {
		t.Errorf("MapConcurrency default = %d, want 4", got)
	}
	if got := workflow.MapConcurrency(&novav1.Node{Concurrency: 16}); got != 16 {
		t.Errorf("MapConcurrency(16) = %d", got)
	}
	if got := workflow.MapOutput(&novav1.Node{}); got != "results" {
		t.Errorf("MapOutput default = %q, want results", got)
	}
	if got := workflow.MapOutput(&novav1.Node{Output: "totals"}); got != "totals" {
		t.Errorf("MapOutput(totals) = %q", got)
	}
}

func TestFormatParallel(t *testing.T) {
	out := roundTrip(t, mustParse(t, parallelYAML))
	for _, want := range []string{
		"  - id: each\n    type: map\n    items: orders\n    concurrency: 8\n    on_item_failure: collect\n    output: totals\n    code: context[\"result\"] = context[\"item\"] * 2\n",
		"  - {id: notify, type: workflow, workflow: notify-team, input: {message: summary, who: owner}, output: {notified: sent}}\n",
		"  - {id: both, type: join, wait: all, merge: list}\n",
		"  - {id: audit, type: map, items: orders, workflow: audit-order}\n",
		"  - {from: fetch, to: notify}\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}

	t.Run("numbers and keys YAML could misread", func(t *testing.T) {
		def := &novav1.WorkflowDefinition{Name: "w", Nodes: []*novav1.Node{
			{Id: "j", Type: novav1.NodeType_NODE_TYPE_JOIN, Wait: "5"},
			{Id: "k", Type: novav1.NodeType_NODE_TYPE_JOIN, Wait: "any", Description: "first one wins"},
			{Id: "w", Type: novav1.NodeType_NODE_TYPE_WORKFLOW, Workflow: "child",
				Input:      map[string]string{"<<": "yes", "1": "null", "": "a: b", "multi\nline": "#c"},
				OutputKeys: map[string]string{"true": "- x", "k": "", "two": "lines\nof text"}},
			{Id: "v", Type: novav1.NodeType_NODE_TYPE_MAP, Items: "a\nb", Output: " ", Workflow: "x\n", OnItemFailure: "collect"},
			{Id: "m", Type: novav1.NodeType_NODE_TYPE_MAP, Items: "0x1f", Output: "1.0", Prompt: "Sum\nthe item", Concurrency: 1000},
		}}
		out := roundTrip(t, def)
		for _, want := range []string{"  - {id: j, type: join, wait: 5}\n", "    wait: any\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
	})
}
