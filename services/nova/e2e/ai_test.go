package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/code-generator/generator"
	"github.com/novaflow/nova/services/input-analyzer/analyzer"
	"github.com/novaflow/nova/services/nova/stack"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
)

// TestAINodes runs nodes written as a task (`prompt`) through the whole
// agent pipeline: input analyzer, code generator, code validator, sandbox and
// output validator, each a module of the stack talking over the embedded
// NATS, with the chain of work in the embedded FerretDB and the model
// answered by NOVA's scripted OpenAI-compatible server over HTTP. Each
// subtest is one of the behaviours the AI-node issue must show; at the end
// it logs what an AI node costs in these tests.
func TestAINodes(t *testing.T) {
	costs := &aiCosts{}
	t.Run("simple task: one generation call, no analysis", func(t *testing.T) { testSimpleTask(t, costs) })
	t.Run("PDF invoice: analysis first, base64 never in a prompt", func(t *testing.T) { testPDFInvoice(t, costs) })
	t.Run("retry: each error fed to the next attempt", func(t *testing.T) { testRetry(t, costs) })
	t.Run("three failures fail the node and the workflow", func(t *testing.T) { testThreeFailures(t, costs) })
	t.Run("AI decision node routes the workflow", func(t *testing.T) { testAIDecision(t, costs) })
	t.Run("secret in no prompt, audit document or span", func(t *testing.T) { testSecret(t, costs) })
	t.Run("OpenAI wire shape, tool call round trip, transient 429", func(t *testing.T) { testOpenAIShape(t, costs) })
	t.Run("model: node beats workflow beats agent default", func(t *testing.T) { testModelResolution(t, costs) })
	costs.report(t)
}

const discountWorkflow = `
name: discount
nodes:
  - {id: start, type: start}
  - {id: discount, type: action, prompt: "Calculate discount (10% if total > 1000)"}
  - {id: done, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: done}
`

// testSimpleTask: a context of small scalars is decided without the model,
// so the node costs one generation call (and the output validator's
// verdict), in one stage.
func testSimpleTask(t *testing.T, costs *aiCosts) {
	e := startAIEnvFile(t, demoRules)
	wc := e.run(parseAI(t, discountWorkflow), map[string]any{"total": 1500})
	succeeded(t, wc)
	out := ctxMap(wc.Context)
	if out["discount"] != 150.0 || out["final_total"] != 1350.0 {
		t.Errorf("discount %v, final_total %v; want 150 and 1350", out["discount"], out["final_total"])
	}
	if n := summaries(wc)["discount"]; n.GetAttempts() != 1 {
		t.Errorf("discount summary attempts = %d, want 1", n.GetAttempts())
	}

	reqs := e.modelRequests("")
	checkScripted(t, reqs)
	if got, want := e.requestCounts(), map[string]int{codeGenerator: 1, outputValidator: 1}; !maps.Equal(got, want) {
		t.Errorf("model requests by agent = %v, want %v (the input analyzer decides small scalars without the model)", got, want)
	}

	n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
	meta := costs.node(t, n)
	for k, want := range map[string]any{"attempts": 1.0, "stages_used": 1.0, "model_calls": 2.0, "status": "success",
		"scripted": true, "model": "gpt-4o", "prompt_task": "Calculate discount (10% if total > 1000)"} {
		if meta[k] != want {
			t.Errorf("ai_metadata.%s = %#v, want %#v", k, meta[k], want)
		}
	}
	ia := obj(t, meta, "input_analysis")
	if ia["needs_analysis"] != false || ia["decided_without_model"] != true {
		t.Errorf("ai_metadata.input_analysis = %v, want needs_analysis false, decided without the model", ia)
	}
	if _, ok := meta["analysis_metadata"]; ok {
		t.Errorf("ai_metadata has analysis_metadata %v; no analysis ran", meta["analysis_metadata"])
	}
	code, _ := meta["generated_code"].(string)
	mustContain(t, "ai_metadata.generated_code", code, "# STAGE: TASK", "context['final_total']")
	if n.CodeExecuted != code {
		t.Errorf("code_executed = %q, want the generated code", n.CodeExecuted)
	}

	// Tokens and cost are the API's usage priced by the price table.
	prompt, completion, cached, cost := answeredUsage(t, reqs)
	tokens := obj(t, meta, "tokens")
	if num(tokens["prompt"]) != float64(prompt) || num(tokens["completion"]) != float64(completion) ||
		num(tokens["cached"]) != float64(cached) || num(tokens["total"]) != float64(prompt+completion) || prompt == 0 {
		t.Errorf("ai_metadata.tokens = %v, want the usage the server answered: prompt %d, completion %d, cached %d",
			tokens, prompt, completion, cached)
	}
	if got := num(meta["cost_usd"]); cost == 0 || fmt.Sprintf("%.9f", got) != fmt.Sprintf("%.9f", cost) {
		t.Errorf("ai_metadata.cost_usd = %v, want %v", got, cost)
	}

	checkSteps(t, n, "input_analysis@0", "code_generation@1", "code_validation@1", "code_execution@1", "output_validation@1")
	if gen := stepsNamed(n, "code_generation"); len(gen) == 1 &&
		(gen[0].ModelUsed != "gpt-4o" || gen[0].TokensInput == 0 || gen[0].CostUSD == 0 || gen[0].GeneratedCode != code) {
		t.Errorf("code_generation step: model %q, %d prompt tokens, $%v, code %q; want gpt-4o's call and the code",
			gen[0].ModelUsed, gen[0].TokensInput, gen[0].CostUSD, gen[0].GeneratedCode)
	}
}

