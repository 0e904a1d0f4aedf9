package flow

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const budgetYAML = `
name: ai
model: gpt-4o-mini
budget: {max_usd: 0.001}
nodes:
  - {id: start, type: start}
  - {id: discount, type: action, prompt: "Calculate discount (10% if total > 1000)" NODE}
  - {id: end, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: end}
`

// budgetYAMLWith is budgetYAML with fields added to the AI node.
func budgetYAMLWith(nodeFields string) string {
	return strings.Replace(budgetYAML, "NODE", nodeFields, 1)
}

// run drives an execution of yaml through the AI pipeline in memory: answer
// plays the agents. It returns every event the engine published.
func run(t *testing.T, cfg Config, yaml string, answer func(cmd proto.Message) proto.Message) (*novav1.ExecutionState, []OutEvent) {
	t.Helper()
	def, err := workflow.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}); err != nil {
		t.Fatal(err)
	}
	c, _ := jsonvalue.ObjectOf(map[string]any{"total": 1500.0})
	st := &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: c.Proto(), StartedAt: tsNow(time.Now())}
	tr := New(st, cfg, time.Now())
	startIn(tr)
	all := tr.out
	for st.Status == statusRunning {
		var cmd proto.Message
		for i := len(tr.out) - 1; i >= 0 && cmd == nil; i-- {
			if strings.HasPrefix(tr.out[i].Subject, "nova.cmd.") {
				cmd = tr.out[i].Msg
			}
		}
		if cmd == nil {
			t.Fatal("no command issued while running")
		}
		tr = New(st, cfg, time.Now())
		var err error
		switch r := answer(cmd).(type) {
		case *novav1.InputAnalyzed:
			err = applyStep(tr, func(t *Transition) error { return t.InputAnalyzed(r) })
		case *novav1.CodeGenerated:
			err = applyStep(tr, func(t *Transition) error { return t.CodeGenerated(r) })
		case *novav1.CodeValidated:
			err = applyStep(tr, func(t *Transition) error { return t.CodeValidated(r) })
		case *novav1.CodeExecuted:
			err = applyStep(tr, func(t *Transition) error { return t.CodeExecuted(r) })
		case *novav1.OutputValidated:
			err = applyStep(tr, func(t *Transition) error { return t.OutputValidated(r) })
		}
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, tr.out...)
	}
	return st, all
}

// modelAgent answers like an agent under an allowance: a call costing cost
// is made only if it fits, else refused as pkg/llm refuses it.
func modelAgent(ref *novav1.StepRef, agent string, cost float64) (*novav1.AgentOutcome, bool) {
	a := ref.GetAllowance()
	refuse := func(l *novav1.BudgetLimit, spent, needed, given float64) (*novav1.AgentOutcome, bool) {
		be := &novav1.BudgetExceeded{Limit: l, StepSpent: spent, Needed: needed, Given: given, Agent: agent, Model: "gpt-4o-mini"}
		return &novav1.AgentOutcome{Status: "error", Error: describe(be), BudgetExceeded: be}, false
	}
	if a.ModelCalls != nil && a.GetModelCalls() < 1 {
		return refuse(a.GetCallsLimit(), 0, 1, float64(a.GetModelCalls()))
	}
	if a.Usd != nil && cost > a.GetUsd() {
		return refuse(a.GetUsdLimit(), 0, cost, a.GetUsd())
	}
	return &novav1.AgentOutcome{Status: "success", ModelCalls: []*novav1.ModelCall{{Model: "gpt-4o-mini", PromptTokens: 100, CostUsd: cost}}}, true
}

// describe is the message pkg/llm gives a refusal (the engine passes the
// agent's message on as it is).
func describe(be *novav1.BudgetExceeded) string {
	l := be.GetLimit()
	return fmt.Sprintf("budget_exceeded: %s of %s: $%.6f spent of $%.6f allowed; the next model call (%s, %s) would cost up to $%.6f",
		l.GetName(), l.GetScope(), l.GetSpent()+be.GetStepSpent(), l.GetAllowed(), be.GetAgent(), be.GetModel(), be.GetNeeded())
}

