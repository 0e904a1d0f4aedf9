package scripted_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
	"go.uber.org/goleak"

	"github.com/novaflow/nova/pkg/llm/scripted"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// start serves rules (YAML) on loopback for the duration of the test.
func start(t *testing.T, rulesYAML string, opts ...scripted.Option) *scripted.Server {
	t.Helper()
	rules, err := scripted.ParseRules([]byte(rulesYAML))
	if err != nil {
		t.Fatalf("ParseRules: %v", err)
	}
	srv, err := scripted.New(rules, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	url, stop, err := srv.Start(t.Context(), "")
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop: %v", err)
		}
	})
	if !strings.HasPrefix(url, "http://127.0.0.1:") || srv.URL() != url {
		t.Fatalf("Start url %q, URL() %q: want the same loopback url", url, srv.URL())
	}
	return srv
}

// agentTransport adds X-Nova-Agent as NOVA's LLM client does.
type agentTransport struct {
	base  *http.Transport
	agent string
}

func (a agentTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if a.agent != "" {
		r = r.Clone(r.Context())
		r.Header.Set(scripted.HeaderAgent, a.agent)
	}
	return a.base.RoundTrip(r)
}

// client is the official go-openai client pointed at the server, as NOVA's pkg/llm uses it.
func client(t *testing.T, srv *scripted.Server, agent string) *openai.Client {
	t.Helper()
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	cfg := openai.DefaultConfig("sk-test-key-0123456789")
	cfg.BaseURL = srv.BaseURL()
	cfg.HTTPClient = &http.Client{Transport: agentTransport{base: tr, agent: agent}}
	return openai.NewClientWithConfig(cfg)
}

// post sends a raw request and decodes the JSON answer.
func post(t *testing.T, url, body string, header map[string]string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func do(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Header.Get(scripted.HeaderScripted) != "true" {
		t.Errorf("%s %s: header %s = %q, want true", req.Method, req.URL.Path, scripted.HeaderScripted, resp.Header.Get(scripted.HeaderScripted))
	}
	var out map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s %s: answer is not a JSON object: %v: %s", req.Method, req.URL.Path, err, b)
		}
	}
	return resp.StatusCode, out
}

func userMsg(s string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: s}
}

func systemMsg(s string) openai.ChatCompletionMessage {
	return openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: s}
}

func apiError(t *testing.T, err error) *openai.APIError {
	t.Helper()
	var apiErr *openai.APIError
	if !errors.As(err, &apiErr) {
		t.Fatalf("error %v (%T): want an *openai.APIError decoded from OpenAI's error shape", err, err)
	}
	return apiErr
}

func TestContentAnswerIsShapedLikeOpenAI(t *testing.T) {
	srv := start(t, `
rules:
  - name: hello
    match: {user_contains: Say hi}
    respond: {content: "Hi there!"}
  - name: cached
    match: {user_contains: cache}
    respond:
      content: "{}"
      usage: {prompt_tokens: 2000, completion_tokens: 7, cached_tokens: 1024, reasoning_tokens: 5}
`)
	c := client(t, srv, "")

	resp, err := c.CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
		Model:    "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{systemMsg("You are terse."), userMsg("Say hi")},
	})
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	if !strings.HasPrefix(resp.ID, "chatcmpl-") || resp.Object != "chat.completion" || resp.Created == 0 {
		t.Errorf("id %q object %q created %d: want chatcmpl-..., chat.completion, a timestamp", resp.ID, resp.Object, resp.Created)
	}
	if resp.Model != "gpt-4o-mini" || resp.SystemFingerprint != scripted.Fingerprint {
		t.Errorf("model %q fingerprint %q: want the requested model and %q", resp.Model, resp.SystemFingerprint, scripted.Fingerprint)
	}
	if resp.Header().Get(scripted.HeaderScripted) != "true" {
		t.Errorf("header %s missing", scripted.HeaderScripted)
	}
	if len(resp.Choices) != 1 {
		t.Fatalf("choices: %d, want 1", len(resp.Choices))
	}
	ch := resp.Choices[0]
	if ch.Message.Role != "assistant" || ch.Message.Content != "Hi there!" || ch.FinishReason != openai.FinishReasonStop {
		t.Errorf("choice %+v: want assistant \"Hi there!\" finish stop", ch)
	}
	// Estimate: ceil(runes/4) per text, 3 per message, 3 to prime the answer:
	// prompt 3 + (3+ceil(14/4)) + (3+ceil(6/4)) = 15, completion ceil(9/4) = 3.
	want := openai.Usage{PromptTokens: 15, CompletionTokens: 3, TotalTokens: 18}
	if u := resp.Usage; u.PromptTokens != want.PromptTokens || u.CompletionTokens != want.CompletionTokens || u.TotalTokens != want.TotalTokens {
		t.Errorf("usage %+v: want %+v", u, want)
	}
	if resp.Usage.PromptTokensDetails == nil || resp.Usage.CompletionTokensDetails == nil {
		t.Errorf("usage details missing: %+v", resp.Usage)
	}

	resp, err = c.CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
		Model: "gpt-4o", Messages: []openai.ChatCompletionMessage{userMsg("cache me")},
	})
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	u := resp.Usage
	if u.PromptTokens != 2000 || u.CompletionTokens != 7 || u.TotalTokens != 2007 ||
		u.PromptTokensDetails.CachedTokens != 1024 || u.CompletionTokensDetails.ReasoningTokens != 5 {
		t.Errorf("usage %+v (%+v, %+v): want the rule's override", u, u.PromptTokensDetails, u.CompletionTokensDetails)
	}
}

