package e2e

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/novaflow/nova/pkg/llm"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/engine"
	"github.com/novaflow/nova/services/nova/stack"
)

// budgetModel is priced for these tests so that a few calls cost about a
// tenth of a cent: its prompt tokens dominate, as they do for code
// generation.
const budgetModel = "budget-model"

var budgetPrices = llm.PriceTable{budgetModel: {Input: 0.1, CachedInput: 0.05, Output: 0.01}}

const budgetRules = `
rules:
  - name: broken-code
    match: {agent: code-generator, user_contains: "broken"}
    respond:
      content: |
        # STAGE: TASK
        context['discount'] = totl * 0.1
  - name: discount-code
    match: {agent: code-generator}
    respond:
      content: |
        # STAGE: TASK
        context['discount'] = context['total'] * 0.1 if context['total'] > 1000 else 0
  - name: verdict
    match: {agent: output-validator}
    respond:
      content: '{"valid": true, "reason": "discount is 10% of the total over 1000 (scripted verdict)."}'
`

// The code cache is off: every execution must call the model, or the
// budgets would have nothing to count.
const budgetWorkflow = `
name: NAME
model: budget-model
budget: BUDGET
cache: false
nodes:
  - {id: start, type: start}
  - {id: discount, type: action, prompt: "PROMPT"}
  - {id: done, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: done}
`

func budgetDef(t *testing.T, name, budget, prompt string) *novav1.WorkflowDefinition {
	t.Helper()
	r := strings.NewReplacer("NAME", name, "BUDGET", budget, "PROMPT", prompt)
	return parseAI(t, r.Replace(budgetWorkflow))
}

// rejectionsByLimit reads nova_llm_budget_rejections_total by limit.
func rejectionsByLimit(t *testing.T, e *env) map[string]float64 {
	t.Helper()
	return counterBy(t, e, "nova_llm_budget_rejections_total", "limit")
}

// counterBy reads the counter name of the stack's metrics, summed by the
// value of its label by.
func counterBy(t *testing.T, e *env, name, by string) map[string]float64 {
	t.Helper()
	families, err := e.s.Metrics().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			out[label(m, by)] += m.GetCounter().GetValue()
		}
	}
	return out
}

