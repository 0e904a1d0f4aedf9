package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// refineMsg is one of the refinement's messages as a client reads it.
type refineMsg struct {
	Type           string          `json:"type"`
	Message        string          `json:"message"`
	ExecutionID    string          `json:"executionId"`
	Attempt        int             `json:"attempt"`
	Attempts       int             `json:"attempts"`
	MaxAttempts    int             `json:"maxAttempts"`
	Fixed          []string        `json:"fixed"`
	Remaining      []string        `json:"remaining"`
	Resolved       []string        `json:"resolved"`
	PartialSuccess *bool           `json:"partialSuccess"`
	Code           string          `json:"code"`
	Output         string          `json:"output"`
	Language       string          `json:"language"`
	Analysis       map[string]any  `json:"analysis"`
	Result         json.RawMessage `json:"result"`
	Error          string          `json:"error"`
	Model          string          `json:"model"`
	Scripted       *bool           `json:"scripted"`
	Tokens         struct {
		Prompt, Completion, Total int64
	} `json:"tokens"`
	CostUSD float64 `json:"costUsd"`
	Links   struct {
		Execution string `json:"execution"`
	} `json:"links"`
}

// refine posts body to POST /v1/refine and reads the whole stream, which
// must be the refinement's messages and nothing else.
func refine(t *testing.T, key string, body any) []refineMsg {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	b, err := json.Marshal(body)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url+"/v1/refine", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		t.Fatalf("status %d, Content-Type %q: %s", resp.StatusCode, resp.Header.Get("Content-Type"), buf.String())
	}
	var msgs []refineMsg
	for _, e := range readSSE(t, bufio.NewReader(resp.Body), nil) {
		if e.event != "" {
			t.Errorf("event %q: the refinement's messages are data with an id", e.event)
		}
		if want := fmt.Sprint(len(msgs) + 1); e.id != want {
			t.Errorf("message %d has id %q, want %s (its place in the stream)", len(msgs)+1, e.id, want)
		}
		var m refineMsg
		dec := json.NewDecoder(strings.NewReader(e.data))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			t.Fatalf("message %s: %v", e.data, err)
		}
		msgs = append(msgs, m)
	}
	if len(msgs) == 0 {
		t.Fatal("no messages")
	}
	return msgs
}

// kinds lists the messages' types, with the attempt of info and progress.
func kinds(msgs []refineMsg) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, fmt.Sprintf("%s:%d", m.Type, m.Attempt))
	}
	return out
}

func last(t *testing.T, msgs []refineMsg, typ string) refineMsg {
	t.Helper()
	m := msgs[len(msgs)-1]
	if m.Type != typ {
		t.Fatalf("the stream ends with %+v, want %s; messages %v", m, typ, kinds(msgs))
	}
	return m
}

// script makes rules the scripted model's only ones and forgets its
// recorded requests.
func script(t *testing.T, rules ...scripted.Rule) {
	t.Helper()
	if err := h.model.SetRules(scripted.Rules{Rules: rules}); err != nil {
		t.Fatal(err)
	}
	h.model.Reset()
}

// modelRequests are the chat requests the scripted model received; each
// must have been answered by a rule of the test's script.
func modelRequests(t *testing.T) []scripted.Recorded {
	t.Helper()
	var out []scripted.Recorded
	for _, r := range h.model.Requests() {
		if strings.HasSuffix(r.Path, "/chat/completions") {
			if r.Rule == "fallback" || r.Status != http.StatusOK {
				t.Errorf("model request answered by %q with %d; last user message:\n%s", r.Rule, r.Status, r.LastUser())
			}
			out = append(out, r)
		}
	}
	return out
}

func answer(language, code string) *scripted.Response {
	return &scripted.Response{Content: "```" + language + "\n" + code + "```"}
}

// Products as a transformer's sample input.
var sampleInput = []any{map[string]any{"n": "lamp", "p": "19.5"}, map[string]any{"n": "desk", "p": "120"}, map[string]any{"n": "rug", "p": "7"}}

const (
	origJS   = "module.exports = async (ctx) => ctx.sampleInput.map(r => ({ name: r.n }))\n"
	titledJS = "module.exports = async (ctx) => ctx.sampleInput.map(r => ({ name: r.n[0].toUpperCase() + r.n.slice(1) }))\n"
	pricedJS = "module.exports = async (ctx) => ctx.sampleInput.map(r => ({ name: r.n[0].toUpperCase() + r.n.slice(1), price: Number(r.p) }))\n"
)

