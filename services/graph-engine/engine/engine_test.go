package engine

import (
	"testing"

	"github.com/google/uuid"
)

func TestExecutionID(t *testing.T) {
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
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ExecutionID(tt.id)
			if tt.kept && got != tt.id {
				t.Errorf("ExecutionID(%q) = %q, want it kept", tt.id, got)
			}
			if !tt.kept && (uuid.Validate(got) != nil || got != ExecutionID(tt.id)) {
				t.Errorf("ExecutionID(%q) = %q, want a UUID derived from it", tt.id, got)
			}
		})
	}
}
