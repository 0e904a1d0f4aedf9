package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/services/gateway/gateway"
)

// executionItem is one execution of GET /v1/executions, and the data of an
// event of GET /v1/executions/events.
type executionItem struct {
	ExecutionID  string     `json:"execution_id"`
	WorkflowName string     `json:"workflow_name"`
	Status       string     `json:"status"`
	Error        string     `json:"error"`
	StartedAt    *time.Time `json:"started_at"`
	CompletedAt  *time.Time `json:"completed_at"`
	DurationMs   int64      `json:"duration_ms"`
	CostUSD      *float64   `json:"cost_usd"`
	ModelCalls   *int       `json:"model_calls"`
	Cursor       string     `json:"cursor"`
	Links        struct {
		Self string `json:"self"`
	} `json:"links"`
}

func (e executionItem) String() string {
	b, _ := json.Marshal(e)
	return string(b)
}

type listDoc struct {
	Executions []executionItem `json:"executions"`
	NextCursor string          `json:"next_cursor"`
}

func (h *harness) list(t *testing.T, q url.Values) listDoc {
	t.Helper()
	resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions?" + q.Encode(), key: h.key["reader"]})
	var l listDoc
	decode(t, resp, http.StatusOK, &l)
	return l
}

func (l listDoc) ids() []string {
	out := []string{}
	for _, e := range l.Executions {
		out = append(out, e.ExecutionID)
	}
	return out
}