var origAnalysis = map[string]any{"type": "array", "isStructured": true, "itemCount": 3,
	"fields": []any{map[string]any{"name": "name", "type": "string", "required": true, "coverage": 100, "examples": []any{"lamp", "desk", "rug"}}}}

// transformerRequest asks to title-case name and add price.
func transformerRequest() map[string]any {
	return map[string]any{
		"agentType":      "transformer",
		"originalCode":   origJS,
		"outputAnalysis": origAnalysis,
		"feedback": []any{
			map[string]any{"field": "name", "issue": "format", "correctValue": "Lamp", "notes": "Names start with a capital"},
			map[string]any{"field": "price", "issue": "missing", "correctExpression": "Number(r.p)"},
		},
		"testContext": map[string]any{"sampleInput": sampleInput, "api_key": "sk-live-0123456789abcdefABCDEF0123"},
	}
}

// chainOf reads a refinement's execution once the audit service has it.
type refinedChain struct {
	Execution struct {
		Status       string   `json:"status"`
		WorkflowName string   `json:"workflow_name"`
		Error        string   `json:"error"`
		Path         []string `json:"path"`
	} `json:"execution"`
	Nodes []struct {
		NodeID       string               `json:"node_id"`
		Status       string               `json:"status"`
		CodeExecuted string               `json:"code_executed"`
		AIMetadata   map[string]any       `json:"ai_metadata"`
		Steps        []chainstore.StepDoc `json:"steps"`
	} `json:"nodes"`
}

func chainOf(t *testing.T, id string) refinedChain {
	t.Helper()
	h.waitAudit(t)
	resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]})
	var c refinedChain
	decode(t, resp, http.StatusOK, &c)
	return c
}