// TestBudgetStopsRetries: a node whose code keeps failing retries until the
// next generation would pass max_usd: that call is not made, the node and
// the workflow fail with budget_exceeded naming the limit and the amounts,
// and what was spent is kept per node and per execution.
func TestBudgetStopsRetries(t *testing.T) {
	cfg := testConfig()
	var allowances []float64
	st, events := run(t, cfg, budgetYAMLWith(""), func(cmd proto.Message) proto.Message {
		switch c := cmd.(type) {
		case *novav1.AnalyzeInput:
			return &novav1.InputAnalyzed{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, DecidedWithoutModel: true}
		case *novav1.GenerateCode:
			a := c.Ref.GetAllowance()
			if a.UsdLimit.GetName() != "max_usd" || a.UsdLimit.GetScope() != `workflow "ai"` || a.ModelCalls != nil {
				t.Errorf("allowance %v", a)
			}
			allowances = append(allowances, a.GetUsd())
			outcome, _ := modelAgent(c.Ref, "code-generator", 0.0004)
			return &novav1.CodeGenerated{Ref: c.Ref, Outcome: outcome, Code: "context['discount'] = totl", Stage: "TASK"}
		case *novav1.ValidateCode:
			return &novav1.CodeValidated{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "success"}, Valid: false,
				Findings: []*novav1.Finding{{Rule: "undefined-name", Message: "name 'totl' is not defined", Line: 1}}}
		}
		t.Fatalf("unexpected command %T", cmd)
		return nil
	})
	if len(allowances) != 3 || math.Abs(allowances[0]-0.001) > 1e-12 || math.Abs(allowances[1]-0.0006) > 1e-12 || math.Abs(allowances[2]-0.0002) > 1e-12 {
		t.Errorf("allowances of the generations %v, want [0.001 0.0006 0.0002]", allowances)
	}
	want := `node "discount" failed: budget_exceeded: max_usd of workflow "ai": $0.000800 spent of $0.001000 allowed; ` +
		`the next model call (code-generator, gpt-4o-mini) would cost up to $0.000400`
	if st.Status != statusFailed || st.Error != want {
		t.Errorf("status %s, error\n%s\nwant\n%s", st.Status, st.Error, want)
	}
	if s := st.GetSpend(); math.Abs(s.GetUsd()-0.0008) > 1e-12 || s.GetModelCalls() != 2 {
		t.Errorf("execution spend %v, want $0.0008 in 2 calls", s)
	}
	var nc *novav1.NodeCompleted
	var wc *novav1.WorkflowCompleted
	for _, o := range events {
		switch m := o.Msg.(type) {
		case *novav1.NodeCompleted:
			if m.NodeId == "discount" {
				nc = m
			}
		case *novav1.WorkflowCompleted:
			wc = m
		}
	}
	if nc == nil || nc.ErrorKind != "budget_exceeded" || nc.ModelCalls != 2 || math.Abs(nc.CostUsd-0.0008) > 1e-12 {
		t.Fatalf("node completed %v", nc)
	}
	meta := nc.AiMetadata.AsMap()
	be, _ := meta["budget_exceeded"].(map[string]any)
	if meta["status"] != "budget_exceeded" || be["limit"] != "max_usd" || be["allowed"] != 0.001 || be["needed_usd"] != 0.0004 ||
		math.Abs(be["spent"].(float64)-0.0008) > 1e-12 {
		t.Errorf("ai_metadata status %v, budget_exceeded %v", meta["status"], be)
	}
	if wc == nil || wc.Error != want || math.Abs(wc.CostUsd-0.0008) > 1e-12 || wc.ModelCalls != 2 {
		t.Fatalf("workflow completed %v", wc)
	}
	for _, n := range wc.Nodes {
		if n.Id == "discount" && (n.ModelCalls != 2 || n.Attempts != 3) {
			t.Errorf("node summary %v", n)
		}
	}
}

