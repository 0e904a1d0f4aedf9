package llm_test

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func startScripted(t *testing.T, rules scripted.Rules, opts ...scripted.Option) *scripted.Server {
	t.Helper()
	srv, err := scripted.New(rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := srv.Start(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	return srv
}

// TestEmbed: vectors in the texts' order, the call's tokens and its cost
// from the price table, marked scripted, and a span without the texts.
func TestEmbed(t *testing.T) {
	srv := startScripted(t, scripted.Rules{})
	rec := tracetest.NewSpanRecorder()
	c, err := llm.New(llm.Config{BaseURL: srv.BaseURL(), APIKey: "k", Agent: "graph-engine",
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	texts := []string{"Calculate discount (10% if total > 1000)", "the secret plan"}
	res, err := c.Embed(t.Context(), "text-embedding-3-small", texts)
	if err != nil {
		t.Fatal(err)
	}
	for i, text := range texts {
		if !slices.Equal(res.Vectors[i], scripted.Embed(text, 0)) {
			t.Errorf("vector %d is not the scripted embedding of %q", i, text)
		}
	}
	wantCost := 14 * 0.02 / 1e6 // ceil(runes/4) tokens of each text, at text-embedding-3-small's input price
	if c := res.Call; c.Model != "text-embedding-3-small" || c.PromptTokens != 14 || c.CompletionTokens != 0 || !c.Scripted ||
		math.Abs(c.CostUsd-wantCost) > 1e-15 || c.EstimatedUsd < c.CostUsd {
		t.Errorf("call %v, want 14 prompt tokens costing $%g, scripted", c, wantCost)
	}
	spans := rec.Ended()
	if len(spans) != 1 || spans[0].Name() != "embeddings text-embedding-3-small" {
		t.Fatalf("spans %v", spans)
	}
	for _, kv := range spans[0].Attributes() {
		if strings.Contains(kv.Value.Emit(), "secret plan") {
			t.Errorf("attribute %s carries a text", kv.Key)
		}
	}
	if _, err := c.Embed(t.Context(), "", texts); err == nil {
		t.Error("no model: no error")
	}
	if _, err := c.Embed(t.Context(), "m", nil); err == nil {
		t.Error("no texts: no error")
	}
}

// TestEmbedErrors: an API without embeddings is told from other failures,
// and the errors name the model, never the key.
func TestEmbedErrors(t *testing.T) {
	off := startScripted(t, scripted.Rules{Embeddings: &scripted.EmbeddingsSpec{Disabled: true}})
	c, err := llm.New(llm.Config{BaseURL: off.BaseURL(), APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Embed(t.Context(), "text-embedding-3-small", []string{"x"})
	if !errors.Is(err, llm.ErrEmbeddingsUnsupported) || !strings.Contains(err.Error(), "text-embedding-3-small") || !strings.Contains(err.Error(), "404") {
		t.Errorf("embeddings disabled: %v, want ErrEmbeddingsUnsupported naming the model and the 404", err)
	}

	const key = "sk-proj-0123456789abcdefghij"
	locked := startScripted(t, scripted.Rules{}, scripted.WithAPIKey("sk-other-key-000000"))
	c, err = llm.New(llm.Config{BaseURL: locked.BaseURL(), APIKey: key})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Embed(t.Context(), "text-embedding-3-small", []string{"x"})
	if err == nil || errors.Is(err, llm.ErrEmbeddingsUnsupported) || !strings.Contains(err.Error(), "401") || strings.Contains(err.Error(), key) {
		t.Errorf("a wrong key: %v, want a 401 that is not 'unsupported' and does not show the key", err)
	}
}

// TestEmbedBudget: an embeddings call is held to the context's allowance
// like a chat call.
func TestEmbedBudget(t *testing.T) {
	srv := startScripted(t, scripted.Rules{})
	c, err := llm.New(llm.Config{BaseURL: srv.BaseURL(), APIKey: "k", Agent: "graph-engine"})
	if err != nil {
		t.Fatal(err)
	}
	calls := &novav1.BudgetLimit{Name: "max_model_calls", Scope: `workflow "w"`, Allowed: 2, Spent: 2}
	ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{ModelCalls: proto.Int32(0), CallsLimit: calls})
	_, err = c.Embed(ctx, "text-embedding-3-small", []string{"x"})
	if be, ok := llm.AsBudgetError(err); !ok || be.GetLimit().GetName() != "max_model_calls" || be.GetAgent() != "graph-engine" {
		t.Errorf("no model call left: %v", err)
	}
	usd := &novav1.BudgetLimit{Name: "max_usd", Scope: `workflow "w"`, Allowed: 1e-9}
	ctx = llm.WithAllowance(t.Context(), &novav1.Allowance{Usd: proto.Float64(1e-9), UsdLimit: usd})
	if _, err := c.Embed(ctx, "text-embedding-3-small", []string{strings.Repeat("word ", 200)}); err == nil {
		t.Error("a call costing more than the allowance was made")
	}
	ctx = llm.WithAllowance(t.Context(), &novav1.Allowance{Usd: proto.Float64(0.01), UsdLimit: usd, ModelCalls: proto.Int32(1), CallsLimit: calls})
	if _, err := c.Embed(ctx, "text-embedding-3-small", []string{"x"}); err != nil {
		t.Errorf("a call that fits: %v", err)
	}
	if len(srv.Requests()) != 1 {
		t.Errorf("%d requests reached the server, want only the one that fit", len(srv.Requests()))
	}
}