// TestRefineFixesOneFieldPerAttempt: the first attempt fixes one field of
// two, the second (told what the first resolved) the other.
func TestRefineFixesOneFieldPerAttempt(t *testing.T) {
	script(t,
		scripted.Rule{Name: "second", Match: scripted.Match{Agent: "code-generator",
			UserContains: scripted.Strings{"Attempt 1: ran; resolved: name; still unresolved: price", "Code of attempt 1:\n```javascript\n" + titledJS}},
			Respond: answer("javascript", pricedJS)},
		scripted.Rule{Name: "first", Match: scripted.Match{Agent: "code-generator",
			UserContains: scripted.Strings{"You are refining transformer code", "CURRENT CODE:\n```javascript\n" + origJS, "Correct expression: Number(r.p)"}},
			Respond: answer("javascript", titledJS)},
	)
	msgs := refine(t, h.key["refiner"], transformerRequest())
	want := []string{"info:0", "info:1", "info:1", "progress:1", "info:2", "info:2", "complete:2"}
	if got := kinds(msgs); !slices.Equal(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	if msgs[1].Message != "Refinement attempt 1/5" || msgs[4].Message != "Refinement attempt 2/5" {
		t.Errorf("attempt messages %q, %q", msgs[1].Message, msgs[4].Message)
	}
	if !strings.Contains(msgs[2].Message, "Testing improved code... (written by gpt-4o [SCRIPTED model") || !*msgs[2].Scripted {
		t.Errorf("testing message %+v: the scripted model's code must say so", msgs[2])
	}
	p := msgs[3]
	if !slices.Equal(p.Fixed, []string{"name"}) || !slices.Equal(p.Remaining, []string{"price"}) || p.Code != titledJS ||
		p.Message != "Fixed 1 fields, 1 remaining" || p.Scripted == nil || !*p.Scripted {
		t.Errorf("progress %+v", p)
	}
	c := last(t, msgs, "complete")
	if !slices.Equal(c.Resolved, []string{"name", "price"}) || len(c.Remaining) != 0 || c.PartialSuccess == nil || *c.PartialSuccess {
		t.Errorf("complete: resolved %v remaining %v partialSuccess %v", c.Resolved, c.Remaining, c.PartialSuccess)
	}
	if c.Code != pricedJS || c.Output != pricedJS || c.Language != "javascript" || c.Attempt != 2 || c.Attempts != 2 {
		t.Errorf("complete %+v", c)
	}
	if !*c.Scripted || !strings.Contains(c.Message, "SCRIPTED") || c.Model != "gpt-4o" || c.Tokens.Total <= 0 || c.CostUSD <= 0 {
		t.Errorf("complete: model %q scripted %v message %q tokens %+v cost %v", c.Model, *c.Scripted, c.Message, c.Tokens, c.CostUSD)
	}
	fields, _ := c.Analysis["fields"].([]any)
	if c.Analysis["itemCount"] != json.Number("3") || len(fields) != 2 {
		t.Errorf("analysis %v, want the refined output's: 3 items, name and price", c.Analysis)
	}
	var items []map[string]any
	if err := json.Unmarshal(c.Result, &items); err != nil || len(items) != 3 || items[0]["name"] != "Lamp" || items[0]["price"] == nil {
		t.Errorf("result %s, want the refined output's 3 items, the first named Lamp with a price", c.Result)
	}

	reqs := modelRequests(t)
	if len(reqs) != 2 || reqs[0].Rule != "first" || reqs[1].Rule != "second" {
		t.Fatalf("model requests %d", len(reqs))
	}
	for _, r := range reqs {
		if strings.Contains(string(r.Body), "sk-live-0123456789") {
			t.Error("a prompt carries the test context's API key")
		}
	}

	// The refinement is an execution in the chain of work, its attempts
	// recorded like an AI node's steps.
	if c.Links.Execution != "/v1/executions/"+c.ExecutionID || !strings.HasPrefix(c.ExecutionID, "refine-") {
		t.Errorf("execution %q link %q", c.ExecutionID, c.Links.Execution)
	}
	ch := chainOf(t, c.ExecutionID)
	if ch.Execution.Status != "succeeded" || ch.Execution.WorkflowName != gateway.RefineWorkflow || !slices.Equal(ch.Execution.Path, []string{"refine"}) {
		t.Errorf("execution %+v", ch.Execution)
	}
	if len(ch.Nodes) != 1 || ch.Nodes[0].Status != "success" || ch.Nodes[0].CodeExecuted != pricedJS {
		t.Fatalf("nodes %+v", ch.Nodes)
	}
	if ch.Nodes[0].AIMetadata["scripted"] != true || ch.Nodes[0].AIMetadata["model"] != "gpt-4o" {
		t.Errorf("ai_metadata %v", ch.Nodes[0].AIMetadata)
	}
	var steps []string
	var tokens int64
	for _, s := range ch.Nodes[0].Steps {
		steps = append(steps, fmt.Sprintf("%d %s/%s attempt %d %s", s.StepNumber, s.AgentName, s.StepName, s.AttemptNumber, s.Status))
		if s.AgentName == "code-generator" {
			tokens += s.TokensInput + s.TokensOutput
			if s.ModelUsed != "gpt-4o" || s.CostUSD <= 0 || s.OutputData["scripted"] != true || s.GeneratedCode == "" {
				t.Errorf("generation step %+v", s)
			}
		}
	}
	wantSteps := []string{
		"1 code-generator/code_refinement attempt 1 success", "2 sandbox/code_execution attempt 1 success",
		"3 code-generator/code_refinement attempt 2 success", "4 sandbox/code_execution attempt 2 success",
	}
	if !slices.Equal(steps, wantSteps) {
		t.Errorf("steps\n%v\nwant\n%v", steps, wantSteps)
	}
	if tokens != c.Tokens.Total {
		t.Errorf("steps' tokens %d, the stream said %d", tokens, c.Tokens.Total)
	}
}

// TestRefineRunsOutOfAttempts: one attempt fails to run, the next fixes one
// field of two; the refinement ends with the best attempt, partially.
func TestRefineRunsOutOfAttempts(t *testing.T) {
	const throws = "module.exports = async () => { throw new Error('no rows today') }\n"
	script(t,
		scripted.Rule{Name: "after-failure", Match: scripted.Match{Agent: "code-generator",
			UserContains: scripted.Strings{"Attempt 1: FAILED: the code failed when run: ", "no rows today"}},
			Respond: answer("javascript", titledJS)},
		scripted.Rule{Name: "first", Match: scripted.Match{Agent: "code-generator"}, Respond: answer("javascript", throws)},
	)
	body := transformerRequest()
	body["maxAttempts"] = 2
	msgs := refine(t, h.key["refiner"], body)
	want := []string{"info:0", "info:1", "info:1", "progress:1", "info:2", "info:2", "progress:2", "complete:2"}
	if got := kinds(msgs); !slices.Equal(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	if p := msgs[3]; !strings.Contains(p.Error, "no rows today") || len(p.Fixed) != 0 || !slices.Equal(p.Remaining, []string{"name", "price"}) {
		t.Errorf("progress of the failed attempt %+v", p)
	}
	c := last(t, msgs, "complete")
	if c.PartialSuccess == nil || !*c.PartialSuccess || !slices.Equal(c.Resolved, []string{"name"}) || !slices.Equal(c.Remaining, []string{"price"}) {
		t.Errorf("complete: partialSuccess %v resolved %v remaining %v", c.PartialSuccess, c.Resolved, c.Remaining)
	}
	if c.Code != titledJS || c.Attempt != 2 || c.Attempts != 2 || !*c.Scripted {
		t.Errorf("complete %+v", c)
	}
	if n := len(modelRequests(t)); n != 2 {
		t.Errorf("%d model requests for 2 attempts", n)
	}
	ch := chainOf(t, c.ExecutionID)
	if ch.Execution.Status != "failed" || !strings.Contains(ch.Execution.Error, "price") {
		t.Errorf("execution %+v", ch.Execution)
	}
	if len(ch.Nodes) != 1 || len(ch.Nodes[0].Steps) != 4 || ch.Nodes[0].Steps[1].Status != "failed" ||
		!strings.Contains(ch.Nodes[0].Steps[1].ErrorMessage, "no rows today") {
		t.Errorf("nodes %+v", ch.Nodes)
	}
}

// TestRefineEndsInError: when no attempt yields code (the model refuses
// every request), the stream ends with an error message.
func TestRefineEndsInError(t *testing.T) {
	script(t) // every request is answered 400 by the fallback
	body := transformerRequest()
	body["maxAttempts"] = 2
	msgs := refine(t, h.key["refiner"], body)
	want := []string{"info:0", "info:1", "progress:1", "info:2", "progress:2", "error:0"}
	if got := kinds(msgs); !slices.Equal(got, want) {
		t.Fatalf("messages %v, want %v", got, want)
	}
	if p := msgs[2]; !strings.HasPrefix(p.Error, "code generation failed: model gpt-4o failed") || p.Code != "" {
		t.Errorf("progress %+v", p)
	}
	e := last(t, msgs, "error")
	if !strings.HasPrefix(e.Error, "no attempt produced code; the last failed with: code generation failed") {
		t.Errorf("error %+v", e)
	}
	ch := chainOf(t, e.ExecutionID)
	if ch.Execution.Status != "failed" || ch.Execution.Error != e.Error || len(ch.Nodes) != 1 || len(ch.Nodes[0].Steps) != 2 {
		t.Errorf("chain %+v", ch)
	}
}

// TestRefineNodeOfExecution refines the Python of a node of a finished
// execution, from its code, input and output analysis in the chain of work.
func TestRefineNodeOfExecution(t *testing.T) {
	const shape = "context['rows'] = [{'name': r['n']} for r in context['items']]\n"
	const priced = "context['rows'] = [{'name': r['n'], 'price': float(r['p'])} for r in context['items']]\n"
	def := map[string]any{"name": "shaper", "nodes": []any{
		map[string]any{"id": "start", "type": "start"},
		map[string]any{"id": "shape", "type": "action", "code": shape},
		map[string]any{"id": "end", "type": "end"}},
		"edges": []any{map[string]any{"from": "start", "to": "shape"}, map[string]any{"from": "shape", "to": "end"}}}
	body, _ := json.Marshal(map[string]any{"definition": def, "context": map[string]any{"items": sampleInput}})
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: string(body)})
	var done completionDoc
	decode(t, resp, http.StatusOK, &done)
	h.awaitStatus(t, done.ExecutionID, "succeeded")

	script(t, scripted.Rule{Name: "python", Match: scripted.Match{Agent: "code-generator",
		SystemContains: scripted.Strings{"Store the output under ONE key of `context`"},
		UserContains:   scripted.Strings{"CURRENT CODE:\n```python\n" + shape, "name (string, 100% populated)", "TEST CONTEXT:\n- items"}},
		Respond: answer("python", priced)})
	msgs := refine(t, h.key["refiner"], map[string]any{"agentType": "mapper", "executionId": done.ExecutionID, "nodeId": "shape",
		"feedback": []any{map[string]any{"field": "price", "issue": "missing"}}})
	c := last(t, msgs, "complete")
	if !slices.Equal(c.Resolved, []string{"price"}) || c.Code != priced || c.Language != "python" || c.Attempt != 1 {
		t.Errorf("complete %+v; messages %v", c, kinds(msgs))
	}
	if n := len(modelRequests(t)); n != 1 {
		t.Errorf("%d model requests", n)
	}
	ch := chainOf(t, c.ExecutionID)
	if ch.Nodes[0].AIMetadata["refined_execution"] != done.ExecutionID || ch.Nodes[0].AIMetadata["refined_node"] != "shape" {
		t.Errorf("ai_metadata %v", ch.Nodes[0].AIMetadata)
	}
}

