package execstate

import (
	"testing"

	"github.com/google/uuid"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The constants every reader compares with are the enum's spellings.
func TestStatusSpelling(t *testing.T) {
	for s, want := range map[novav1.ExecutionStatus]string{
		novav1.ExecutionStatus_EXECUTION_STATUS_RUNNING:     StatusRunning,
		novav1.ExecutionStatus_EXECUTION_STATUS_SUCCEEDED:   StatusSucceeded,
		novav1.ExecutionStatus_EXECUTION_STATUS_FAILED:      StatusFailed,
		novav1.ExecutionStatus_EXECUTION_STATUS_UNSPECIFIED: "",
	} {
		if got := Spelling(s); got != want {
			t.Errorf("Spelling(%v) = %q, want %q", s, got, want)
		}
		if want == "" {
			continue
		}
		if back, ok := ParseStatus(want); !ok || back != s {
			t.Errorf("ParseStatus(%q) = %v, %v", want, back, ok)
		}
	}
	for s, want := range map[novav1.NodeStatus]string{
		novav1.NodeStatus_NODE_STATUS_SUCCESS: NodeSuccess,
		novav1.NodeStatus_NODE_STATUS_FAILED:  NodeFailed,
	} {
		if got := NodeSpelling(s); got != want {
			t.Errorf("NodeSpelling(%v) = %q, want %q", s, got, want)
		}
	}
	for _, bad := range []string{"", "RUNNING", "unspecified_x", "done"} {
		if _, ok := ParseStatus(bad); ok {
			t.Errorf("ParseStatus(%q) accepted", bad)
		}
	}
}

func TestID(t *testing.T) {
	tests := []struct {
		name, id string
		kept     bool
	}{
		{"a UUID", "0b9f3c1e-8f0a-4d5e-9a61-2f3c1d7e9b42", true},
		{"a name of its own", "order-1001", true},
		{"a refinement's", "refine-0b9f3c1e-8f0a-4d5e-9a61-2f3c1d7e9b42", true},
		{"not a key", "order 42/7", false},
		{"empty", "", false},
		{"the gateway's stream of every execution", "events", false},
		{"the gateway's export", "export", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ID(tt.id)
			if tt.kept && got != tt.id {
				t.Errorf("ID(%q) = %q, want it kept", tt.id, got)
			}
			if !tt.kept && (uuid.Validate(got) != nil || got != ID(tt.id)) {
				t.Errorf("ID(%q) = %q, want a UUID derived from it", tt.id, got)
			}
		})
	}
}

func TestCompletionNamesRefinements(t *testing.T) {
	st := &novav1.ExecutionState{ExecutionId: "refine-1", Status: StatusSucceeded, Refine: &novav1.RefineRun{},
		Nodes: map[string]*novav1.NodeState{"refine": {Visits: 1, Status: StatusSucceeded}}}
	wc := Completion(st)
	if wc.WorkflowName != RefineWorkflow || len(wc.Nodes) != 1 || wc.Nodes[0].Id != RefineNode {
		t.Errorf("completion %v", wc)
	}
}