func TestRuleSelection(t *testing.T) {
	srv := start(t, `
rules:
  - name: by-agent
    match: {agent: code-generator}
    respond: {content: by-agent}
  - name: by-model-glob
    match: {model: "o3*"}
    respond: {content: by-model-glob}
  - name: by-model-with-slash
    match: {model: "meta/llama-*"}
    respond: {content: by-model-with-slash}
  - name: by-system
    match: {system_contains: [validator, strict]}
    respond: {content: by-system}
  - name: by-user-list
    match: {user_contains: [alpha, beta]}
    respond: {content: by-user-list}
  - name: by-contains
    match: {contains: NameError}
    respond: {content: by-contains}
  - name: by-regex
    match: {regex: 'total\W+\d{4}'}
    respond: {content: by-regex}
  - name: catch-all
    respond: {content: catch-all}
`)
	tests := []struct {
		name     string
		agent    string
		model    string
		messages []openai.ChatCompletionMessage
		want     string
	}{
		{"agent header", "code-generator", "gpt-4o", []openai.ChatCompletionMessage{userMsg("anything")}, "by-agent"},
		{"agent marker in system prompt", "", "gpt-4o",
			[]openai.ChatCompletionMessage{systemMsg("NOVA agent: code-generator\nWrite Python."), userMsg("x")}, "by-agent"},
		{"other agent header", "input-analyzer", "gpt-4o", []openai.ChatCompletionMessage{userMsg("anything")}, "catch-all"},
		{"model glob", "", "o3-mini", []openai.ChatCompletionMessage{userMsg("x")}, "by-model-glob"},
		{"model glob with slash", "", "meta/llama-3.1-8b", []openai.ChatCompletionMessage{userMsg("x")}, "by-model-with-slash"},
		{"system contains all", "", "gpt-4o",
			[]openai.ChatCompletionMessage{systemMsg("You are a strict output validator."), userMsg("x")}, "by-system"},
		{"system contains only one", "", "gpt-4o",
			[]openai.ChatCompletionMessage{systemMsg("You are an output validator."), userMsg("x")}, "catch-all"},
		{"user contains all", "", "gpt-4o", []openai.ChatCompletionMessage{userMsg("beta then alpha")}, "by-user-list"},
		{"user contains looks at the last user message only", "", "gpt-4o",
			[]openai.ChatCompletionMessage{userMsg("alpha beta"), {Role: "assistant", Content: "ok"}, userMsg("gamma")}, "catch-all"},
		{"contains any message", "", "gpt-4o",
			[]openai.ChatCompletionMessage{systemMsg("Earlier error: NameError: name 'x' is not defined"), userMsg("retry")}, "by-contains"},
		{"regex", "", "gpt-4o", []openai.ChatCompletionMessage{userMsg(`context: {"total": 1500}`)}, "by-regex"},
		{"nothing specific", "", "gpt-4o", []openai.ChatCompletionMessage{userMsg("hello")}, "catch-all"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := client(t, srv, tt.agent).CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{Model: tt.model, Messages: tt.messages})
			if err != nil {
				t.Fatalf("CreateChatCompletion: %v", err)
			}
			if got := resp.Choices[0].Message.Content; got != tt.want {
				t.Errorf("answered by %q, want %q", got, tt.want)
			}
		})
	}
}