// TestSaveRefinedCode: an AI node's refined code is saved as its code; the
// workflow's next run runs that code and calls no model.
func TestSaveRefinedCode(t *testing.T) {
	// Only this test registers an AI node: the engine accepts prompts.
	restart := func(allow bool) {
		if err := h.stopModule("graph-engine"); err != nil {
			t.Fatal(err)
		}
		h.engine.AllowPrompt = allow
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.startModule(ctx, "graph-engine"); err != nil {
			t.Fatal(err)
		}
	}
	restart(true)
	t.Cleanup(func() { restart(false) })

	const prompt = "Give every row a price from p, as a number."
	resp := postWorkflow(t, h.key["admin"], "application/json", `{"name": "pricing-pin", "nodes": [{"id": "start", "type": "start"},
		{"id": "price", "type": "action", "prompt": "`+prompt+`"}, {"id": "end", "type": "end"}],
		"edges": [{"from": "start", "to": "price"}, {"from": "price", "to": "end"}]}`)
	var registered workflowDoc
	decode(t, resp, http.StatusCreated, &registered)

	const original = "# STAGE: TASK\ncontext['rows'] = [{'n': r['n']} for r in context['items']]\n"
	const refined = "# STAGE: TASK\ncontext['rows'] = [{'n': r['n'], 'price': float(r['p'])} for r in context['items']]\n"
	script(t, scripted.Rule{Name: "python", Match: scripted.Match{Agent: "code-generator"}, Respond: answer("python", refined)})
	msgs := refine(t, h.key["refiner"], map[string]any{"agentType": "transformer", "language": "python", "originalCode": original,
		"outputAnalysis": map[string]any{"type": "array", "isStructured": true, "itemCount": 3,
			"fields": []any{map[string]any{"name": "n", "coverage": 100}}},
		"feedback":    []any{map[string]any{"field": "price", "issue": "missing"}},
		"testContext": map[string]any{"context": map[string]any{"items": sampleInput}}})
	c := last(t, msgs, "complete")
	if c.Code != refined || len(c.Remaining) != 0 {
		t.Fatalf("complete %+v", c)
	}

	save := func(key, path string, body any) response {
		b, _ := json.Marshal(body)
		return h.do(t, h.url, request{method: "POST", path: path, key: key, body: string(b)})
	}
	const path = "/v1/workflows/pricing-pin/nodes/price/code"
	resp = save(h.key["admin"], path, map[string]any{"code": c.Code, "language": c.Language, "revision": registered.Revision})
	var saved struct {
		workflowDoc
		PreviousRevision uint64 `json:"previous_revision"`
		Node             string `json:"node"`
	}
	decode(t, resp, http.StatusOK, &saved)
	if saved.Revision <= registered.Revision || saved.PreviousRevision != registered.Revision || saved.Node != "price" {
		t.Errorf("saved %+v after revision %d", saved, registered.Revision)
	}
	var got struct {
		Revision   uint64 `json:"revision"`
		Definition struct {
			Nodes []struct {
				ID, Code, Prompt, Description, Language string
			} `json:"nodes"`
		} `json:"definition"`
	}
	decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows/pricing-pin", key: h.key["reader"]}), http.StatusOK, &got)
	pinned := got.Definition.Nodes[1]
	if got.Revision != saved.Revision || pinned.ID != "price" || pinned.Prompt != "" || pinned.Description != prompt ||
		pinned.Language != "python" || !strings.HasSuffix(pinned.Code, refined) {
		t.Errorf("registered now: revision %d, node %+v", got.Revision, pinned)
	}

	// A save made for an older registration is refused.
	p := problem(t, save(h.key["admin"], path, map[string]any{"code": c.Code, "revision": registered.Revision}),
		http.StatusConflict, gateway.TypeConflict)
	if !slices.Equal(p.fields(), []string{"revision"}) {
		t.Errorf("conflict %+v", p)
	}

	// The next run runs the saved code: no model call, no AI steps.
	before := len(modelRequests(t))
	resp = h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"],
		body: `{"workflow": "pricing-pin", "context": {"items": [{"n": "lamp", "p": "19.5"}]}}`})
	var run completionDoc
	decode(t, resp, http.StatusOK, &run)
	var out struct {
		Rows []struct {
			N     string  `json:"n"`
			Price float64 `json:"price"`
		} `json:"rows"`
	}
	if err := json.Unmarshal(run.Context, &out); err != nil || run.Status != "succeeded" || len(out.Rows) != 1 || out.Rows[0].Price != 19.5 {
		t.Fatalf("run %s", resp.body)
	}
	if after := len(modelRequests(t)); after != before {
		t.Errorf("the run made %d model requests", after-before)
	}
	v := h.awaitStatus(t, run.ExecutionID, "succeeded")
	for _, n := range v.Nodes {
		if n.NodeID != "price" {
			continue
		}
		if len(n.Steps) != 1 || n.Steps[0].AgentName != "sandbox" {
			t.Errorf("steps of the pinned node %+v, want its code's run only", n.Steps)
		}
		if !strings.HasPrefix(n.CodeExecuted, "# Pinned from an AI node; its task (prompt) was:\n# "+prompt+"\n"+refined) {
			t.Errorf("code executed %q", n.CodeExecuted)
		}
	}
}

