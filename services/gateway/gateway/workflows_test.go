package gateway_test

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// workflowDoc is a registered workflow as the gateway answers it.
type workflowDoc struct {
	Name      string    `json:"name"`
	Revision  uint64    `json:"revision"`
	NodeCount int       `json:"node_count"`
	UpdatedAt time.Time `json:"updated_at"`
	Links     struct {
		Self       string `json:"self"`
		Executions string `json:"executions"`
	} `json:"links"`
	Revisions []struct {
		Revision  uint64    `json:"revision"`
		NodeCount int       `json:"node_count"`
		UpdatedAt time.Time `json:"updated_at"`
	} `json:"revisions"`
	Definition struct {
		Name  string `json:"name"`
		Nodes []struct {
			ID   string `json:"id"`
			Type string `json:"type"`
			Code string `json:"code"`
		} `json:"nodes"`
		Edges []struct {
			From string `json:"from"`
			To   string `json:"to"`
		} `json:"edges"`
	} `json:"definition"`
}

// doublerYAML is a workflow that doubles context["n"], as a user writes it.
func doublerYAML(name, factor string) string {
	return fmt.Sprintf(`name: %s
description: doubles n
nodes:
  - id: start
    type: start
  - id: double
    type: action
    code: context["n"] = context["n"] * %s
  - id: end
    type: end
edges:
  - from: start
    to: double
  - from: double
    to: end
`, name, factor)
}

// postWorkflow is POST /v1/workflows with key and a Content-Type (none when empty).
func postWorkflow(t *testing.T, key, contentType, body string) response {
	t.Helper()
	header := map[string]string{}
	if contentType != "" {
		header["Content-Type"] = contentType
	}
	return h.do(t, h.url, request{method: "POST", path: "/v1/workflows", key: key, body: body, header: header})
}

// runByName starts a registered workflow with {"n": n} and returns n at its end.
func runByName(t *testing.T, name string, n int) string {
	t.Helper()
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"],
		body: fmt.Sprintf(`{"workflow": %q, "context": {"n": %d}}`, name, n)})
	var c completionDoc
	decode(t, resp, http.StatusOK, &c)
	if c.Status != "succeeded" {
		t.Fatalf("execution of %s: %s", name, resp.body)
	}
	end, err := jsonvalue.ParseObject(c.Context)
	if err != nil {
		t.Fatal(err)
	}
	return string(end["n"])
}

func TestWorkflowsRegister(t *testing.T) {
	tests := []struct {
		name, contentType string
		json              bool
	}{
		{"YAML as application/yaml", "application/yaml", false},
		{"YAML as application/x-yaml", "application/x-yaml", false},
		{"YAML as text/yaml with a charset", "text/yaml; charset=utf-8", false},
		{"JSON as application/json", "application/json", true},
		{"YAML without a Content-Type", "", false},
		{"JSON without a Content-Type", "", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			name := fmt.Sprintf("wf-%s-%d", uuid.NewString()[:8], i)
			body := doublerYAML(name, "2")
			if tt.json {
				body = chain(name, `context["n"] = context["n"] * 2`)
			}
			start := time.Now().Add(-time.Second)
			resp := postWorkflow(t, h.key["admin"], tt.contentType, body)
			var w workflowDoc
			decode(t, resp, http.StatusCreated, &w)
			if w.Name != name || w.NodeCount != 3 || w.Revision == 0 || w.UpdatedAt.Before(start) ||
				w.Links.Self != "/v1/workflows/"+name || w.Links.Executions != "/v1/executions?workflow="+name {
				t.Fatalf("answer = %s", resp.body)
			}
			if loc := resp.header.Get("Location"); loc != w.Links.Self {
				t.Errorf("Location = %q, want %q", loc, w.Links.Self)
			}
			// Registered when answered: a start by name that follows finds it.
			if got := runByName(t, name, 21); got != "42" {
				t.Errorf("n = %s, want 42", got)
			}
		})
	}

	t.Run("registered again, replaced", func(t *testing.T) {
		name := "wf-again-" + uuid.NewString()[:8]
		var first, second workflowDoc
		decode(t, postWorkflow(t, h.key["admin"], "application/yaml", doublerYAML(name, "2")), http.StatusCreated, &first)
		decode(t, postWorkflow(t, h.key["admin"], "application/yaml", doublerYAML(name, "3")), http.StatusCreated, &second)
		if second.Revision <= first.Revision {
			t.Errorf("revision %d after %d", second.Revision, first.Revision)
		}
		if got := runByName(t, name, 5); got != "15" {
			t.Errorf("n = %s, want 15: the first definition still runs", got)
		}
		var got workflowDoc
		decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows/" + name, key: h.key["reader"]}), http.StatusOK, &got)
		if got.Revision != second.Revision || len(got.Definition.Nodes) != 3 || got.Definition.Nodes[1].Code != `context["n"] = context["n"] * 3` {
			t.Errorf("GET = %+v", got)
		}
	})
}

