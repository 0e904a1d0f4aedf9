package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// executionEvent is an event of GET /v1/executions/events, its data read.
type executionEvent struct {
	sseEvent
	item executionItem
}

type executionsStream struct {
	body *bufio.Reader
}

// openExecutionsStream opens GET /v1/executions/events?query as a reader;
// it ends with ctx.
func openExecutionsStream(t *testing.T, ctx context.Context, query url.Values, lastEventID string) *executionsStream {
	t.Helper()
	resp := openSSE(t, ctx, h.url+"/v1/executions/events?"+query.Encode(), h.key["reader"], lastEventID)
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &executionsStream{body: bufio.NewReader(resp.Body)}
}

// readUntil reads every event up to the workflow.completed of execution id.
func (s *executionsStream) readUntil(t *testing.T, id string) []executionEvent {
	t.Helper()
	var out []executionEvent
	for {
		e, ok := readEvent(t, s.body)
		if !ok {
			t.Fatalf("the stream ended before execution %s completed; it had %v", id, out)
		}
		ev := executionEvent{sseEvent: e}
		if err := json.Unmarshal([]byte(e.data), &ev.item); err != nil {
			t.Fatalf("%s data is not an execution: %s", e.event, e.data)
		}
		out = append(out, ev)
		if e.event == "workflow.completed" && ev.item.ExecutionID == id {
			return out
		}
	}
}

// of keeps the events of the executions ids, named event:execution.
func of(events []executionEvent, ids ...string) (kept []executionEvent, names []string) {
	for _, e := range events {
		if slices.Contains(ids, e.item.ExecutionID) {
			kept = append(kept, e)
			names = append(names, e.event+":"+e.item.ExecutionID)
		}
	}
	return kept, names
}

// TestExecutionsStream follows every execution's start and end over SSE:
// a failing and a succeeding run, one after the other, as a list sees
// them; a stream of one workflow; a reconnection with Last-Event-ID.
func TestExecutionsStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	suffix := uuid.NewString()[:8]
	okName, failName := "live-ok-"+suffix, "live-failing-"+suffix
	// An execution that ended before the streams open is not in them.
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"],
		body: startBody(`"definition": ` + chain("live-earlier-"+suffix, `context["a"] = 1`))})
	decode(t, resp, http.StatusOK, &completionDoc{})
	info, err := h.bus.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	before := info.CachedInfo().State.LastSeq

	all := openExecutionsStream(t, ctx, nil, "")
	one := openExecutionsStream(t, ctx, url.Values{"workflow": {okName}}, "")
	failing := h.startRunning(t, failName, `raise ValueError("no invoice")`)
	live := all.readUntil(t, failing)
	ok := h.startRunning(t, okName, `context["y"] = context["x"] + 1`)
	live = append(live, all.readUntil(t, ok)...)

	// New events only, in the order of their ids.
	prev := before
	for _, e := range live {
		n, err := strconv.ParseUint(e.id, 10, 64)
		if err != nil || n <= prev {
			t.Fatalf("event ids %v: want increasing integers after %d, the stream's last before it opened", live, before)
		}
		prev = n
	}
	ours, names := of(live, failing, ok)
	want := []string{"workflow.started:" + failing, "workflow.completed:" + failing, "workflow.started:" + ok, "workflow.completed:" + ok}
	if !slices.Equal(names, want) {
		t.Fatalf("events %v\nwant %v", names, want)
	}
	for i, c := range []struct{ name, status, err string }{
		{failName, "running", ""}, {failName, "failed", "no invoice"}, {okName, "running", ""}, {okName, "succeeded", ""},
	} {
		it := ours[i].item
		if it.WorkflowName != c.name || it.Status != c.status || !strings.Contains(it.Error, c.err) || (c.err == "") != (it.Error == "") ||
			it.StartedAt == nil || it.Links.Self != "/v1/executions/"+it.ExecutionID {
			t.Errorf("%s data %s: want workflow %s, status %s, error with %q", ours[i].event, ours[i].data, c.name, c.status, c.err)
		}
		if done := it.CompletedAt != nil; done != (c.status != "running") ||
			done && (it.CompletedAt.Before(*it.StartedAt) || it.DurationMs != it.CompletedAt.Sub(*it.StartedAt).Milliseconds()) {
			t.Errorf("%s data %s: completed_at and duration_ms", ours[i].event, ours[i].data)
		}
	}

	// A completion's data is the execution as GET /v1/executions lists it
	// once the audit service has recorded it (times as the store keeps
	// them, to the millisecond).
	h.waitAudit(t)
	for _, e := range []executionEvent{ours[1], ours[3]} {
		page := h.list(t, url.Values{"workflow": {e.item.WorkflowName}})
		streamed := e.item
		started, completed := streamed.StartedAt.Truncate(time.Millisecond), streamed.CompletedAt.Truncate(time.Millisecond)
		streamed.StartedAt, streamed.CompletedAt = &started, &completed
		if len(page.Executions) != 1 || !equalItems(page.Executions[0], streamed) {
			t.Errorf("streamed %v\nlisted %v", streamed, page.Executions)
		}
	}

	// A stream of one workflow shows its executions only, though the
	// failing one's events came first.
	if got, names := of(one.readUntil(t, ok), failing, ok); !slices.Equal(names, want[2:]) || !slices.EqualFunc(got, ours[2:], sameEvent) {
		t.Errorf("?workflow=%s: %v\nwant %v", okName, names, want[2:])
	}

	// A client that reconnects with Last-Event-ID gets what followed it.
	resumed := openExecutionsStream(t, ctx, nil, ours[0].id).readUntil(t, ok)
	if got, names := of(resumed, failing, ok); !slices.EqualFunc(got, ours[1:], sameEvent) {
		t.Errorf("after Last-Event-ID %s: %v\nwant %v", ours[0].id, names, want[1:])
	}
}

