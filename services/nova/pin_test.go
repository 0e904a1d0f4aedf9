package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/syncbuf"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// pinOrders has two AI nodes that run and one that the route never takes.
// The cache is off, so that only pinning can spare the second run its model
// calls.
const pinOrders = `
name: pin-orders
cache: false
nodes:
  - {id: start, type: start}
  - id: discount
    type: action
    prompt: "Calculate discount (10% if total > 1000)"
  - id: route
    type: decision
    prompt: "Route the order: 'review' when the final total is above 1000, else 'auto'"
  - id: review
    type: action
    code: |
      context["queue"] = "manual-review"
  - id: auto
    type: action
    prompt: "Queue the order for automatic handling"
  - {id: done, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: route}
  - {from: route, to: review, condition: review}
  - {from: route, to: auto, condition: auto}
  - {from: review, to: done}
  - {from: auto, to: done}
`

// pinBroken has an AI node whose task the scripted model has no answer for.
const pinBroken = `
name: pin-broken
nodes:
  - {id: start, type: start}
  - {id: haiku, type: action, prompt: "Write a haiku about the order"}
  - {id: done, type: end}
edges:
  - {from: start, to: haiku}
  - {from: haiku, to: done}
`

// pinPlain has no AI node.
const pinPlain = `
name: pin-plain
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: "context['y'] = context['total'] * 2"}
  - {id: done, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: done}
`

