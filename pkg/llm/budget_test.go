package llm_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// prices for the budget tests: USD per million tokens.
var testPrices = llm.PriceTable{"m": {Input: 10, CachedInput: 5, Output: 20}}

func budgetServer(t *testing.T, rules scripted.Rules) (*scripted.Server, *llm.Client, *sdkmetric.ManualReader) {
	t.Helper()
	srv, err := scripted.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := srv.Start(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	reader := sdkmetric.NewManualReader()
	c, err := llm.New(llm.Config{BaseURL: srv.BaseURL(), APIKey: "k", Agent: "code-generator", Prices: testPrices,
		MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))})
	if err != nil {
		t.Fatal(err)
	}
	return srv, c, reader
}

func userMsg(s string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleSystem, Content: "You write code."},
		{Role: openai.ChatMessageRoleUser, Content: s}}
}

// rejections reads nova.llm.budget_rejections by its limit attribute.
func rejections(t *testing.T, r *sdkmetric.ManualReader) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != "nova.llm.budget_rejections" {
				continue
			}
			for _, p := range m.Data.(metricdata.Sum[int64]).DataPoints {
				l, _ := p.Attributes.Value("limit")
				out[l.AsString()] += p.Value
			}
		}
	}
	return out
}

// TestEstimateBoundsTheCost: whatever a call's messages and tools, the cost
// of the usage the server reports is at most the estimate made before it
// (the scripted server counts tokens as OpenAI's cookbook does, about four
// characters a token).
func TestEstimateBoundsTheCost(t *testing.T) {
	_, c, _ := budgetServer(t, scripted.Rules{Rules: []scripted.Rule{
		{Match: scripted.Match{HasToolResult: proto.Bool(false)}, Respond: &scripted.Response{
			ToolCalls: []scripted.ToolCallSpec{{Name: "look", Arguments: json.RawMessage(`{"q":"pandas read_csv ✓"}`)}}}},
		{Respond: &scripted.Response{Content: strings.Repeat("x = 1 # é\n", 40)}},
	}})
	tool := llm.Tool{Name: "look", Description: "Looks things up.", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`),
		Handle: func(context.Context, string) (string, error) { return strings.Repeat("docs ", 300), nil }}
	resp, err := c.Chat(t.Context(), llm.Request{Model: "m", Messages: userMsg("Sum the lines — ünïcode too " + strings.Repeat("data ", 500)),
		Tools: []llm.Tool{tool}, MaxTokens: 2000})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Calls) != 2 {
		t.Fatalf("%d calls, want 2 (a tool round, then the answer)", len(resp.Calls))
	}
	for i, call := range resp.Calls {
		if call.CostUsd <= 0 || call.EstimatedUsd < call.CostUsd {
			t.Errorf("call %d: cost $%g, estimated $%g; want 0 < cost <= estimate", i, call.CostUsd, call.EstimatedUsd)
		}
	}
}

// TestAllowance: a call whose worst case does not fit what the step may
// still spend is not made; the refusal names the limit and the amounts.
func TestAllowance(t *testing.T) {
	// Each answer reports 1500 completion tokens ($0.03), within max_tokens.
	srv, c, reader := budgetServer(t, scripted.Rules{Rules: []scripted.Rule{{Respond: &scripted.Response{Content: "ok",
		Usage: &scripted.Usage{CompletionTokens: 1500}}}}})
	msgs := userMsg(strings.Repeat("a", 1000))
	req := llm.Request{Model: "m", Messages: msgs, MaxTokens: 2000}
	// The worst case: ~1040 prompt tokens at $10/M and 2000 completion tokens at $20/M.
	worst := testPrices.EstimateCost(openai.ChatCompletionRequest{Model: "m", Messages: msgs, MaxTokens: 2000})
	if worst < 0.05 || worst > 0.051 {
		t.Fatalf("estimate $%g, want about $0.0504", worst)
	}
	limit := func(share bool) *novav1.BudgetLimit {
		return &novav1.BudgetLimit{Name: "max_usd", Scope: `workflow "w"`, Allowed: 0.1, Spent: 0.1 - 0.06, Share: share}
	}

	t.Run("fits, then does not", func(t *testing.T) {
		srv.Reset()
		ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{Usd: proto.Float64(0.06), UsdLimit: limit(false)})
		first, err := c.Chat(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		spent := first.Calls[0].CostUsd
		// What is left (0.06 - 0.0404) no longer holds the worst case, nor
		// one with max_tokens lowered to 1024 ($0.0104 + $0.0205).
		_, err = c.Chat(ctx, req)
		be, ok := llm.AsBudgetError(err)
		if !ok {
			t.Fatalf("second call: err %v, want a budget refusal", err)
		}
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("%d requests reached the server, want 1", n)
		}
		if be.Needed < worst*0.99 || be.StepSpent != spent || be.Given != 0.06 || be.Agent != "code-generator" || be.Model != "m" {
			t.Errorf("refusal %v", be)
		}
		msg := err.Error()
		for _, want := range []string{"budget_exceeded: max_usd of workflow \"w\"", "spent of $0.100000 allowed",
			"the next model call (code-generator, m) would cost up to $0.05"} {
			if !strings.Contains(msg, want) {
				t.Errorf("message %q lacks %q", msg, want)
			}
		}
	})

	t.Run("a hard limit lowers max_tokens to what fits", func(t *testing.T) {
		srv.Reset()
		ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{Usd: proto.Float64(0.04), UsdLimit: limit(false)})
		resp, err := c.Chat(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			MaxTokens int `json:"max_tokens"`
		}
		if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil {
			t.Fatal(err)
		}
		if body.MaxTokens < llm.MinBudgetTokens || body.MaxTokens >= 2000 {
			t.Errorf("max_tokens sent %d, want lowered below 2000 but not under %d", body.MaxTokens, llm.MinBudgetTokens)
		}
		if e := resp.Calls[0].EstimatedUsd; e > 0.04 || e < resp.Calls[0].CostUsd {
			t.Errorf("estimate $%g, want within the allowance and at least the cost $%g", e, resp.Calls[0].CostUsd)
		}
	})

	t.Run("a share is asked to grow instead", func(t *testing.T) {
		srv.Reset()
		ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{Usd: proto.Float64(0.04), UsdLimit: limit(true)})
		_, err := c.Chat(ctx, req)
		if _, ok := llm.AsBudgetError(err); !ok || len(srv.Requests()) != 0 {
			t.Fatalf("err %v, %d requests; want a refusal and none sent", err, len(srv.Requests()))
		}
		if !strings.Contains(err.Error(), "more than this step's share of $0.040000") {
			t.Errorf("message %q", err)
		}
	})

	t.Run("model calls", func(t *testing.T) {
		srv.Reset()
		calls := &novav1.BudgetLimit{Name: "max_model_calls", Scope: `node "n"`, Allowed: 3, Spent: 1}
		ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{ModelCalls: proto.Int32(2), CallsLimit: calls})
		for range 2 {
			if _, err := c.Chat(ctx, llm.Request{Model: "m", Messages: msgs}); err != nil {
				t.Fatal(err)
			}
		}
		_, err := c.Chat(ctx, llm.Request{Model: "m", Messages: msgs})
		if err == nil || err.Error() != `budget_exceeded: max_model_calls of node "n": 3 model calls made of 3 allowed` {
			t.Errorf("third call: %v", err)
		}
		if n := len(srv.Requests()); n != 2 {
			t.Errorf("%d requests, want 2", n)
		}
	})

	if got := rejections(t, reader); got["max_usd"] != 2 || got["max_model_calls"] != 1 {
		t.Errorf("nova.llm.budget_rejections by limit = %v, want max_usd 2, max_model_calls 1", got)
	}
}
