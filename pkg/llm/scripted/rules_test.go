package scripted_test

import (
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"

	"github.com/novaflow/nova/pkg/llm/scripted"
)

func TestParseRules(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		wantErr string // "" means valid
		check   func(t *testing.T, r scripted.Rules)
	}{
		{"object form", `
rules:
  - name: a
    match: {agent: code-generator, user_contains: discount, has_tool_result: false}
    respond: {content: "x = 1"}
models: [gpt-4o]
fallback: {status: 400}`, "", func(t *testing.T, r scripted.Rules) {
			if len(r.Rules) != 1 || r.Rules[0].Match.UserContains[0] != "discount" || *r.Rules[0].Match.HasToolResult ||
				r.Models[0] != "gpt-4o" || r.Fallback.Status != 400 {
				t.Errorf("parsed %+v", r)
			}
		}},
		{"bare list", `[{match: {contains: [a, b]}, respond: {content: x}}]`, "", func(t *testing.T, r scripted.Rules) {
			if len(r.Rules) != 1 || len(r.Rules[0].Match.Contains) != 2 {
				t.Errorf("parsed %+v", r)
			}
		}},
		{"JSON", `{"rules": [{"respond": {"tool_calls": [{"name": "f", "arguments": "{\"raw\": true}"}]}}]}`, "", nil},
		{"error as a plain message", `[{respond: {status: 429, error: slow down}}]`, "", func(t *testing.T, r scripted.Rules) {
			if r.Rules[0].Respond.Error.Message != "slow down" {
				t.Errorf("error %+v", r.Rules[0].Respond.Error)
			}
		}},
		{"misspelt field", `[{match: {user_contain: x}, respond: {content: x}}]`, `unknown field "user_contain"`, nil},
		{"no answer", `[{match: {agent: a}}]`, "needs respond or responses", nil},
		{"respond and responses", `[{respond: {content: a}, responses: [{content: b}]}]`, "not both", nil},
		{"empty answer", `[{respond: {usage: {prompt_tokens: 3}}}]`, "needs content, template, tool_calls or an error", nil},
		{"error with content", `[{respond: {status: 500, content: x}}]`, "no content", nil},
		{"status not an error", `[{respond: {status: 200}}]`, "want an HTTP error status", nil},
		{"bad regex", `[{match: {regex: "("}, respond: {content: x}}]`, "match.regex", nil},
		{"bad template", `[{respond: {template: "{{.Nope"}}]`, "template", nil},
		{"bad tool name", `[{respond: {tool_calls: [{name: "has space"}]}}]`, "tool_calls[0]", nil},
		{"bad delay", `[{respond: {content: x, delay: 5}}]`, "duration", nil},
		{"names the rule", `[{name: my-rule, respond: {}}]`, `"my-rule"`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := scripted.ParseRules([]byte(tt.in))
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("ParseRules: %v", err)
				}
				if tt.check != nil {
					tt.check(t, r)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
	t.Run("New validates rules built in Go", func(t *testing.T) {
		_, err := scripted.New(scripted.Rules{Rules: []scripted.Rule{{Match: scripted.Match{Regex: scripted.Strings{"["}}, Respond: &scripted.Response{Content: "x"}}}})
		if err == nil {
			t.Error("New accepted a rule with an invalid regex")
		}
	})
}

// TestExampleRules serves examples/scripted-llm.yaml, the offline demo's rules, and checks
// that each agent gets an answer it can use.
func TestExampleRules(t *testing.T) {
	rules, err := scripted.LoadRules(filepath.Join("..", "..", "..", "examples", "scripted-llm.yaml"))
	if err != nil {
		t.Fatalf("LoadRules: %v", err)
	}
	srv, err := scripted.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	_, stop, err := srv.Start(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stop() })
	jsonFormat := &openai.ChatCompletionResponseFormat{Type: openai.ChatCompletionResponseFormatTypeJSONObject}
	ask := func(t *testing.T, agent string, req openai.ChatCompletionRequest) openai.ChatCompletionMessage {
		t.Helper()
		req.Model = "gpt-4o"
		resp, err := client(t, srv, agent).CreateChatCompletion(t.Context(), req)
		if err != nil {
			t.Fatalf("%s: %v", agent, err)
		}
		if resp.SystemFingerprint != scripted.Fingerprint {
			t.Errorf("fingerprint %q", resp.SystemFingerprint)
		}
		return resp.Choices[0].Message
	}

	t.Run("input-analyzer", func(t *testing.T) {
		msg := ask(t, "input-analyzer", openai.ChatCompletionRequest{ResponseFormat: jsonFormat, Messages: []openai.ChatCompletionMessage{
			systemMsg("Decide whether the data needs analysis. Answer in JSON."), userMsg(`Task: Calculate discount. Context: {"total": 1500}`),
		}})
		var got struct {
			NeedsAnalysis *bool  `json:"needs_analysis"`
			Reasoning     string `json:"reasoning"`
			Complexity    string `json:"complexity"`
		}
		if err := json.Unmarshal([]byte(msg.Content), &got); err != nil || got.NeedsAnalysis == nil || *got.NeedsAnalysis || got.Reasoning == "" || got.Complexity != "low" {
			t.Errorf("answer %q (%v): want needs_analysis false, reasoning, complexity low", msg.Content, err)
		}
	})

	t.Run("output-validator", func(t *testing.T) {
		msg := ask(t, "output-validator", openai.ChatCompletionRequest{ResponseFormat: jsonFormat, Messages: []openai.ChatCompletionMessage{
			systemMsg("Judge the result. Answer in JSON {valid, reason}."), userMsg("before/after"),
		}})
		var got struct {
			Valid  bool   `json:"valid"`
			Reason string `json:"reason"`
		}
		if err := json.Unmarshal([]byte(msg.Content), &got); err != nil || !got.Valid || got.Reason == "" {
			t.Errorf("answer %q (%v): want valid true with a reason", msg.Content, err)
		}
	})

	t.Run("code-generator discount code computes 10% over 1000", func(t *testing.T) {
		msg := ask(t, "code-generator", openai.ChatCompletionRequest{Messages: []openai.ChatCompletionMessage{
			systemMsg("Write Python that reads and updates `context`."),
			userMsg(`Task: Calculate discount (10% if total > 1000). Context: {"total": 1500}`),
		}})
		tests := []struct {
			total float64
			want  map[string]float64
		}{
			{1500, map[string]float64{"discount": 150, "final_total": 1350}},
			{800, map[string]float64{"discount": 0, "final_total": 800}},
		}
		for _, tt := range tests {
			got := runPython(t, msg.Content, map[string]any{"total": tt.total})
			for k, v := range tt.want {
				if got[k] != v {
					t.Errorf("total %v: %s = %v, want %v (context %v)", tt.total, k, got[k], v, got)
				}
			}
		}
	})

	t.Run("code-generator searches documentation, then writes code", func(t *testing.T) {
		tools := []openai.Tool{{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: "search_documentation", Parameters: json.RawMessage(`{"type":"object","properties":{"library":{"type":"string"},"query":{"type":"string"}}}`),
		}}}
		msgs := []openai.ChatCompletionMessage{systemMsg("Write Python."), userMsg("Task: Format the final total as currency.")}
		first := ask(t, "code-generator", openai.ChatCompletionRequest{Messages: msgs, Tools: tools})
		if len(first.ToolCalls) != 1 || first.ToolCalls[0].Function.Name != "search_documentation" {
			t.Fatalf("first answer %+v: want a search_documentation call", first)
		}
		msgs = append(msgs, first, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, ToolCallID: first.ToolCalls[0].ID, Content: "Decimal.quantize(exp, rounding=None)"})
		second := ask(t, "code-generator", openai.ChatCompletionRequest{Messages: msgs, Tools: tools})
		got := runPythonStrings(t, second.Content, map[string]any{"final_total": 1350.0})
		if got["formatted_total"] != "1,350.00 EUR" {
			t.Errorf("formatted_total %q, want \"1,350.00 EUR\"", got["formatted_total"])
		}
	})
}

// runPython runs code the way NOVA's sandbox presents it: a `context` dict to read and update.
func runPython(t *testing.T, code string, ctx map[string]any) map[string]float64 {
	t.Helper()
	var out map[string]float64
	runPythonInto(t, code, ctx, &out)
	return out
}

func runPythonStrings(t *testing.T, code string, ctx map[string]any) map[string]any {
	t.Helper()
	var out map[string]any
	runPythonInto(t, code, ctx, &out)
	return out
}

func runPythonInto(t *testing.T, code string, ctx map[string]any, out any) {
	t.Helper()
	python, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	in, err := json.Marshal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	prog := "import json, sys\ncontext = json.loads(sys.stdin.read())\n" + code + "\nprint(json.dumps(context))\n"
	cmd := exec.CommandContext(t.Context(), python, "-c", prog)
	cmd.Stdin = strings.NewReader(string(in))
	b, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("scripted code failed: %v\n%s\ncode:\n%s", err, stderr, code)
	}
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("context after the code %q: %v", b, err)
	}
}
