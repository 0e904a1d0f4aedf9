package llm_test

import (
	"encoding/json"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
)

// TestTemperatureOnTheWire: a zero temperature reaches the API (go-openai
// would omit it, and the API would use its default of 1); reasoning models
// get none.
func TestTemperatureOnTheWire(t *testing.T) {
	srv, err := scripted.New(scripted.Rules{Rules: []scripted.Rule{{Respond: &scripted.Response{Content: "ok"}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := srv.Start(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	c, err := llm.New(llm.Config{BaseURL: srv.BaseURL(), APIKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	zero, warm := float32(0), float32(0.2)
	tests := []struct {
		model       string
		temperature *float32
		want        any // the temperature sent; nil for none
	}{
		{"gpt-4o-mini", &zero, 1e-45},
		{"gpt-4o", &warm, 0.2},
		{"gpt-4o", nil, nil},
		{"o4-mini", &zero, nil},
	}
	for _, tc := range tests {
		srv.Reset()
		msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "hi"}}
		if _, err := c.Chat(t.Context(), llm.Request{Model: tc.model, Messages: msgs, Temperature: tc.temperature}); err != nil {
			t.Fatal(err)
		}
		var body map[string]any
		if err := json.Unmarshal(srv.Requests()[0].Body, &body); err != nil {
			t.Fatal(err)
		}
		got, sent := body["temperature"]
		if tc.want == nil && sent || tc.want != nil && (!sent || float32(got.(float64)) != float32(tc.want.(float64))) {
			t.Errorf("%s with temperature %v: sent %v (present %v), want %v", tc.model, tc.temperature, got, sent, tc.want)
		}
	}
}

// TestModelCallSpans: every model call is a client span named "chat
// <model>" with the OpenTelemetry GenAI attributes, so trace tools show
// token use; the messages never reach the span.
func TestModelCallSpans(t *testing.T) {
	srv, err := scripted.New(scripted.Rules{Rules: []scripted.Rule{{Respond: &scripted.Response{Content: "ok",
		Usage: &scripted.Usage{PromptTokens: 120, CompletionTokens: 7}}}}})
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := srv.Start(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = stop() }()
	rec := tracetest.NewSpanRecorder()
	c, err := llm.New(llm.Config{BaseURL: srv.BaseURL(), APIKey: "k", Agent: "code-generator",
		TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))})
	if err != nil {
		t.Fatal(err)
	}
	msgs := []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: "the secret plan"}}
	if _, err := c.Chat(t.Context(), llm.Request{Model: "gpt-4o-mini", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1", len(spans))
	}
	s := spans[0]
	if s.Name() != "chat gpt-4o-mini" || s.SpanKind() != trace.SpanKindClient {
		t.Errorf("span %q kind %v", s.Name(), s.SpanKind())
	}
	got := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		got[kv.Key] = kv.Value
		if strings.Contains(kv.Value.Emit(), "secret plan") {
			t.Errorf("attribute %s carries the prompt", kv.Key)
		}
	}
	for key, want := range map[attribute.Key]string{
		"gen_ai.operation.name":      "chat",
		"gen_ai.provider.name":       "openai",
		"gen_ai.request.model":       "gpt-4o-mini",
		"gen_ai.usage.input_tokens":  "120",
		"gen_ai.usage.output_tokens": "7",
		"nova.scripted":              "true",
		"nova.agent":                 "code-generator",
	} {
		if v, ok := got[key]; !ok || v.Emit() != want {
			t.Errorf("%s = %q (present %v), want %q", key, v.Emit(), ok, want)
		}
	}
}