func TestSequencedResponses(t *testing.T) {
	srv := start(t, `
rules:
  - name: retry-script
    match: {agent: code-generator}
    responses:
      - content: "x = undefined_name"
      - content: "context['wrong'] = context['totl']"
      - content: "context['discount'] = 150"
  - name: limited
    match: {agent: input-analyzer}
    times: 2
    responses:
      - content: first
      - content: second
  - name: after-limit
    match: {agent: input-analyzer}
    respond: {content: after-limit}
`)
	ask := func(agent string) string {
		t.Helper()
		resp, err := client(t, srv, agent).CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
			Model: "gpt-4o", Messages: []openai.ChatCompletionMessage{userMsg("task")},
		})
		if err != nil {
			t.Fatalf("CreateChatCompletion: %v", err)
		}
		return resp.Choices[0].Message.Content
	}
	tests := []struct {
		name  string
		agent string
		want  []string
	}{
		{"n-th request gets n-th answer, then the last repeats", "code-generator",
			[]string{"x = undefined_name", "context['wrong'] = context['totl']", "context['discount'] = 150", "context['discount'] = 150"}},
		{"times stops the rule, the next rule answers", "input-analyzer",
			[]string{"first", "second", "after-limit", "after-limit"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for i, want := range tt.want {
				if got := ask(tt.agent); got != want {
					t.Errorf("request %d answered %q, want %q", i+1, got, want)
				}
			}
		})
	}
	t.Run("Reset restarts the sequences", func(t *testing.T) {
		srv.Reset()
		if got := ask("code-generator"); got != "x = undefined_name" {
			t.Errorf("after Reset answered %q, want the first answer again", got)
		}
		if n := len(srv.Requests()); n != 1 {
			t.Errorf("after Reset and one request, %d recorded, want 1", n)
		}
	})
}

