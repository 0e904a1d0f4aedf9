package e2e

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/stack"
)

// demoRules are the scripted model's rules of `make demo` and `nova run`.
var demoRules = filepath.Join("..", "..", "..", "examples", "scripted-llm.yaml")

// Agent names as the model server sees them (the X-Nova-Agent header).
const (
	inputAnalyzer   = stack.InputAnalyzer
	codeGenerator   = stack.CodeGenerator
	outputValidator = stack.OutputValidator
)

// Markers of the code generator's user prompt that tell the stages apart.
const (
	writeTask     = "Write the task code now"
	writeAnalysis = "Write the analysis code now"
)

// startAIEnv starts a stack whose AI agents call the scripted
// OpenAI-compatible server, over loopback HTTP, answering from rules (YAML).
// A request no rule matches is answered 400, which no agent retries, so a
// gap in a test's script fails fast instead of after transient retries.
func startAIEnv(t *testing.T, rules string, configure ...func(*stack.Options)) *env {
	t.Helper()
	r, err := scripted.ParseRules([]byte(rules))
	if err != nil {
		t.Fatalf("scripted rules: %v", err)
	}
	return startAIEnvRules(t, r, configure...)
}

// startAIEnvFile is startAIEnv with a rules file.
func startAIEnvFile(t *testing.T, path string, configure ...func(*stack.Options)) *env {
	t.Helper()
	r, err := scripted.LoadRules(path)
	if err != nil {
		t.Fatalf("scripted rules: %v", err)
	}
	return startAIEnvRules(t, r, configure...)
}

func startAIEnvRules(t *testing.T, r scripted.Rules, configure ...func(*stack.Options)) *env {
	t.Helper()
	if r.Fallback == nil {
		r.Fallback = &scripted.Response{Status: 400, Error: &scripted.ErrorSpec{
			Message: "e2e: no scripted rule matches this request", Type: "invalid_request_error"}}
	}
	e := startEnv(t, append([]func(*stack.Options){func(o *stack.Options) { o.LLM.ScriptedRules = &r }}, configure...)...)
	if e.s.Scripted() == nil {
		t.Fatal("the stack runs no scripted model server")
	}
	return e
}

// waitRuntimeDocs waits until the sandbox has published its runtime's
// description (modules and library documentation), which it does shortly
// after it starts; search_documentation answers from it.
func (e *env) waitRuntimeDocs() *runtimeinfo.Info {
	e.t.Helper()
	var info *runtimeinfo.Info
	e.eventually(30*time.Second, "the sandbox published its runtime description", func() bool {
		var err error
		info, err = runtimeinfo.Load(e.ctx, e.bus.JetStream())
		return err == nil
	})
	return info
}

// modelRequests returns the chat completion requests the scripted server
// received from agent ("" for every agent), in order.
func (e *env) modelRequests(agent string) []scripted.Recorded {
	var out []scripted.Recorded
	for _, r := range e.s.Scripted().Requests() {
		if strings.HasSuffix(r.Path, "/chat/completions") && (agent == "" || r.Agent == agent) {
			out = append(out, r)
		}
	}
	return out
}

// requestCounts counts the chat requests by agent.
func (e *env) requestCounts() map[string]int {
	counts := map[string]int{}
	for _, r := range e.modelRequests("") {
		counts[r.Agent]++
	}
	return counts
}

// checkScripted fails the test when a request was answered by no rule of the
// test's script (the fallback) or with an unplanned error status.
func checkScripted(t *testing.T, reqs []scripted.Recorded, allowed ...int) {
	t.Helper()
	for i, r := range reqs {
		if r.Rule == "fallback" || r.Rule == "" || (r.Status != 200 && !slices.Contains(allowed, r.Status)) {
			t.Errorf("model request %d (%s, %s) answered by rule %q with status %d: %s\nlast user message:\n%s",
				i, r.Agent, r.Model, r.Rule, r.Status, r.Response, r.LastUser())
		}
	}
}

// withText keeps the requests whose messages contain s (a node's task).
func withText(reqs []scripted.Recorded, s string) []scripted.Recorded {
	var out []scripted.Recorded
	for _, r := range reqs {
		if strings.Contains(r.Text(), s) {
			out = append(out, r)
		}
	}
	return out
}

// usage is what the scripted server answered a request with: its model and
// token usage, as OpenAI reports them.
type usage struct {
	Model string `json:"model"`
	Usage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// answeredUsage sums the usage the server answered to the successful
// requests, and the cost the default price table gives it.
func answeredUsage(t *testing.T, reqs []scripted.Recorded) (prompt, completion, cached int64, cost float64) {
	t.Helper()
	prices := llm.DefaultPrices()
	for _, r := range reqs {
		if r.Status != 200 {
			continue
		}
		var u usage
		if err := json.Unmarshal(r.Response, &u); err != nil {
			t.Fatalf("response of %s: %v", r.Agent, err)
		}
		prompt += u.Usage.PromptTokens
		completion += u.Usage.CompletionTokens
		cached += u.Usage.PromptTokensDetails.CachedTokens
		cost += prices.Cost(u.Model, u.Usage.PromptTokens, u.Usage.PromptTokensDetails.CachedTokens, u.Usage.CompletionTokens)
	}
	return prompt, completion, cached, cost
}

// num reads a number of a stored document, whichever BSON type it came back as.
func num(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case int32:
		return float64(n)
	case int64:
		return float64(n)
	case int:
		return float64(n)
	}
	return -1
}