// testPDFInvoice: a base64 PDF makes the input analyzer ask for analysis;
// the analysis code runs once and its findings reach the task prompt, the
// task code reads the total from the PDF, and no prompt carries the PDF.
func testPDFInvoice(t *testing.T, costs *aiCosts) {
	const rules = `
rules:
  - name: input-analyzer
    match: {agent: input-analyzer, user_contains: invoice_pdf_b64}
    respond:
      content: '{"needs_analysis": true, "reasoning": "invoice_pdf_b64 is a base64-encoded document whose pages and text layer are unknown.", "complexity": "high"}'
  - name: analysis-code
    match: {agent: code-generator, user_contains: "Write the analysis code now"}
    respond:
      content: |
        # STAGE: ANALYSIS
        import base64
        import fitz
        doc = fitz.open(stream=base64.b64decode(context['invoice_pdf_b64']), filetype='pdf')
        text = ''.join(page.get_text() for page in doc)
        context['_data_analysis'] = {
            'format': 'pdf',
            'pages': doc.page_count,
            'text_chars': len(text),
            'has_text_layer': bool(text.strip()),
            'first_line': text.strip().splitlines()[0] if text.strip() else '',
        }
  - name: task-code
    match: {agent: code-generator, user_contains: ["Write the task code now", "DATA INSIGHTS"]}
    respond:
      content: |
        # STAGE: TASK
        import base64
        import re
        import fitz
        doc = fitz.open(stream=base64.b64decode(context['invoice_pdf_b64']), filetype='pdf')
        text = '\n'.join(page.get_text() for page in doc)
        match = re.search(r'Total:\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Z]{3})', text)
        if match is None:
            raise ValueError('no "Total:" line in the invoice text')
        context['total'] = float(match.group(1))
        context['currency'] = match.group(2)
  - name: output-validator
    match: {agent: output-validator}
    respond:
      content: '{"valid": true, "reason": "total and currency are read from the invoice text (scripted verdict)."}'
`
	pdf := invoicePDF(t)
	e := startAIEnv(t, rules)
	e.waitRuntimeDocs()
	def := parseAI(t, `
name: invoice-total
nodes:
  - {id: start, type: start}
  - {id: extract, type: action, prompt: "Extract the invoice's total amount and currency from the PDF"}
  - {id: done, type: end}
edges:
  - {from: start, to: extract}
  - {from: extract, to: done}
`)
	wc := e.run(def, map[string]any{"invoice_pdf_b64": pdf})
	succeeded(t, wc)
	if out := ctxMap(wc.Context); out["total"] != 1234.56 || out["currency"] != "EUR" {
		t.Errorf("total %v, currency %v; want 1234.56 EUR", out["total"], out["currency"])
	}

	reqs := e.modelRequests("")
	checkScripted(t, reqs)
	if got, want := e.requestCounts(), map[string]int{inputAnalyzer: 1, codeGenerator: 2, outputValidator: 1}; !maps.Equal(got, want) {
		t.Errorf("model requests by agent = %v, want %v", got, want)
	}
	// The PDF never reaches the model: not its base64, not its bytes.
	for i, r := range reqs {
		for _, data := range []string{pdf[:200], pdf[len(pdf)/2 : len(pdf)/2+100], "JVBERi0"} {
			if bytes.Contains(r.Body, []byte(data)) || strings.Contains(r.Text(), data) {
				t.Errorf("model request %d (%s) contains the PDF's base64 (%.20q...)", i, r.Agent, data)
			}
		}
	}
	mustContain(t, "the input analyzer's prompt", e.modelRequests(inputAnalyzer)[0].LastUser(), "invoice_pdf_b64", "base64")
	gen := e.modelRequests(codeGenerator)
	if len(gen) == 2 {
		mustContain(t, "the analysis prompt", gen[0].LastUser(), "invoice_pdf_b64", writeAnalysis)
		// The analysis's findings are the task prompt's data insights.
		mustContain(t, "the task prompt", gen[1].LastUser(), writeTask, "DATA INSIGHTS", "pages", "text_chars", "ACME Supplies Ltd")
	}

	n := nodeDoc(t, e.chain(wc.ExecutionId), "extract", 1)
	meta := costs.node(t, n)
	if meta["stages_used"] != 2.0 || meta["attempts"] != 1.0 || meta["status"] != "success" {
		t.Errorf("ai_metadata: stages_used %v, attempts %v, status %v; want 2, 1, success", meta["stages_used"], meta["attempts"], meta["status"])
	}
	if ia := obj(t, meta, "input_analysis"); ia["needs_analysis"] != true || ia["decided_without_model"] != false || ia["complexity"] != "high" {
		t.Errorf("ai_metadata.input_analysis = %v, want the model's decision: needs analysis, high", ia)
	}
	analysis := obj(t, meta, "analysis_metadata")
	code, _ := analysis["code"].(string)
	mustContain(t, "analysis_metadata.code", code, "# STAGE: ANALYSIS", "_data_analysis")
	result := obj(t, analysis, "result")
	if result["pages"] != 1.0 || num(result["text_chars"]) < 40 || result["has_text_layer"] != true || result["format"] != "pdf" {
		t.Errorf("analysis_metadata.result = %v, want one page of text", result)
	}
	if timings := obj(t, analysis, "timings"); num(timings["execution_ms"]) <= 0 || num(timings["generation_ms"]) < 0 {
		t.Errorf("analysis_metadata.timings = %v, want the analysis's generation and execution times", timings)
	}
	checkSteps(t, n, "input_analysis@0", "analysis_generation@0", "analysis_validation@0", "analysis_execution@0",
		"code_generation@1", "code_validation@1", "code_execution@1", "output_validation@1")
}

