package flow

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const aiYAML = `
name: ai
model: gpt-4o-mini
nodes:
  - {id: start, type: start}
  - {id: discount, type: action, prompt: "Calculate discount (10% if total > 1000)"}
  - {id: end, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: end}
`

// pipeline plays the agents: answer returns the result message for each
// command the engine issues.
func pipeline(t *testing.T, cfg Config, st *novav1.ExecutionState, first proto.Message, answer func(cmd proto.Message) proto.Message) []string {
	t.Helper()
	var seen []string
	cmd := first
	for st.Status == statusRunning {
		if cmd == nil {
			t.Fatal("no command issued while running")
		}
		res := answer(cmd)
		tr := New(st, cfg, time.Now())
		var err error
		switch r := res.(type) {
		case *novav1.InputAnalyzed:
			seen = append(seen, "analyze")
			err = applyStep(tr, func(t *Transition) error { return t.InputAnalyzed(r) })
		case *novav1.CodeGenerated:
			seen = append(seen, "generate:"+cmd.(*novav1.GenerateCode).Stage)
			err = applyStep(tr, func(t *Transition) error { return t.CodeGenerated(r) })
		case *novav1.CodeValidated:
			seen = append(seen, "validate")
			err = applyStep(tr, func(t *Transition) error { return t.CodeValidated(r) })
		case *novav1.CodeExecuted:
			seen = append(seen, "execute:"+cmd.(*novav1.ExecuteCode).Stage)
			err = applyStep(tr, func(t *Transition) error { return t.CodeExecuted(r) })
		case *novav1.OutputValidated:
			seen = append(seen, "output")
			err = applyStep(tr, func(t *Transition) error { return t.OutputValidated(r) })
		}
		if err != nil {
			t.Fatal(err)
		}
		cmd = nil
		for i := len(tr.out) - 1; i >= 0; i-- {
			if strings.HasPrefix(tr.out[i].Subject, "nova.cmd.") {
				cmd = tr.out[i].Msg
				break
			}
		}
	}
	return seen
}

func startAIExecution(t *testing.T, cfg Config, ctx map[string]any) (*novav1.ExecutionState, proto.Message) {
	t.Helper()
	def, err := workflow.Parse([]byte(aiYAML))
	if err != nil {
		t.Fatal(err)
	}
	c, _ := jsonvalue.ObjectOf(ctx)
	st := &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: c.Proto(), StartedAt: tsNow(time.Now())}
	tr := New(st, cfg, time.Now())
	startIn(tr)
	last := tr.out[len(tr.out)-1].Msg
	if _, ok := last.(*novav1.AnalyzeInput); !ok {
		t.Fatalf("AI node started with %T, want input analysis", last)
	}
	return st, last
}

func call(tokens int64) *novav1.AgentOutcome {
	return &novav1.AgentOutcome{Status: "success", DurationMs: 5,
		ModelCalls: []*novav1.ModelCall{{Model: "gpt-4o", PromptTokens: tokens, CompletionTokens: 10, CostUsd: 0.001, Scripted: true}}}
}

func TestAINodeHappyPath(t *testing.T) {
	cfg := testConfig()
	st, first := startAIExecution(t, cfg, map[string]any{"total": 1500.0})
	var genCalls int
	seen := pipeline(t, cfg, st, first, func(cmd proto.Message) proto.Message {
		switch c := cmd.(type) {
		case *novav1.AnalyzeInput:
			if c.Spec.Model != "gpt-4o-mini" || c.Spec.Task == "" {
				t.Errorf("analyze spec %+v", c.Spec)
			}
			return &novav1.InputAnalyzed{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, DecidedWithoutModel: true}
		case *novav1.GenerateCode:
			genCalls++
			return &novav1.CodeGenerated{Ref: c.Ref, Outcome: call(100), Code: "# STAGE: TASK\ncontext['discount'] = 150", Stage: "TASK"}
		case *novav1.ValidateCode:
			return &novav1.CodeValidated{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, Valid: true}
		case *novav1.ExecuteCode:
			u := jsonvalue.Proto([]byte(`{"discount": 150.0, "final_total": 1350.0}`))
			return &novav1.CodeExecuted{ExecutionId: c.ExecutionId, NodeId: c.NodeId, StepId: c.StepId, Sequence: c.Sequence, Status: "success", ContextUpdates: u}
		case *novav1.ValidateOutput:
			return &novav1.OutputValidated{Ref: c.Ref, Outcome: call(50), Valid: true, ModelConsulted: true}
		}
		t.Fatalf("unexpected command %T", cmd)
		return nil
	})
	if st.Status != statusSucceeded || genCalls != 1 {
		t.Fatalf("status %s (%s), generations %d, steps %v", st.Status, st.Error, genCalls, seen)
	}
	if got := strings.Join(seen, ","); got != "analyze,generate:TASK,validate,execute:TASK,output" {
		t.Errorf("steps %s", got)
	}
	if got := string(jsonvalue.MustObject(st.Context)["final_total"]); got != "1350.0" {
		t.Errorf("context %v", st.Context)
	}
}