func TestToolCallRoundTrip(t *testing.T) {
	srv := start(t, `
rules:
  - name: lookup
    match: {agent: code-generator, has_tool_result: false}
    respond:
      tool_calls:
        - name: search_documentation
          arguments: {library: pandas, query: read_csv}
  - name: write-code
    match: {agent: code-generator, has_tool_result: true, contains: "read_csv(filepath_or_buffer"}
    respond:
      template: "# docs said: {{.LastToolResult}}\ndf = pandas.read_csv(context['path'])"
`)
	c := client(t, srv, "code-generator")
	tools := []openai.Tool{{
		Type: openai.ToolTypeFunction,
		Function: &openai.FunctionDefinition{
			Name:        "search_documentation",
			Description: "Search the documentation of an installed library.",
			Parameters:  json.RawMessage(`{"type":"object","properties":{"library":{"type":"string"},"query":{"type":"string"}},"required":["library","query"]}`),
		},
	}}
	msgs := []openai.ChatCompletionMessage{systemMsg("Write Python."), userMsg("Load the CSV at context['path'].")}

	first, err := c.CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{Model: "gpt-4o", Messages: msgs, Tools: tools, ToolChoice: "auto"})
	if err != nil {
		t.Fatalf("first round: %v", err)
	}
	ch := first.Choices[0]
	if ch.FinishReason != openai.FinishReasonToolCalls || ch.Message.Content != "" || len(ch.Message.ToolCalls) != 1 {
		t.Fatalf("first round %+v: want finish_reason tool_calls, no content, one tool call", ch)
	}
	call := ch.Message.ToolCalls[0]
	if !strings.HasPrefix(call.ID, "call_") || call.Type != openai.ToolTypeFunction || call.Function.Name != "search_documentation" {
		t.Errorf("tool call %+v: want id call_..., type function, name search_documentation", call)
	}
	var args map[string]string
	if err := json.Unmarshal([]byte(call.Function.Arguments), &args); err != nil || args["library"] != "pandas" || args["query"] != "read_csv" {
		t.Errorf("arguments %q (%v): want the JSON string of {library: pandas, query: read_csv}", call.Function.Arguments, err)
	}
	// On the wire, content is null (not missing, not "") next to tool_calls, as OpenAI sends it.
	rec := srv.Requests()
	var raw struct {
		Choices []struct {
			Message map[string]json.RawMessage `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(rec[len(rec)-1].Response, &raw); err != nil {
		t.Fatal(err)
	}
	if got := string(raw.Choices[0].Message["content"]); got != "null" {
		t.Errorf("wire content %q, want null", got)
	}

	msgs = append(msgs, ch.Message, openai.ChatCompletionMessage{
		Role:       openai.ChatMessageRoleTool,
		ToolCallID: call.ID,
		Content:    "pandas.read_csv(filepath_or_buffer, *, sep=',', ...)",
	})
	second, err := c.CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{Model: "gpt-4o", Messages: msgs, Tools: tools})
	if err != nil {
		t.Fatalf("second round: %v", err)
	}
	ch = second.Choices[0]
	wantCode := "# docs said: pandas.read_csv(filepath_or_buffer, *, sep=',', ...)\ndf = pandas.read_csv(context['path'])"
	if ch.FinishReason != openai.FinishReasonStop || ch.Message.Content != wantCode || len(ch.Message.ToolCalls) != 0 {
		t.Errorf("second round %+v: want finish_reason stop and content %q", ch, wantCode)
	}

	// What the model received in the second round: the assistant's call and the tool result.
	got := srv.Requests()[1].Messages
	if len(got) != 4 || got[2].Role != "assistant" || len(got[2].ToolCalls) != 1 || got[2].ToolCalls[0].ID != call.ID ||
		got[3].Role != "tool" || got[3].ToolCallID != call.ID {
		t.Errorf("second request messages %+v: want system, user, assistant with the call, tool answering it", got)
	}
}

func TestRuleAnswersMustFitTheRequest(t *testing.T) {
	srv := start(t, `
rules:
  - name: calls-a-tool
    match: {user_contains: call}
    respond: {tool_calls: [{name: search_documentation, arguments: {q: x}}]}
  - name: prose
    respond: {content: "not json"}
`)
	fn := &openai.FunctionDefinition{Name: "search_documentation", Parameters: json.RawMessage(`{"type":"object"}`)}
	other := &openai.FunctionDefinition{Name: "other_tool", Parameters: json.RawMessage(`{"type":"object"}`)}
	tests := []struct {
		name    string
		req     openai.ChatCompletionRequest
		wantMsg string
	}{
		{"tool call without tools offered",
			openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{userMsg("call it")}},
			"offers no tools"},
		{"tool call to a tool not offered",
			openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{userMsg("call it")}, Tools: []openai.Tool{{Type: "function", Function: other}}},
			`calls tool "search_documentation"`},
		{"tool call with tool_choice none",
			openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{userMsg("call it")}, Tools: []openai.Tool{{Type: "function", Function: fn}}, ToolChoice: "none"},
			`tool_choice "none"`},
		{"content when tool_choice is required",
			openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{userMsg("talk")}, Tools: []openai.Tool{{Type: "function", Function: fn}}, ToolChoice: "required"},
			"requires one"},
		{"non-JSON content for json_object",
			openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{userMsg("answer in json")},
				ResponseFormat: &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}},
			"not JSON"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.Model = "gpt-4o"
			_, err := client(t, srv, "").CreateChatCompletion(t.Context(), tt.req)
			e := apiError(t, err)
			if e.HTTPStatusCode != http.StatusInternalServerError || e.Code != "scripted_rule_error" || !strings.Contains(e.Message, tt.wantMsg) {
				t.Errorf("error %d %v %q: want 500 scripted_rule_error containing %q", e.HTTPStatusCode, e.Code, e.Message, tt.wantMsg)
			}
		})
	}
}

func TestErrorStatuses(t *testing.T) {
	srv := start(t, `
rules:
  - name: rate-limited
    match: {user_contains: "429"}
    respond:
      status: 429
      error: {message: "Rate limit reached for gpt-4o on tokens per min.", type: tokens, code: rate_limit_exceeded}
      headers: {Retry-After: "2"}
  - name: overloaded
    match: {user_contains: "503"}
    respond: {status: 503}
  - name: broken
    match: {user_contains: "500"}
    respond: {error: "boom"}
  - name: transient-then-ok
    match: {user_contains: flaky}
    responses:
      - status: 503
      - content: recovered
`)
	tests := []struct {
		name     string
		user     string
		status   int
		typ      string
		code     any
		contains string
	}{
		{"429 with scripted body", "429", 429, "tokens", "rate_limit_exceeded", "Rate limit reached for gpt-4o"},
		// OpenAI sends "code": null; go-openai decodes a null code as 0.
		{"503 with OpenAI's default body", "503", 503, "server_error", 0, "overloaded"},
		{"error without status is 500", "500", 500, "server_error", 0, "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := client(t, srv, "").CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
				Model: "gpt-4o", Messages: []openai.ChatCompletionMessage{userMsg(tt.user)},
			})
			e := apiError(t, err)
			if e.HTTPStatusCode != tt.status || e.Type != tt.typ || e.Code != tt.code || !strings.Contains(e.Message, tt.contains) {
				t.Errorf("got %d type %q code %v message %q; want %d %q %v containing %q",
					e.HTTPStatusCode, e.Type, e.Code, e.Message, tt.status, tt.typ, tt.code, tt.contains)
			}
		})
	}
	t.Run("Retry-After header", func(t *testing.T) {
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.BaseURL()+"/chat/completions",
			strings.NewReader(`{"model":"gpt-4o","messages":[{"role":"user","content":"429"}]}`))
		tr := &http.Transport{}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" {
			t.Errorf("status %d Retry-After %q: want 429 and 2", resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	})
	t.Run("a transient error then success", func(t *testing.T) {
		c := client(t, srv, "")
		req := openai.ChatCompletionRequest{Model: "gpt-4o", Messages: []openai.ChatCompletionMessage{userMsg("flaky")}}
		_, err := c.CreateChatCompletion(t.Context(), req)
		if e := apiError(t, err); e.HTTPStatusCode != 503 {
			t.Fatalf("first call status %d, want 503", e.HTTPStatusCode)
		}
		resp, err := c.CreateChatCompletion(t.Context(), req)
		if err != nil || resp.Choices[0].Message.Content != "recovered" {
			t.Errorf("second call %v %v: want content recovered", resp.Choices, err)
		}
	})
}

func TestStreamIsRejected(t *testing.T) {
	srv := start(t, `[{respond: {content: hi}}]`)
	_, err := client(t, srv, "").CreateChatCompletionStream(t.Context(), openai.ChatCompletionRequest{
		Model: "gpt-4o", Messages: []openai.ChatCompletionMessage{userMsg("hi")}, Stream: true,
	})
	e := apiError(t, err)
	if e.HTTPStatusCode != http.StatusBadRequest || e.Type != "invalid_request_error" || e.Param == nil || *e.Param != "stream" {
		t.Errorf("got %d %q param %v: want 400 invalid_request_error on param stream", e.HTTPStatusCode, e.Type, e.Param)
	}
}

func TestUnmatchedRequest(t *testing.T) {
	long := "Calculate the discount. " + strings.Repeat("x", 300)
	tests := []struct {
		name       string
		rules      string
		wantStatus int
		wantMsg    []string
		wantNot    string
	}{
		{"default: loud 500 naming the request", `rules: [{match: {agent: nobody}, respond: {content: x}}]`,
			500, []string{"no scripted rule matches", `agent "code-generator"`, "Calculate the discount. xxx"}, strings.Repeat("x", 201)},
		{"fallback from the rules file", `
rules: [{match: {agent: nobody}, respond: {content: x}}]
fallback: {status: 400, error: {message: "unscripted request", code: unscripted}}`,
			400, []string{"unscripted request"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := start(t, tt.rules)
			_, err := client(t, srv, "code-generator").CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
				Model: "gpt-4o", Messages: []openai.ChatCompletionMessage{userMsg(long)},
			})
			e := apiError(t, err)
			if e.HTTPStatusCode != tt.wantStatus {
				t.Errorf("status %d, want %d", e.HTTPStatusCode, tt.wantStatus)
			}
			for _, w := range tt.wantMsg {
				if !strings.Contains(e.Message, w) {
					t.Errorf("message %q: want it to contain %q", e.Message, w)
				}
			}
			if tt.wantNot != "" && strings.Contains(e.Message, tt.wantNot) {
				t.Errorf("message quotes more than 200 characters of the user message")
			}
		})
	}
	t.Run("fallback option answers content", func(t *testing.T) {
		srv := start(t, `rules: [{match: {agent: nobody}, respond: {content: x}}]`,
			scripted.WithFallback(scripted.Response{Content: "default answer"}))
		resp, err := client(t, srv, "").CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
			Model: "gpt-4o", Messages: []openai.ChatCompletionMessage{userMsg("?")},
		})
		if err != nil || resp.Choices[0].Message.Content != "default answer" {
			t.Fatalf("got %v %v: want the fallback content", resp.Choices, err)
		}
		if r := srv.Requests()[0].Rule; r != "fallback" {
			t.Errorf("recorded rule %q, want fallback", r)
		}
	})
}

func TestModels(t *testing.T) {
	srv := start(t, `
models: [gpt-4o-mini]
rules:
  - {match: {model: gpt-4o}, respond: {content: a}}
  - {match: {model: "o3*"}, respond: {content: b}}
  - {match: {model: gpt-4o-mini}, respond: {content: c}}
`)
	c := client(t, srv, "")
	list, err := c.ListModels(t.Context())
	if err != nil {
		t.Fatalf("ListModels: %v", err)
	}
	var ids []string
	for _, m := range list.Models {
		ids = append(ids, m.ID)
		if m.Object != "model" || m.OwnedBy != scripted.Fingerprint || m.CreatedAt == 0 {
			t.Errorf("model %+v: want object model, owned_by %s, created", m, scripted.Fingerprint)
		}
	}
	if strings.Join(ids, ",") != "gpt-4o-mini,gpt-4o" {
		t.Errorf("models %v: want gpt-4o-mini, gpt-4o (globs are not models)", ids)
	}
	if m, err := c.GetModel(t.Context(), "gpt-4o"); err != nil || m.ID != "gpt-4o" {
		t.Errorf("GetModel gpt-4o: %+v %v", m, err)
	}
	_, err = c.GetModel(t.Context(), "gpt-unknown")
	if e := apiError(t, err); e.HTTPStatusCode != 404 || e.Code != "model_not_found" {
		t.Errorf("GetModel unknown: %d %v, want 404 model_not_found", e.HTTPStatusCode, e.Code)
	}
	status, body := do(t, mustRequest(t, http.MethodGet, srv.URL()+"/models"))
	if status != 200 || body["object"] != "list" {
		t.Errorf("GET /models without /v1: %d %v", status, body)
	}
}

func mustRequest(t *testing.T, method, url string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	return req
}

func TestRecordedRequests(t *testing.T) {
	srv := start(t, `
rules:
  - name: validator
    match: {agent: output-validator}
    respond: {content: '{"valid": true, "reason": "discount is 10% of total"}'}
`)
	resp, err := client(t, srv, "output-validator").CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
		Model: "gpt-4o-mini",
		Messages: []openai.ChatCompletionMessage{
			systemMsg("You check task results. Answer in JSON."),
			{Role: openai.ChatMessageRoleUser, MultiContent: []openai.ChatMessagePart{
				{Type: openai.ChatMessagePartTypeText, Text: "before: {\"total\": 1500}"},
				{Type: openai.ChatMessagePartTypeText, Text: "after: {\"discount\": 150}"},
			}},
		},
		ResponseFormat:      &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject},
		MaxCompletionTokens: 200,
	})
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	var verdict struct {
		Valid  bool   `json:"valid"`
		Reason string `json:"reason"`
	}
	if err := json.Unmarshal([]byte(resp.Choices[0].Message.Content), &verdict); err != nil || !verdict.Valid {
		t.Errorf("json_object answer %q (%v): want the scripted verdict", resp.Choices[0].Message.Content, err)
	}

	recs := srv.Requests()
	if len(recs) != 1 {
		t.Fatalf("recorded %d requests, want 1", len(recs))
	}
	r := recs[0]
	if r.Method != "POST" || r.Path != "/v1/chat/completions" || r.Model != "gpt-4o-mini" || r.Agent != "output-validator" ||
		r.Rule != "validator" || r.Status != 200 || r.ResponseFormat != "json_object" || r.MaxCompletionTokens != 200 {
		t.Errorf("recorded %+v", r)
	}
	if r.Header.Get("Authorization") != "" {
		t.Errorf("recorded the Authorization header")
	}
	if r.LastUser() != "before: {\"total\": 1500}\nafter: {\"discount\": 150}" || !strings.Contains(r.System(), "You check task results") {
		t.Errorf("recorded user %q system %q", r.LastUser(), r.System())
	}
	if !strings.Contains(r.Text(), `"total": 1500`) || !bytes.Contains(r.Body, []byte(`"max_completion_tokens":200`)) {
		t.Errorf("recorded text %q / body %s", r.Text(), r.Body)
	}

	hr, err := http.NewRequestWithContext(t.Context(), http.MethodGet, srv.URL()+"/_nova/requests", nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	hresp, err := (&http.Client{Transport: tr}).Do(hr)
	if err != nil {
		t.Fatal(err)
	}
	defer hresp.Body.Close()
	if hresp.StatusCode != 200 {
		t.Fatalf("GET /_nova/requests: %d", hresp.StatusCode)
	}
	var human []struct {
		Agent    string             `json:"agent"`
		Rule     string             `json:"rule"`
		Messages []scripted.Message `json:"messages"`
		Body     map[string]any     `json:"body"`
	}
	if err := json.NewDecoder(hresp.Body).Decode(&human); err != nil {
		t.Fatalf("decode /_nova/requests: %v", err)
	}
	if len(human) != 1 || human[0].Agent != "output-validator" || human[0].Rule != "validator" || len(human[0].Messages) != 2 || human[0].Body["model"] != "gpt-4o-mini" {
		t.Errorf("/_nova/requests: %+v", human)
	}

	status, _ := do(t, mustRequest(t, http.MethodDelete, srv.URL()+"/_nova/requests"))
	if status != http.StatusNoContent || len(srv.Requests()) != 0 {
		t.Errorf("DELETE /_nova/requests: %d, %d left", status, len(srv.Requests()))
	}
}

func TestReasoningModelWithMaxCompletionTokens(t *testing.T) {
	srv := start(t, `[{match: {model: "gpt-5*"}, respond: {content: ok, usage: {reasoning_tokens: 64}}}]`)
	resp, err := client(t, srv, "").CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
		Model: "gpt-5-mini", MaxCompletionTokens: 4000, ReasoningEffort: "low",
		Messages: []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleDeveloper, Content: "Be brief."}, userMsg("go")},
	})
	if err != nil {
		t.Fatalf("CreateChatCompletion: %v", err)
	}
	// completion tokens include reasoning tokens, as OpenAI reports them.
	if u := resp.Usage; u.CompletionTokensDetails.ReasoningTokens != 64 || u.CompletionTokens != 1+64 {
		t.Errorf("usage %+v %+v: want 64 reasoning tokens inside completion tokens", u, u.CompletionTokensDetails)
	}
	if got := srv.Requests()[0].MaxCompletionTokens; got != 4000 {
		t.Errorf("recorded max_completion_tokens %d, want 4000", got)
	}
}

func TestInvalidRequestsAreRejectedLikeOpenAI(t *testing.T) {
	srv := start(t, `[{respond: {content: '{"ok": true}'}}]`)
	chat := srv.BaseURL() + "/chat/completions"
	tests := []struct {
		name      string
		url       string
		body      string
		status    int
		wantParam string
		wantMsg   string
	}{
		{"valid request passes", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200, "", ""},
		{"path without /v1", srv.URL() + "/chat/completions", `{"model":"m","messages":[{"role":"user","content":"hi"}]}`, 200, "", ""},
		{"not JSON", chat, `{"model":`, 400, "", "could not parse the JSON body"},
		{"no model", chat, `{"messages":[{"role":"user","content":"hi"}]}`, 400, "", "you must provide a model parameter"},
		{"no messages", chat, `{"model":"m"}`, 400, "messages", "Missing required parameter: 'messages'"},
		{"empty messages", chat, `{"model":"m","messages":[]}`, 400, "messages", "empty array"},
		{"unknown role", chat, `{"model":"m","messages":[{"role":"robot","content":"hi"}]}`, 400, "messages[0].role", "Invalid value: 'robot'"},
		{"tool message without a call", chat,
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"tool","tool_call_id":"call_1","content":"x"}]}`,
			400, "messages.[1].role", "must be a response to a preceeding message with 'tool_calls'"},
		{"tool call without its result", chat,
			`{"model":"m","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"user","content":"and?"}]}`,
			400, "messages.[1].role", "did not have response messages: call_1"},
		{"tool_choice without tools", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"tool_choice":"auto"}`,
			400, "tool_choice", "only allowed when 'tools' are specified"},
		{"bad tool name", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"tools":[{"type":"function","function":{"name":"bad name"}}]}`,
			400, "tools[0].function.name", "does not match pattern"},
		{"json_object without the word json", chat,
			`{"model":"m","messages":[{"role":"user","content":"hi"}],"response_format":{"type":"json_object"}}`,
			400, "messages", "must contain the word 'json'"},
		{"json_object with the word json", chat,
			`{"model":"m","messages":[{"role":"user","content":"answer in JSON"}],"response_format":{"type":"json_object"}}`, 200, "", ""},
		{"n above 1", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"n":2}`, 400, "n", ""},
		{"temperature out of range", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"temperature":3}`, 400, "temperature", ""},
		{"max_tokens zero", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":0}`, 400, "max_tokens", ""},
		{"stream true", chat, `{"model":"m","messages":[{"role":"user","content":"hi"}],"stream":true}`, 400, "stream", "not supported"},
		{"unknown path", srv.BaseURL() + "/embeddingz", `{}`, 404, "", "Invalid URL (POST /v1/embeddingz)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := post(t, tt.url, tt.body, nil)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %v", status, tt.status, body)
			}
			if status == 200 {
				return
			}
			e, ok := body["error"].(map[string]any)
			if !ok {
				t.Fatalf("body %v: want OpenAI's {\"error\": {...}}", body)
			}
			for _, k := range []string{"message", "type", "param", "code"} {
				if _, present := e[k]; !present {
					t.Errorf("error %v: field %q missing (OpenAI sends it, null when unset)", e, k)
				}
			}
			if e["type"] != "invalid_request_error" {
				t.Errorf("type %v, want invalid_request_error", e["type"])
			}
			if tt.wantParam != "" && e["param"] != tt.wantParam {
				t.Errorf("param %v, want %q", e["param"], tt.wantParam)
			}
			if msg, _ := e["message"].(string); !strings.Contains(msg, tt.wantMsg) {
				t.Errorf("message %q, want it to contain %q", msg, tt.wantMsg)
			}
		})
	}
	t.Run("wrong method", func(t *testing.T) {
		status, body := do(t, mustRequest(t, http.MethodGet, chat))
		if status != http.StatusMethodNotAllowed || body["error"] == nil {
			t.Errorf("GET chat completions: %d %v, want 405 in OpenAI's shape", status, body)
		}
	})
}