func TestSaveCodeBadRequests(t *testing.T) {
	h.register(t, doublerYAML("save-bad", "2"))
	for _, c := range []struct {
		name, path, key, body string
		status                int
		typ                   string
		fields                []string
	}{
		{"no key", "/v1/workflows/save-bad/nodes/double/code", "", `{"code": "1"}`, http.StatusUnauthorized, gateway.TypeUnauthorized, nil},
		{"refine scope is not admin", "/v1/workflows/save-bad/nodes/double/code", "refiner", `{"code": "1"}`, http.StatusForbidden, gateway.TypeForbidden, nil},
		{"every field wrong", "/v1/workflows/save-bad/nodes/double/code", "admin", `{"code": " ", "language": "ruby", "revision": 0, "x": 1}`,
			http.StatusBadRequest, gateway.TypeInvalidRequest, []string{"code", "language", "revision", "x"}},
		{"not JSON", "/v1/workflows/save-bad/nodes/double/code", "admin", `code`, http.StatusBadRequest, gateway.TypeInvalidRequest, []string{"code"}},
		{"unknown workflow", "/v1/workflows/nope/nodes/double/code", "admin", `{"code": "1"}`, http.StatusNotFound, gateway.TypeNotFound, nil},
		{"unknown node", "/v1/workflows/save-bad/nodes/nope/code", "admin", `{"code": "1"}`, http.StatusNotFound, gateway.TypeNotFound, nil},
		{"start node", "/v1/workflows/save-bad/nodes/start/code", "admin", `{"code": "1"}`, http.StatusUnprocessableEntity, gateway.TypeInvalidWorkflow, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: "POST", path: c.path, key: h.key[c.key], body: c.body})
			p := problem(t, resp, c.status, c.typ)
			got := p.fields()
			slices.Sort(got)
			if c.fields != nil && !slices.Equal(got, c.fields) {
				t.Errorf("fields %v, want %v", got, c.fields)
			}
		})
	}
}