// testRetry: the first answer uses an undefined name, the second reads a key
// the context does not have and stores None, the third is right. Each
// failure, with its code, is in the next generation prompt; the input and
// the data are analysed once.
func testRetry(t *testing.T, costs *aiCosts) {
	const rules = `
rules:
  - name: input-analyzer
    match: {agent: input-analyzer}
    respond:
      content: '{"needs_analysis": true, "reasoning": "lines is a list of objects whose fields must be known before summing them.", "complexity": "medium"}'
  - name: analysis-code
    match: {agent: code-generator, user_contains: "Write the analysis code now"}
    respond:
      content: |
        # STAGE: ANALYSIS
        lines = context['lines']
        context['_data_analysis'] = {
            'line_count': len(lines),
            'line_fields': sorted({key for line in lines for key in line}),
            'numeric_fields': sorted({key for line in lines for key, value in line.items() if isinstance(value, (int, float))}),
        }
  - name: task-code
    match: {agent: code-generator, user_contains: "Write the task code now"}
    responses:
      - content: |
          # STAGE: TASK
          subtotal = sum(line['qty'] * line['unit_price'] for line in context['lines'])
          context['order_total'] = round(subtotal * (1 + vat_rate), 2)
      - content: |
          # STAGE: TASK
          context['order_total'] = context.get('totals')
      - content: |
          # STAGE: TASK
          subtotal = sum(line['qty'] * line['unit_price'] for line in context['lines'])
          context['order_total'] = round(subtotal, 2)
  - name: output-validator
    match: {agent: output-validator}
    respond:
      content: '{"valid": true, "reason": "order_total is the sum of qty times unit_price over the lines (scripted verdict)."}'
`
	e := startAIEnv(t, rules)
	def := parseAI(t, `
name: order-total
nodes:
  - {id: start, type: start}
  - {id: total, type: action, prompt: "Compute the order total: the sum of qty * unit_price over the order lines, in context['order_total']"}
  - {id: done, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: done}
`)
	wc := e.run(def, map[string]any{"currency": "EUR", "lines": []any{
		map[string]any{"sku": "A-1", "qty": 2, "unit_price": 19.5},
		map[string]any{"sku": "B-7", "qty": 1, "unit_price": 61.0},
	}})
	succeeded(t, wc)
	if got := ctxMap(wc.Context)["order_total"]; got != 100.0 {
		t.Errorf("order_total = %v, want 100", got)
	}
	if n := summaries(wc)["total"]; n.GetAttempts() != 3 {
		t.Errorf("node summary attempts = %d, want 3", n.GetAttempts())
	}

	checkScripted(t, e.modelRequests(""))
	// Input analysis and data analysis ran once; the task code three times;
	// the output validator's model only saw the output that passed its checks.
	if got, want := e.requestCounts(), map[string]int{inputAnalyzer: 1, codeGenerator: 4, outputValidator: 1}; !maps.Equal(got, want) {
		t.Errorf("model requests by agent = %v, want %v", got, want)
	}
	var task []string
	for _, r := range e.modelRequests(codeGenerator) {
		if strings.Contains(r.LastUser(), writeTask) {
			task = append(task, r.LastUser())
		}
	}
	if len(task) != 3 {
		t.Fatalf("%d task generation requests, want 3", len(task))
	}
	if strings.Contains(task[0], "EARLIER ATTEMPTS") {
		t.Errorf("the first task prompt has a history:\n%s", task[0])
	}
	first := []string{"Attempt 1: FAILED in validation", "round(subtotal * (1 + vat_rate), 2)", "name 'vat_rate' is not defined"}
	second := []string{"Attempt 2: FAILED in output validation", "context['order_total'] = context.get('totals')", "none_result", `context["order_total"] set to None`}
	mustContain(t, "the second task prompt", task[1], first...)
	if strings.Contains(task[1], "Attempt 2") {
		t.Errorf("the second task prompt already has attempt 2:\n%s", task[1])
	}
	mustContain(t, "the third task prompt", task[2], append(first, second...)...)
	for i, p := range task {
		mustContain(t, fmt.Sprintf("task prompt %d", i+1), p, "DATA INSIGHTS", "line_count")
	}

	n := nodeDoc(t, e.chain(wc.ExecutionId), "total", 1)
	meta := costs.node(t, n)
	if meta["attempts"] != 3.0 || meta["stages_used"] != 2.0 || meta["status"] != "success" {
		t.Errorf("ai_metadata: attempts %v, stages_used %v, status %v; want 3, 2, success", meta["attempts"], meta["stages_used"], meta["status"])
	}
	checkSteps(t, n, "input_analysis@0", "analysis_generation@0", "analysis_validation@0", "analysis_execution@0",
		"code_generation@1", "code_validation@1",
		"code_generation@2", "code_validation@2", "code_execution@2", "output_validation@2",
		"code_generation@3", "code_validation@3", "code_execution@3", "output_validation@3")

	// Where each broken program was caught: the validator catches the
	// undefined name before anything runs; the wrong key passes the static
	// checks (.get of a missing key is legal) and is caught on its output.
	caught := map[string]int{}
	for _, s := range n.Steps {
		switch {
		case s.StepName == "code_validation" && s.OutputData["valid"] == false:
			caught["code validator"]++
			mustContain(t, "the validator's findings", fmt.Sprint(s.OutputData["findings"]), "undefined-name", "vat_rate")
		case s.StepName == "code_execution" && s.Status != "success":
			caught["sandbox"]++
		case s.StepName == "output_validation" && s.OutputData["valid"] == false:
			caught["output validator"]++
			if checks := fmt.Sprint(s.OutputData["failed_checks"]); checks != "[none_result]" || s.OutputData["model_consulted"] != false {
				t.Errorf("attempt %d output validation: failed checks %s, model consulted %v; want [none_result] without the model",
					s.AttemptNumber, checks, s.OutputData["model_consulted"])
			}
		}
	}
	if want := map[string]int{"code validator": 1, "output validator": 1}; !maps.Equal(caught, want) {
		t.Errorf("broken programs caught by %v, want %v", caught, want)
	}
	t.Logf("of the 2 broken programs, the code validator caught %d before execution, the output validator %d",
		caught["code validator"], caught["output validator"])
}