// TestAllowanceOfEachLimit: a node's own limits apply besides the
// workflow's, and a deployment default fills what the workflow leaves
// unset; the tightest limit is the one the step is told of. Without any
// budget a command carries no allowance.
func TestAllowanceOfEachLimit(t *testing.T) {
	tests := []struct {
		name      string
		yaml      string
		defaults  *novav1.Budget
		usd       *float64
		usdLimit  string
		calls     *int32
		callLimit string
	}{
		{name: "none", yaml: strings.Replace(budgetYAMLWith(""), "budget: {max_usd: 0.001}", "", 1)},
		{name: "workflow", yaml: budgetYAMLWith(""), usd: proto.Float64(0.001), usdLimit: `max_usd of workflow "ai"`},
		{name: "node tighter", yaml: budgetYAMLWith(", budget: {max_usd: 0.0005, max_model_calls: 4}"),
			usd: proto.Float64(0.0005), usdLimit: `max_usd of node "discount"`, calls: proto.Int32(4), callLimit: `max_model_calls of node "discount"`},
		{name: "deployment default", yaml: budgetYAMLWith(""), defaults: &novav1.Budget{MaxUsd: proto.Float64(5), MaxModelCalls: proto.Int32(3)},
			usd: proto.Float64(0.001), usdLimit: `max_usd of workflow "ai"`, calls: proto.Int32(3), callLimit: `max_model_calls of workflow "ai" (deployment default)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Budget = tc.defaults
			var a *novav1.Allowance
			run(t, cfg, tc.yaml, func(cmd proto.Message) proto.Message {
				c, ok := cmd.(*novav1.AnalyzeInput)
				if !ok {
					t.Fatalf("command %T", cmd)
				}
				a = c.Ref.GetAllowance()
				// Ends the run: the node fails on a failed input analysis.
				return &novav1.InputAnalyzed{Ref: c.Ref, Outcome: &novav1.AgentOutcome{Status: "error", Error: "stop"}}
			})
			if tc.usd == nil && tc.calls == nil {
				if a != nil {
					t.Errorf("allowance %v without a budget", a)
				}
				return
			}
			if (a.Usd == nil) != (tc.usd == nil) || a.GetUsd() != *cmpOr(tc.usd) ||
				(tc.usd != nil && a.UsdLimit.GetName()+" of "+a.UsdLimit.GetScope() != tc.usdLimit) {
				t.Errorf("usd %v (%v), want %v (%s)", a.Usd, a.UsdLimit, tc.usd, tc.usdLimit)
			}
			if (a.ModelCalls == nil) != (tc.calls == nil) || (tc.calls != nil && (a.GetModelCalls() != *tc.calls ||
				a.CallsLimit.GetName()+" of "+a.CallsLimit.GetScope() != tc.callLimit)) {
				t.Errorf("calls %v (%v), want %v (%s)", a.ModelCalls, a.CallsLimit, tc.calls, tc.callLimit)
			}
		})
	}
}

func cmpOr(p *float64) *float64 {
	if p == nil {
		return new(float64)
	}
	return p
}

// TestDayShareGrowsOnRequest: under max_usd_per_day a model step asks to
// hold a share of the day; when a call needs more than its share the step
// is issued again asking for more, and the share it held is released with
// what it spent.
func TestDayShareGrowsOnRequest(t *testing.T) {
	cfg := testConfig()
	yaml := strings.Replace(budgetYAMLWith(""), "budget: {max_usd: 0.001}", "budget: {max_usd_per_day: 5}", 1)
	def, _ := workflow.Parse([]byte(yaml))
	c, _ := jsonvalue.ObjectOf(map[string]any{"total": 1500.0})
	st := &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: c.Proto(), StartedAt: tsNow(time.Now())}
	tr := New(st, cfg, time.Now())
	startIn(tr)
	day := tr.now.UTC().Format(time.DateOnly)
	if len(tr.BudgetFx.Holds) != 1 {
		t.Fatalf("holds %+v, want one for the input analysis", tr.BudgetFx.Holds)
	}
	h := tr.BudgetFx.Holds[0]
	if h.Want != 0.1 || len(h.Days) != 1 || h.Days[0].Key != "ai."+day || h.Step != line0(st).PendingStepId {
		t.Errorf("hold %+v, want 5/50 on ai.%s for the pending step", h, day)
	}
	if got := line0(st).Ai.HeldDayKeys; len(got) != 1 || got[0] != "ai."+day {
		t.Errorf("held day keys %v", got)
	}
	// The agent was given a share of $0.1 and needs $0.3 for its call.
	cmd := tr.out[len(tr.out)-1].Msg.(*novav1.AnalyzeInput)
	limit := &novav1.BudgetLimit{Name: "max_usd_per_day", Scope: `workflow "ai"`, Allowed: 5, Day: day, Share: true}
	be := &novav1.BudgetExceeded{Limit: limit, Needed: 0.3, Given: 0.1, Agent: "input-analyzer", Model: "gpt-4o-mini"}
	first := line0(st).PendingStepId
	tr = New(st, cfg, time.Now())
	err := applyStep(tr, func(t *Transition) error {
		return t.InputAnalyzed(&novav1.InputAnalyzed{Ref: cmd.Ref, Outcome: &novav1.AgentOutcome{Status: "error",
			Error: describe(be), BudgetExceeded: be}})
	})
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != statusRunning || line0(st).PendingStepId == first {
		t.Fatalf("status %s, pending %s: want the input analysis issued again", st.Status, line0(st).PendingStepId)
	}
	if s := tr.BudgetFx.Settles; len(s) != 1 || s[0].Step != first || s[0].USD != 0 {
		t.Errorf("settles %+v, want the first step's share released", s)
	}
	if h := tr.BudgetFx.Holds; len(h) != 1 || h[0].Want != 0.3 || h[0].Step != line0(st).PendingStepId {
		t.Errorf("holds %+v, want $0.3 (what the call needs) for the new step", h)
	}
	if _, ok := tr.out[len(tr.out)-1].Msg.(*novav1.AnalyzeInput); !ok {
		t.Errorf("last event %T, want the input analysis again", tr.out[len(tr.out)-1].Msg)
	}
}

func TestDayKey(t *testing.T) {
	for _, tc := range []struct{ workflow, node, want string }{
		{"invoice-routing", "", "invoice-routing.2026-03-01"},
		{"ai", "discount", "ai.discount.2026-03-01"},
		{"My flow.v2", "n 1", "=TXkgZmxvdy52Mg.=biAx.2026-03-01"},
	} {
		if got := DayKey(tc.workflow, tc.node, "2026-03-01"); got != tc.want {
			t.Errorf("DayKey(%q, %q) = %q, want %q", tc.workflow, tc.node, got, tc.want)
		}
	}
}
