package workflow_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"google.golang.org/protobuf/proto"
)

type wantProblem struct {
	nodeID, field, msg string
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name string
		// edit changes a valid copy of routingYAML into the case under test.
		edit func(def *novav1.WorkflowDefinition)
		opts workflow.ValidateOptions
		want []wantProblem
	}{
		{
			name: "valid",
			edit: func(*novav1.WorkflowDefinition) {},
		},
		{
			name: "missing name",
			edit: func(def *novav1.WorkflowDefinition) { def.Name = " " },
			want: []wantProblem{{"", "name", "is required"}},
		},
		{
			name: "no nodes",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes, def.Edges = nil, nil },
			want: []wantProblem{{"", "nodes", "at least one node"}},
		},
		{
			name: "edge to unknown node",
			edit: func(def *novav1.WorkflowDefinition) { def.Edges[1].To = "check_amout" },
			want: []wantProblem{
				{"", "edges[1].to", `edge extract -> check_amout leads to unknown node "check_amout"`},
				{"extract", "", "no outgoing edge"},
				{"check_amount", "", "unreachable"},
				{"manager_approval", "", "unreachable"},
				{"auto_approve", "", "unreachable"},
				{"done", "", "unreachable"},
			},
		},
		{
			name: "edge from unknown node",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Edges = append(def.Edges, &novav1.Edge{From: "ghost", To: "done"})
			},
			want: []wantProblem{{"", "edges[6].from", `edge ghost -> done starts at unknown node "ghost"`}},
		},
		{
			name: "edge without ends",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Edges = append(def.Edges, &novav1.Edge{})
			},
			want: []wantProblem{{"", "edges[6].from", "is required"}, {"", "edges[6].to", "is required"}},
		},
		{
			name: "no start node",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes, def.Edges = def.Nodes[1:], def.Edges[1:] },
			want: []wantProblem{{"", "nodes", "no start node"}},
		},
		{
			name: "two start nodes",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Nodes = append(def.Nodes, &novav1.Node{Id: "start2", Type: novav1.NodeType_NODE_TYPE_START})
				def.Edges = append(def.Edges, &novav1.Edge{From: "start2", To: "extract"})
			},
			want: []wantProblem{{"", "nodes", "2 start nodes (start, start2)"}},
		},
		{
			name: "no end node",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Nodes[5].Type = novav1.NodeType_NODE_TYPE_ACTION
				def.Nodes[5].Code = "pass"
				def.Edges = append(def.Edges, &novav1.Edge{From: "done", To: "extract"})
			},
			want: []wantProblem{{"", "nodes", "no end node"}},
		},
		{
			name: "unreachable node",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Nodes = append(def.Nodes, &novav1.Node{Id: "orphan", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: "pass"})
				def.Edges = append(def.Edges, &novav1.Edge{From: "orphan", To: "done"})
			},
			want: []wantProblem{{"orphan", "", `unreachable: no path leads to it from start node "start"`}},
		},
		{
			name: "decision without edges",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Edges = append(def.Edges[:2], def.Edges[4:]...)
			},
			want: []wantProblem{
				{"check_amount", "", "decision node has no outgoing edges"},
				{"manager_approval", "", "unreachable"},
				{"auto_approve", "", "unreachable"},
				{"done", "", "unreachable"},
			},
		},
		{
			name: "decision edge without condition",
			edit: func(def *novav1.WorkflowDefinition) { def.Edges[3].Condition = "" },
			want: []wantProblem{{"check_amount", "edges[3].condition", "edge check_amount -> auto_approve has no condition"}},
		},
		{
			name: "duplicate decision condition",
			edit: func(def *novav1.WorkflowDefinition) { def.Edges[3].Condition = "true" },
			want: []wantProblem{{"check_amount", "edges[3].condition", `condition "true" is used by more than one edge (to manager_approval and to auto_approve)`}},
		},
		{
			name: "duplicate node ids",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes[4].Id = "manager_approval" },
			want: []wantProblem{
				{"manager_approval", "id", "duplicate node id (nodes[4])"},
				{"", "edges[3].to", `unknown node "auto_approve"`},
				{"", "edges[5].from", `unknown node "auto_approve"`},
			},
		},
		{
			name: "empty node id",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Nodes = append(def.Nodes, &novav1.Node{Type: novav1.NodeType_NODE_TYPE_END})
			},
			want: []wantProblem{{"", "nodes[6].id", "is required"}},
		},
		{
			name: "missing type",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes[4].Type = novav1.NodeType_NODE_TYPE_UNSPECIFIED },
			want: []wantProblem{{"auto_approve", "type", "is required"}},
		},
		{
			name: "both code and prompt",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes[1].Prompt = "Extract the amount" },
			opts: workflow.ValidateOptions{AllowPrompt: true},
			want: []wantProblem{{"extract", "", "has both code and prompt"}},
		},
		{
			name: "neither code nor prompt",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes[2].Code = "" },
			want: []wantProblem{{"check_amount", "", "has neither code nor prompt; a decision node needs one"}},
		},
		{
			name: "prompt allowed",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Nodes[1].Code, def.Nodes[1].Prompt = "", "Extract the amount"
			},
			opts: workflow.ValidateOptions{AllowPrompt: true},
		},
		{
			name: "prompt rejected when not allowed",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Nodes[1].Code, def.Nodes[1].Prompt = "", "Extract the amount"
			},
			want: []wantProblem{{"extract", "prompt", "AI (prompt) nodes need a model, and this deployment has none: give the AI agents OPENAI_API_KEY or OPENAI_BASE_URL and set NOVA_ALLOW_PROMPT=true on the graph engine"}},
		},
		{
			name: "code on start node",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes[0].Code = "print(1)" },
			want: []wantProblem{{"start", "", "a start node runs nothing"}},
		},
		{
			name: "start without outgoing edge",
			edit: func(def *novav1.WorkflowDefinition) { def.Edges = def.Edges[1:] },
			want: []wantProblem{
				{"start", "", "has no outgoing edge; a start node needs one (or several, whose targets run at once)"},
				{"extract", "", "unreachable"},
				{"check_amount", "", "unreachable"},
				{"manager_approval", "", "unreachable"},
				{"auto_approve", "", "unreachable"},
				{"done", "", "unreachable"},
			},
		},
		{
			name: "action fanning out to two nodes",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Edges = append(def.Edges, &novav1.Edge{From: "extract", To: "done"})
			},
		},
		{
			name: "action with two edges to one node",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Edges = append(def.Edges, &novav1.Edge{From: "extract", To: "done"}, &novav1.Edge{From: "extract", To: "check_amount"})
			},
			want: []wantProblem{{"extract", "", "has 2 edges to check_amount (edges[1], edges[7]); the branches leaving a node lead to different nodes: remove the repeated edge"}},
		},
		{
			name: "condition on action edge",
			edit: func(def *novav1.WorkflowDefinition) { def.Edges[1].Condition = "true" },
			want: []wantProblem{{"extract", "edges[1].condition", `edge extract -> check_amount has condition "true"`}},
		},
		{
			name: "end with outgoing edge",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Edges = append(def.Edges, &novav1.Edge{From: "done", To: "extract"})
			},
			want: []wantProblem{{"done", "", "end node has outgoing edges (to extract)"}},
		},
		{
			name: "negative timeouts and visits",
			edit: func(def *novav1.WorkflowDefinition) {
				def.TimeoutSeconds = -1
				def.Nodes[1].TimeoutSeconds = -2
				def.Nodes[1].MaxVisits = -3
			},
			want: []wantProblem{
				{"", "timeout", "must not be negative, got -1"},
				{"extract", "timeout", "must not be negative, got -2"},
				{"extract", "max_visits", "must not be negative, got -3"},
			},
		},
		{
			name: "unknown language",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes[1].Language = "ruby" },
			want: []wantProblem{{"extract", "language", `must be python or javascript, got "ruby"`}},
		},
		{
			name: "javascript allowed",
			edit: func(def *novav1.WorkflowDefinition) { def.Nodes[1].Language = "javascript" },
		},
		{
			name: "cycle through a decision is allowed",
			edit: func(def *novav1.WorkflowDefinition) {
				def.Edges = append(def.Edges, &novav1.Edge{From: "check_amount", To: "extract", Condition: "retry"})
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := mustParse(t, routingYAML)
			tt.edit(def)
			err := workflow.Validate(def, tt.opts)
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			var verr *workflow.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate error = %v, want *ValidationError", err)
			}
			if len(verr.Problems) != len(tt.want) {
				t.Errorf("got %d problems, want %d:\n%v", len(verr.Problems), len(tt.want), err)
			}
			for _, w := range tt.want {
				if !hasProblem(verr, w.nodeID, w.field, w.msg) {
					t.Errorf("missing problem node=%q field=%q containing %q in:\n%v", w.nodeID, w.field, w.msg, err)
				}
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	var verr *workflow.ValidationError
	if err := workflow.Validate(nil, workflow.ValidateOptions{}); !errors.As(err, &verr) {
		t.Fatalf("Validate(nil) = %v, want *ValidationError", err)
	}
}

func TestValidationErrorListsEachProblemOnItsOwnLine(t *testing.T) {
	def := mustParse(t, routingYAML)
	def.Edges[5].To = "nowhere"
	def.Nodes[1].Prompt = "also a prompt"
	err := workflow.Validate(def, workflow.ValidateOptions{})
	if err == nil {
		t.Fatal("Validate succeeded, want problems")
	}
	want := `workflow "routing" has 4 problems:
  - node "extract": has both code and prompt; a node runs either code as written or a prompt (AI node), not both
  - node "extract", field "prompt": AI (prompt) nodes need a model, and this deployment has none: give the AI agents OPENAI_API_KEY or OPENAI_BASE_URL and set NOVA_ALLOW_PROMPT=true on the graph engine
  - edges[5].to: edge auto_approve -> nowhere leads to unknown node "nowhere"
  - node "auto_approve": has no outgoing edge; an action node needs one (or several, whose targets run at once)`
	if err.Error() != want {
		t.Errorf("Error() =\n%s\nwant\n%s", err, want)
	}
}

func TestLoad(t *testing.T) {
	t.Run("example invoice routing", func(t *testing.T) {
		path := filepath.Join("..", "..", "examples", "invoice-routing.yaml")
		def, err := workflow.Load(path, workflow.ValidateOptions{})
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		g := workflow.NewGraph(def)
		for decision, want := range map[string]string{"high": "manager_approval", "low": "auto_approve"} {
			if got, err := g.Decide("check_amount", decision); err != nil || got != want {
				t.Errorf("Decide(check_amount, %q) = %q, %v; want %q", decision, got, err, want)
			}
		}
	})

	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tests := []struct {
		name     string
		path     string
		wantText []string
		wantAs   bool
	}{
		{"missing file", filepath.Join(dir, "absent.yaml"), []string{"absent.yaml", "no such file"}, false},
		{"malformed", write("bad.yaml", "name: [\n"), []string{"bad.yaml", "malformed workflow definition"}, false},
		{"invalid graph", write("invalid.json", `{"name": "x", "nodes": [{"id": "s", "type": "start"}]}`),
			[]string{"invalid.json", `node "s": has no outgoing edge`, "no end node"}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := workflow.Load(tt.path, workflow.ValidateOptions{})
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			var verr *workflow.ValidationError
			if got := errors.As(err, &verr); got != tt.wantAs {
				t.Errorf("errors.As(*ValidationError) = %v, want %v", got, tt.wantAs)
			}
		})
	}

	t.Run("round trip keeps the definition", func(t *testing.T) {
		p := write("routing.yaml", routingYAML)
		def, err := workflow.Load(p, workflow.ValidateOptions{})
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if !proto.Equal(def, mustParse(t, routingYAML)) {
			t.Errorf("Load and Parse disagree")
		}
	})
}
