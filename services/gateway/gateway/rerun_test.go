package gateway_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// rerunYAML fails at check while final_total is over limit; a rerun from
// check with a higher limit succeeds without running total again.
const rerunYAML = `name: rerun-limit
nodes:
  - {id: start, type: start}
  - {id: total, type: action, code: 'context["final_total"] = context["total"] * 0.9'}
  - id: check
    type: action
    code: |
      if context["final_total"] > context["limit"]:
          raise ValueError("final_total %s is over the limit %s" % (context["final_total"], context["limit"]))
      context["approved"] = "v1"
  - {id: done, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: check}
  - {from: check, to: done}
`

// rerunDoc is the answer to a rerun: 202 (status running) or, with ?wait,
// 200 with the completion's members.
type rerunDoc struct {
	ExecutionID string          `json:"execution_id"`
	Status      string          `json:"status"`
	RerunOf     string          `json:"rerun_of"`
	From        string          `json:"from"`
	CarriedOver []string        `json:"carried_over"`
	Context     json.RawMessage `json:"context"`
	Path        []string        `json:"path"`
	Links       struct {
		Self string `json:"self"`
	} `json:"links"`
}

// TestRerun: POST /v1/executions/{id}/rerun refuses what cannot be rerun,
// naming why, and starts a rerun the engine runs from the node asked for,
// the nodes before it carried over; both executions' documents show the
// link.
func TestRerun(t *testing.T) {
	router := openapiRouter(t)
	post := func(t *testing.T, key, id, query, body string, header map[string]string) response {
		t.Helper()
		req := request{method: "POST", path: "/v1/executions/" + id + "/rerun" + query, key: key, body: body, header: header}
		resp := h.do(t, h.url, req)
		documented(t, router, req, resp)
		return resp
	}
	get := func(t *testing.T, id string) (map[string]any, []map[string]any) {
		t.Helper()
		req := request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]}
		resp := h.do(t, h.url, req)
		documented(t, router, req, resp)
		var v struct {
			Execution map[string]any   `json:"execution"`
			Nodes     []map[string]any `json:"nodes"`
		}
		decode(t, resp, http.StatusOK, &v)
		return v.Execution, v.Nodes
	}
	start := func(t *testing.T, body string) string {
		t.Helper()
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: body})
		var c completionDoc
		decode(t, resp, http.StatusOK, &c)
		return c.ExecutionID
	}
	// The original fails at check: 1350.0 is over the limit 1000.
	orig := start(t, startBody(`"definition": `+jsonString(rerunYAML), `"context": {"total": 1500, "limit": 1000}`))
	// A succeeded execution: no failed node to start from by default.
	fine := start(t, startBody(`"definition": `+jsonString(rerunYAML), `"context": {"total": 10, "limit": 1000}`))
	h.waitAudit(t)

	t.Run("refused", func(t *testing.T) {
		commands := h.lastCommand(t)
		ids := steeredStates(t, time.Now().Add(time.Hour))
		for _, c := range []struct {
			name, key, id, body string
			status              int
			typ                 string
			want                []string // in the detail
			field               string
		}{
			{"unknown", "writer", "no-such-execution", "", 404, gateway.TypeNotFound, []string{"no-such-execution"}, ""},
			{"reader", "reader", orig, "", 403, gateway.TypeForbidden, nil, ""},
			{"signaller", "signaller", orig, "", 403, gateway.TypeForbidden, nil, ""},
			{"from not a string", "writer", orig, `{"from": 5}`, 400, gateway.TypeInvalidRequest, nil, "from"},
			{"context not an object", "writer", orig, `{"context": [1]}`, 400, gateway.TypeInvalidRequest, nil, "context"},
			{"unknown revision", "writer", orig, `{"revision": "latest"}`, 400, gateway.TypeInvalidRequest, nil, "revision"},
			{"unknown field", "writer", orig, `{"node": "check"}`, 400, gateway.TypeInvalidRequest, nil, "node"},
			{"never reached", "writer", orig, `{"from": "nowhere"}`, 422, gateway.TypeCannotRerun,
				[]string{`never reached node "nowhere"`, "start, total, check"}, "from"},
			{"no failed node", "writer", fine, "", 422, gateway.TypeCannotRerun, []string{"no failed node"}, "from"},
			{"newest of a workflow not registered", "writer", orig, `{"revision": "newest"}`, 422, gateway.TypeCannotRerun,
				[]string{`workflow "rerun-limit" is not registered`}, "revision"},
			{"running", "writer", ids["waiting"], "", 409, gateway.TypeExecutionRunning, []string{"is running"}, ""},
			{"ended, not recorded yet", "writer", ids["succeeded"], "", 409, gateway.TypeExecutionRunning,
				[]string{"ended succeeded", "not recorded its end yet"}, ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				resp := post(t, h.key[c.key], c.id, "", c.body, nil)
				p := problem(t, resp, c.status, c.typ)
				for _, w := range c.want {
					if !strings.Contains(p.Detail, w) {
						t.Errorf("detail %q does not say %q", p.Detail, w)
					}
				}
				if c.field != "" && !slices.Contains(p.fields(), c.field) {
					t.Errorf("fields %v, want %s", p.fields(), c.field)
				}
				if got, want := resp.header.Get("Retry-After"), map[bool]string{true: "2"}[c.name == "ended, not recorded yet"]; got != want {
					t.Errorf("Retry-After %q, want %q", got, want)
				}
			})
		}
		if got := h.lastCommand(t); got != commands {
			t.Errorf("a command was published for a refused rerun")
		}
	})

	t.Run("from the failed node", func(t *testing.T) {
		resp := post(t, h.key["writer"], orig, "", `{"context": {"limit": 2000}}`, nil)
		var a rerunDoc
		decode(t, resp, http.StatusAccepted, &a)
		if a.ExecutionID == orig || a.Status != "running" || a.RerunOf != orig || a.From != "check" ||
			!slices.Equal(a.CarriedOver, []string{"start", "total"}) || a.Links.Self != "/v1/executions/"+a.ExecutionID ||
			resp.header.Get("Location") != a.Links.Self {
			t.Fatalf("answer %s", resp.body)
		}
		wc := h.awaitCompletion(t, a.ExecutionID)
		out := jsonvalue.MustObject(wc.GetContext())
		if wc.GetStatus() != "succeeded" || wc.GetRerunOf() != orig || !slices.Equal(wc.GetPath(), []string{"start", "total", "check", "done"}) ||
			string(out["limit"]) != "2000" || string(out["final_total"]) != "1350.0" || string(out["approved"]) != `"v1"` {
			t.Fatalf("completion: %s, rerun of %q, path %v, context %s", wc.GetStatus(), wc.GetRerunOf(), wc.GetPath(), out.Bytes())
		}
		h.waitAudit(t)
		exec, nodes := get(t, a.ExecutionID)
		if exec["rerun_of"] != orig || exec["rerun_from"] != "check" {
			t.Errorf("the rerun's document: rerun_of %v, rerun_from %v", exec["rerun_of"], exec["rerun_from"])
		}
		carried := map[string]any{}
		for _, n := range nodes {
			if n["status"] == "carried_over" {
				carried[n["node_id"].(string)] = n["carried_over_from"]
			}
		}
		if len(carried) != 2 || carried["start"] != orig || carried["total"] != orig {
			t.Errorf("carried over visits %v, want start and total from %s", carried, orig)
		}
		origDoc, _ := get(t, orig)
		if reruns, _ := origDoc["reruns"].([]any); !slices.Contains(reruns, any(a.ExecutionID)) {
			t.Errorf("the original's reruns %v do not list %s", origDoc["reruns"], a.ExecutionID)
		}
	})

	t.Run("from a node, waiting", func(t *testing.T) {
		resp := post(t, h.key["admin"], orig, "?wait=60s", `{"from": "total", "context": {"total": 100}}`, nil)
		var c rerunDoc
		decode(t, resp, http.StatusOK, &c)
		out, err := jsonvalue.ParseObject(c.Context)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != "succeeded" || c.RerunOf != orig || c.From != "total" || !slices.Equal(c.CarriedOver, []string{"start"}) ||
			string(out["final_total"]) != "90.0" {
			t.Errorf("answer %s", resp.body)
		}
	})

	t.Run("the newest revision", func(t *testing.T) {
		h.register(t, strings.Replace(rerunYAML, `"v1"`, `"v2"`, 1))
		resp := post(t, h.key["writer"], orig, "?wait=60s", `{"revision": "newest", "context": {"limit": 2000}}`, nil)
		var c rerunDoc
		decode(t, resp, http.StatusOK, &c)
		out, err := jsonvalue.ParseObject(c.Context)
		if err != nil {
			t.Fatal(err)
		}
		if c.Status != "succeeded" || string(out["approved"]) != `"v2"` {
			t.Errorf("answer %s; want the newest registration's check to run", resp.body)
		}
	})

	t.Run("Idempotency-Key", func(t *testing.T) {
		send := func() string {
			resp := post(t, h.key["writer"], orig, "", `{"context": {"limit": 3000}}`, map[string]string{"Idempotency-Key": "fix-limit"})
			var a rerunDoc
			decode(t, resp, http.StatusAccepted, &a)
			return a.ExecutionID
		}
		first := send()
		if again := send(); again != first {
			t.Fatalf("a retry with the same Idempotency-Key started %s, then %s", first, again)
		}
		if wc := h.awaitCompletion(t, first); wc.GetStatus() != "succeeded" {
			t.Errorf("rerun %s: %s", first, wc.GetStatus())
		}
		if n := h.startedEvents(t, first); n != 1 {
			t.Errorf("the rerun started %d times, want once", n)
		}
	})
}
