package analyzer_test

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/input-analyzer/analyzer"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// modelServer starts the scripted model server with rules (YAML) and
// returns it with a client that calls it as the input analyzer.
func modelServer(t *testing.T, rules string) (*scripted.Server, *llm.Client) {
	t.Helper()
	r, err := scripted.ParseRules([]byte(rules))
	if err != nil {
		t.Fatalf("rules: %v", err)
	}
	srv, err := scripted.New(r)
	if err != nil {
		t.Fatalf("scripted server: %v", err)
	}
	ts := httptest.NewServer(srv)
	transport := &http.Transport{}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		ts.Close()
	})
	client, err := llm.New(llm.Config{
		APIKey: "test-key", BaseURL: ts.URL + "/v1", Agent: bus.AgentInputAnalyzer,
		MaxRetries: 1, Logger: slog.New(slog.DiscardHandler), HTTPClient: &http.Client{Transport: transport},
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv, client
}

func command(t *testing.T, task, model string, ctx map[string]any) *novav1.AnalyzeInput {
	t.Helper()
	st, err := jsonvalue.ObjectOf(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return &novav1.AnalyzeInput{
		Ref:     &novav1.StepRef{ExecutionId: "exec-1", NodeId: "extract", StepId: "exec-1/extract/1/1", Visit: 1, StepNumber: 1},
		Spec:    &novav1.TaskSpec{Task: task, NodeType: "action", Model: model},
		Context: st.Proto(),
	}
}

// pdfB64 is base64 of n bytes that start like a PDF.
func pdfB64(n int) string {
	raw := []byte("%PDF-1.4\n")
	for len(raw) < n {
		raw = append(raw, "4 0 obj << /Length 44 >> stream BT /F1 12 Tf (Total: 1234.56) Tj ET endstream\n"...)
	}
	return base64.StdEncoding.EncodeToString(raw[:n])
}

const goodAnswer = `{"needs_analysis": true, "reasoning": "The invoice is a base64 PDF; its text layer and layout must be inspected first.", "complexity": "high"}`

func TestSmallScalarsAreDecidedWithoutTheModel(t *testing.T) {
	for _, ctx := range []map[string]any{
		{"total": 1500, "client": "Acme Corp", "vip": true, "note": nil},
		{"email_password": "hunter2-secret", "total": 1500},
		{},
	} {
		srv, client := modelServer(t, "rules: []\n")
		a := analyzer.New(analyzer.Deps{LLM: client})
		res, err := a.Analyze(t.Context(), command(t, "Calculate discount (10% if total > 1000)", "", ctx))
		if err != nil {
			t.Fatal(err)
		}
		if n := len(srv.Requests()); n != 0 {
			t.Errorf("%v: the model server received %d requests, want 0", ctx, n)
		}
		if res.NeedsAnalysis || !res.DecidedWithoutModel || res.Complexity != "low" || len(res.Outcome.ModelCalls) != 0 {
			t.Errorf("%v: got %+v, want no analysis, low complexity, decided without model, no calls", ctx, res)
		}
		if res.Outcome.Status != "success" || !strings.Contains(res.Reasoning, "decided without calling the model") {
			t.Errorf("%v: outcome %v, reasoning %q", ctx, res.Outcome, res.Reasoning)
		}
		if strings.Contains(res.Reasoning, "hunter2") {
			t.Errorf("reasoning shows a secret: %q", res.Reasoning)
		}
		for k := range ctx {
			if !strings.Contains(res.Reasoning, k) {
				t.Errorf("reasoning %q does not name key %q", res.Reasoning, k)
			}
		}
	}
}

func TestComplexContextAsksTheModel(t *testing.T) {
	srv, client := modelServer(t, `
rules:
  - name: analyzer
    match: {agent: input-analyzer}
    respond:
      content: '`+goodAnswer+`'
      usage: {prompt_tokens: 420, completion_tokens: 35, cached_tokens: 128}
`)
	a := analyzer.New(analyzer.Deps{LLM: client})
	pdf := pdfB64(200 << 10)
	stripeKey := "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc" // split: secret scanners read this file
	awsKeyID := "AKIA" + "IOSFODNN7EXAMPLE"
	res, err := a.Analyze(t.Context(), command(t, "Extract the invoice total (bucket key "+awsKeyID+")", "", map[string]any{
		"pdf_data_b64": pdf, "client_name": "Acme Corp", "email_password": "hunter2-secret", "total": 1500, "stripe": stripeKey,
	}))
	if err != nil {
		t.Fatal(err)
	}
	if !res.NeedsAnalysis || res.Complexity != "high" || res.DecidedWithoutModel ||
		!strings.HasPrefix(res.Reasoning, "The invoice is a base64 PDF") || res.Outcome.Status != "success" {
		t.Errorf("got %+v", res)
	}
	if len(res.Outcome.ModelCalls) != 1 {
		t.Fatalf("model calls = %d, want 1", len(res.Outcome.ModelCalls))
	}
	c := res.Outcome.ModelCalls[0]
	if c.Model != analyzer.DefaultModel || c.PromptTokens != 420 || c.CompletionTokens != 35 || c.CachedTokens != 128 || !c.Scripted || c.CostUsd <= 0 {
		t.Errorf("model call = %+v", c)
	}

	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("requests = %d, want 1", len(reqs))
	}
	body := string(reqs[0].Body)
	for _, leak := range []string{"hunter2-secret", pdf[:64], pdf[100_000:100_064], "JVBERi0", stripeKey, "4eC39Hq", awsKeyID} {
		if strings.Contains(body, leak) {
			t.Errorf("the prompt contains %q", leak)
		}
	}
	prompt := reqs[0].Text()
	for _, want := range []string{"InputAnalyzer", "Extract the invoice total (bucket key [REDACTED])", "pdf_data_b64: string, base64 data", "looks like a PDF",
		"email_password: string: present, value hidden", `client_name: string, 9 chars = "Acme Corp"`, "stripe: string: present, value hidden"} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if reqs[0].ResponseFormat != "json_object" || reqs[0].Model != analyzer.DefaultModel {
		t.Errorf("request: response_format %q, model %q", reqs[0].ResponseFormat, reqs[0].Model)
	}
	if len(body) > 8<<10 {
		t.Errorf("request body is %d bytes; a summary should be compact", len(body))
	}
}

func TestModelResolution(t *testing.T) {
	tests := []struct{ specModel, defaultModel, want string }{
		{"", "", analyzer.DefaultModel},
		{"", "gpt-4.1-nano", "gpt-4.1-nano"},
		{"gpt-4o", "gpt-4.1-nano", "gpt-4o"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			srv, client := modelServer(t, "rules:\n  - respond: {content: '"+goodAnswer+"'}\n")
			a := analyzer.New(analyzer.Deps{LLM: client, DefaultModel: tt.defaultModel})
			res, err := a.Analyze(t.Context(), command(t, "Summarise the items", tt.specModel, map[string]any{"items": []any{1, 2, 3}}))
			if err != nil {
				t.Fatal(err)
			}
			reqs := srv.Requests()
			if len(reqs) != 1 || reqs[0].Model != tt.want || res.Outcome.ModelCalls[0].Model != tt.want {
				t.Errorf("requests %d, model asked %q, recorded %q; want %q", len(reqs), reqs[0].Model, res.Outcome.ModelCalls[0].Model, tt.want)
			}
		})
	}
}