func TestWorkflowsRegisterRejected(t *testing.T) {
	def, err := workflow.Parse([]byte(brokenYAML))
	if err == nil {
		err = workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true})
	}
	verr, ok := err.(*workflow.ValidationError)
	if !ok || len(verr.Problems) < 3 {
		t.Fatalf("the broken workflow must have several problems, has: %v", err)
	}
	everyProblem := make([]string, len(verr.Problems))
	for i, p := range verr.Problems {
		everyProblem[i] = "definition"
		if p.Field != "" {
			everyProblem[i] += "." + p.Field
		}
	}
	badName := strings.Replace(brokenYAML, "name: broken", "name: broken one", 1)

	tests := []struct {
		name, key, contentType, body string
		status                       int
		typ                          string
		fields                       []string
	}{
		{"YAML that does not parse", "admin", "application/yaml", "name: x\nnodes: [\n", 400, gateway.TypeInvalidRequest, []string{"body"}},
		{"YAML sent as JSON", "admin", "application/json", doublerYAML("as-json", "2"), 400, gateway.TypeInvalidRequest, []string{"body"}},
		{"no body", "admin", "application/yaml", "", 400, gateway.TypeInvalidRequest, []string{"body"}},
		{"a list, not a definition", "admin", "", "- a\n- b\n", 400, gateway.TypeInvalidRequest, []string{"body"}},
		{"a workflow with several problems", "admin", "text/yaml", brokenYAML, 422, gateway.TypeInvalidWorkflow, everyProblem},
		{"and a name the registry cannot keep", "admin", "text/yaml", badName, 422, gateway.TypeInvalidWorkflow,
			append(slices.Clone(everyProblem), "definition.name")},
		{"a starting key", "writer", "application/yaml", doublerYAML("by-writer", "2"), 403, gateway.TypeForbidden, nil},
		{"a reading key", "reader", "application/yaml", doublerYAML("by-reader", "2"), 403, gateway.TypeForbidden, nil},
		{"no key", "", "application/yaml", doublerYAML("by-nobody", "2"), 401, gateway.TypeUnauthorized, nil},
	}
	commands := h.lastCommand(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := postWorkflow(t, h.key[tt.key], tt.contentType, tt.body)
			p := problem(t, resp, tt.status, tt.typ)
			if !slices.Equal(p.fields(), tt.fields) {
				t.Errorf("fields %v, want %v; %s", p.fields(), tt.fields, resp.body)
			}
			if tt.status == http.StatusForbidden && !strings.Contains(p.Detail, "admin") {
				t.Errorf("detail %q does not name the scope", p.Detail)
			}
		})
	}
	if got := h.lastCommand(t); got != commands {
		t.Errorf("NOVA_CMD's last sequence went from %d to %d: a refused definition was published", commands, got)
	}
	// Each problem names the line of the text it is at: node orphan's at
	// its id, the edge's at its member to.
	t.Run("at their lines", func(t *testing.T) {
		p := problem(t, postWorkflow(t, h.key["admin"], "application/yaml", brokenYAML), http.StatusUnprocessableEntity, gateway.TypeInvalidWorkflow)
		var lines []int
		for _, e := range p.Errors {
			lines = append(lines, e.Line)
		}
		if want := []int{8, 16, 8, 8}; !slices.Equal(lines, want) {
			t.Errorf("the problems %+v are at lines %v, want %v", p.Errors, lines, want)
		}
	})
	for _, name := range []string{"broken", "by-writer", "by-reader", "by-nobody"} {
		problem(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows/" + name, key: h.key["reader"]}),
			http.StatusNotFound, gateway.TypeNotFound)
	}

	// The gateway accepts AI nodes; an engine without the AI pipeline (as
	// here) refuses them, and the gateway says so.
	t.Run("refused by the engine", func(t *testing.T) {
		name := "ai-" + uuid.NewString()[:8]
		body := fmt.Sprintf(`{"name": %q, "nodes": [{"id": "start", "type": "start"},
			{"id": "think", "type": "action", "prompt": "Summarise the invoice"}, {"id": "end", "type": "end"}],
			"edges": [{"from": "start", "to": "think"}, {"from": "think", "to": "end"}]}`, name)
		p := problem(t, postWorkflow(t, h.key["admin"], "application/json", body), http.StatusUnprocessableEntity, gateway.TypeInvalidWorkflow)
		if !strings.Contains(p.Detail, "refused") || !strings.Contains(p.Detail, "think") {
			t.Errorf("detail %q does not give the engine's reason", p.Detail)
		}
		problem(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows/" + name, key: h.key["reader"]}),
			http.StatusNotFound, gateway.TypeNotFound)
	})
}

