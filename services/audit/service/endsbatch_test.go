package service_test

import (
	"testing"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/services/audit/service"
)

// A completion ends the audit's batch only when no other execution with
// events in the batch is still running: one at a time every workflow is its
// own batch, and while several run, batches are not cut at each completion.
func TestEndsBatch(t *testing.T) {
	ev := bus.EventSubject
	for _, tc := range []struct {
		name     string
		subjects []string
		want     bool
	}{
		{"one workflow, whole", []string{ev("a", bus.KindWorkflowStarted), ev("a", bus.KindNodeCompleted), ev("a", bus.KindWorkflowCompleted)}, true},
		{"its completion alone", []string{ev("a", bus.KindWorkflowCompleted)}, true},
		{"not at a completion", []string{ev("a", bus.KindWorkflowCompleted), ev("b", bus.KindWorkflowStarted)}, false},
		{"another still runs", []string{ev("a", bus.KindWorkflowStarted), ev("b", bus.KindWorkflowStarted), ev("a", bus.KindWorkflowCompleted)}, false},
		{"another's events before its completion", []string{ev("b", bus.KindNodeStarted), ev("a", bus.KindWorkflowCompleted)}, false},
		{"two, both whole", []string{ev("a", bus.KindWorkflowStarted), ev("b", bus.KindWorkflowStarted), ev("a", bus.KindWorkflowCompleted), ev("b", bus.KindWorkflowCompleted)}, true},
		{"a reply outside any workflow", []string{ev("run-1", bus.ReplyKind(bus.AgentSandbox)), ev("a", bus.KindNodeCompleted), ev("a", bus.KindWorkflowCompleted)}, true},
		{"a subject of no execution", []string{"nova.evt.x", ev("a", bus.KindWorkflowCompleted)}, true},
	} {
		if got := service.EndsBatch(tc.subjects); got != tc.want {
			t.Errorf("%s: EndsBatch(%v) = %v, want %v", tc.name, tc.subjects, got, tc.want)
		}
	}
}
