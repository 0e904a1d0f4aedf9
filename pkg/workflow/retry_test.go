package workflow_test

import (
	"math"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestRetryPolicyOf(t *testing.T) {
	def := mustParse(t, approvalYAML)
	charge, approve := def.GetNodes()[4], def.GetNodes()[1]
	if got := workflow.RetryPolicyOf(def, charge); got != charge.GetRetry() {
		t.Errorf("RetryPolicyOf(charge) = %v, want the node's own", got)
	}
	if got := workflow.RetryPolicyOf(def, approve); got != def.GetRetry() {
		t.Errorf("RetryPolicyOf(approve) = %v, want the workflow's", got)
	}
	def.Retry = nil
	if got := workflow.RetryPolicyOf(def, approve); got != nil {
		t.Errorf("RetryPolicyOf without policies = %v, want nil", got)
	}
}

func TestRetryBackoff(t *testing.T) {
	tests := []struct {
		name    string
		p       *novav1.RetryPolicy
		attempt int32
		want    time.Duration
	}{
		{"nil policy", nil, 1, 0},
		{"first failure", &novav1.RetryPolicy{InitialIntervalSeconds: 1, BackoffCoefficient: 2}, 1, time.Second},
		{"second failure", &novav1.RetryPolicy{InitialIntervalSeconds: 1, BackoffCoefficient: 2}, 2, 2 * time.Second},
		{"fourth failure", &novav1.RetryPolicy{InitialIntervalSeconds: 1, BackoffCoefficient: 2}, 4, 8 * time.Second},
		{"coefficient 0 means 2", &novav1.RetryPolicy{InitialIntervalSeconds: 0.5}, 3, 2 * time.Second},
		{"coefficient 1 keeps the wait", &novav1.RetryPolicy{InitialIntervalSeconds: 3, BackoffCoefficient: 1}, 5, 3 * time.Second},
		{"coefficient 1.5", &novav1.RetryPolicy{InitialIntervalSeconds: 2, BackoffCoefficient: 1.5}, 3, 4500 * time.Millisecond},
		{"capped", &novav1.RetryPolicy{InitialIntervalSeconds: 1, BackoffCoefficient: 2, MaxIntervalSeconds: 30}, 10, 30 * time.Second},
		{"below the cap", &novav1.RetryPolicy{InitialIntervalSeconds: 1, BackoffCoefficient: 2, MaxIntervalSeconds: 30}, 5, 16 * time.Second},
		{"no interval retries at once", &novav1.RetryPolicy{MaxAttempts: 3}, 2, 0},
		{"attempt 0 counts as the first", &novav1.RetryPolicy{InitialIntervalSeconds: 1}, 0, time.Second},
		{"overflow without a cap", &novav1.RetryPolicy{InitialIntervalSeconds: 1, BackoffCoefficient: 10}, 1000, math.MaxInt64},
		{"overflow with a cap", &novav1.RetryPolicy{InitialIntervalSeconds: 1, BackoffCoefficient: 10, MaxIntervalSeconds: 60}, 1000, time.Minute},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := workflow.RetryBackoff(tt.p, tt.attempt); got != tt.want {
				t.Errorf("RetryBackoff(attempt %d) = %v, want %v", tt.attempt, got, tt.want)
			}
		})
	}
}

func TestRetries(t *testing.T) {
	all := &novav1.RetryPolicy{MaxAttempts: 3}
	faults := &novav1.RetryPolicy{MaxAttempts: 3, On: []string{"sandbox_fault"}}
	errorsAndTimeouts := &novav1.RetryPolicy{MaxAttempts: 5, On: []string{"error", "timeout"}}
	tests := []struct {
		name    string
		p       *novav1.RetryPolicy
		kind    string
		attempt int32
		want    bool
	}{
		{"nil policy", nil, "code_error", 1, false},
		{"one attempt means no retry", &novav1.RetryPolicy{MaxAttempts: 1}, "code_error", 1, false},
		{"code error, first attempt", all, "code_error", 1, true},
		{"code error, second attempt", all, "code_error", 2, true},
		{"attempts used up", all, "code_error", 3, false},
		{"error as is", all, "error", 1, true},
		{"timeout", all, "timeout", 1, true},
		{"limit counts as error", all, "limit", 1, true},
		{"sandbox fault", all, "sandbox_fault", 1, true},
		{"budget exceeded never", all, "budget_exceeded", 1, false},
		{"dead letter never", all, "dead_letter", 1, false},
		{"runtime unavailable never", all, "runtime_unavailable", 1, false},
		{"cancelled never", all, "cancelled", 1, false},
		{"no kind never", all, "", 1, false},
		{"on lists the kind", faults, "sandbox_fault", 2, true},
		{"on does not list code errors", faults, "code_error", 1, false},
		{"on does not list timeouts", faults, "timeout", 1, false},
		{"limit under on: [error]", errorsAndTimeouts, "limit", 4, true},
		{"timeout under on: [timeout]", errorsAndTimeouts, "timeout", 1, true},
		{"sandbox fault not listed", errorsAndTimeouts, "sandbox_fault", 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := workflow.Retries(tt.p, tt.kind, tt.attempt); got != tt.want {
				t.Errorf("Retries(%v, %q, %d) = %v, want %v", tt.p, tt.kind, tt.attempt, got, tt.want)
			}
		})
	}
}