func TestWorkflowsListAndGet(t *testing.T) {
	prefix := "list-" + uuid.NewString()[:8]
	names := []string{prefix + "-b", prefix + "-a"}
	registered := map[string]workflowDoc{}
	for _, name := range names {
		var w workflowDoc
		decode(t, postWorkflow(t, h.key["admin"], "application/yaml", doublerYAML(name, "2")), http.StatusCreated, &w)
		registered[name] = w
	}

	var list struct {
		Workflows []workflowDoc `json:"workflows"`
	}
	decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows", key: h.key["reader"]}), http.StatusOK, &list)
	var listed []string
	for _, w := range list.Workflows {
		listed = append(listed, w.Name)
		if want, ok := registered[w.Name]; ok {
			if w.Revision != want.Revision || w.NodeCount != 3 || !w.UpdatedAt.Equal(want.UpdatedAt) || w.Links.Self != want.Links.Self {
				t.Errorf("listed %+v, registered %+v", w, want)
			}
		}
	}
	if !slices.IsSorted(listed) {
		t.Errorf("not sorted by name: %v", listed)
	}
	for _, name := range names {
		if !slices.Contains(listed, name) {
			t.Errorf("%s is not listed: %v", name, listed)
		}
	}

	var one workflowDoc
	decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows/" + names[0], key: h.key["reader"]}), http.StatusOK, &one)
	d := one.Definition
	if one.Name != names[0] || one.Revision != registered[names[0]].Revision || d.Name != names[0] || len(d.Nodes) != 3 ||
		d.Nodes[0].Type != "NODE_TYPE_START" || d.Nodes[1].Code != `context["n"] = context["n"] * 2` || len(d.Edges) != 2 {
		t.Errorf("GET %s = %+v", names[0], one)
	}

	tests := []struct {
		name, method, path, key string
		status                  int
		typ                     string
	}{
		{"an unknown workflow", "GET", "/v1/workflows/never-registered", "reader", 404, gateway.TypeNotFound},
		{"a name no workflow can have", "GET", "/v1/workflows/a.b", "reader", 404, gateway.TypeNotFound},
		{"listing with a starting key", "GET", "/v1/workflows", "writer", 403, gateway.TypeForbidden},
		{"reading one with a starting key", "GET", "/v1/workflows/" + names[0], "writer", 403, gateway.TypeForbidden},
		{"listing without a key", "GET", "/v1/workflows", "", 401, gateway.TypeUnauthorized},
		{"an unknown parameter", "GET", "/v1/workflows?limit=5", "reader", 400, gateway.TypeInvalidRequest},
		{"a revision that is no number", "GET", "/v1/workflows/" + names[0] + "?revision=latest", "reader", 400, gateway.TypeInvalidRequest},
		{"revision 0", "GET", "/v1/workflows/" + names[0] + "?revision=0", "reader", 400, gateway.TypeInvalidRequest},
		{"a revision of another name", "GET", "/v1/workflows/" + names[0] + fmt.Sprintf("?revision=%d", registered[names[1]].Revision), "reader", 404, gateway.TypeNotFound},
		{"deleting", "DELETE", "/v1/workflows/" + names[0], "admin", 405, gateway.TypeMethodNotAllowed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problem(t, h.do(t, h.url, request{method: tt.method, path: tt.path, key: h.key[tt.key]}), tt.status, tt.typ)
		})
	}
}

