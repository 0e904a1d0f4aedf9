package llm_test

import (
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
)

func TestDecodeJSON(t *testing.T) {
	type answer struct {
		Valid  *bool  `json:"valid"`
		Reason string `json:"reason"`
	}
	tests := []struct {
		name    string
		content string
		wantErr string // substring; "" means it decodes to valid=true
	}{
		{"plain", `{"valid": true, "reason": "ok"}`, ""},
		{"whitespace", "\n  {\"valid\": true}\n", ""},
		{"json fence", "```json\n{\"valid\": true, \"reason\": \"ok\"}\n```", ""},
		{"bare fence", "```\n{\"valid\": true}\n```\n", ""},
		{"prose around", `Sure! Here it is: {"valid": true, "reason": "a } in text"} Anything else?`, ""},
		{"empty", "  ", "the answer is empty"},
		{"no object", "I think it is valid.", "holds no JSON object"},
		{"broken object", `{"valid": tru`, "not a valid JSON object"},
		{"wrong type", `{"valid": "yes"}`, "cannot unmarshal string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var a answer
			err := llm.DecodeJSON(tt.content, &a)
			if tt.wantErr == "" {
				if err != nil || a.Valid == nil || !*a.Valid {
					t.Errorf("DecodeJSON = %v, %+v; want valid=true", err, a)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("DecodeJSON error = %v, want it to contain %q", err, tt.wantErr)
			}
		})
	}
}

func TestChatJSON(t *testing.T) {
	tests := []struct {
		name      string
		answers   []string
		wantCalls int
		wantErr   bool
	}{
		{"first answer usable", []string{`{"valid": true}`}, 1, false},
		{"corrected on the second answer", []string{`{"verdict": "fine"}`, `{"valid": false}`}, 2, false},
		{"unusable twice", []string{`{"verdict": "fine"}`}, 2, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var responses []scripted.Response
			for _, a := range tt.answers {
				responses = append(responses, scripted.Response{Content: a})
			}
			srv, err := scripted.New(scripted.Rules{Rules: []scripted.Rule{{Responses: responses}}})
			if err != nil {
				t.Fatal(err)
			}
			ts := httptest.NewServer(srv)
			transport := &http.Transport{}
			defer ts.Close()
			defer transport.CloseIdleConnections()
			c, err := llm.New(llm.Config{BaseURL: ts.URL + "/v1", APIKey: "k", Logger: slog.New(slog.DiscardHandler),
				HTTPClient: &http.Client{Transport: transport}})
			if err != nil {
				t.Fatal(err)
			}
			var got struct {
				Valid *bool `json:"valid"`
			}
			res, err := c.ChatJSON(t.Context(), llm.Request{Model: "gpt-4o-mini", Messages: []openai.ChatCompletionMessage{
				{Role: openai.ChatMessageRoleUser, Content: `Answer in JSON: {"valid": bool}`},
			}}, func(content string) error {
				got.Valid = nil
				if err := llm.DecodeJSON(content, &got); err != nil {
					return err
				}
				if got.Valid == nil {
					return errors.New(`missing field "valid"`)
				}
				return nil
			})
			if tt.wantErr != (err != nil) || (err != nil && !errors.Is(err, llm.ErrUnusableAnswer)) {
				t.Fatalf("ChatJSON error = %v, want error %v (ErrUnusableAnswer)", err, tt.wantErr)
			}
			if len(res.Calls) != tt.wantCalls || len(srv.Requests()) != tt.wantCalls {
				t.Errorf("calls %d, requests %d; want %d", len(res.Calls), len(srv.Requests()), tt.wantCalls)
			}
			reqs := srv.Requests()
			for i, r := range reqs {
				if r.ResponseFormat != "json_object" {
					t.Errorf("request %d: response_format %q, want json_object", i, r.ResponseFormat)
				}
			}
			if tt.wantCalls == 2 {
				msgs := reqs[1].Messages
				if len(msgs) != 3 || msgs[1].Role != "assistant" || msgs[1].Content != tt.answers[0] ||
					!strings.Contains(msgs[2].Content, `missing field "valid"`) {
					t.Errorf("the second request does not show the first answer and its problem: %+v", msgs)
				}
			}
		})
	}
}