func TestRefineBadRequests(t *testing.T) {
	script(t) // any model call would be answered 400 and fail the test below
	good := func(change func(map[string]any)) string {
		b := transformerRequest()
		change(b)
		out, _ := json.Marshal(b)
		return string(out)
	}
	for _, c := range []struct {
		name, body string
		fields     []string
	}{
		{"not JSON", `feedback`, []string{"body"}},
		{"nothing", `{}`, []string{"agentType", "feedback", "originalCode", "outputAnalysis"}},
		{"every top-level field wrong", good(func(b map[string]any) {
			b["agentType"], b["originalCode"], b["language"], b["maxAttempts"] = "web scraper", " ", "ruby", 11
			b["timeout"], b["model"], b["outputAnalysis"], b["testContext"], b["colour"] = -1, "", []any{}, "x", "red"
		}), []string{"agentType", "colour", "language", "maxAttempts", "model", "originalCode", "outputAnalysis", "testContext", "timeout"}},
		{"analysis members", good(func(b map[string]any) {
			b["outputAnalysis"] = map[string]any{"type": "list", "isStructured": "yes", "itemCount": -1, "extra": 1,
				"fields": []any{map[string]any{"coverage": 101, "required": 1, "examples": "a", "type": 3}, "x"}}
		}), []string{"outputAnalysis.extra", "outputAnalysis.fields[0].coverage", "outputAnalysis.fields[0].examples",
			"outputAnalysis.fields[0].name", "outputAnalysis.fields[0].required", "outputAnalysis.fields[0].type",
			"outputAnalysis.fields[1]", "outputAnalysis.isStructured", "outputAnalysis.itemCount", "outputAnalysis.type"}},
		{"test context members", good(func(b map[string]any) {
			b["testContext"] = map[string]any{"url": "ftp://x", "context": []any{}, "args": []any{1}}
		}), []string{"testContext.args[0]", "testContext.context", "testContext.url"}},
		{"feedback not a list", good(func(b map[string]any) { b["feedback"] = map[string]any{} }), []string{"feedback"}},
		{"feedback empty", good(func(b map[string]any) { b["feedback"] = []any{} }), []string{"feedback"}},
		{"feedback items", good(func(b map[string]any) {
			b["feedback"] = []any{
				map[string]any{"field": "", "issue": "bad", "correctValue": map[string]any{}, "notes": 5, "colour": 1},
				map[string]any{"field": "price", "issue": "format"},
				map[string]any{"field": "price", "issue": "missing", "examples": []any{map[string]any{"input": 1}, 2}},
				"x",
				map[string]any{"issue": "missing"},
			}
		}), []string{"feedback[0].colour", "feedback[0].correctValue", "feedback[0].field", "feedback[0].issue", "feedback[0].notes",
			"feedback[1]", "feedback[2].examples[0].expectedOutput", "feedback[2].examples[1]", "feedback[2].field", "feedback[3]", "feedback[4].field"}},
		{"wrong with nothing to compare", good(func(b map[string]any) {
			b["feedback"] = []any{map[string]any{"field": "price", "issue": "wrong"}}
		}), []string{"feedback[0]"}},
		{"node and code at once", good(func(b map[string]any) { b["executionId"], b["nodeId"] = "x", 5 }),
			[]string{"nodeId", "originalCode", "outputAnalysis", "testContext"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: "POST", path: "/v1/refine", key: h.key["refiner"], body: c.body})
			p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
			got := p.fields()
			slices.Sort(got)
			if !slices.Equal(got, c.fields) {
				t.Errorf("fields %v, want %v\n%+v", got, c.fields, p)
			}
		})
	}

	body := good(func(map[string]any) {})
	problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/refine", body: body}), http.StatusUnauthorized, gateway.TypeUnauthorized)
	problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/refine", key: h.key["writer"], body: body}), http.StatusForbidden, gateway.TypeForbidden)
	problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/refine?x=1", key: h.key["refiner"], body: body}),
		http.StatusBadRequest, gateway.TypeInvalidRequest)

	// Nodes of executions.
	finished := h.startRunning(t, "refine-targets", `context["y"] = 1`)
	h.awaitStatus(t, finished, "succeeded")
	running := h.startRunning(t, "refine-running", "import time\ntime.sleep(4)\ncontext[\"slept\"] = True")
	h.awaitStatus(t, running, "running")
	nodeBody := func(exec, node string) string {
		return fmt.Sprintf(`{"agentType": "transformer", "executionId": %q, "nodeId": %q, "feedback": [{"field": "y", "issue": "missing"}]}`, exec, node)
	}
	for _, c := range []struct {
		name, body string
		status     int
		typ        string
	}{
		{"unknown execution", nodeBody("no-such-execution", "step1"), http.StatusNotFound, gateway.TypeNotFound},
		{"unknown node", nodeBody(finished, "nope"), http.StatusNotFound, gateway.TypeNotFound},
		{"a node without code", nodeBody(finished, "start"), http.StatusUnprocessableEntity, gateway.TypeInvalidRequest},
		{"a running execution", nodeBody(running, "step1"), http.StatusConflict, gateway.TypeConflict},
	} {
		t.Run(c.name, func(t *testing.T) {
			problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/refine", key: h.key["refiner"], body: c.body}), c.status, c.typ)
		})
	}
	if n := len(modelRequests(t)); n != 0 {
		t.Errorf("%d model requests for refused refinements", n)
	}
}