func TestAINodeRetriesWithHistoryThenFails(t *testing.T) {
	cfg := testConfig()
	st, first := startAIExecution(t, cfg, map[string]any{"pdf": strings.Repeat("JVBERi0", 10)})
	var histories []int
	var executes []string // attempt/step_number of each task execution
	seen := pipeline(t, cfg, st, first, func(cmd proto.Message) proto.Message {
		switch c := cmd.(type) {
		case *novav1.AnalyzeInput:
			return &novav1.InputAnalyzed{Ref: c.Ref, Outcome: call(30), NeedsAnalysis: true}
		case *novav1.GenerateCode:
			if c.Stage == stageAnalysis {
				return &novav1.CodeGenerated{Ref: c.Ref, Outcome: call(80), Code: "context['_data_analysis'] = {'pages': 1}", Stage: "ANALYSIS"}
			}
			if got := string(c.DataInsights.GetRaw()); got != `{"pages":1.0}` {
				t.Errorf("task generation without insights: %v", c.DataInsights)
			}
			histories = append(histories, len(c.History))
			return &novav1.CodeGenerated{Ref: c.Ref, Outcome: call(200), Code: "code v" + string(rune('0'+c.Ref.Attempt)), Stage: "TASK"}
		case *novav1.ValidateCode:
			valid := !(c.Stage == stageTask && c.Ref.Attempt == 1)
			return &novav1.CodeValidated{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, Valid: valid,
				Findings: map[bool][]*novav1.Finding{false: {{Rule: "undefined-name", Message: "name 'totl' is not defined", Line: 1}}}[valid]}
		case *novav1.ExecuteCode:
			if c.Stage == stageAnalysis {
				u := jsonvalue.Proto([]byte(`{"_data_analysis": {"pages": 1.0}}`))
				return &novav1.CodeExecuted{ExecutionId: c.ExecutionId, NodeId: c.NodeId, StepId: c.StepId, Sequence: c.Sequence, Status: "success", ContextUpdates: u}
			}
			executes = append(executes, fmt.Sprintf("%d/%d", c.Attempt, c.StepNumber))
			return &novav1.CodeExecuted{ExecutionId: c.ExecutionId, NodeId: c.NodeId, StepId: c.StepId, Sequence: c.Sequence,
				Status: "error", ErrorKind: "code_error", Error: "KeyError: 'totals'", Traceback: "Traceback ...\nKeyError: 'totals'"}
		}
		t.Fatalf("unexpected command %T", cmd)
		return nil
	})
	if st.Status != statusFailed {
		t.Fatalf("status %s", st.Status)
	}
	if got := strings.Join(seen, ","); !strings.HasPrefix(got, "analyze,generate:ANALYSIS,validate,execute:ANALYSIS,generate:TASK,validate,generate:TASK") {
		t.Errorf("steps %s", got)
	}
	// The sandbox command names the node's attempt, and the step's number
	// apart (the sandbox span's attempt attribute reads the former).
	if got := strings.Join(executes, ","); got != "2/9,3/12" {
		t.Errorf("task executions as attempt/step_number: %s, want 2/9,3/12", got)
	}
	if len(histories) != 3 || histories[0] != 0 || histories[1] != 1 || histories[2] != 2 {
		t.Errorf("history lengths per attempt %v, want [0 1 2]", histories)
	}
	if !strings.Contains(st.Error, "failed after 3 attempts") || !strings.Contains(st.Error, "KeyError") {
		t.Errorf("error %q", st.Error)
	}
	if st.Nodes["discount"].Attempts != 3 || strings.Count(strings.Join(seen, ","), "analyze") != 1 {
		t.Errorf("attempts %d, steps %v", st.Nodes["discount"].Attempts, seen)
	}
}

func TestAINodeFailsFastWhenTheRuntimeIsUnavailable(t *testing.T) {
	cfg := testConfig()
	st, first := startAIExecution(t, cfg, map[string]any{"total": 1500.0})
	var generations int
	pipeline(t, cfg, st, first, func(cmd proto.Message) proto.Message {
		switch c := cmd.(type) {
		case *novav1.AnalyzeInput:
			return &novav1.InputAnalyzed{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}}
		case *novav1.GenerateCode:
			generations++
			return &novav1.CodeGenerated{Ref: c.Ref, Outcome: call(100), Code: "context['x'] = 1", Stage: "TASK"}
		case *novav1.ValidateCode:
			return &novav1.CodeValidated{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, Valid: true}
		case *novav1.ExecuteCode:
			return &novav1.CodeExecuted{ExecutionId: c.ExecutionId, NodeId: c.NodeId, StepId: c.StepId, Sequence: c.Sequence,
				Status: "error", ErrorKind: errorKindRuntimeUnavailable, Error: "this sandbox has no JavaScript runtime"}
		}
		t.Fatalf("unexpected command %T", cmd)
		return nil
	})
	if st.Status != statusFailed || generations != 1 || !strings.Contains(st.Error, "no JavaScript runtime") {
		t.Errorf("status %s after %d generations: %q", st.Status, generations, st.Error)
	}
}
