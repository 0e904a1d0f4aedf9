package workflow

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const budgetBase = `
name: b
%s
nodes:
  - {id: start, type: start}
  - {id: a, type: action, prompt: "do a" %s}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: end}
`

func budgetDoc(workflowLine, nodeFields string) []byte {
	return []byte(strings.Replace(strings.Replace(budgetBase, "%s", workflowLine, 1), "%s", nodeFields, 1))
}

func TestParseBudget(t *testing.T) {
	def, err := Parse(budgetDoc("budget: {max_usd: 0.5, max_usd_per_day: 20, max_model_calls: 12}",
		", budget: {max_usd: 0.001, max_model_calls: 0}"))
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(def, ValidateOptions{AllowPrompt: true}); err != nil {
		t.Fatal(err)
	}
	want := &novav1.Budget{MaxUsd: proto.Float64(0.5), MaxUsdPerDay: proto.Float64(20), MaxModelCalls: proto.Int32(12)}
	if !proto.Equal(def.Budget, want) {
		t.Errorf("workflow budget %v, want %v", def.Budget, want)
	}
	// 0 is a limit (no model call at all), not "unset".
	wantNode := &novav1.Budget{MaxUsd: proto.Float64(0.001), MaxModelCalls: proto.Int32(0)}
	if !proto.Equal(def.Nodes[1].Budget, wantNode) {
		t.Errorf("node budget %v, want %v", def.Nodes[1].Budget, wantNode)
	}
	if def.Nodes[0].Budget != nil {
		t.Errorf("a node without budget has %v", def.Nodes[0].Budget)
	}
}

func TestBudgetErrors(t *testing.T) {
	tests := []struct {
		name, workflow, node string
		// The problem: node ("" for the workflow), field, and text in its message.
		nodeID, field, text string
	}{
		{"negative max_usd", "budget: {max_usd: -1}", "", "", "budget.max_usd", "0 or more, got -1"},
		{"negative per day on a node", "", ", budget: {max_usd_per_day: -0.5}", "a", "budget.max_usd_per_day", "0 or more, got -0.5"},
		{"negative calls", "budget: {max_model_calls: -3}", "", "", "budget.max_model_calls", "0 or more, got -3"},
		{"max_usd a word", "budget: {max_usd: lots}", "", "", "budget.max_usd", `must be a number of US dollars such as 0.25, got string "lots"`},
		{"max_usd quoted", `budget: {max_usd: "0.50"}`, "", "", "budget.max_usd", `got string "0.50"`},
		{"max_usd a currency", "", `, budget: {max_usd: "$1"}`, "a", "budget.max_usd", `got string "$1"`},
		{"max_usd_per_day a list", "budget: {max_usd_per_day: [1]}", "", "", "budget.max_usd_per_day", "got a list"},
		{"max_usd too large", "budget: {max_usd: 1e999}", "", "", "budget.max_usd", "1e999"},
		{"calls a fraction", "budget: {max_model_calls: 2.5}", "", "", "budget.max_model_calls", "whole number of calls, got number 2.5"},
		{"calls a word", "", ", budget: {max_model_calls: many}", "a", "budget.max_model_calls", `got string "many"`},
		{"budget not a mapping", "budget: 5", "", "", "budget", "must be a mapping"},
		{"misspelt limit", "budget: {max_usd_per_dya: 5}", "", "", "budget.max_usd_per_dya", `unknown field; did you mean "max_usd_per_day"?`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			def, err := Parse(budgetDoc(tc.workflow, tc.node))
			if err == nil {
				err = Validate(def, ValidateOptions{AllowPrompt: true})
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a *ValidationError", err)
			}
			for _, p := range ve.Problems {
				if p.NodeID == tc.nodeID && p.Field == tc.field && strings.Contains(p.Message, tc.text) {
					return
				}
			}
			t.Errorf("no problem on node %q, field %q with %q in:\n%v", tc.nodeID, tc.field, tc.text, err)
		})
	}
}

func TestFormatBudget(t *testing.T) {
	def, err := Parse(budgetDoc("budget: {max_usd: 0.001, max_usd_per_day: 2, max_model_calls: 0}", ", budget: {}"))
	if err != nil {
		t.Fatal(err)
	}
	out, err := FormatYAML(def)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"budget: {max_usd: 0.001, max_usd_per_day: 2, max_model_calls: 0}\n", "budget: {}\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	back, err := Parse(out)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(back, def) {
		t.Errorf("Parse(FormatYAML(def)) = %v, want %v", back, def)
	}
}

func TestBudgetSettings(t *testing.T) {
	b, err := BudgetSettings{MaxUSD: "0.25", MaxModelCalls: "20"}.Budget()
	if err != nil {
		t.Fatal(err)
	}
	if want := (&novav1.Budget{MaxUsd: proto.Float64(0.25), MaxModelCalls: proto.Int32(20)}); !proto.Equal(b, want) {
		t.Errorf("Budget() = %v, want %v", b, want)
	}
	if b, err := (BudgetSettings{}).Budget(); b != nil || err != nil {
		t.Errorf("no settings: %v, %v; want no budget", b, err)
	}
	_, err = BudgetSettings{MaxUSD: "-1", MaxUSDPerDay: "ten", MaxModelCalls: "1.5"}.Budget()
	for _, want := range []string{`NOVA_BUDGET_MAX_USD="-1"`, `NOVA_BUDGET_MAX_USD_PER_DAY="ten"`, `NOVA_BUDGET_MAX_MODEL_CALLS="1.5"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

func TestLimits(t *testing.T) {
	def, err := Parse(budgetDoc("budget: {max_usd: 1, max_model_calls: 0}", ", budget: {max_usd: 0.1, max_usd_per_day: 3}"))
	if err != nil {
		t.Fatal(err)
	}
	defaults := &novav1.Budget{MaxUsd: proto.Float64(5), MaxUsdPerDay: proto.Float64(50), MaxModelCalls: proto.Int32(40)}
	got := Limits(def, def.Nodes[1], defaults)
	want := []Limit{
		{Name: LimitMaxUSD, Value: 1},
		{Name: LimitMaxModelCalls, Value: 0},
		// The workflow sets no max_usd_per_day: the deployment's applies.
		{Name: LimitMaxUSDPerDay, Value: 50, Default: true},
		{Name: LimitMaxUSD, Value: 0.1, NodeID: "a"},
		{Name: LimitMaxUSDPerDay, Value: 3, NodeID: "a"},
	}
	if len(got) != len(want) {
		t.Fatalf("Limits = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("limit %d = %+v, want %+v", i, got[i], want[i])
		}
	}
	if s := want[2].Scope("b"); s != `workflow "b" (deployment default)` {
		t.Errorf("Scope = %q", s)
	}
	if s := want[3].Scope("b"); s != `node "a"` {
		t.Errorf("Scope = %q", s)
	}
	if got := Limits(def, def.Nodes[0], nil); len(got) != 2 {
		t.Errorf("start node without defaults: %+v, want the workflow's two limits", got)
	}
}
