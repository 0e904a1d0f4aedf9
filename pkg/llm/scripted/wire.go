package scripted

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// The request and response shapes of OpenAI's chat completions API, as far as the server
// reads and writes them. Request fields are pointers or raw where OpenAI distinguishes
// "absent" from a zero value.

type chatRequest struct {
	Model               *string         `json:"model"`
	Messages            []wireMessage   `json:"messages"`
	Tools               []wireTool      `json:"tools"`
	ToolChoice          json.RawMessage `json:"tool_choice"`
	MaxTokens           *int            `json:"max_tokens"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	ResponseFormat      *responseFormat `json:"response_format"`
	Temperature         *float64        `json:"temperature"`
	N                   *int            `json:"n"`
	Stream              bool            `json:"stream"`
}

type wireMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []wireToolCall  `json:"tool_calls"`
	ToolCallID string          `json:"tool_call_id"`
}

type wireToolCall struct {
	ID       string       `json:"id"`
	Type     string       `json:"type"`
	Function wireFunction `json:"function"`
}

type wireFunction struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type wireTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name       string          `json:"name"`
		Parameters json.RawMessage `json:"parameters"`
	} `json:"function"`
}

type responseFormat struct {
	Type string `json:"type"`
}

type chatResponse struct {
	ID                string       `json:"id"`
	Object            string       `json:"object"`
	Created           int64        `json:"created"`
	Model             string       `json:"model"`
	Choices           []wireChoice `json:"choices"`
	Usage             wireUsage    `json:"usage"`
	ServiceTier       string       `json:"service_tier"`
	SystemFingerprint string       `json:"system_fingerprint"`
}

type wireChoice struct {
	Index        int        `json:"index"`
	Message      wireAnswer `json:"message"`
	Logprobs     *struct{}  `json:"logprobs"`
	FinishReason string     `json:"finish_reason"`
}

// wireAnswer is the assistant message; content and refusal are null when absent, as in OpenAI.
type wireAnswer struct {
	Role        string         `json:"role"`
	Content     *string        `json:"content"`
	Refusal     *string        `json:"refusal"`
	ToolCalls   []wireToolCall `json:"tool_calls,omitempty"`
	Annotations []struct{}     `json:"annotations"`
}

type wireUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	TotalTokens         int `json:"total_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
		AudioTokens  int `json:"audio_tokens"`
	} `json:"prompt_tokens_details"`
	CompletionTokensDetails struct {
		ReasoningTokens          int `json:"reasoning_tokens"`
		AudioTokens              int `json:"audio_tokens"`
		AcceptedPredictionTokens int `json:"accepted_prediction_tokens"`
		RejectedPredictionTokens int `json:"rejected_prediction_tokens"`
	} `json:"completion_tokens_details"`
}

type wireModel struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
}

type wireModelList struct {
	Object string      `json:"object"`
	Data   []wireModel `json:"data"`
}

// wireError is OpenAI's error body; param and code are null when unset.
type wireError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func newWireError(e ErrorSpec) wireError {
	var w wireError
	w.Error.Message = e.Message
	w.Error.Type = e.Type
	if e.Param != "" {
		w.Error.Param = &e.Param
	}
	if e.Code != "" {
		w.Error.Code = &e.Code
	}
	return w
}

// Message is a chat message as the server received it, with its content flattened to text.
type Message struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	Name       string     `json:"name,omitempty"`
	ToolCalls  []ToolCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

// ToolCall is a function call made by the assistant; Arguments is the JSON text.
type ToolCall struct {
	ID        string `json:"id,omitempty"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

// text is what the content conditions search: the content and any tool calls.
func (m Message) text() string {
	if len(m.ToolCalls) == 0 {
		return m.Content
	}
	var b strings.Builder
	b.WriteString(m.Content)
	for _, tc := range m.ToolCalls {
		b.WriteString("\n")
		b.WriteString(tc.Name)
		b.WriteString(" ")
		b.WriteString(tc.Arguments)
	}
	return b.String()
}

// contentText flattens OpenAI message content: null, a string, or a list of parts of which
// the text parts count.
func contentText(raw json.RawMessage) (string, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string  `json:"type"`
		Text *string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", fmt.Errorf("content must be a string or a list of content parts")
	}
	texts := make([]string, 0, len(parts))
	for _, p := range parts {
		if p.Type == "" {
			return "", fmt.Errorf("content part without a type")
		}
		if p.Type == "text" {
			if p.Text == nil {
				return "", fmt.Errorf("text content part without text")
			}
			texts = append(texts, *p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}

// estimateTokens is a deterministic stand-in for a tokenizer: about four characters a token.
func estimateTokens(s string) int {
	return (utf8.RuneCountInString(s) + 3) / 4
}