func TestAPIKey(t *testing.T) {
	srv := start(t, `[{respond: {content: ok}}]`, scripted.WithAPIKey("sk-test-key-0123456789"))
	body := `{"model":"m","messages":[{"role":"user","content":"hi"}]}`
	chat := srv.BaseURL() + "/chat/completions"
	tests := []struct {
		name   string
		header map[string]string
		status int
		code   any
	}{
		{"missing", nil, 401, nil},
		{"wrong", map[string]string{"Authorization": "Bearer sk-wrong-key-000000"}, 401, "invalid_api_key"},
		{"right", map[string]string{"Authorization": "Bearer sk-test-key-0123456789"}, 200, nil},
		{"azure api-key header", map[string]string{"api-key": "sk-test-key-0123456789"}, 200, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, resp := post(t, chat, body, tt.header)
			if status != tt.status {
				t.Fatalf("status %d, want %d: %v", status, tt.status, resp)
			}
			if status == 401 {
				e := resp["error"].(map[string]any)
				if e["code"] != tt.code || e["type"] != "invalid_request_error" {
					t.Errorf("error %v: want code %v", e, tt.code)
				}
			}
		})
	}
	// The go-openai client sends the key it is configured with.
	if _, err := client(t, srv, "").CreateChatCompletion(t.Context(), openai.ChatCompletionRequest{
		Model: "m", Messages: []openai.ChatCompletionMessage{userMsg("hi")},
	}); err != nil {
		t.Errorf("go-openai with the right key: %v", err)
	}
}

