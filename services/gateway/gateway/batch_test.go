package gateway_test

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/services/gateway/gateway"
)

// listedLinks are the members of a listed execution that link it to the
// execution that started it and flag the items that failed in it.
type listedLinks struct {
	Executions []struct {
		ExecutionID       string `json:"execution_id"`
		Status            string `json:"status"`
		ParentExecutionID string `json:"parent_execution_id"`
		ParentNode        string `json:"parent_node"`
		ItemsFailed       int    `json:"items_failed"`
	} `json:"executions"`
}

type totalsDoc struct {
	Executions int64     `json:"executions"`
	CostUSD    float64   `json:"cost_usd"`
	ModelCalls int64     `json:"model_calls"`
	AsOf       time.Time `json:"as_of"`
}

// TestListLinksAndTotals: a sub-workflow's child lists its parent and the
// node that started it, and ?parent= lists a parent's children; an execution whose map collected failed items
// lists how many; GET /v1/execution-totals counts what the filters select
// over every page.
func TestListLinksAndTotals(t *testing.T) {
	suffix := uuid.NewString()[:8]
	child, parent := "links-child-"+suffix, "links-parent-"+suffix
	h.register(t, chain(child, `context["c"] = 1`))
	h.register(t, fmt.Sprintf(`{"name": %q, "nodes": [
		{"id": "start", "type": "start"},
		{"id": "items", "type": "action", "code": "context['orders'] = [1, 2, 3, 4, 5]"},
		{"id": "each", "type": "map", "items": "orders", "on_item_failure": "collect",
		 "code": "if context['item'] %% 2:\n    raise ValueError('odd order')\ncontext['result'] = context['item']"},
		{"id": "sub", "type": "workflow", "workflow": %q},
		{"id": "end", "type": "end"}],
		"edges": [{"from": "start", "to": "items"}, {"from": "items", "to": "each"}, {"from": "each", "to": "sub"}, {"from": "sub", "to": "end"}]}`,
		parent, child))
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: fmt.Sprintf(`{"workflow": %q}`, parent)})
	var c completionDoc
	decode(t, resp, http.StatusOK, &c)
	h.waitAudit(t)

	var p listedLinks
	decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/executions?workflow=" + parent, key: h.key["reader"]}), http.StatusOK, &p)
	if len(p.Executions) != 1 || p.Executions[0].ExecutionID != c.ExecutionID || p.Executions[0].Status != "succeeded" ||
		p.Executions[0].ItemsFailed != 3 || p.Executions[0].ParentExecutionID != "" {
		t.Errorf("the parent lists as %+v; want succeeded with items_failed 3 (items 1, 3 and 5) and no parent", p.Executions)
	}
	var ch listedLinks
	decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/executions?workflow=" + child, key: h.key["reader"]}), http.StatusOK, &ch)
	if len(ch.Executions) != 1 || ch.Executions[0].ParentExecutionID != c.ExecutionID || ch.Executions[0].ParentNode != "sub" ||
		ch.Executions[0].ItemsFailed != 0 {
		t.Errorf("the child lists as %+v; want parent %s, node sub, no failed items", ch.Executions, c.ExecutionID)
	}
	// The parent's children by parent: the child, and none of the child's.
	var kids listedLinks
	decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/executions?parent=" + c.ExecutionID, key: h.key["reader"]}), http.StatusOK, &kids)
	if len(kids.Executions) != 1 || len(ch.Executions) != 1 || kids.Executions[0].ExecutionID != ch.Executions[0].ExecutionID {
		t.Errorf("?parent=%s lists %+v; want the child %+v", c.ExecutionID, kids.Executions, ch.Executions)
	}
	decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/executions?parent=" + ch.Executions[0].ExecutionID, key: h.key["reader"]}), http.StatusOK, &kids)
	if len(kids.Executions) != 0 {
		t.Errorf("the child, which started none, has children %+v", kids.Executions)
	}

	totals := func(q url.Values) totalsDoc {
		t.Helper()
		var d totalsDoc
		decode(t, h.do(t, h.url, request{method: "GET", path: "/v1/execution-totals?" + q.Encode(), key: h.key["reader"]}), http.StatusOK, &d)
		return d
	}
	tests := []struct {
		name  string
		query url.Values
		want  int64
	}{
		{"one workflow", url.Values{"workflow": {parent}}, 1},
		// A child's id begins with its parent's.
		{"an id prefix", url.Values{"id": {c.ExecutionID[:13]}}, 2},
		{"a parent's children", url.Values{"parent": {c.ExecutionID}}, 1},
		{"a status none has", url.Values{"workflow": {child}, "status": {"failed"}}, 0},
		{"until before them", url.Values{"workflow": {parent}, "until": {"2001-01-01T00:00:00Z"}}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := totals(tt.query); got.Executions != tt.want || got.CostUSD != 0 || got.ModelCalls != 0 {
				t.Errorf("totals %+v, want %d executions costing nothing", got, tt.want)
			}
		})
	}
	t.Run("counted once for requests close together", func(t *testing.T) {
		q := url.Values{"workflow": {parent}}
		first, again := totals(q), totals(q)
		if first.AsOf.IsZero() || !again.AsOf.Equal(first.AsOf) || again.Executions != first.Executions {
			t.Errorf("totals %+v, then %+v; want the same count, as of the same time", first, again)
		}
	})
	t.Run("every page", func(t *testing.T) {
		// The total is of every execution, not of a page: as many as the
		// pages of 500 list.
		q := url.Values{"limit": {"500"}}
		want := totals(url.Values{}).Executions
		var listed int64
		for {
			l := h.list(t, q)
			listed += int64(len(l.Executions))
			if l.NextCursor == "" {
				break
			}
			q.Set("cursor", l.NextCursor)
		}
		// Other tests add executions meanwhile; none are deleted.
		if listed < want || want < 2 {
			t.Errorf("totals say %d executions, the pages list %d", want, listed)
		}
	})
	for _, q := range []string{"limit=5", "cursor=x", "status=done"} {
		t.Run("refuses "+q, func(t *testing.T) {
			problem(t, h.do(t, h.url, request{method: "GET", path: "/v1/execution-totals?" + q, key: h.key["reader"]}), http.StatusBadRequest, gateway.TypeInvalidRequest)
		})
	}
}

