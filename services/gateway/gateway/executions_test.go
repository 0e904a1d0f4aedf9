package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// chain is a workflow start -> one action node per code -> end, as the
// JSON object a client sends.
func chain(name string, codes ...string) string {
	type node struct {
		ID   string `json:"id"`
		Type string `json:"type"`
		Code string `json:"code,omitempty"`
	}
	type edge struct {
		From string `json:"from"`
		To   string `json:"to"`
	}
	nodes := []node{{ID: "start", Type: "start"}}
	var edges []edge
	prev := "start"
	for i, code := range codes {
		id := fmt.Sprintf("step%d", i+1)
		nodes = append(nodes, node{ID: id, Type: "action", Code: code})
		edges = append(edges, edge{From: prev, To: id})
		prev = id
	}
	nodes = append(nodes, node{ID: "end", Type: "end"})
	edges = append(edges, edge{From: prev, To: "end"})
	b, _ := json.Marshal(map[string]any{"name": name, "nodes": nodes, "edges": edges})
	return string(b)
}

// exactYAML is a 3-node Python workflow that computes from numbers a float64
// would change: 9007199254740993 (2^53 + 1) and 150.0.
const exactYAML = `name: exact-numbers
nodes:
  - id: start
    type: start
  - id: compute
    type: action
    code: |
      context["next_id"] = context["id"] + 1
      context["total"] = context["price"] * 2
  - id: end
    type: end
edges:
  - from: start
    to: compute
  - from: compute
    to: end
`

const exactContext = `{"id": 9007199254740993, "price": 150.0, "note": "<é>"}`

// wantExact checks the context the exact-numbers workflow ends with, member
// by member as text.
func wantExact(t *testing.T, raw json.RawMessage) {
	t.Helper()
	got, err := jsonvalue.ParseObject(raw)
	if err != nil {
		t.Fatalf("context %s: %v", raw, err)
	}
	want := map[string]string{"id": "9007199254740993", "price": "150.0", "next_id": "9007199254740994", "total": "300.0", "note": `"<é>"`}
	for k, v := range want {
		if string(got[k]) != v {
			t.Errorf("context[%q] = %s, want %s (context %s)", k, got[k], v, raw)
		}
	}
}

// completionDoc is the answer of a start that waited: nova run --json's shape.
type completionDoc struct {
	ExecutionID string          `json:"execution_id"`
	Status      string          `json:"status"`
	Context     json.RawMessage `json:"context"`
	Path        []string        `json:"path"`
	Nodes       []struct {
		ID       string      `json:"id"`
		Status   string      `json:"status"`
		Attempts json.Number `json:"attempts"`
		Error    string      `json:"error"`
	} `json:"nodes"`
	Error string `json:"error"`
}

type acceptedDoc struct {
	ExecutionID string `json:"execution_id"`
	Status      string `json:"status"`
	Links       struct {
		Self   string `json:"self"`
		Events string `json:"events"`
	} `json:"links"`
}