// TestPin runs a workflow whose AI nodes the scripted model answers, pins
// it, validates the pinned definition as nova validate does, registers it,
// runs it by name, and finds that the second run called no model: its
// pinned nodes ran the first run's code, with no AI step.
func TestPin(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	rules, err := stack.DefaultRules()
	if err != nil {
		t.Fatal(err)
	}
	// A request no rule answers fails at once (no agent retries a 400).
	rules.Fallback = &scripted.Response{Status: 400, Error: &scripted.ErrorSpec{
		Message: "pin test: no scripted rule matches this request", Type: "invalid_request_error"}}
	var logs syncbuf.Buffer
	s, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir(), Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		LLM: stack.LLMOptions{ScriptedRules: &rules}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close stack: %v", err)
		}
		if t.Failed() {
			t.Logf("services' logs:\n%s", logs.String())
		}
	}()
	b, err := s.Connect(ctx, "pin-test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	values, err := valueref.Open(ctx, b.JetStream(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(b, values)
	modelCalls := func() int {
		n := 0
		for _, r := range s.Scripted().Requests() {
			if strings.HasSuffix(r.Path, "/chat/completions") {
				n++
			}
		}
		return n
	}
	runDef := func(def *novav1.WorkflowDefinition, name string) *novav1.WorkflowCompleted {
		t.Helper()
		exec, err := c.Start(ctx, def, name, map[string]any{"total": 1500})
		if err != nil {
			t.Fatal(err)
		}
		wc, err := exec.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
			t.Fatal(err)
		}
		return wc
	}
	parse := func(yaml string) *novav1.WorkflowDefinition {
		t.Helper()
		def, err := workflow.Parse([]byte(yaml))
		if err == nil {
			err = workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true})
		}
		if err != nil {
			t.Fatal(err)
		}
		return def
	}
	pin := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cmdPin(ctx, append([]string{"--mongo", s.MongoURI()}, args...), &out, &errOut)
		return code, out.String(), errOut.String()
	}

	first := runDef(parse(pinOrders), "")
	if first.Status != "succeeded" {
		t.Fatalf("first run: %s, %s", first.Status, first.Error)
	}
	if modelCalls() == 0 {
		t.Fatal("the first run called no model")
	}
	broken := runDef(parse(pinBroken), "")
	if broken.Status != "failed" {
		t.Fatalf("the broken run: %s, want failed", broken.Status)
	}
	plain := runDef(parse(pinPlain), "")
	if plain.Status != "succeeded" {
		t.Fatalf("the plain run: %s, %s", plain.Status, plain.Error)
	}

	// Every AI node that succeeded, to a file; auto did not run.
	file := filepath.Join(t.TempDir(), "pinned.yaml")
	code, out, errOut := pin(first.ExecutionId, "-o", file)
	if code != exitOK || out != file+`: workflow "pin-orders" with discount, route pinned to the code execution `+first.ExecutionId+" accepted\n" ||
		errOut != `nova pin: left "auto" an AI node: it did not run in execution `+first.ExecutionId+"\n" {
		t.Fatalf("nova pin -o: exit %d\n%s%s", code, out, errOut)
	}
	var vOut, vErr bytes.Buffer
	if code := cmdValidate(t.Context(), []string{file}, &vOut, &vErr); code != exitOK || !strings.Contains(vOut.String(), `workflow "pin-orders" is valid (6 nodes, 6 edges)`) {
		t.Fatalf("nova validate of the pinned definition: exit %d\n%s%s", code, vOut.String(), vErr.String())
	}
	text, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(text), `# Workflow "pin-orders", pinned by nova pin from execution `+first.ExecutionId+".\n") ||
		!strings.Contains(string(text), "\n#   discount, route\nname: pin-orders\n") {
		t.Errorf("the pinned file does not say where it comes from:\n%s", text)
	}
	pinned, err := workflow.Load(file, workflow.ValidateOptions{})
	if err == nil || !strings.Contains(err.Error(), `node "auto"`) {
		t.Errorf("the pinned definition without AI nodes allowed: %v; want only auto refused", err)
	}
	if pinned, err = workflow.Load(file, workflow.ValidateOptions{AllowPrompt: true}); err != nil {
		t.Fatal(err)
	}
	if pinned.Cache == nil || pinned.GetCache() {
		t.Errorf("the pinned definition lost the workflow's cache: false:\n%s", text)
	}
	chain, err := s.Store.Chain(ctx, first.ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"discount", "route"} {
		n, ran := nodeOf(pinned, id), lastVisit(chain, id)
		prompt := nodeOf(parse(pinOrders), id).GetPrompt()
		generated, _ := ran.AIMetadata["generated_code"].(string)
		if n.GetPrompt() != "" || n.GetDescription() != prompt || generated == "" ||
			n.GetCode() != "# Pinned from an AI node; its task (prompt) was:\n# "+prompt+"\n"+generated {
			t.Errorf("pinned node %s: prompt %q, description %q, code\n%s\nwant the prompt atop the code the first run generated:\n%s",
				id, n.GetPrompt(), n.GetDescription(), n.GetCode(), generated)
		}
	}
	if nodeOf(pinned, "auto").GetPrompt() == "" || nodeOf(pinned, "review").GetCode() != "context[\"queue\"] = \"manual-review\"\n" {
		t.Errorf("nodes not pinned changed:\n%s", text)
	}

	// Registered and run again by name: the same result, no model call,
	// and no AI step in the chain of work.
	if err := c.Register(ctx, pinned); err != nil {
		t.Fatal(err)
	}
	before := modelCalls()
	second := runDef(nil, "pin-orders")
	if second.Status != "succeeded" || ctxMap(t, second)["final_total"] != ctxMap(t, first)["final_total"] ||
		ctxMap(t, second)["queue"] != "manual-review" || strings.Join(second.Path, ",") != strings.Join(first.Path, ",") {
		t.Errorf("the pinned run: %s %v, context %s; want %v, context %s", second.Status, second.Path, second.GetContext().GetRaw(), first.Path, first.GetContext().GetRaw())
	}
	if after := modelCalls(); after != before {
		t.Errorf("the pinned run made %d model calls, want none", after-before)
	}
	chain, err = s.Store.Chain(ctx, second.ExecutionId)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"discount", "route"} {
		n := lastVisit(chain, id)
		if n == nil || n.Status != nodeSucceeded || len(n.AIMetadata) != 0 || !strings.HasPrefix(n.CodeExecuted, "# Pinned from an AI node") {
			t.Fatalf("pinned node %s in the second run's chain of work: %+v; want its code run as written, no AI metadata", id, n)
		}
		if len(n.Steps) != 1 || n.Steps[0].AgentName != bus.AgentSandbox || n.Steps[0].ModelUsed != "" {
			t.Errorf("steps of pinned node %s in the second run: %+v; want only the sandbox's", id, n.Steps)
		}
	}

	// To stdout, one node: the other stays an AI node.
	code, out, errOut = pin(first.ExecutionId, "discount")
	if code != exitOK || errOut != "" || !strings.HasPrefix(out, "# Workflow \"pin-orders\"") {
		t.Fatalf("nova pin to stdout: exit %d\n%s%s", code, out, errOut)
	}
	one, err := workflow.Parse([]byte(out))
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if nodeOf(one, "discount").GetCode() == "" || nodeOf(one, "route").GetPrompt() == "" {
		t.Errorf("nova pin EXECUTION discount pinned otherwise:\n%s", out)
	}

	tests := []struct {
		name     string
		args     []string
		wantCode int
		want     string
	}{
		{"no execution id", nil, exitInvalid, "want an EXECUTION_ID"},
		{"unknown execution", []string{"no-such-execution"}, exitInvalid, `no execution "no-such-execution" in the chain of work`},
		{"a code node", []string{first.ExecutionId, "review"}, exitInvalid, `node "review" is not an AI node: it runs code as written already`},
		{"a start node", []string{first.ExecutionId, "start"}, exitInvalid, `node "start" is not an AI node: it is a start node`},
		{"no such node", []string{first.ExecutionId, "ghost"}, exitInvalid,
			`workflow "pin-orders" has no node "ghost" (its nodes: start, discount, route, review, auto, done)`},
		{"an AI node that did not run", []string{first.ExecutionId, "discount", "auto"}, exitInvalid,
			`cannot pin: AI node "auto" did not run in execution ` + first.ExecutionId},
		{"an AI node that failed", []string{broken.ExecutionId, "haiku"}, exitInvalid,
			`cannot pin: AI node "haiku" did not succeed in execution ` + broken.ExecutionId + " (visit 1 failed: "},
		{"no AI node succeeded", []string{broken.ExecutionId}, exitInvalid,
			"no AI node of execution " + broken.ExecutionId + ` succeeded, so there is nothing to pin: "haiku" an AI node: it did not succeed`},
		{"the pinned run, whose AI node did not run", []string{second.ExecutionId}, exitInvalid,
			"no AI node of execution " + second.ExecutionId + ` succeeded, so there is nothing to pin: "auto" an AI node: it did not run`},
		{"a run without AI nodes", []string{plain.ExecutionId}, exitInvalid, `workflow "pin-plain" of execution ` + plain.ExecutionId + " has no AI node to pin"},
		{"every problem at once", []string{first.ExecutionId, "review", "ghost"}, exitInvalid, `node "review" is not an AI node: it runs code as written already; workflow "pin-orders" has no node "ghost"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := pin(tt.args...)
			if code != tt.wantCode || !strings.Contains(errOut, tt.want) || out != "" {
				t.Errorf("nova pin %v: exit %d, want %d with %q\n%s%s", tt.args, code, tt.wantCode, tt.want, out, errOut)
			}
		})
	}
}

// lastVisit is the last visit of node id in a chain of work.
func lastVisit(chain []chainstore.NodeDoc, id string) *chainstore.NodeDoc {
	var last *chainstore.NodeDoc
	for i := range chain {
		if chain[i].NodeID == id {
			last = &chain[i]
		}
	}
	return last
}

// ctxMap is a completed workflow's context.
func ctxMap(t *testing.T, wc *novav1.WorkflowCompleted) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal(wc.GetContext().GetRaw(), &m); err != nil {
		t.Fatalf("context of %s: %v", wc.ExecutionId, err)
	}
	return m
}