func TestListExecutions(t *testing.T) {
	suffix := uuid.NewString()[:8]
	wfA, wfB := "list-a-"+suffix, "list-b-"+suffix
	run := func(body string) string {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: body})
		var c completionDoc
		decode(t, resp, http.StatusOK, &c)
		return c.ExecutionID
	}
	// Started one after another, so their start times are in this order.
	var a []string
	for i := range 5 {
		a = append(a, run(startBody(`"definition": `+chain(wfA, `context["i"] = 1`), fmt.Sprintf(`"context": {"n": %d}`, i))))
	}
	failed := run(startBody(`"definition": ` + chain(wfA, `raise ValueError("no invoice")`)))
	a = append(a, failed)
	b := []string{run(startBody(`"definition": ` + chain(wfB, `context["b"] = 1`)))}
	b = append(b, run(startBody(`"definition": `+chain(wfB, `context["b"] = 2`))))
	h.waitAudit(t)
	slices.Reverse(a)
	slices.Reverse(b)

	t.Run("pages of two, newest first", func(t *testing.T) {
		var got []string
		q := url.Values{"workflow": {wfA}, "limit": {"2"}}
		for pages := 1; ; pages++ {
			l := h.list(t, q)
			if len(l.Executions) != 2 {
				t.Fatalf("page %d has %d executions, want 2", pages, len(l.Executions))
			}
			for _, e := range l.Executions {
				if e.WorkflowName != wfA || e.Links.Self != "/v1/executions/"+e.ExecutionID || e.StartedAt == nil {
					t.Errorf("item %+v", e)
				}
			}
			got = append(got, l.ids()...)
			// Each item's cursor is where a page after it starts.
			if l.NextCursor != "" && l.Executions[1].Cursor != l.NextCursor {
				t.Errorf("page %d: the last item's cursor %q, next_cursor %q", pages, l.Executions[1].Cursor, l.NextCursor)
			}
			if l.Executions[0].Cursor == "" || l.Executions[0].Cursor == l.Executions[1].Cursor {
				t.Errorf("page %d: item cursors %q and %q", pages, l.Executions[0].Cursor, l.Executions[1].Cursor)
			}
			if pages == 1 {
				after := h.list(t, url.Values{"workflow": {wfA}, "limit": {"2"}, "cursor": {l.Executions[0].Cursor}}).ids()
				if want := []string{a[1], a[2]}; !slices.Equal(after, want) {
					t.Errorf("the page after the first item's cursor lists %v, want %v", after, want)
				}
			}
			if l.NextCursor == "" {
				if pages != 3 {
					t.Errorf("%d pages, want 3", pages)
				}
				break
			}
			if pages == 3 {
				t.Fatalf("a next_cursor after the last page")
			}
			q.Set("cursor", l.NextCursor)
		}
		if !slices.Equal(got, a) {
			t.Errorf("listed %v, want %v", got, a)
		}
	})

	all := h.list(t, url.Values{"workflow": {wfA}})
	third := all.Executions[2].StartedAt.Format(time.RFC3339Nano)
	tests := []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"status failed", url.Values{"workflow": {wfA}, "status": {"failed"}}, []string{failed}},
		{"status succeeded", url.Values{"workflow": {wfA}, "status": {"succeeded"}}, a[1:]},
		{"another workflow", url.Values{"workflow": {wfB}}, b},
		{"since (inclusive)", url.Values{"workflow": {wfA}, "since": {third}}, a[:3]},
		{"until (exclusive)", url.Values{"workflow": {wfA}, "until": {third}}, a[3:]},
		{"since and until", url.Values{"workflow": {wfA}, "since": {all.Executions[4].StartedAt.Format(time.RFC3339Nano)}, "until": {third}}, a[3:5]},
		{"limit", url.Values{"workflow": {wfA}, "limit": {"1"}}, a[:1]},
		{"no such workflow", url.Values{"workflow": {"none-" + suffix}}, []string{}},
		{"a whole id", url.Values{"id": {a[2]}}, a[2:3]},
		{"an id's first characters", url.Values{"id": {a[2][:13]}}, a[2:3]},
		{"an id prefix and a status", url.Values{"id": {a[2][:13]}, "status": {"failed"}}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := h.list(t, tt.query).ids(); !slices.Equal(got, tt.want) {
				t.Errorf("listed %v, want %v", got, tt.want)
			}
		})
	}
	if all.Executions[0].Status != "failed" || all.Executions[0].Error == "" {
		t.Errorf("the failed execution lists as %+v", all.Executions[0])
	}
	for _, e := range all.Executions {
		if e.CostUSD == nil || *e.CostUSD != 0 || e.ModelCalls == nil || *e.ModelCalls != 0 {
			t.Errorf("a code workflow's execution lists cost_usd and model_calls as %v and %v, want 0 and 0", e.CostUSD, e.ModelCalls)
		}
	}
	// Without a workflow filter: every execution, this test's newest first.
	if got := h.list(t, url.Values{"limit": {"2"}}).ids(); !slices.Equal(got, b) {
		t.Errorf("unfiltered first page %v, want %v", got, b)
	}
}

func TestListBadFilters(t *testing.T) {
	tests := []struct {
		query string
		field string
	}{
		{"limit=0", "limit"},
		{"limit=501", "limit"},
		{"limit=ten", "limit"},
		{"status=done", "status"},
		{"since=yesterday", "since"},
		{"until=2025-13-01T00:00:00Z", "until"},
		{"since=2025-03-02T00:00:00Z&until=2025-03-01T00:00:00Z", "until"},
		{"cursor=not-a-cursor", "cursor"},
		{"workflow=a&workflow=b", "workflow"},
		{"stauts=failed", "stauts"},
		{"id=", "id"},
		{"id=a%20b", "id"},
		{"id=a&id=b", "id"},
		{"parent=", "parent"},
		{"parent=a%20b", "parent"},
	}
	for _, tt := range tests {
		t.Run(tt.query, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions?" + tt.query, key: h.key["reader"]})
			p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
			if !slices.Equal(p.fields(), []string{tt.field}) {
				t.Errorf("fields %v, want [%s]; %+v", p.fields(), tt.field, p)
			}
		})
	}
	// Every parameter at fault is named at once.
	resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions?limit=0&status=done&since=never", key: h.key["reader"]})
	p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
	if got := p.fields(); !slices.Equal(got, []string{"status", "since", "limit"}) {
		t.Errorf("fields %v, want status, since and limit", got)
	}
}