// daySpend reads a day counter of max_usd_per_day as the engine stores it.
func (e *env) daySpend(key string) (spent float64, calls int64, held float64) {
	e.t.Helper()
	kv, err := e.bus.JetStream().KeyValue(e.ctx, engine.BucketBudget)
	if err != nil {
		e.t.Fatal(err)
	}
	entry, err := kv.Get(e.ctx, key)
	if err != nil {
		e.t.Fatalf("day counter %s: %v", key, err)
	}
	var r struct {
		SpentUSD   float64            `json:"spent_usd"`
		ModelCalls int64              `json:"model_calls"`
		Held       map[string]float64 `json:"held"`
	}
	if err := json.Unmarshal(entry.Value(), &r); err != nil {
		e.t.Fatal(err)
	}
	for _, h := range r.Held {
		held += h
	}
	return r.SpentUSD, r.ModelCalls, held
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestBudget: spend limits in currency, with the scripted model priced by a
// price table of the test's own.
func TestBudget(t *testing.T) {
	e := startAIEnv(t, budgetRules, func(o *stack.Options) {
		o.LLM.Prices = budgetPrices
		// The budget, not the attempts, must stop the retries.
		engineOf(o).MaxAttempts = 10
	})
	t.Run("max_usd stops a retrying node", func(t *testing.T) { testMaxUSD(t, e) })
	t.Run("max_usd_per_day holds across 20 executions at once", func(t *testing.T) { testMaxUSDPerDay(t, e) })
}

// testMaxUSD: the generated code never passes validation, so the node
// retries; each attempt's generation call costs under $0.0001, and the
// attempt whose call would pass max_usd: 0.001 is not made. The node and the
// workflow fail with budget_exceeded, naming the limit and the amounts; the
// spend (per node and per execution, in the completion, the chain of work
// and `nova run --json`'s fields) stays within the limit.
func testMaxUSD(t *testing.T, e *env) {
	before := e.requestCounts()[codeGenerator]
	wc := e.run(budgetDef(t, "budget-retry", "{max_usd: 0.001}", "Calculate discount (10% if total > 1000); broken"),
		map[string]any{"total": 1500})
	generations := e.requestCounts()[codeGenerator] - before
	if wc.Status != "failed" {
		t.Fatalf("status %s, want failed", wc.Status)
	}
	want := `node "discount" failed: budget_exceeded: max_usd of workflow "budget-retry": $`
	if !strings.HasPrefix(wc.Error, want) || !strings.Contains(wc.Error, " spent of $0.001000 allowed; the next model call (code-generator, budget-model) would cost up to $") {
		t.Errorf("error %q, want it to start %q and name the amounts", wc.Error, want)
	}
	if generations < 2 || generations >= 10 {
		t.Errorf("%d generation calls, want the node to have retried and stopped at the budget before its 10 attempts", generations)
	}
	if wc.CostUsd <= 0 || wc.CostUsd > 0.001 || wc.ModelCalls != int32(generations) {
		t.Errorf("execution spend $%g in %d calls, want within $0.001 in %d calls", wc.CostUsd, wc.ModelCalls, generations)
	}
	n := summaries(wc)["discount"]
	if n.GetCostUsd() != wc.CostUsd || n.GetModelCalls() != wc.ModelCalls || int(n.GetAttempts()) != generations+1 {
		t.Errorf("node summary %v: want the execution's spend, attempt %d refused", n, generations+1)
	}

	doc := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
	meta := doc.AIMetadata
	be := obj(t, meta, "budget_exceeded")
	if meta["status"] != "budget_exceeded" || doc.ErrorKind != "budget_exceeded" || be["limit"] != "max_usd" ||
		be["scope"] != `workflow "budget-retry"` || num(be["allowed"]) != 0.001 {
		t.Errorf("ai_metadata status %v, error_kind %q, budget_exceeded %v", meta["status"], doc.ErrorKind, be)
	}
	// The refusal was due: what was spent and the next call's worst case
	// together pass the limit; what was spent does not.
	if spent, needed := num(be["spent"]), num(be["needed_usd"]); math.Abs(spent-wc.CostUsd) > 1e-12 || spent+needed <= 0.001 {
		t.Errorf("spent $%g (execution $%g), next call up to $%g: the call would have fit $0.001", spent, wc.CostUsd, needed)
	}
	if math.Abs(doc.CostUSD-wc.CostUsd) > 1e-12 || doc.ModelCalls != generations {
		t.Errorf("chain_of_work cost_usd %v, model_calls %d", doc.CostUSD, doc.ModelCalls)
	}
	// Each call cost what its usage is at the price table's prices, at
	// most what was estimated before it was made.
	var gens []string
	for _, s := range stepsNamed(doc, "code_generation") {
		gens = append(gens, s.Status)
		if s.Status == "success" && (s.CostUSD <= 0 || s.CostUSD > num(s.OutputData["estimated_usd"])) {
			t.Errorf("generation step %d: cost $%g, estimated $%v", s.StepNumber, s.CostUSD, s.OutputData["estimated_usd"])
		}
	}
	if len(gens) != generations+1 || gens[len(gens)-1] != "error" {
		t.Errorf("generation steps %v, want %d that ran and the refused one last", gens, generations)
	}
	exec, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	var stored float64
	for _, n := range exec.Nodes {
		if n.ID == "discount" {
			stored = n.CostUSD
		}
	}
	if math.Abs(exec.CostUSD-wc.CostUsd) > 1e-12 || exec.ModelCalls != generations || stored != wc.CostUsd {
		t.Errorf("executions document: cost_usd %v, model_calls %d, nodes %+v", exec.CostUSD, exec.ModelCalls, exec.Nodes)
	}
	if got := rejectionsByLimit(t, e); got["max_usd"] != 1 {
		t.Errorf("nova_llm_budget_rejections_total by limit %v, want max_usd 1", got)
	}
	t.Logf("max_usd $0.001: %d generations made, $%.6f spent, then %s", generations, wc.CostUsd, wc.Error)
}

// testMaxUSDPerDay: 20 executions of one workflow start at once under a
// max_usd_per_day of about seven executions' worth. Each model step holds a
// share of the day in the KV counter (compare-and-set), so together they
// never spend more than the day allows: some succeed, the others fail with
// budget_exceeded, and the day's counter holds exactly what they spent.
func testMaxUSDPerDay(t *testing.T, e *env) {
	// One execution, without a budget, shows what one costs.
	one := e.run(budgetDef(t, "budget-day-probe", "{}", "Calculate discount (10% if total > 1000)"), map[string]any{"total": 1500})
	succeeded(t, one)
	perRun := one.CostUsd
	if perRun <= 0 || one.ModelCalls != 2 {
		t.Fatalf("one execution: $%g in %d calls, want a cost in 2 calls", perRun, one.ModelCalls)
	}
	limit := math.Round(7*perRun*1e6) / 1e6
	def := budgetDef(t, "budget-day", fmt.Sprintf("{max_usd_per_day: %g}", limit), "Calculate discount (10% if total > 1000)")
	day := time.Now().UTC().Format(time.DateOnly)

	const n = 20
	results := make([]*novav1.WorkflowCompleted, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			wc, err := e.client.Run(e.ctx, def, map[string]any{"total": 1500 + i})
			if err != nil {
				t.Errorf("execution %d: %v", i, err)
				return
			}
			results[i] = wc
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var total float64
	var ok, stopped int
	for i, wc := range results {
		total += wc.CostUsd
		switch {
		case wc.Status == "succeeded":
			ok++
		case strings.Contains(wc.Error, fmt.Sprintf(`budget_exceeded: max_usd_per_day of workflow "budget-day" on %s (UTC): $`, day)) &&
			strings.Contains(wc.Error, " allowed"):
			stopped++
		default:
			t.Errorf("execution %d: %s, %q; want success or budget_exceeded on max_usd_per_day", i, wc.Status, wc.Error)
		}
	}
	if total > limit+1e-12 {
		t.Errorf("20 executions spent $%.9f together, over max_usd_per_day $%g", total, limit)
	}
	if ok == 0 || stopped == 0 {
		t.Errorf("%d succeeded, %d stopped at the budget; want some of each", ok, stopped)
	}
	key := engine.DayKey("budget-day", "", day)
	spent, calls, held := e.daySpend(key)
	if math.Abs(spent-total) > 1e-12 || held != 0 {
		t.Errorf("day counter %s: spent $%.9f, held $%g; want $%.9f, nothing held", key, spent, held, total)
	}
	var modelCalls int64
	for _, wc := range results {
		modelCalls += int64(wc.ModelCalls)
	}
	if calls != modelCalls {
		t.Errorf("day counter %s: %d model calls, the executions made %d", key, calls, modelCalls)
	}
	if got := rejectionsByLimit(t, e); got["max_usd_per_day"] == 0 {
		t.Errorf("nova_llm_budget_rejections_total by limit %v, want max_usd_per_day counted", got)
	}
	t.Logf("max_usd_per_day $%g (one execution costs $%.6f): %d succeeded, %d stopped at the budget, $%.6f spent in %d calls",
		limit, perRun, ok, stopped, total, calls)
}