// The registry keeps the last 5 registrations of a name: GET lists them
// newest first and reads any of them with ?revision=N.
func TestWorkflowRevisions(t *testing.T) {
	name := "revs-" + uuid.NewString()[:8]
	var regs []workflowDoc
	for factor := 2; factor <= 7; factor++ {
		var w workflowDoc
		decode(t, postWorkflow(t, h.key["admin"], "application/yaml", doublerYAML(name, fmt.Sprint(factor))), http.StatusCreated, &w)
		regs = append(regs, w)
	}
	get := func(query string) workflowDoc {
		t.Helper()
		var w workflowDoc
		decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows/" + name + query, key: h.key["reader"]}), http.StatusOK, &w)
		return w
	}
	latest := get("")
	var listed []uint64
	for _, r := range latest.Revisions {
		listed = append(listed, r.Revision)
		if r.NodeCount != 3 || r.UpdatedAt.IsZero() {
			t.Errorf("revision %+v", r)
		}
	}
	want := []uint64{regs[5].Revision, regs[4].Revision, regs[3].Revision, regs[2].Revision, regs[1].Revision}
	if !slices.Equal(listed, want) {
		t.Errorf("revisions %v, want the last five registrations newest first %v", listed, want)
	}
	if latest.Revision != regs[5].Revision || latest.Definition.Nodes[1].Code != `context["n"] = context["n"] * 7` {
		t.Errorf("GET without a revision = revision %d, code %q; want the last registration", latest.Revision, latest.Definition.Nodes[1].Code)
	}
	older := get(fmt.Sprintf("?revision=%d", regs[2].Revision))
	if older.Revision != regs[2].Revision || older.Definition.Nodes[1].Code != `context["n"] = context["n"] * 4` || !older.UpdatedAt.Equal(regs[2].UpdatedAt) {
		t.Errorf("revision %d = revision %d, code %q, updated %v; want the third registration", regs[2].Revision, older.Revision,
			older.Definition.Nodes[1].Code, older.UpdatedAt)
	}
	if !slices.Equal(func() []uint64 {
		var out []uint64
		for _, r := range older.Revisions {
			out = append(out, r.Revision)
		}
		return out
	}(), want) {
		t.Errorf("an older revision lists revisions %+v, want %v", older.Revisions, want)
	}
	p := problem(t, h.do(t, h.url, request{method: "GET", path: fmt.Sprintf("/v1/workflows/%s?revision=%d", name, regs[0].Revision),
		key: h.key["reader"]}), http.StatusNotFound, gateway.TypeNotFound)
	if !strings.Contains(p.Detail, "not kept") || !strings.Contains(p.Detail, fmt.Sprint(regs[5].Revision)) {
		t.Errorf("the first registration, no longer kept: %q; want it to say so and name the kept ones", p.Detail)
	}
}

// A definition registered again unchanged is answered at once, 200 with
// the stored revision and unchanged: the engine stores nothing for it, so
// there is no write to wait for. A changed one is stored as before.
func TestWorkflowsRegisterUnchanged(t *testing.T) {
	name := "same-" + uuid.NewString()[:8]
	var first, again, changed workflowDoc
	decode(t, postWorkflow(t, h.key["admin"], "application/yaml", doublerYAML(name, "2")), http.StatusCreated, &first)
	tests := []struct {
		name, contentType, body string
	}{
		{"the same YAML", "application/yaml", doublerYAML(name, "2")},
		{"the same definition as JSON", "application/json", fmt.Sprintf(`{"name": %q, "description": "doubles n", "nodes": [{"id": "start", "type": "start"},
			{"id": "double", "type": "action", "code": "context[\"n\"] = context[\"n\"] * 2"}, {"id": "end", "type": "end"}],
			"edges": [{"from": "start", "to": "double"}, {"from": "double", "to": "end"}]}`, name)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := postWorkflow(t, h.key["admin"], tt.contentType, tt.body)
			var raw map[string]any
			decode(t, resp, http.StatusOK, &raw)
			decode(t, resp, http.StatusOK, &again)
			if again.Revision != first.Revision || raw["unchanged"] != true || !again.UpdatedAt.Equal(first.UpdatedAt) {
				t.Errorf("registered again unchanged: %s; want revision %d, unchanged", resp.body, first.Revision)
			}
			if loc := resp.header.Get("Location"); loc != first.Links.Self {
				t.Errorf("Location = %q, want %q", loc, first.Links.Self)
			}
		})
	}
	resp := postWorkflow(t, h.key["admin"], "application/yaml", doublerYAML(name, "3"))
	decode(t, resp, http.StatusCreated, &changed)
	if changed.Revision <= first.Revision || strings.Contains(string(resp.body), "unchanged") {
		t.Errorf("a changed definition: %s; want a new revision after %d", resp.body, first.Revision)
	}
}