func TestValidateRetry(t *testing.T) {
	tests := []struct {
		name string
		edit func(def *novav1.WorkflowDefinition)
		want []string
	}{
		{"max_attempts 0", func(def *novav1.WorkflowDefinition) { def.Retry.MaxAttempts = 0 },
			[]string{`retry: max_attempts must be at least 1 (1 means no retry)`}},
		{"node max_attempts negative", func(def *novav1.WorkflowDefinition) { def.Nodes[4].Retry.MaxAttempts = -2 },
			[]string{`node "charge", field "retry": max_attempts must be at least 1 (1 means no retry), got -2`}},
		{"an empty policy", func(def *novav1.WorkflowDefinition) { def.Nodes[4].Retry = &novav1.RetryPolicy{} },
			[]string{`node "charge", field "retry": max_attempts must be at least 1 (1 means no retry)`}},
		{"negative initial_interval", func(def *novav1.WorkflowDefinition) { def.Retry.InitialIntervalSeconds = -1 },
			[]string{`retry: initial_interval must be 0 or more seconds, got -1`}},
		{"backoff_coefficient below 1", func(def *novav1.WorkflowDefinition) { def.Retry.BackoffCoefficient = 0.5 },
			[]string{`retry: backoff_coefficient must be 0 (meaning 2) or at least 1, got 0.5`}},
		{"backoff_coefficient 0 and 1", func(def *novav1.WorkflowDefinition) {
			def.Retry.BackoffCoefficient = 0
			def.Nodes[4].Retry.BackoffCoefficient = 1
		}, nil},
		{"max_interval below initial_interval", func(def *novav1.WorkflowDefinition) { def.Retry.MaxIntervalSeconds = 0.5 },
			[]string{`retry: max_interval (0.5s) must be 0 (no limit) or at least initial_interval (1s)`}},
		{"negative max_interval", func(def *novav1.WorkflowDefinition) { def.Retry.MaxIntervalSeconds = -3 },
			[]string{`retry: max_interval must be 0 (no limit) or more seconds, got -3`}},
		{"NaN interval", func(def *novav1.WorkflowDefinition) { def.Retry.InitialIntervalSeconds = math.NaN() },
			[]string{`retry: initial_interval must be 0 or more seconds, got NaN`}},
		{"unknown kind", func(def *novav1.WorkflowDefinition) { def.Nodes[4].Retry.On = []string{"error", "eror"} },
			[]string{`node "charge", field "retry": on[1]: unknown failure kind "eror"; did you mean "error"? (use error, timeout or sandbox_fault)`}},
		{"kind without a close name", func(def *novav1.WorkflowDefinition) { def.Retry.On = []string{"budget_exceeded"} },
			[]string{`retry: on[0]: unknown failure kind "budget_exceeded" (use error, timeout or sandbox_fault)`}},
		{"on a wait node", func(def *novav1.WorkflowDefinition) { def.Nodes[1].Retry = &novav1.RetryPolicy{MaxAttempts: 2} },
			[]string{`node "approve", field "retry": a wait node runs no code, so it has nothing to retry; retry applies to action nodes and to decision nodes with code`}},
		{"on a sleep node", func(def *novav1.WorkflowDefinition) { def.Nodes[2].Retry = &novav1.RetryPolicy{MaxAttempts: 2} },
			[]string{`node "cool_off", field "retry": a sleep node runs no code, so it has nothing to retry; retry applies to action nodes and to decision nodes with code`}},
		{"on the start and end nodes", func(def *novav1.WorkflowDefinition) {
			def.Nodes[0].Retry = &novav1.RetryPolicy{MaxAttempts: 2}
			def.Nodes[5].Retry = &novav1.RetryPolicy{MaxAttempts: 2}
		}, []string{
			`node "start", field "retry": a start node runs no code, so it has nothing to retry; retry applies to action nodes and to decision nodes with code`,
			`node "done", field "retry": an end node runs no code, so it has nothing to retry; retry applies to action nodes and to decision nodes with code`,
		}},
		{"on an AI action node", func(def *novav1.WorkflowDefinition) {
			def.Nodes[4].Code, def.Nodes[4].Prompt = "", "Charge the card"
		}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := mustParse(t, approvalYAML)
			tt.edit(def)
			checkProblems(t, workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}), tt.want)
		})
	}

	t.Run("decision nodes", func(t *testing.T) {
		def := mustParse(t, routingYAML)
		def.Nodes[2].Retry = &novav1.RetryPolicy{MaxAttempts: 2}
		checkProblems(t, workflow.Validate(def, workflow.ValidateOptions{}), nil)
		def.Nodes[2].Code, def.Nodes[2].Prompt = "", "Is the amount over 1000?"
		checkProblems(t, workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}), []string{
			`node "check_amount", field "retry": a decision node without code has nothing to retry; retry applies to action nodes and to decision nodes with code`,
		})
	})
}