// obj reads a nested document.
func obj(t *testing.T, m map[string]any, key string) map[string]any {
	t.Helper()
	o, ok := m[key].(map[string]any)
	if !ok {
		t.Fatalf("%s is %T (%v), want a document", key, m[key], m[key])
	}
	return o
}

// list reads a nested array.
func list(t *testing.T, m map[string]any, key string) []any {
	t.Helper()
	l, ok := m[key].([]any)
	if !ok {
		t.Fatalf("%s is %T (%v), want an array", key, m[key], m[key])
	}
	return l
}

// stepTrail lists a node's agent steps as "step_name@attempt", in order.
func stepTrail(n chainstore.NodeDoc) []string {
	out := make([]string, len(n.Steps))
	for i, s := range n.Steps {
		out[i] = fmt.Sprintf("%s@%d", s.StepName, s.AttemptNumber)
	}
	return out
}

// stepsNamed returns a node's steps of one name, in order.
func stepsNamed(n chainstore.NodeDoc, name string) []chainstore.StepDoc {
	var out []chainstore.StepDoc
	for _, s := range n.Steps {
		if s.StepName == name {
			out = append(out, s)
		}
	}
	return out
}

// checkSteps asserts that a node's steps are numbered 1..n in order, belong
// to the node's visit, and are the trail given.
func checkSteps(t *testing.T, n chainstore.NodeDoc, want ...string) {
	t.Helper()
	if got := stepTrail(n); !slices.Equal(got, want) {
		t.Errorf("steps of %s = %v, want %v", n.NodeID, got, want)
	}
	for i, s := range n.Steps {
		if s.StepNumber != i+1 || s.ChainOfWorkID != n.ID || s.Visit != n.Visit {
			t.Errorf("step %d of %s: number %d, chain_of_work_id %q, visit %d; want %d, %q, %d",
				i, n.NodeID, s.StepNumber, s.ChainOfWorkID, s.Visit, i+1, n.ID, n.Visit)
		}
	}
}

// parseAI parses and validates a workflow with AI nodes.
func parseAI(t *testing.T, yaml string) *novav1.WorkflowDefinition {
	t.Helper()
	def, err := workflow.Parse([]byte(yaml))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}); err != nil {
		t.Fatalf("validate: %v", err)
	}
	return def
}

// succeeded fails the test unless the workflow succeeded.
func succeeded(t *testing.T, wc *novav1.WorkflowCompleted) {
	t.Helper()
	if wc.Status != "succeeded" || wc.Error != "" {
		t.Fatalf("workflow %s: status %q, error %q; want succeeded", wc.ExecutionId, wc.Status, wc.Error)
	}
}

// invoicePDF makes a one-page invoice with PyMuPDF, the library the sandbox
// runtime has, and returns it base64-encoded.
func invoicePDF(t *testing.T) string {
	t.Helper()
	const script = `
import base64, fitz
doc = fitz.open()
page = doc.new_page()
page.insert_text((72, 72), "ACME Supplies Ltd", fontsize=16)
page.insert_text((72, 100), "Invoice INV-2024-0042, 2024-03-14")
page.insert_text((72, 140), "3 x Widget, 411.52 EUR each")
page.insert_text((72, 180), "Total: 1234.56 EUR", fontsize=13)
print(base64.b64encode(doc.tobytes()).decode())
`
	out, err := exec.CommandContext(t.Context(), "/usr/bin/python3", "-c", script).Output()
	if err != nil {
		var stderr []byte
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = ee.Stderr
		}
		t.Fatalf("make the invoice PDF: %v\n%s", err, stderr)
	}
	b64 := strings.TrimSpace(string(out))
	if !strings.HasPrefix(b64, "JVBERi0") || len(b64) < 400 {
		t.Fatalf("the invoice PDF is not a PDF: %.40q (%d chars)", b64, len(b64))
	}
	return b64
}

// aiCosts collects what the AI nodes of the tests cost, from their
// ai_metadata, for the medians the issue asks for.
type aiCosts struct {
	calls, prompt, cost []float64
}

// node returns the ai_metadata of an AI node's document and records its cost.
func (c *aiCosts) node(t *testing.T, n chainstore.NodeDoc) map[string]any {
	t.Helper()
	meta := n.AIMetadata
	if meta == nil {
		t.Fatalf("node %s has no ai_metadata", n.NodeID)
	}
	tokens := obj(t, meta, "tokens")
	c.calls = append(c.calls, num(meta["model_calls"]))
	c.prompt = append(c.prompt, num(tokens["prompt"]))
	c.cost = append(c.cost, num(meta["cost_usd"]))
	return meta
}

func (c *aiCosts) report(t *testing.T) {
	if len(c.calls) == 0 {
		return
	}
	t.Logf("AI nodes in these tests: %d; per AI node: median model calls %.1f, median prompt tokens %.0f, median estimated cost $%.6f",
		len(c.calls), median(c.calls), median(c.prompt), median(c.cost))
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