// GET /v1/workflows?runs=N sums up each workflow's last N executions in
// the one answer: the newest, and how many ended and succeeded.
func TestWorkflowsListRuns(t *testing.T) {
	prefix := "runs-" + uuid.NewString()[:8]
	ran, never, later := prefix+"-ran", prefix+"-never", prefix+"-later"
	for _, name := range []string{ran, never, later} {
		decode(t, postWorkflow(t, h.key["admin"], "application/yaml", doublerYAML(name, "2")), http.StatusCreated, &workflowDoc{})
	}
	runByName(t, ran, 1)
	runByName(t, ran, 2)
	// None * 2 raises: that run fails.
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"],
		body: fmt.Sprintf(`{"workflow": %q, "context": {"n": null}}`, ran)})
	var failed completionDoc
	decode(t, resp, http.StatusOK, &failed)
	// Newer than ran's runs: with ?runs=1 the listing of the newest
	// executions may hold only later's, and ran's own is read.
	for n := range 3 {
		runByName(t, later, n)
	}
	h.waitAudit(t)

	type summed struct {
		Name string `json:"name"`
		Runs *struct {
			Last *struct {
				ExecutionID string `json:"execution_id"`
				Status      string `json:"status"`
			} `json:"last"`
			Counted   int `json:"counted"`
			Ended     int `json:"ended"`
			Succeeded int `json:"succeeded"`
		} `json:"runs"`
	}
	list := func(query string) map[string]summed {
		t.Helper()
		var l struct {
			Workflows []summed `json:"workflows"`
		}
		decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows" + query, key: h.key["reader"]}), http.StatusOK, &l)
		out := map[string]summed{}
		for _, w := range l.Workflows {
			out[w.Name] = w
		}
		return out
	}
	tests := []struct {
		query                     string
		workflow                  string
		counted, ended, succeeded int
		lastStatus, lastID        string
	}{
		{"?runs=20", ran, 3, 3, 2, failed.Status, failed.ExecutionID},
		{"?runs=2", ran, 2, 2, 1, failed.Status, failed.ExecutionID},
		{"?runs=20", never, 0, 0, 0, "", ""},
		{"?runs=1", ran, 1, 1, 0, failed.Status, failed.ExecutionID},
		{"?runs=1", never, 0, 0, 0, "", ""},
		{"?runs=1", later, 1, 1, 1, "succeeded", ""},
	}
	for _, tt := range tests {
		t.Run(tt.workflow+tt.query, func(t *testing.T) {
			w := list(tt.query)[tt.workflow]
			r := w.Runs
			if r == nil || r.Counted != tt.counted || r.Ended != tt.ended || r.Succeeded != tt.succeeded {
				t.Fatalf("%s: runs %+v, want %d counted, %d ended, %d succeeded", tt.workflow, r, tt.counted, tt.ended, tt.succeeded)
			}
			if tt.lastStatus == "" && r.Last != nil || tt.lastStatus != "" && (r.Last == nil || r.Last.Status != tt.lastStatus) ||
				tt.lastID != "" && r.Last.ExecutionID != tt.lastID {
				t.Errorf("%s: last run %+v, want %q %s", tt.workflow, r.Last, tt.lastID, tt.lastStatus)
			}
		})
	}
	if failed.Status != "failed" {
		t.Errorf("the run with n null ended %s, want failed", failed.Status)
	}
	if w := list("")[ran]; w.Runs != nil {
		t.Errorf("without ?runs the list sums up runs: %+v", w.Runs)
	}
	for _, bad := range []string{"0", "101", "many"} {
		p := problem(t, h.do(t, h.url, request{method: "GET", path: "/v1/workflows?runs=" + bad, key: h.key["reader"]}),
			http.StatusBadRequest, gateway.TypeInvalidRequest)
		if !slices.Equal(p.fields(), []string{"runs"}) {
			t.Errorf("runs=%s: fields %v, want runs", bad, p.fields())
		}
	}
}