type batchDoc struct {
	Action   string `json:"action"`
	Selected int    `json:"selected"`
	Done     int    `json:"done"`
	Refused  int    `json:"refused"`
	Results  []struct {
		ExecutionID string `json:"execution_id"`
		Outcome     string `json:"outcome"`
		Detail      string `json:"detail"`
		RerunID     string `json:"rerun_id"`
	} `json:"results"`
}

// TestBatchExecutions: POST /v1/executions/batch cancels the executions it
// names (one that ended is refused, saying why, and the others go on),
// reruns those a filter selects, and refuses a body at fault naming each
// field.
func TestBatchExecutions(t *testing.T) {
	suffix := uuid.NewString()[:8]
	waiting, failing := "batch-wait-"+suffix, "batch-fail-"+suffix
	h.register(t, fmt.Sprintf(`name: %s
nodes:
  - {id: start, type: start}
  - {id: hold, type: wait, signal: go, timeout: 1h}
  - {id: end, type: end}
edges:
  - {from: start, to: hold}
  - {from: hold, to: end}
`, waiting))
	h.register(t, chain(failing, `raise ValueError("no invoice")`))
	start := func(wf, wait string) string {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions" + wait, key: h.key["writer"], body: fmt.Sprintf(`{"workflow": %q}`, wf)})
		var c completionDoc
		if wait == "" {
			decode(t, resp, http.StatusAccepted, &c)
		} else {
			decode(t, resp, http.StatusOK, &c)
		}
		return c.ExecutionID
	}
	held := []string{start(waiting, ""), start(waiting, "")}
	ended := start(failing, "?wait=60s")
	failed2 := start(failing, "?wait=60s")
	// The engine holds both at their wait node.
	for _, id := range held {
		waitStatus(t, id, func(s string) bool { return s == "running" })
	}
	h.waitAudit(t)

	batch := func(key, body string) batchDoc {
		t.Helper()
		var d batchDoc
		decode(t, h.do(t, h.url, request{method: "POST", path: "/v1/executions/batch", key: key, body: body}), http.StatusOK, &d)
		return d
	}
	t.Run("cancel by ids", func(t *testing.T) {
		d := batch(h.key["writer"], fmt.Sprintf(`{"action": "cancel", "ids": [%q, %q, %q], "reason": "batch test"}`, held[0], ended, held[1]))
		if d.Action != "cancel" || d.Selected != 3 || d.Done != 2 || d.Refused != 1 || len(d.Results) != 3 {
			t.Fatalf("answer %+v; want 3 selected, 2 cancelling, 1 refused", d)
		}
		if r := d.Results[1]; r.ExecutionID != ended || r.Outcome != "refused" || r.Detail == "" {
			t.Errorf("the ended execution: %+v; want refused, saying why", r)
		}
		for _, i := range []int{0, 2} {
			if r := d.Results[i]; r.Outcome != "cancelling" {
				t.Errorf("%+v; want cancelling", r)
			}
		}
		for _, id := range held {
			waitStatus(t, id, func(s string) bool { return s == "cancelled" })
		}
	})
	t.Run("rerun by filter", func(t *testing.T) {
		h.waitAudit(t)
		d := batch(h.key["writer"], fmt.Sprintf(`{"action": "rerun", "filter": {"workflow": %q, "status": "failed"}}`, failing))
		if d.Selected != 2 || d.Done != 2 || d.Refused != 0 {
			t.Fatalf("answer %+v; want both failed executions rerun", d)
		}
		got := []string{d.Results[0].ExecutionID, d.Results[1].ExecutionID}
		if !slices.Equal(got, []string{failed2, ended}) {
			t.Errorf("rerun %v, want %v (newest first)", got, []string{failed2, ended})
		}
		for _, r := range d.Results {
			if r.Outcome != "rerun" || r.RerunID == "" {
				t.Errorf("%+v; want rerun with its id", r)
			}
			waitStatus(t, r.RerunID, func(s string) bool { return s == "failed" })
		}
	})
	t.Run("a reader may not", func(t *testing.T) {
		problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/executions/batch", key: h.key["reader"], body: `{"action": "cancel", "ids": ["x"]}`}),
			http.StatusForbidden, gateway.TypeForbidden)
	})
	bad := []struct {
		name, body string
		fields     []string
	}{
		{"no action", `{"ids": ["a"]}`, []string{"action"}},
		{"an unknown action", `{"action": "delete", "ids": ["a"]}`, []string{"action"}},
		{"neither ids nor filter", `{"action": "cancel"}`, []string{"ids"}},
		{"both", `{"action": "cancel", "ids": ["a"], "filter": {}}`, []string{"filter"}},
		{"no ids", `{"action": "cancel", "ids": []}`, []string{"ids"}},
		{"an id twice and one no id", `{"action": "cancel", "ids": ["a", "a", "b c"]}`, []string{"ids[1]", "ids[2]"}},
		{"a filter at fault", `{"action": "rerun", "filter": {"status": "done", "colour": "red"}}`, []string{"filter.colour", "filter.status"}},
		{"a rerun with a reason", `{"action": "rerun", "ids": ["a"], "reason": "why"}`, []string{"reason"}},
		{"an unknown field", `{"action": "cancel", "ids": ["a"], "force": true}`, []string{"force"}},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			p := problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/executions/batch", key: h.key["writer"], body: tt.body}), http.StatusBadRequest, gateway.TypeInvalidRequest)
			if got := p.fields(); !slices.Equal(got, tt.fields) {
				t.Errorf("fields %v, want %v; %+v", got, tt.fields, p)
			}
		})
	}
}

// waitStatus waits until GET /v1/executions/{id} says a status ok takes.
func waitStatus(t *testing.T, id string, ok func(string) bool) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]})
		if resp.status != http.StatusOK {
			continue
		}
		var v struct {
			Execution struct {
				Status string `json:"status"`
			} `json:"execution"`
		}
		decode(t, resp, http.StatusOK, &v)
		if last = v.Execution.Status; ok(last) {
			return
		}
	}
	t.Fatalf("execution %s is %q after a minute", id, last)
}