func startBody(fields ...string) string { return "{" + strings.Join(fields, ", ") + "}" }

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func TestStartAndWait(t *testing.T) {
	h.register(t, exactYAML)
	tests := []struct {
		name, body string
	}{
		{"definition as a JSON object", startBody(`"definition": `+exactJSON, `"context": `+exactContext)},
		{"definition as YAML text", startBody(`"definition": `+jsonString(exactYAML), `"context": `+exactContext)},
		{"registered workflow", startBody(`"workflow": "exact-numbers"`, `"context": `+exactContext)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: tt.body})
			var c completionDoc
			decode(t, resp, http.StatusOK, &c)
			if c.Status != "succeeded" || c.Error != "" {
				t.Fatalf("completion = %s", resp.body)
			}
			if _, err := uuid.Parse(c.ExecutionID); err != nil {
				t.Errorf("execution_id %q is not a UUID", c.ExecutionID)
			}
			if loc := resp.header.Get("Location"); loc != "/v1/executions/"+c.ExecutionID {
				t.Errorf("Location = %q", loc)
			}
			if !slices.Equal(c.Path, []string{"start", "compute", "end"}) {
				t.Errorf("path = %v", c.Path)
			}
			var ids []string
			for _, n := range c.Nodes {
				ids = append(ids, n.ID)
				if n.Status != "succeeded" || n.ID == "compute" && n.Attempts != "1" {
					t.Errorf("node %+v", n)
				}
			}
			slices.Sort(ids)
			if !slices.Equal(ids, []string{"compute", "end", "start"}) {
				t.Errorf("nodes = %v", ids)
			}
			wantExact(t, c.Context)
			// The answer is the completion the engine published, field for field.
			var keys map[string]json.RawMessage
			_ = json.Unmarshal(resp.body, &keys)
			var names []string
			for k := range keys {
				names = append(names, k)
			}
			slices.Sort(names)
			if want := []string{"context", "cost_usd", "error", "execution_id", "model_calls", "nodes", "path", "status"}; !slices.Equal(names, want) {
				t.Errorf("fields %v, want %v (nova run --json)", names, want)
			}
		})
	}
}

// Requests waiting for their new executions share one consumer of
// completions: a consumer per wait would cost the server about 0.7 ms of
// CPU each (pkg/bus BenchmarkWaits).
func TestWaitsShareOneConsumer(t *testing.T) {
	const n = 5
	body := startBody(`"definition": `+chain("shared-waits", "import time\ntime.sleep(1)\ncontext['slept'] = 1"), `"context": {}`)
	consumers := func() int {
		s, err := h.bus.JetStream().Stream(context.Background(), bus.StreamEvents)
		if err != nil {
			return -1
		}
		info, err := s.Info(context.Background())
		if err != nil {
			return -1
		}
		return info.State.Consumers
	}
	before := consumers()
	most := make(chan int)
	stop := make(chan struct{})
	go func() {
		m := 0
		for {
			m = max(m, consumers())
			select {
			case <-stop:
				most <- m
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	t.Run("requests", func(t *testing.T) {
		for i := range n {
			t.Run(fmt.Sprint(i), func(t *testing.T) {
				t.Parallel()
				resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: body})
				var c completionDoc
				decode(t, resp, http.StatusOK, &c)
				if c.Status != "succeeded" {
					t.Errorf("completion = %s", resp.body)
				}
			})
		}
	})
	close(stop)
	if got := <-most - before; got > 1 {
		t.Errorf("requests waiting at once (%d, -parallel at a time) made %d consumers of %s, want at most 1", n, got, bus.StreamEvents)
	}
}

// exactJSON is exactYAML written as a JSON object.
const exactJSON = `{"name": "exact-numbers", "nodes": [
		{"id": "start", "type": "start"},
		{"id": "compute", "type": "action", "code": "context[\"next_id\"] = context[\"id\"] + 1\ncontext[\"total\"] = context[\"price\"] * 2\n"},
		{"id": "end", "type": "end"}],
	 "edges": [{"from": "start", "to": "compute"}, {"from": "compute", "to": "end"}]}`

func TestStartWithoutWait(t *testing.T) {
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
		body: startBody(`"definition": ` + chain("no-wait", `context["done"] = True`))})
	var a acceptedDoc
	decode(t, resp, http.StatusAccepted, &a)
	if a.Status != "running" || a.Links.Self != "/v1/executions/"+a.ExecutionID || a.Links.Events != a.Links.Self+"/events" {
		t.Errorf("answer = %s", resp.body)
	}
	if loc := resp.header.Get("Location"); loc != a.Links.Self {
		t.Errorf("Location = %q, want %q", loc, a.Links.Self)
	}
	v := h.awaitStatus(t, a.ExecutionID, "succeeded")
	if string(v.Execution.FinalContext["done"]) != "true" {
		t.Errorf("final context = %v", v.Execution.FinalContext)
	}
}

