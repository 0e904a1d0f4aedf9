package flow

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// An AI node keeps its generation loop for failed code; its retry policy
// covers its infrastructure faults: a program the sandbox could not take
// (dead-lettered) runs the whole node again after the backoff, as a new
// visit with the next attempt number.
func TestAINodeRetriesAnInfrastructureFault(t *testing.T) {
	cfg := testConfig()
	def, err := workflow.Parse([]byte(strings.Replace(aiYAML, `prompt: "Calculate discount (10% if total > 1000)"}`,
		`prompt: "Calculate discount (10% if total > 1000)", retry: {max_attempts: 2, initial_interval: 5s, on: [sandbox_fault]}}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := jsonvalue.ObjectOf(map[string]any{"total": 1500.0})
	st := &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: c.Proto(), StartedAt: tsNow(time.Now())}
	tr := New(st, cfg, time.Now())
	startIn(tr)
	cmd := tr.out[len(tr.out)-1].Msg
	deadLettered := false
	for st.Status == statusRunning && line0(st).Timer == nil {
		tr = New(st, cfg, time.Now())
		switch c := cmd.(type) {
		case *novav1.AnalyzeInput:
			err = applyStep(tr, func(t *Transition) error {
				return t.InputAnalyzed(&novav1.InputAnalyzed{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, DecidedWithoutModel: true})
			})
		case *novav1.GenerateCode:
			err = applyStep(tr, func(t *Transition) error {
				return t.CodeGenerated(&novav1.CodeGenerated{Ref: c.Ref, Outcome: call(100), Code: "context['discount'] = 150", Stage: "TASK"})
			})
		case *novav1.ValidateCode:
			err = applyStep(tr, func(t *Transition) error {
				return t.CodeValidated(&novav1.CodeValidated{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, Valid: true})
			})
		case *novav1.ExecuteCode:
			deadLettered = true
			err = applyStep(tr, func(t *Transition) error {
				return t.CodeExecuted(&novav1.CodeExecuted{ExecutionId: c.ExecutionId, NodeId: c.NodeId, StepId: c.StepId, Sequence: c.Sequence,
					Status: "error", ErrorKind: ErrorKindDeadLetter, Error: "the sandbox could not handle the command after 3 deliveries"})
			})
		default:
			t.Fatalf("unexpected command %T", cmd)
		}
		if err != nil {
			t.Fatal(err)
		}
		for i := len(tr.out) - 1; i >= 0; i-- {
			if strings.HasPrefix(tr.out[i].Subject, "nova.cmd.") {
				cmd = tr.out[i].Msg
				break
			}
		}
	}
	if !deadLettered || st.Status != statusRunning || line0(st).Timer == nil || line0(st).Timer.Kind != timerRetry || line0(st).Ai != nil {
		t.Fatalf("after the dead letter: %s, timer %v, ai %v; want running, waiting on the retry's timer", st.Status, line0(st).Timer, line0(st).Ai)
	}
	var failed *novav1.NodeCompleted
	for _, o := range tr.out {
		if nc, ok := o.Msg.(*novav1.NodeCompleted); ok && nc.NodeId == "discount" {
			failed = nc
		}
	}
	if failed == nil || failed.Status != nodeFailed || failed.Attempt != 1 || failed.NextAttemptAt == nil || failed.AiMetadata == nil {
		t.Fatalf("the failed attempt's visit: %v", failed)
	}
	if d := failed.NextAttemptAt.AsTime().Sub(failed.CompletedAt.AsTime()); d != 5*time.Second {
		t.Errorf("next attempt %s after the failure, want 5s", d)
	}
	tr = New(st, cfg, time.Now())
	if err := applyStep(tr, func(t *Transition) error {
		return t.TimerFired(&novav1.TimerFired{ExecutionId: "x1", TimerId: line0(st).Timer.Id})
	}); err != nil {
		t.Fatal(err)
	}
	ns := st.Nodes["discount"]
	if ns.Visits != 2 || ns.RetryAttempt != 2 || line0(st).Ai == nil {
		t.Fatalf("after the timer: visits %d, attempt %d, ai %v; want the node again as visit 2, attempt 2", ns.Visits, ns.RetryAttempt, line0(st).Ai)
	}
	if _, ok := tr.out[len(tr.out)-1].Msg.(*novav1.AnalyzeInput); !ok {
		t.Errorf("the second attempt began with %T, want input analysis", tr.out[len(tr.out)-1].Msg)
	}
	// A timer that is not the pending one changes nothing.
	before := proto.Clone(st)
	if err := applyStep(New(st, cfg, time.Now()), func(t *Transition) error {
		return t.TimerFired(&novav1.TimerFired{ExecutionId: "x1", TimerId: "discount-1-retry"})
	}); err != ErrStale || !proto.Equal(before, st) {
		t.Errorf("a stale timer: %v", err)
	}
}