// testThreeFailures: every answer is wrong in a different way; the node
// fails after three attempts with all of them in its chain of work, and the
// workflow fails naming the node.
func testThreeFailures(t *testing.T, costs *aiCosts) {
	codes := []string{
		"# STAGE: TASK\nrates = {'EUR': 1.08, 'GBP': 1.27}\nif context['currency'] not in rates:\n    raise ValueError('no exchange rate for ' + context['currency'])\ncontext['amount_usd'] = round(context['amount'] * rates[context['currency']], 2)\n",
		"# STAGE: TASK\ncontext['amount_usd'] = round(context['amount'] * context['usd_rate'], 2)\n",
		"# STAGE: TASK\ncontext['amount_usd'] = context['amount']\n",
	}
	var rules strings.Builder
	rules.WriteString("rules:\n  - name: task-code\n    match: {agent: code-generator}\n    responses:\n")
	for _, c := range codes {
		fmt.Fprintf(&rules, "      - content: %q\n", c)
	}
	rules.WriteString(`  - name: output-validator
    match: {agent: output-validator}
    respond:
      content: '{"valid": false, "reason": "amount_usd equals amount: no exchange rate was applied (scripted verdict)."}'
`)
	e := startAIEnv(t, rules.String())
	def := parseAI(t, `
name: convert
nodes:
  - {id: start, type: start}
  - {id: convert, type: action, prompt: "Convert amount from currency to US dollars in context['amount_usd']"}
  - {id: done, type: end}
edges:
  - {from: start, to: convert}
  - {from: convert, to: done}
`)
	wc := e.run(def, map[string]any{"amount": 100, "currency": "XYZ"})
	if wc.Status != "failed" {
		t.Fatalf("workflow status %q, want failed", wc.Status)
	}
	mustContain(t, "the workflow's error", wc.Error, `node "convert" failed`, "failed after 3 attempts", "no exchange rate was applied")
	if !slices.Equal(wc.Path, []string{"start", "convert"}) {
		t.Errorf("path = %v, want it to end at the failed node", wc.Path)
	}
	if n := summaries(wc)["convert"]; n.GetStatus() != "failed" || n.GetAttempts() != 3 {
		t.Errorf("convert summary = %v, want failed after 3 attempts", n)
	}
	checkScripted(t, e.modelRequests(""))
	if got, want := e.requestCounts(), map[string]int{codeGenerator: 3, outputValidator: 1}; !maps.Equal(got, want) {
		t.Errorf("model requests by agent = %v, want %v", got, want)
	}

	nodes := e.chain(wc.ExecutionId)
	n := nodeDoc(t, nodes, "convert", 1)
	if n.Status != "failed" || !strings.Contains(n.ErrorMessage, "failed after 3 attempts") {
		t.Errorf("convert document: status %q, error %q; want failed after 3 attempts", n.Status, n.ErrorMessage)
	}
	meta := costs.node(t, n)
	if meta["status"] != "failed_after_retries" || meta["attempts"] != 3.0 {
		t.Errorf("ai_metadata: status %v, attempts %v; want failed_after_retries, 3", meta["status"], meta["attempts"])
	}
	mustContain(t, "ai_metadata.final_error", fmt.Sprint(meta["final_error"]), "failed after 3 attempts", "no exchange rate was applied")
	all := list(t, meta, "all_attempts")
	wantAttempts := []struct{ phase, err string }{
		{"execution", "ValueError: no exchange rate for XYZ"},
		{"validation", "usd_rate"},
		{"output_validation", "no exchange rate was applied"},
	}
	if len(all) != len(wantAttempts) {
		t.Fatalf("ai_metadata.all_attempts has %d entries, want 3: %v", len(all), all)
	}
	for i, w := range wantAttempts {
		a, _ := all[i].(map[string]any)
		if a["attempt"] != float64(i+1) || a["phase"] != w.phase || a["code"] != codes[i] {
			t.Errorf("all_attempts[%d] = attempt %v, phase %v, code %q; want %d, %s, the %d. answer", i, a["attempt"], a["phase"], a["code"], i+1, w.phase, i+1)
		}
		mustContain(t, fmt.Sprintf("all_attempts[%d].error", i), fmt.Sprint(a["error"]), w.err)
	}

	checkSteps(t, n, "input_analysis@0",
		"code_generation@1", "code_validation@1", "code_execution@1",
		"code_generation@2", "code_validation@2",
		"code_generation@3", "code_validation@3", "code_execution@3", "output_validation@3")
	stepOf := func(name string, attempt int) chainstore.StepDoc {
		for _, s := range n.Steps {
			if s.StepName == name && s.AttemptNumber == attempt {
				return s
			}
		}
		t.Fatalf("no %s step of attempt %d", name, attempt)
		return chainstore.StepDoc{}
	}
	if s := stepOf("code_execution", 1); s.Status == "success" || !strings.Contains(s.ErrorMessage, "no exchange rate for XYZ") ||
		s.GeneratedCode != codes[0] {
		t.Errorf("attempt 1 execution step: status %q, error %q, code %q; want the failure of the 1. answer", s.Status, s.ErrorMessage, s.GeneratedCode)
	}
	if s := stepOf("code_validation", 2); s.OutputData["valid"] != false || !strings.Contains(fmt.Sprint(s.OutputData["findings"]), "unknown-context-key") ||
		s.GeneratedCode != codes[1] {
		t.Errorf("attempt 2 validation step: valid %v, findings %v, code %q; want the unknown key found", s.OutputData["valid"], s.OutputData["findings"], s.GeneratedCode)
	}
	if s := stepOf("output_validation", 3); s.OutputData["valid"] != false || s.OutputData["model_consulted"] != true ||
		!strings.Contains(fmt.Sprint(s.OutputData["reason"]), "no exchange rate was applied") {
		t.Errorf("attempt 3 output validation step: output %v; want the model's verdict invalid", s.OutputData)
	}
	exec, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	if exec.Status != "failed" || exec.Error != wc.Error {
		t.Errorf("execution document: status %q, error %q; want failed with %q", exec.Status, exec.Error, wc.Error)
	}
}

var aiOrdersExample = filepath.Join("..", "..", "..", "examples", "ai-orders.yaml")