func TestDelayEndsWhenTheClientLeaves(t *testing.T) {
	srv := start(t, `[{respond: {content: late, delay: 1m}}]`)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := client(t, srv, "").CreateChatCompletion(ctx, openai.ChatCompletionRequest{
		Model: "m", Messages: []openai.ChatCompletionMessage{userMsg("hi")},
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v: want the client's deadline", err)
	}
	// The handler notices the client left; wait for its recording (no timing assertion).
	for len(srv.Requests()) == 0 {
		select {
		case <-t.Context().Done():
			t.Fatal("request never recorded")
		case <-time.After(5 * time.Millisecond):
		}
	}
	if r := srv.Requests()[0]; r.Status != 0 || r.Rule == "" {
		t.Errorf("recorded status %d rule %q: want status 0 (not answered) and the rule", r.Status, r.Rule)
	}
}

func TestServeStopsWithContext(t *testing.T) {
	srv, err := scripted.New(scripted.Rules{Rules: []scripted.Rule{{Respond: &scripted.Response{Content: "ok"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	url, stop, err := srv.Start(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if status, _ := do(t, mustRequest(t, http.MethodGet, url+"/_nova/health")); status != 200 {
		t.Errorf("health: %d", status)
	}
	cancel()
	if err := stop(); err != nil {
		t.Errorf("stop after ctx cancel: %v", err)
	}
	if err := stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}