// executionDocView is GET /v1/executions/{id} as a client reads it.
type executionDocView struct {
	Execution struct {
		ExecutionID    string                      `json:"execution_id"`
		WorkflowName   string                      `json:"workflow_name"`
		Status         string                      `json:"status"`
		InitialContext map[string]json.RawMessage  `json:"initial_context"`
		FinalContext   map[string]json.RawMessage  `json:"final_context"`
		Definition     map[string]any              `json:"definition"`
		Path           []string                    `json:"path"`
		Nodes          []chainstore.NodeSummaryDoc `json:"nodes"`
		Error          string                      `json:"error"`
		StartedAt      *time.Time                  `json:"started_at"`
		CurrentNode    string                      `json:"current_node"`
	} `json:"execution"`
	Nodes []struct {
		NodeID       string                     `json:"node_id"`
		NodeType     string                     `json:"node_type"`
		Sequence     int                        `json:"sequence"`
		Status       string                     `json:"status"`
		CodeExecuted string                     `json:"code_executed"`
		InputContext map[string]json.RawMessage `json:"input_context"`
		OutputResult map[string]json.RawMessage `json:"output_result"`
		Steps        []struct {
			AgentName string `json:"agent_name"`
			Status    string `json:"status"`
		} `json:"steps"`
	} `json:"nodes"`
}

// get reads GET /v1/executions/{id}; found is false on a 404 problem.
func (h *harness) get(t *testing.T, id string) (executionDocView, bool) {
	t.Helper()
	resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]})
	if resp.status == http.StatusNotFound {
		problem(t, resp, http.StatusNotFound, gateway.TypeNotFound)
		return executionDocView{}, false
	}
	var v executionDocView
	decode(t, resp, http.StatusOK, &v)
	return v, true
}

// awaitStatus reads the execution until it has status in the audit store.
func (h *harness) awaitStatus(t *testing.T, id, status string) executionDocView {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		v, found := h.get(t, id)
		if found && v.Execution.Status == status && v.Execution.InitialContext != nil && len(v.Nodes) > 0 {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s: %+v, never %s in the audit store", id, v.Execution, status)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestWaitRunsOut(t *testing.T) {
	slow := chain("slow", "import time\ntime.sleep(3)\ncontext[\"slept\"] = True")
	short, err := h.serve(gateway.Deps{Keys: h.keys, Limits: gateway.Limits{MaxWait: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, base, wait string
	}{
		{"the wait asked for", h.url, "300ms"},
		{"a wait capped by the gateway's longest", short, "60s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := h.do(t, tt.base, request{method: "POST", path: "/v1/executions?wait=" + tt.wait, key: h.key["writer"],
				body: startBody(`"definition": ` + slow)})
			var a acceptedDoc
			decode(t, resp, http.StatusAccepted, &a)
			if a.Status != "running" || resp.header.Get("Location") != a.Links.Self {
				t.Errorf("answer = %s", resp.body)
			}
			// It was not given up: it ends on its own.
			v := h.awaitStatus(t, a.ExecutionID, "succeeded")
			if string(v.Execution.FinalContext["slept"]) != "true" {
				t.Errorf("final context = %v", v.Execution.FinalContext)
			}
		})
	}
}

