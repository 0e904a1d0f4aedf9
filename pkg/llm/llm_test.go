package llm_test

import (
	"encoding/json"
	"testing"

	openai "github.com/sashabaranov/go-openai"

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