// testAIDecision: the demo's workflow and rules; the decision node's code,
// written from its task, sets branch_decision to one of its edges' values,
// which the generation prompt lists, and the workflow takes that branch.
func testAIDecision(t *testing.T, costs *aiCosts) {
	e := startAIEnvFile(t, demoRules)
	def, err := workflow.Load(aiOrdersExample, workflow.ValidateOptions{AllowPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	// Each case generates its code: with the code cache on, the second would
	// reuse the first's whenever the sandbox's runtime was known in time.
	def.Cache = proto.Bool(false)
	tests := []struct {
		total         float64
		branch, queue string
		finalTotal    float64
	}{
		{total: 1500, branch: "review", queue: "manual-review", finalTotal: 1350},
		{total: 500, branch: "auto", queue: "automatic", finalTotal: 500},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("total %v takes %s", tc.total, tc.branch), func(t *testing.T) {
			e.s.Scripted().Reset()
			wc := e.run(def, map[string]any{"total": tc.total})
			succeeded(t, wc)
			if want := []string{"start", "discount", "route", tc.branch, "done"}; !slices.Equal(wc.Path, want) {
				t.Errorf("path = %v, want %v", wc.Path, want)
			}
			out := ctxMap(wc.Context)
			if out["branch_decision"] != tc.branch || out["queue"] != tc.queue || out["final_total"] != tc.finalTotal {
				t.Errorf("branch_decision %v, queue %v, final_total %v; want %s, %s, %v",
					out["branch_decision"], out["queue"], out["final_total"], tc.branch, tc.queue, tc.finalTotal)
			}
			reqs := e.modelRequests("")
			checkScripted(t, reqs)
			route := withText(e.modelRequests(codeGenerator), "Route the order")
			if len(route) != 1 {
				t.Fatalf("%d generation requests for the route node, want 1", len(route))
			}
			// The decision node's prompt names the values its code may set.
			mustContain(t, "the route node's generation prompt", route[0].System(), "DECISION NODE", `- "auto"`, `- "review"`)

			nodes := e.chain(wc.ExecutionId)
			n := nodeDoc(t, nodes, "route", 1)
			if n.NodeType != "decision" || n.DecisionResult != tc.branch || n.PathTaken != tc.branch || n.Status != "success" {
				t.Errorf("route document: type %q, decision %q -> %q, status %q; want decision %q -> %q",
					n.NodeType, n.DecisionResult, n.PathTaken, n.Status, tc.branch, tc.branch)
			}
			for _, id := range []string{"discount", "route"} {
				meta := costs.node(t, nodeDoc(t, nodes, id, 1))
				if meta["attempts"] != 1.0 || meta["stages_used"] != 1.0 || meta["status"] != "success" {
					t.Errorf("%s ai_metadata: attempts %v, stages_used %v, status %v; want 1, 1, success",
						id, meta["attempts"], meta["stages_used"], meta["status"])
				}
			}
			checkSteps(t, n, "input_analysis@0", "code_generation@1", "code_validation@1", "code_execution@1", "output_validation@1")
		})
	}
}

// testSecret: a password in the context, and a Stripe key under a key that
// does not say it is secret, which the code uses and which its first,
// failing attempt even quotes in an error, reach no prompt, no audit
// document and no span.
func testSecret(t *testing.T, costs *aiCosts) {
	secret := fmt.Sprintf("hunter2-%x", rand.Uint64())
	stripe := fmt.Sprintf("sk_live_%x%x", rand.Uint64(), rand.Uint64()) // a secret by its look only
	secrets := []string{secret, stripe}
	const rules = `
rules:
  - name: input-analyzer
    match: {agent: input-analyzer}
    respond:
      content: '{"needs_analysis": false, "reasoning": "customer is a small object of obvious shape.", "complexity": "low"}'
  - name: task-code
    match: {agent: code-generator}
    responses:
      - content: |
          # STAGE: TASK
          password = context['email_password']
          if not password.startswith('smtp-'):
              raise RuntimeError('mailbox login refused for shop@example.com with password ' + password + ', billing with ' + context['billing'])
      - content: |
          # STAGE: TASK
          customer = context['customer']
          context['email_subject'] = 'Your order of %.2f EUR' % context['total']
          context['email_body'] = 'Dear %s, thank you for your order.' % customer['name']
          context['mailbox_ready'] = bool(context.get('email_password'))
          print('confirmation for', customer['email'], 'ready; mailbox login', 'set' if context['mailbox_ready'] else 'missing')
  - name: output-validator
    match: {agent: output-validator}
    respond:
      content: '{"valid": true, "reason": "subject, body and the mailbox flag are set (scripted verdict)."}'
`
	spans := tracetest.NewInMemoryExporter()
	e := startAIEnv(t, rules, func(o *stack.Options) { o.SpanExporter = spans })
	def := parseAI(t, `
name: confirm-order
nodes:
  - {id: start, type: start}
  - {id: confirm, type: action, prompt: "Write the order confirmation email for the customer (subject and body) and say whether the shop's mailbox login is set"}
  - {id: done, type: end}
edges:
  - {from: start, to: confirm}
  - {from: confirm, to: done}
`)
	wc := e.run(def, map[string]any{
		"total":          1500,
		"customer":       map[string]any{"name": "Ada Lovelace", "email": "ada@example.com"},
		"email_password": secret,
		"billing":        stripe,
	})
	succeeded(t, wc)
	if out := ctxMap(wc.Context); out["mailbox_ready"] != true || out["email_subject"] != "Your order of 1500.00 EUR" {
		t.Errorf("mailbox_ready %v, email_subject %v; want the second attempt's results", out["mailbox_ready"], out["email_subject"])
	}

	// Prompts: every agent was asked, the generator heard of the key (and,
	// on the retry, of the error), never of its value.
	reqs := e.modelRequests("")
	checkScripted(t, reqs)
	if got, want := e.requestCounts(), map[string]int{inputAnalyzer: 1, codeGenerator: 2, outputValidator: 1}; !maps.Equal(got, want) {
		t.Errorf("model requests by agent = %v, want %v", got, want)
	}
	for i, r := range reqs {
		for _, secret := range secrets {
			if bytes.Contains(r.Body, []byte(secret)) || strings.Contains(r.Text(), secret) {
				t.Errorf("model request %d (%s) contains the secret %q", i, r.Agent, secret)
			}
		}
	}
	if gen := e.modelRequests(codeGenerator); len(gen) == 2 {
		mustContain(t, "the retry's prompt", gen[1].LastUser(), "email_password", "mailbox login refused for shop@example.com with password")
	}

	// Audit documents, read raw from the store.
	nodes := e.chain(wc.ExecutionId)
	costs.node(t, nodeDoc(t, nodes, "confirm", 1))
	client, err := mongo.Connect(options.Client().ApplyURI(e.s.MongoURI()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.WithoutCancel(e.ctx)) }()
	db := client.Database(chainstore.DefaultDatabase)
	for _, coll := range []string{chainstore.ExecutionsCollection, chainstore.ChainCollection, chainstore.StepsCollection} {
		cur, err := db.Collection(coll).Find(e.ctx, bson.D{{Key: "execution_id", Value: wc.ExecutionId}})
		if err != nil {
			t.Fatal(err)
		}
		docs := 0
		for cur.Next(e.ctx) {
			docs++
			raw := cur.Current
			js, err := bson.MarshalExtJSON(raw, false, false)
			if err != nil {
				t.Fatal(err)
			}
			for _, secret := range secrets {
				if bytes.Contains(raw, []byte(secret)) || bytes.Contains(js, []byte(secret)) {
					t.Errorf("%s document %s contains the secret %q:\n%s", coll, raw.Lookup("_id"), secret, js)
				}
			}
		}
		if err := cur.Err(); err != nil {
			t.Fatal(err)
		}
		_ = cur.Close(e.ctx)
		if docs == 0 {
			t.Errorf("no %s documents of the execution", coll)
		}
	}
	// The keys are kept, their values hidden.
	for _, k := range []string{"email_password", "billing"} {
		if n := nodeDoc(t, nodes, "confirm", 1); n.InputContext[k] != redact.Placeholder {
			t.Errorf("input_context.%s = %v, want %q", k, n.InputContext[k], redact.Placeholder)
		}
	}

	// Spans of every service, once each has finished its work.
	for _, c := range []struct{ stream, durable string }{
		{bus.StreamCommands, bus.ConsumerEngineCommands}, {bus.StreamEvents, bus.ConsumerEngineResults},
		{bus.StreamCommands, bus.AgentSandbox}, {bus.StreamCommands, bus.AgentInputAnalyzer},
		{bus.StreamCommands, bus.AgentCodeGenerator}, {bus.StreamCommands, bus.AgentCodeValidator},
		{bus.StreamCommands, bus.AgentOutputValidator}, {bus.StreamEvents, auditservice.Consumer},
	} {
		if err := e.client.WaitConsumerIdle(e.ctx, c.stream, c.durable); err != nil {
			t.Fatal(err)
		}
	}
	all := spans.GetSpans()
	services := map[string]bool{}
	for _, s := range all {
		services[serviceName(s)] = true
		for _, secret := range secrets {
			if where := secretIn(s, secret); where != "" {
				t.Errorf("span %q of %s holds the secret %q in %s", s.Name, serviceName(s), secret, where)
			}
		}
	}
	for _, m := range stack.Modules {
		if !services[m] {
			t.Errorf("no span of %s among %d spans; every service worked on the node", m, len(all))
		}
	}
}

// secretIn says where in a span secret appears, "" when nowhere.
func secretIn(s tracetest.SpanStub, secret string) string {
	attrs := func(what string, kvs []attribute.KeyValue) string {
		for _, kv := range kvs {
			if strings.Contains(string(kv.Key), secret) || strings.Contains(kv.Value.Emit(), secret) {
				return what + " " + string(kv.Key)
			}
		}
		return ""
	}
	if strings.Contains(s.Name, secret) {
		return "its name"
	}
	if strings.Contains(s.Status.Description, secret) {
		return "its status"
	}
	if w := attrs("attribute", s.Attributes); w != "" {
		return w
	}
	for _, ev := range s.Events {
		if strings.Contains(ev.Name, secret) {
			return "event " + ev.Name
		}
		if w := attrs("event "+ev.Name+" attribute", ev.Attributes); w != "" {
			return w
		}
	}
	for _, l := range s.Links {
		if w := attrs("link attribute", l.Attributes); w != "" {
			return w
		}
	}
	if s.Resource != nil {
		if w := attrs("resource attribute", s.Resource.Attributes()); w != "" {
			return w
		}
	}
	return ""
}

// testOpenAIShape: the agents speak OpenAI's chat completions API over HTTP:
// the code generator reads fitz's documentation through a
// search_documentation tool call before it answers with code, and a 429 of
// the output validator's model is retried without costing an attempt.
func testOpenAIShape(t *testing.T, costs *aiCosts) {
	// ~~~ stands for a Markdown code fence, which a Go raw string cannot hold:
	// the code comes fenced, as real models answer.
	rules := strings.ReplaceAll(`
rules:
  - name: input-analyzer
    match: {agent: input-analyzer}
    respond:
      content: '{"needs_analysis": false, "reasoning": "The task says which document to read and what to take from it.", "complexity": "medium"}'
  - name: look-up-fitz
    match: {agent: code-generator, has_tool_result: false}
    respond:
      tool_calls:
        - name: search_documentation
          arguments: {library: fitz, query: extract text from page}
  - name: code-after-docs
    match: {agent: code-generator, has_tool_result: true}
    respond:
      content: |
        ~~~python
        # STAGE: TASK
        import base64
        import fitz
        doc = fitz.open(stream=base64.b64decode(context['invoice_pdf_b64']), filetype='pdf')
        context['page_count'] = doc.page_count
        context['invoice_text'] = doc[0].get_text().strip()
        ~~~
  - name: output-validator
    match: {agent: output-validator}
    responses:
      - status: 429
        error: {message: "Rate limit reached for gpt-4o-mini (scripted)", type: requests, code: rate_limit_exceeded}
      - content: '{"valid": true, "reason": "page_count and the first page text are set (scripted verdict)."}'
`, "~~~", "```")
	pdf := invoicePDF(t)
	e := startAIEnv(t, rules)
	e.waitRuntimeDocs()
	def := parseAI(t, `
name: invoice-text
nodes:
  - {id: start, type: start}
  - {id: read, type: action, prompt: "Extract the text of the invoice PDF's first page and count its pages"}
  - {id: done, type: end}
edges:
  - {from: start, to: read}
  - {from: read, to: done}
`)
	wc := e.run(def, map[string]any{"invoice_pdf_b64": pdf})
	succeeded(t, wc)
	out := ctxMap(wc.Context)
	if text, _ := out["invoice_text"].(string); out["page_count"] != 1.0 || !strings.Contains(text, "Total: 1234.56 EUR") {
		t.Errorf("page_count %v, invoice_text %q; want 1 page with the total", out["page_count"], text)
	}
	if n := summaries(wc)["read"]; n.GetAttempts() != 1 {
		t.Errorf("node summary attempts = %d, want 1: a transient model error is not an attempt", n.GetAttempts())
	}

	reqs := e.modelRequests("")
	checkScripted(t, reqs, http.StatusTooManyRequests)
	if got, want := e.requestCounts(), map[string]int{inputAnalyzer: 1, codeGenerator: 2, outputValidator: 2}; !maps.Equal(got, want) {
		t.Errorf("model requests by agent = %v, want %v", got, want)
	}
	for i, r := range reqs {
		checkOpenAIRequest(t, fmt.Sprintf("request %d (%s)", i, r.Agent), r)
	}
	if ov := e.modelRequests(outputValidator); len(ov) == 2 && (ov[0].Status != 429 || ov[1].Status != 200) {
		t.Errorf("output validator's requests answered %d, %d; want 429 then 200", ov[0].Status, ov[1].Status)
	}

	// The tool call round trip, as the model saw it.
	gen := e.modelRequests(codeGenerator)
	if len(gen) != 2 {
		t.Fatalf("%d code generator requests, want 2", len(gen))
	}
	if !slices.Equal(gen[0].Tools, []string{"search_documentation"}) || len(gen[0].Messages) != 2 {
		t.Errorf("first generation request: tools %v, %d messages; want search_documentation offered, system and user", gen[0].Tools, len(gen[0].Messages))
	}
	var roles []string
	for _, m := range gen[1].Messages {
		roles = append(roles, m.Role)
	}
	if want := []string{"system", "user", "assistant", "tool"}; !slices.Equal(roles, want) {
		t.Fatalf("second generation request's roles = %v, want %v", roles, want)
	}
	call, answer := gen[1].Messages[2], gen[1].Messages[3]
	if len(call.ToolCalls) != 1 || call.ToolCalls[0].Name != "search_documentation" || call.ToolCalls[0].ID == "" ||
		answer.ToolCallID != call.ToolCalls[0].ID {
		t.Fatalf("assistant tool calls %+v, tool message for %q; want one search_documentation call answered", call.ToolCalls, answer.ToolCallID)
	}
	var args map[string]string
	if err := json.Unmarshal([]byte(call.ToolCalls[0].Arguments), &args); err != nil || args["library"] != "fitz" || args["query"] != "extract text from page" {
		t.Errorf("tool call arguments %q (%v), want library fitz, query \"extract text from page\"", call.ToolCalls[0].Arguments, err)
	}
	// Real documentation of the installed PyMuPDF, not a canned text.
	mustContain(t, "the tool's answer", answer.Content, "# fitz (PyMuPDF", "get_text")

	n := nodeDoc(t, e.chain(wc.ExecutionId), "read", 1)
	meta := costs.node(t, n)
	if meta["attempts"] != 1.0 || meta["status"] != "success" || meta["model_calls"] != 4.0 {
		t.Errorf("ai_metadata: attempts %v, status %v, model calls %v; want 1, success, 4 (the 429 is not a call)",
			meta["attempts"], meta["status"], meta["model_calls"])
	}
	checkToolCalls := func(what string, calls []any) {
		t.Helper()
		if len(calls) != 1 {
			t.Errorf("%s = %v, want one call", what, calls)
			return
		}
		c, _ := calls[0].(map[string]any)
		if c["name"] != "search_documentation" || !strings.Contains(fmt.Sprint(c["arguments"]), `"library":"fitz"`) ||
			!strings.Contains(fmt.Sprint(c["result"]), "get_text") {
			t.Errorf("%s[0] = %v, want search_documentation of fitz with its answer", what, c)
		}
	}
	checkToolCalls("ai_metadata.tool_calls", list(t, meta, "tool_calls"))
	if steps := stepsNamed(n, "code_generation"); len(steps) == 1 {
		checkToolCalls("the code_generation step's tool_calls", steps[0].ToolCalls)
		if steps[0].OutputData["model_calls"] != 2.0 {
			t.Errorf("code_generation step model_calls = %v, want 2 (the tool round and the answer)", steps[0].OutputData["model_calls"])
		}
	}
	if steps := stepsNamed(n, "output_validation"); len(steps) != 1 || steps[0].AttemptNumber != 1 || steps[0].OutputData["valid"] != true {
		t.Errorf("output validation steps = %v, want one valid step of attempt 1", stepTrail(n))
	}
}

// checkOpenAIRequest checks a recorded request and its answer against the
// shape of OpenAI's chat completions API.
func checkOpenAIRequest(t *testing.T, what string, r scripted.Recorded) {
	t.Helper()
	if r.Method != http.MethodPost || r.Path != "/v1/chat/completions" || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/json") ||
		r.Header.Get("X-Nova-Agent") != r.Agent {
		t.Errorf("%s: %s %s, content type %q, agent header %q; want a JSON POST to /v1/chat/completions naming its agent",
			what, r.Method, r.Path, r.Header.Get("Content-Type"), r.Header.Get("X-Nova-Agent"))
	}
	var req struct {
		Model    string `json:"model"`
		Messages []struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
			ToolCallID string `json:"tool_call_id"`
		} `json:"messages"`
		Tools []struct {
			Type     string `json:"type"`
			Function struct {
				Name        string         `json:"name"`
				Description string         `json:"description"`
				Parameters  map[string]any `json:"parameters"`
			} `json:"function"`
		} `json:"tools"`
		ResponseFormat *struct {
			Type string `json:"type"`
		} `json:"response_format"`
		MaxTokens *int  `json:"max_tokens"`
		Stream    *bool `json:"stream"`
	}
	if err := json.Unmarshal(r.Body, &req); err != nil {
		t.Fatalf("%s: body is not JSON: %v", what, err)
	}
	if req.Model == "" || len(req.Messages) < 2 || req.Messages[0].Role != "system" || (req.Stream != nil && *req.Stream) ||
		req.MaxTokens == nil || *req.MaxTokens <= 0 {
		t.Errorf("%s: model %q, %d messages, first role %q, stream %v, max_tokens %v; want a model, a system prompt first, no stream, a bound",
			what, req.Model, len(req.Messages), req.Messages[0].Role, req.Stream, req.MaxTokens)
	}
	for i, m := range req.Messages {
		switch {
		case m.Role == "assistant" && len(m.ToolCalls) > 0:
			for _, tc := range m.ToolCalls {
				if tc.ID == "" || tc.Type != "function" || tc.Function.Name == "" || !json.Valid([]byte(tc.Function.Arguments)) {
					t.Errorf("%s: message %d tool call %+v, want id, type function, name and JSON arguments", what, i, tc)
				}
			}
		case m.Role == "tool":
			if m.ToolCallID == "" || m.Content == nil {
				t.Errorf("%s: message %d is a tool message without tool_call_id or content", what, i)
			}
		case m.Role == "system" || m.Role == "user" || m.Role == "assistant":
			if m.Content == nil || *m.Content == "" {
				t.Errorf("%s: message %d (%s) has no content", what, i, m.Role)
			}
		default:
			t.Errorf("%s: message %d has role %q", what, i, m.Role)
		}
	}
	for _, tool := range req.Tools {
		if tool.Type != "function" || tool.Function.Name == "" || tool.Function.Description == "" || tool.Function.Parameters["type"] != "object" {
			t.Errorf("%s: tool %+v, want a function with a name, a description and an object schema", what, tool)
		}
	}
	// The agents that decide and judge ask for a JSON object; the generator for code.
	wantJSON := r.Agent != codeGenerator
	if gotJSON := req.ResponseFormat != nil && req.ResponseFormat.Type == "json_object"; gotJSON != wantJSON {
		t.Errorf("%s: response_format %+v, want json_object %v", what, req.ResponseFormat, wantJSON)
	}
	if r.Agent == codeGenerator && len(req.Tools) != 1 {
		t.Errorf("%s: %d tools, want search_documentation", what, len(req.Tools))
	}

	// The answer, as OpenAI shapes it.
	if r.Status != http.StatusOK {
		var e struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if err := json.Unmarshal(r.Response, &e); err != nil || e.Error.Message == "" || e.Error.Type == "" || e.Error.Code == nil {
			t.Errorf("%s: error answer %s, want OpenAI's error object", what, r.Response)
		}
		return
	}
	var resp struct {
		ID                string `json:"id"`
		Object            string `json:"object"`
		Created           int64  `json:"created"`
		Model             string `json:"model"`
		SystemFingerprint string `json:"system_fingerprint"`
		Choices           []struct {
			Index   int `json:"index"`
			Message struct {
				Role      string `json:"role"`
				ToolCalls []any  `json:"tool_calls"`
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens     int `json:"prompt_tokens"`
			CompletionTokens int `json:"completion_tokens"`
			TotalTokens      int `json:"total_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(r.Response, &resp); err != nil {
		t.Fatalf("%s: answer is not JSON: %v", what, err)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" || resp.Created == 0 || resp.Model != req.Model ||
		resp.SystemFingerprint != "nova-scripted" || len(resp.Choices) != 1 || resp.Choices[0].Message.Role != "assistant" ||
		resp.Usage.PromptTokens == 0 || resp.Usage.TotalTokens != resp.Usage.PromptTokens+resp.Usage.CompletionTokens {
		t.Errorf("%s: answer %s, want a chat.completion of the requested model with one assistant choice and usage", what, r.Response)
	}
	if len(resp.Choices) == 1 {
		want := "stop"
		if len(resp.Choices[0].Message.ToolCalls) > 0 {
			want = "tool_calls"
		}
		if resp.Choices[0].FinishReason != want {
			t.Errorf("%s: finish_reason %q, want %q", what, resp.Choices[0].FinishReason, want)
		}
	}
}

// testModelResolution: a node's model beats its workflow's, which beats each
// agent's default (built in, or configured for the stack); every agent of
// the node uses the resolved model, and reasoning models get
// max_completion_tokens.
func testModelResolution(t *testing.T, costs *aiCosts) {
	const rules = `
rules:
  - name: input-analyzer
    match: {agent: input-analyzer}
    respond:
      content: '{"needs_analysis": false, "reasoning": "lines is a short list of flat objects.", "complexity": "low"}'
  - name: count
    match: {agent: code-generator, user_contains: Count the order lines}
    respond:
      content: |
        # STAGE: TASK
        context['line_count'] = len(context['lines'])
  - name: sum
    match: {agent: code-generator, user_contains: Sum the order lines}
    respond:
      content: |
        # STAGE: TASK
        context['order_total'] = round(sum(line['qty'] * line['unit_price'] for line in context['lines']), 2)
  - name: priciest
    match: {agent: code-generator, user_contains: most expensive}
    respond:
      content: |
        # STAGE: TASK
        context['priciest_sku'] = max(context['lines'], key=lambda line: line['unit_price'])['sku']
  - name: output-validator
    match: {agent: output-validator}
    respond:
      content: '{"valid": true, "reason": "the result answers the task (scripted verdict)."}'
`
	// A configured default that differs from the built-in one, so the test
	// tells them apart.
	const configuredGenerator = "gpt-4.1"
	if generator.DefaultModel == configuredGenerator {
		t.Fatalf("the configured generator model must differ from the built-in default %s", generator.DefaultModel)
	}
	e := startAIEnv(t, rules, func(o *stack.Options) {
		o.CodeGenerator = stack.Default[generator.Config]()
		o.CodeGenerator.Model = configuredGenerator
	})
	withModels := parseAI(t, `
name: with-models
model: gpt-4.1-mini
nodes:
  - {id: start, type: start}
  - {id: count, type: action, model: o4-mini, prompt: "Count the order lines into context['line_count']"}
  - {id: sum, type: action, prompt: "Sum the order lines (qty * unit_price) into context['order_total']"}
  - {id: done, type: end}
edges:
  - {from: start, to: count}
  - {from: count, to: sum}
  - {from: sum, to: done}
`)
	defaults := parseAI(t, `
name: defaults
nodes:
  - {id: start, type: start}
  - {id: priciest, type: action, prompt: "Find the sku of the most expensive order line"}
  - {id: done, type: end}
edges:
  - {from: start, to: priciest}
  - {from: priciest, to: done}
`)
	lines := []any{
		map[string]any{"sku": "A-1", "qty": 2, "unit_price": 19.5},
		map[string]any{"sku": "B-7", "qty": 1, "unit_price": 61.0},
	}
	var nodes []chainstore.NodeDoc
	for _, def := range []*novav1.WorkflowDefinition{withModels, defaults} {
		wc := e.run(def, map[string]any{"lines": lines})
		succeeded(t, wc)
		nodes = append(nodes, e.chain(wc.ExecutionId)...)
	}
	reqs := e.modelRequests("")
	checkScripted(t, reqs)

	tests := []struct {
		node, task string
		models     map[string]string // by agent
	}{
		{"count", "Count the order lines", map[string]string{inputAnalyzer: "o4-mini", codeGenerator: "o4-mini", outputValidator: "o4-mini"}},
		{"sum", "Sum the order lines", map[string]string{inputAnalyzer: "gpt-4.1-mini", codeGenerator: "gpt-4.1-mini", outputValidator: "gpt-4.1-mini"}},
		{"priciest", "most expensive order line", map[string]string{
			inputAnalyzer: analyzer.DefaultModel, codeGenerator: configuredGenerator, outputValidator: outputvalidator.DefaultModel}},
	}
	for _, tc := range tests {
		got := map[string]string{}
		for _, r := range withText(reqs, tc.task) {
			if got[r.Agent] != "" && got[r.Agent] != r.Model {
				t.Errorf("node %s: %s asked both %s and %s", tc.node, r.Agent, got[r.Agent], r.Model)
			}
			got[r.Agent] = r.Model
			// Reasoning models take max_completion_tokens and no temperature.
			reasoning := r.Model == "o4-mini"
			if reasoning != (r.MaxCompletionTokens > 0 && r.MaxTokens == 0) || reasoning == bytes.Contains(r.Body, []byte(`"temperature"`)) {
				t.Errorf("node %s, %s, model %s: max_tokens %d, max_completion_tokens %d, temperature sent %v",
					tc.node, r.Agent, r.Model, r.MaxTokens, r.MaxCompletionTokens, bytes.Contains(r.Body, []byte(`"temperature"`)))
			}
		}
		if !maps.Equal(got, tc.models) {
			t.Errorf("node %s: models by agent = %v, want %v", tc.node, got, tc.models)
		}
		meta := costs.node(t, nodeDoc(t, nodes, tc.node, 1))
		if meta["model"] != tc.models[codeGenerator] {
			t.Errorf("node %s: ai_metadata.model = %v, want %s", tc.node, meta["model"], tc.models[codeGenerator])
		}
	}
}
