package scripted

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Recorded is one request the server received, kept so tests can assert on exactly what a
// model would have been sent.
type Recorded struct {
	Time   time.Time
	Method string
	Path   string
	// Header is the request's headers without Authorization and Api-Key.
	Header http.Header
	// Body is the raw request body.
	Body []byte
	// The decoded chat request; empty for other endpoints or an undecodable body.
	Model               string
	Agent               string // X-Nova-Agent, else the "NOVA agent:" marker of the system prompt
	Messages            []Message
	Tools               []string // names of the offered tools
	ResponseFormat      string
	MaxTokens           int
	MaxCompletionTokens int
	// Input are the texts of an embeddings request.
	Input []string
	// Rule names the rule that answered, "fallback" for the fallback, "" when none did
	// (an invalid request, or no rule and no fallback).
	Rule string
	// Status is the HTTP status answered; 0 when the client left before the answer.
	Status int
	// Response is the body answered.
	Response []byte
}

// Text is every message's content (and tool call arguments) joined by newlines: what the
// model was shown.
func (r Recorded) Text() string {
	parts := make([]string, 0, len(r.Messages))
	for _, m := range r.Messages {
		parts = append(parts, m.text())
	}
	return strings.Join(parts, "\n")
}

// System is the system and developer messages joined by newlines.
func (r Recorded) System() string {
	var parts []string
	for _, m := range r.Messages {
		if m.Role == "system" || m.Role == "developer" {
			parts = append(parts, m.Content)
		}
	}
	return strings.Join(parts, "\n")
}

// LastUser is the content of the last user message.
func (r Recorded) LastUser() string {
	for i := len(r.Messages) - 1; i >= 0; i-- {
		if r.Messages[i].Role == "user" {
			return r.Messages[i].Content
		}
	}
	return ""
}

// MarshalJSON writes bodies as JSON when they are JSON, else as strings, for /_nova/requests.
func (r Recorded) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Time                time.Time   `json:"time"`
		Method              string      `json:"method"`
		Path                string      `json:"path"`
		Header              http.Header `json:"header,omitempty"`
		Body                any         `json:"body,omitempty"`
		Model               string      `json:"model,omitempty"`
		Agent               string      `json:"agent,omitempty"`
		Messages            []Message   `json:"messages,omitempty"`
		Tools               []string    `json:"tools,omitempty"`
		ResponseFormat      string      `json:"response_format,omitempty"`
		MaxTokens           int         `json:"max_tokens,omitempty"`
		MaxCompletionTokens int         `json:"max_completion_tokens,omitempty"`
		Input               []string    `json:"input,omitempty"`
		Rule                string      `json:"rule,omitempty"`
		Status              int         `json:"status"`
		Response            any         `json:"response,omitempty"`
	}{
		r.Time, r.Method, r.Path, r.Header, jsonOrString(r.Body), r.Model, r.Agent, r.Messages,
		r.Tools, r.ResponseFormat, r.MaxTokens, r.MaxCompletionTokens, r.Input, r.Rule, r.Status,
		jsonOrString(r.Response),
	})
}

func jsonOrString(b []byte) any {
	switch {
	case len(b) == 0:
		return nil
	case json.Valid(b):
		return json.RawMessage(b)
	default:
		return string(b)
	}
}