// TestRefineEventsReplayAndResume: a refinement's messages are kept with its
// events; GET /v1/refine/{id}/events gives them again, and after the one
// Last-Event-ID names.
func TestRefineEventsReplayAndResume(t *testing.T) {
	script(t,
		scripted.Rule{Name: "second", Match: scripted.Match{Agent: "code-generator", UserContains: scripted.Strings{"Attempt 1: ran"}},
			Respond: answer("javascript", pricedJS)},
		scripted.Rule{Name: "first", Match: scripted.Match{Agent: "code-generator"}, Respond: answer("javascript", titledJS)},
	)
	msgs := refine(t, h.key["refiner"], transformerRequest())
	id := last(t, msgs, "complete").ExecutionID
	events := func(after string) []sseEvent {
		t.Helper()
		req := request{method: "GET", path: "/v1/refine/" + id + "/events", key: h.key["refiner"]}
		if after != "" {
			req.header = map[string]string{"Last-Event-ID": after}
		}
		resp := h.do(t, h.url, req)
		if resp.status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", req.path, resp.status, resp.body)
		}
		return readSSE(t, bufio.NewReader(bytes.NewReader(resp.body)), nil)
	}
	all := events("")
	if len(all) != len(msgs) {
		t.Fatalf("replay has %d messages, the stream had %d", len(all), len(msgs))
	}
	for i, e := range all {
		var m refineMsg
		if err := json.Unmarshal([]byte(e.data), &m); err != nil {
			t.Fatal(err)
		}
		if e.id != fmt.Sprint(i+1) || m.Type != msgs[i].Type || m.Attempt != msgs[i].Attempt || m.Message != msgs[i].Message {
			t.Errorf("replayed message %d: id %s %+v, streamed %+v", i+1, e.id, m, msgs[i])
		}
	}
	rest := events("4")
	if len(rest) != len(msgs)-4 || rest[0].id != "5" {
		t.Errorf("after Last-Event-ID 4: %d messages from id %q, want %d from 5", len(rest), rest[0].id, len(msgs)-4)
	}
	// At or past the last message of an ended refinement nothing follows:
	// the answer comes at once, 204, which stops an EventSource's retries.
	for _, after := range []string{fmt.Sprint(len(msgs)), "999"} {
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		resp := openSSE(t, ctx, h.url+"/v1/refine/"+id+"/events", h.key["refiner"], after)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if err != nil || resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Errorf("after Last-Event-ID %s of %d: %d %q (%v), want 204 at once", after, len(msgs), resp.StatusCode, body, err)
		}
	}
	for _, c := range []struct{ path, why string }{
		{"/v1/refine/refine-0b9f3c1e-8f0a-4d5e-9a61-2f3c1d7e9b42/events", "no refinement of that id"},
		{"/v1/refine/" + strings.TrimPrefix(id, "refine-") + "/events", "no refinement id"},
	} {
		resp := h.do(t, h.url, request{method: "GET", path: c.path, key: h.key["refiner"]})
		if resp.status != http.StatusNotFound {
			t.Errorf("%s (%s): %d %s, want 404", c.path, c.why, resp.status, resp.body)
		}
	}
	if resp := h.do(t, h.url, request{method: "GET", path: "/v1/refine/" + id + "/events", key: h.key["reader"]}); resp.status != http.StatusForbidden {
		t.Errorf("a key without the refine scope: %d, want 403", resp.status)
	}
}