// The model's answers vary; the decision must survive any of them. (JSON
// mode guarantees JSON, so nonsense here is JSON of the wrong shape; fences
// and prose around JSON are DecodeJSON's tests in pkg/llm.)
func TestModelAnswers(t *testing.T) {
	complexCtx := map[string]any{"pdf_data_b64": pdfB64(4096), "client": "Acme"}
	tests := []struct {
		name       string
		answers    []string // the scripted sequence (the last repeats)
		wantCalls  int
		wantNeeds  bool
		complexity string
		reasoning  string // a substring
	}{
		{"plain JSON", []string{goodAnswer}, 1, true, "high", "its text layer"},
		{"complexity in capitals", []string{`{"needs_analysis": false, "reasoning": "Only the client name matters.", "complexity": "LOW"}`}, 1, false, "low", "client name"},
		{"nonsense, then a good answer", []string{`{"answer": "Yes, analyse it!"}`, goodAnswer}, 2, true, "high", "its text layer"},
		{"missing field, then a good answer", []string{`{"needs_analysis": true}`, goodAnswer}, 2, true, "high", "its text layer"},
		{"nonsense twice falls back to a rule", []string{`{"decision": "I cannot decide."}`}, 2, true, "high", "the model's answer was unusable: missing fields"},
		{"wrong types twice fall back to a rule", []string{`{"needs_analysis": "maybe", "reasoning": 3, "complexity": "extreme"}`}, 2, true, "high", "decided by rule instead: the context holds binary, base64 or stored-by-reference data (pdf_data_b64)"},
		{"bad complexity twice falls back", []string{`{"needs_analysis": false, "reasoning": "fine", "complexity": "extreme"}`}, 2, true, "high", `"complexity" is "extreme"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var rules strings.Builder
			rules.WriteString("rules:\n  - match: {agent: input-analyzer}\n    responses:\n")
			for _, a := range tt.answers {
				rules.WriteString("      - content: " + strconv.Quote(a) + "\n")
			}
			srv, client := modelServer(t, rules.String())
			a := analyzer.New(analyzer.Deps{LLM: client})
			res, err := a.Analyze(t.Context(), command(t, "Extract the invoice total", "", complexCtx))
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome.Status != "success" {
				t.Errorf("outcome %+v; the node must not fail because of the model's answer", res.Outcome)
			}
			if len(res.Outcome.ModelCalls) != tt.wantCalls || len(srv.Requests()) != tt.wantCalls {
				t.Errorf("model calls %d, requests %d; want %d", len(res.Outcome.ModelCalls), len(srv.Requests()), tt.wantCalls)
			}
			if res.NeedsAnalysis != tt.wantNeeds || res.Complexity != tt.complexity || !strings.Contains(res.Reasoning, tt.reasoning) {
				t.Errorf("got needs=%v complexity=%q reasoning=%q; want needs=%v complexity=%q reasoning containing %q",
					res.NeedsAnalysis, res.Complexity, res.Reasoning, tt.wantNeeds, tt.complexity, tt.reasoning)
			}
			if tt.wantCalls == 2 {
				// The second request tells the model what was wrong with the first answer.
				second := srv.Requests()[1]
				if !strings.Contains(second.LastUser(), "Your answer could not be used") {
					t.Errorf("the retry does not explain the problem: %q", second.LastUser())
				}
			}
		})
	}
}

func TestRuleDecisionWhenTheModelFails(t *testing.T) {
	srv, client := modelServer(t, `
rules:
  - respond: {status: 401, error: {message: "Incorrect API key provided", type: invalid_request_error, code: invalid_api_key}}
`)
	a := analyzer.New(analyzer.Deps{LLM: client})
	res, err := a.Analyze(t.Context(), command(t, "Total the line items", "", map[string]any{
		"invoice": map[string]any{"lines": []any{map[string]any{"qty": 2, "price": 3.5}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	if res.Outcome.Status != "success" || !res.NeedsAnalysis || res.Complexity != "medium" ||
		!strings.Contains(res.Reasoning, "the model call failed") || !strings.Contains(res.Reasoning, "nested data (invoice)") {
		t.Errorf("got %+v", res)
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("requests = %d; a 401 is not retried", n)
	}
}

// TestBudgetRefusal: when the step's allowance holds no model call, the
// analyzer does not call the model, nor decide by rule: the node stops at its
// budget.
func TestBudgetRefusal(t *testing.T) {
	srv, client := modelServer(t, `
rules:
  - respond: {content: '{"needs_analysis": false, "reasoning": "flat data", "complexity": "low"}'}
`)
	a := analyzer.New(analyzer.Deps{LLM: client})
	limit := &novav1.BudgetLimit{Name: "max_usd", Scope: `node "extract"`, Allowed: 0.01, Spent: 0.01}
	ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{Usd: proto.Float64(0), UsdLimit: limit})
	res, err := a.Analyze(ctx, command(t, "Total the line items", "", map[string]any{
		"invoice": map[string]any{"lines": []any{map[string]any{"qty": 2, "price": 3.5}}},
	}))
	if err != nil {
		t.Fatal(err)
	}
	be := res.GetOutcome().GetBudgetExceeded()
	if res.Outcome.Status != "error" || be.GetLimit().GetName() != "max_usd" || be.GetNeeded() <= 0 || res.Reasoning != "" ||
		!strings.HasPrefix(res.Outcome.Error, `budget_exceeded: max_usd of node "extract": $0.010000 spent of $0.010000 allowed`) {
		t.Errorf("got %+v", res)
	}
	if n := len(srv.Requests()); n != 0 {
		t.Errorf("requests = %d, want none", n)
	}
}
