package workflow_test

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestGraphNavigation(t *testing.T) {
	g := workflow.NewGraph(mustParse(t, routingYAML))

	if s := g.Start(); s.GetId() != "start" {
		t.Errorf("Start() = %q, want start", s.GetId())
	}
	if n := g.Node("extract"); n.GetType() != novav1.NodeType_NODE_TYPE_ACTION {
		t.Errorf("Node(extract) = %v", n)
	}
	if n := g.Node("missing"); n != nil {
		t.Errorf("Node(missing) = %v, want nil", n)
	}
	var to []string
	for _, e := range g.Outgoing("check_amount") {
		to = append(to, e.GetTo())
	}
	if !slices.Equal(to, []string{"manager_approval", "auto_approve"}) {
		t.Errorf("Outgoing(check_amount) leads to %v", to)
	}

	t.Run("Next", func(t *testing.T) {
		tests := []struct {
			from, want string
			wantErr    bool
		}{
			{"start", "extract", false},
			{"extract", "check_amount", false},
			{"manager_approval", "done", false},
			{"check_amount", "", true}, // decisions go through Decide
			{"done", "", true},
			{"missing", "", true},
		}
		for _, tt := range tests {
			got, err := g.Next(tt.from)
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("Next(%q) = %q, %v; want %q, error %v", tt.from, got, err, tt.want, tt.wantErr)
			}
		}
		if _, err := g.Next("missing"); !errors.Is(err, workflow.ErrUnknownNode) {
			t.Errorf("Next(missing) error = %v, want ErrUnknownNode", err)
		}
	})

	t.Run("Decide", func(t *testing.T) {
		for decision, want := range map[string]string{"true": "manager_approval", "false": "auto_approve"} {
			if got, err := g.Decide("check_amount", decision); err != nil || got != want {
				t.Errorf("Decide(check_amount, %q) = %q, %v; want %q", decision, got, err, want)
			}
		}
		if _, err := g.Decide("extract", "true"); err == nil {
			t.Error("Decide on an action node succeeded")
		}
		if _, err := g.Decide("missing", "true"); !errors.Is(err, workflow.ErrUnknownNode) {
			t.Errorf("Decide(missing) error = %v, want ErrUnknownNode", err)
		}
	})
}

func TestDecideNoMatchingEdge(t *testing.T) {
	def := mustParse(t, routingYAML)
	g := workflow.NewGraph(def)

	tests := []struct {
		value, want string
	}{
		{"maybe", `decision node "check_amount": branch_decision "maybe" matches no outgoing edge (allowed: "false", "true")`},
		{"True", `decision node "check_amount": branch_decision "True" matches no outgoing edge (allowed: "false", "true")`},
		{"", `decision node "check_amount": branch_decision is empty or not set (allowed: "false", "true")`},
	}
	for _, tt := range tests {
		t.Run(tt.value, func(t *testing.T) {
			_, err := g.Decide("check_amount", tt.value)
			var nm *workflow.NoMatchingEdgeError
			if !errors.As(err, &nm) {
				t.Fatalf("Decide error = %v, want *NoMatchingEdgeError", err)
			}
			if nm.NodeID != "check_amount" || nm.Value != tt.value || !slices.Equal(nm.Allowed, []string{"false", "true"}) {
				t.Errorf("NoMatchingEdgeError = %+v", nm)
			}
			if err.Error() != tt.want {
				t.Errorf("Error() = %s\nwant      %s", err, tt.want)
			}
		})
	}
}

func TestDecisionString(t *testing.T) {
	tests := []struct {
		name   string
		in     any
		want   string
		wantOK bool
	}{
		{"string", "high", "high", true},
		{"empty string", "", "", true},
		{"true", true, "true", true},
		{"false", false, "false", true},
		{"int", 3, "3", true},
		{"int64", int64(-7), "-7", true},
		{"uint8", uint8(2), "2", true},
		{"whole float", 1500.0, "1500", true},
		{"fraction", 2.5, "2.5", true},
		{"float32", float32(0.5), "0.5", true},
		{"large float", 1e21, "1000000000000000000000", true},
		{"json number", json.Number("42"), "42", true},
		{"json float", json.Number("42.0"), "42", true},
		{"json integer beyond int64", json.Number("9223372036854775808"), "9223372036854775808", true},
		{"json float", json.Number("150.0"), "150", true},
		{"nil", nil, "", false},
		{"NaN", math.NaN(), "", false},
		{"list", []any{"a"}, "", false},
		{"map", map[string]any{"a": 1}, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := workflow.DecisionString(tt.in)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("DecisionString(%#v) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestMaxVisits(t *testing.T) {
	tests := []struct {
		name string
		node *novav1.Node
		want int
	}{
		{"default", &novav1.Node{}, workflow.DefaultMaxVisits},
		{"set", &novav1.Node{MaxVisits: 3}, 3},
		{"nil node", nil, workflow.DefaultMaxVisits},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := workflow.MaxVisits(tt.node); got != tt.want {
				t.Errorf("MaxVisits = %d, want %d", got, tt.want)
			}
		})
	}
	if workflow.DefaultMaxVisits != 10 {
		t.Errorf("DefaultMaxVisits = %d, want 10", workflow.DefaultMaxVisits)
	}
}

func TestNodeTimeout(t *testing.T) {
	const fallback = time.Minute
	tests := []struct {
		name     string
		workflow float64
		node     float64
		want     time.Duration
	}{
		{"node wins", 30, 2.5, 2500 * time.Millisecond},
		{"workflow default", 30, 0, 30 * time.Second},
		{"fallback", 0, 0, fallback},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := &novav1.WorkflowDefinition{TimeoutSeconds: tt.workflow}
			node := &novav1.Node{TimeoutSeconds: tt.node}
			if got := workflow.NodeTimeout(def, node, fallback); got != tt.want {
				t.Errorf("NodeTimeout = %v, want %v", got, tt.want)
			}
		})
	}
}