func TestIdempotencyKey(t *testing.T) {
	name := "idem-" + uuid.NewString()[:8]
	body := startBody(`"definition": `+chain(name, `context["n"] = context["n"] + 1`), `"context": {"n": 41}`)
	idem := map[string]string{"Idempotency-Key": "order-42"}
	post := func(key, query string, header map[string]string) response {
		return h.do(t, h.url, request{method: "POST", path: "/v1/executions" + query, key: key, body: body, header: header})
	}

	resp := post(h.key["writer"], "?wait=60s", idem)
	var first completionDoc
	decode(t, resp, http.StatusOK, &first)
	if first.Status != "succeeded" || !strings.Contains(string(first.Context), `"n":42`) {
		t.Fatalf("first = %s", resp.body)
	}
	commands := h.lastCommand(t)

	// Retried without and with a wait: the same execution, nothing new published.
	resp = post(h.key["writer"], "", idem)
	var again acceptedDoc
	decode(t, resp, http.StatusAccepted, &again)
	if again.ExecutionID != first.ExecutionID {
		t.Errorf("retry started %s, want the first execution %s", again.ExecutionID, first.ExecutionID)
	}
	resp = post(h.key["writer"], "?wait=60s", idem)
	var replay completionDoc
	decode(t, resp, http.StatusOK, &replay)
	if replay.ExecutionID != first.ExecutionID || string(replay.Context) != string(first.Context) {
		t.Errorf("retry with wait = %s, want the first completion %+v", resp.body, first)
	}
	if got := h.lastCommand(t); got != commands {
		t.Errorf("NOVA_CMD's last sequence went from %d to %d: a retry published a new start", commands, got)
	}
	h.waitAudit(t)
	docs, err := h.store.ListExecutions(t.Context(), chainstore.ListFilter{Workflow: name, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) != 1 || docs[0].ExecutionID != first.ExecutionID {
		t.Errorf("executions of %s in the audit store: %+v, want only %s", name, docs, first.ExecutionID)
	}
	if n := h.startedEvents(t, first.ExecutionID); n != 1 {
		t.Errorf("%d workflow.started events for %s, want 1", n, first.ExecutionID)
	}
	// Once its events are purged (KeepEnded after its end), a retry with a
	// wait still answers its completion, from the engine's state.
	events, err := h.bus.JetStream().Stream(t.Context(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(t.Context(), jetstream.WithPurgeSubject(bus.ExecutionFilter(first.ExecutionID))); err != nil {
		t.Fatal(err)
	}
	resp = post(h.key["writer"], "?wait=5s", idem)
	var purged completionDoc
	decode(t, resp, http.StatusOK, &purged)
	if purged.ExecutionID != first.ExecutionID || string(purged.Context) != string(first.Context) || purged.Status != first.Status {
		t.Errorf("retry with wait, events purged = %s, want the first completion %+v", resp.body, first)
	}

	// The key is per API key, and another key starts another execution.
	for _, tt := range []struct {
		name, apiKey, idem string
	}{
		{"same Idempotency-Key, another API key", h.key["admin"], "order-42"},
		{"another Idempotency-Key", h.key["writer"], "order-43"},
	} {
		resp := post(tt.apiKey, "?wait=60s", map[string]string{"Idempotency-Key": tt.idem})
		var c completionDoc
		decode(t, resp, http.StatusOK, &c)
		if c.ExecutionID == first.ExecutionID {
			t.Errorf("%s: got the first execution %s again", tt.name, c.ExecutionID)
		}
	}
}

func TestGetExecution(t *testing.T) {
	// Without the audit service the store does not know the execution yet:
	// the gateway answers from the engine's state.
	if err := h.stopModule("audit"); err != nil {
		t.Fatal(err)
	}
	auditRunning := false
	t.Cleanup(func() {
		if !auditRunning {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := h.startModule(ctx, "audit"); err != nil {
				t.Errorf("restart audit: %v", err)
			}
		}
	})
	name := "get-" + uuid.NewString()[:8]
	// step2 runs long enough for the audit service, started again while it
	// runs, to record the execution running: it holds a started event up
	// to auditservice.HoldFor and a quarter of it, waiting for the
	// completion, before it writes it running.
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
		body: startBody(`"definition": `+chain(name, `context["before"] = context["id"]`, "import time\ntime.sleep(6)\ncontext[\"slept\"] = True"),
			`"context": `+exactContext)})
	var a acceptedDoc
	decode(t, resp, http.StatusAccepted, &a)

	deadline := time.Now().Add(30 * time.Second)
	for {
		v, found := h.get(t, a.ExecutionID)
		if found && v.Execution.CurrentNode == "step2" {
			if v.Execution.Status != "running" || v.Execution.WorkflowName != name || v.Execution.StartedAt == nil ||
				len(v.Nodes) != 0 || v.Execution.ExecutionID != a.ExecutionID || v.Execution.Definition["name"] != name {
				t.Fatalf("from the engine's state: %+v", v)
			}
			break
		}
		if found && v.Execution.Status != "running" {
			t.Fatalf("execution is %s before its slow node was seen", v.Execution.Status)
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s never reached its slow node: %+v", a.ExecutionID, v)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := h.store.Execution(t.Context(), a.ExecutionID); err == nil {
		t.Fatal("the audit store has the execution although the audit service is stopped")
	}

	// With the audit service back: the store's document while it runs, with
	// the engine's current node.
	if err := h.startModule(t.Context(), "audit"); err != nil {
		t.Fatal(err)
	}
	auditRunning = true
	for {
		v, _ := h.get(t, a.ExecutionID)
		if v.Execution.InitialContext != nil {
			if v.Execution.Status != "running" || v.Execution.CurrentNode != "step2" {
				t.Fatalf("running execution from the store: status %s, current node %q", v.Execution.Status, v.Execution.CurrentNode)
			}
			if string(v.Execution.InitialContext["id"]) != "9007199254740993" || string(v.Execution.InitialContext["price"]) != "150.0" {
				t.Errorf("initial context = %v", v.Execution.InitialContext)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the audit store never recorded %s", a.ExecutionID)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// Done: the execution, its nodes and its chain of work, as nova chain --json.
	v := h.awaitStatus(t, a.ExecutionID, "succeeded")
	h.waitAudit(t)
	v, _ = h.get(t, a.ExecutionID)
	e := v.Execution
	if e.CurrentNode != "" || !slices.Equal(e.Path, []string{"start", "step1", "step2", "end"}) || e.Definition["name"] != name || len(e.Nodes) != 4 {
		t.Errorf("execution = %+v", e)
	}
	if string(e.FinalContext["before"]) != "9007199254740993" || string(e.FinalContext["price"]) != "150.0" || string(e.FinalContext["slept"]) != "true" {
		t.Errorf("final context = %v", e.FinalContext)
	}
	var visited []string
	for _, n := range v.Nodes {
		visited = append(visited, n.NodeID)
	}
	if !slices.Equal(visited, []string{"start", "step1", "step2", "end"}) {
		t.Fatalf("chain of work visits %v", visited)
	}
	step1 := v.Nodes[1]
	if step1.Status != "success" || step1.CodeExecuted != `context["before"] = context["id"]` ||
		string(step1.InputContext["id"]) != "9007199254740993" || string(step1.OutputResult["before"]) != "9007199254740993" {
		t.Errorf("chain of work of step1: %+v", step1)
	}
	if len(step1.Steps) != 1 || step1.Steps[0].AgentName != "sandbox" || step1.Steps[0].Status != "success" {
		t.Errorf("steps of step1: %+v", step1.Steps)
	}

	// The JSON nova chain --json prints: {"execution": ..., "nodes": [...]}
	// from the store's own readers.
	doc, err := h.store.Execution(t.Context(), a.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := h.store.Chain(t.Context(), a.ExecutionID)
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	enc := json.NewEncoder(&want)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(struct {
		Execution *chainstore.ExecutionDoc `json:"execution"`
		Nodes     []chainstore.NodeDoc     `json:"nodes"`
	}{doc, nodes}); err != nil {
		t.Fatal(err)
	}
	resp = h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + a.ExecutionID, key: h.key["reader"]})
	if got := string(resp.body); got != want.String() {
		t.Errorf("GET answer differs from the store's readers:\n got %s\nwant %s", got, want.String())
	}
}

func TestGetUnknownExecution(t *testing.T) {
	for _, id := range []string{"no-such-execution", uuid.NewString(), "a.b*c"} {
		resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]})
		p := problem(t, resp, http.StatusNotFound, gateway.TypeNotFound)
		if !strings.Contains(p.Detail, id) {
			t.Errorf("detail %q does not name %s", p.Detail, id)
		}
	}
}