func sameEvent(a, b executionEvent) bool { return a.sseEvent == b.sseEvent }

func equalItems(a, b executionItem) bool {
	sameTime := func(x, y *time.Time) bool { return (x == nil) == (y == nil) && (x == nil || x.Equal(*y)) }
	return sameTime(a.StartedAt, b.StartedAt) && sameTime(a.CompletedAt, b.CompletedAt) &&
		a.ExecutionID == b.ExecutionID && a.WorkflowName == b.WorkflowName && a.Status == b.Status &&
		a.Error == b.Error && a.DurationMs == b.DurationMs && a.Links == b.Links
}

func TestExecutionsStreamErrors(t *testing.T) {
	tests := []struct {
		name   string
		req    request
		status int
		typ    string
		fields []string
	}{
		{"an unknown parameter", request{path: "?workflow=a&status=running", key: h.key["reader"]},
			http.StatusBadRequest, gateway.TypeInvalidRequest, []string{"status"}},
		{"workflow twice", request{path: "?workflow=a&workflow=b", key: h.key["reader"]},
			http.StatusBadRequest, gateway.TypeInvalidRequest, []string{"workflow"}},
		{"a Last-Event-ID that is not one", request{key: h.key["reader"], header: map[string]string{"Last-Event-ID": "seven"}},
			http.StatusBadRequest, gateway.TypeInvalidRequest, []string{"Last-Event-ID"}},
		{"a key without executions:read", request{key: h.key["writer"]}, http.StatusForbidden, gateway.TypeForbidden, nil},
		{"no key", request{}, http.StatusUnauthorized, gateway.TypeUnauthorized, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.req.method, tt.req.path = "GET", "/v1/executions/events"+tt.req.path
			p := problem(t, h.do(t, h.url, tt.req), tt.status, tt.typ)
			if !slices.Equal(p.fields(), tt.fields) {
				t.Errorf("fields %v, want %v", p.fields(), tt.fields)
			}
		})
	}
}
