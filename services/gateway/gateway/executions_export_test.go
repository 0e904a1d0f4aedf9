package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// exportLines reads GET /v1/executions/export?query: 200, newline-delimited
// JSON; its lines, each with its newline.
func (h *harness) exportLines(t *testing.T, base string, q url.Values) []string {
	t.Helper()
	resp := h.do(t, base, request{method: "GET", path: "/v1/executions/export?" + q.Encode(), key: h.key["reader"]})
	if resp.status != http.StatusOK || resp.header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("export %s: status %d, Content-Type %q: %s", q.Encode(), resp.status, resp.header.Get("Content-Type"), resp.body)
	}
	lines := strings.SplitAfter(string(resp.body), "\n")
	if last := lines[len(lines)-1]; last != "" {
		t.Fatalf("export %s: the last line does not end: %q", q.Encode(), last)
	}
	return lines[:len(lines)-1]
}

// lineID is the execution id of a line of an export.
func lineID(t *testing.T, line string) string {
	t.Helper()
	var c chainstore.ExecutionChain
	if err := json.Unmarshal([]byte(line), &c); err != nil || c.Execution == nil {
		t.Fatalf("a line of the export is not an execution (%v): %s", err, line)
	}
	return c.Execution.ExecutionID
}

// TestExportExecutions: GET /v1/executions/export answers every execution
// the query selects, whole (what GET /v1/executions/{id} answers, on one
// line), newest first; and refuses a bad query naming the parameter.
func TestExportExecutions(t *testing.T) {
	suffix := uuid.NewString()[:8]
	wfA, wfB := "export-a-"+suffix, "export-b-"+suffix
	run := func(body string) string {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"], body: body})
		var c completionDoc
		decode(t, resp, http.StatusOK, &c)
		return c.ExecutionID
	}
	// One after another, so that they start in this order.
	a := []string{run(startBody(`"definition": `+chain(wfA, `context["total"] = context["price"] * 2`), `"context": `+exactContext))}
	b := run(startBody(`"definition": ` + chain(wfB, `context["b"] = 1`)))
	a = append(a, run(startBody(`"definition": `+chain(wfA, `raise ValueError("no invoice")`), `"context": `+exactContext)))
	h.waitAudit(t)

	lines := h.exportLines(t, h.url, url.Values{"workflow": {wfA}})
	if len(lines) != 2 || lineID(t, lines[0]) != a[1] || lineID(t, lines[1]) != a[0] {
		t.Fatalf("export of %s: %d lines %q, want %v newest first", wfA, len(lines), lines, a)
	}
	for i, id := range []string{a[1], a[0]} {
		got := h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]})
		if got.status != http.StatusOK || string(got.body) != lines[i] {
			t.Errorf("the export's line of %s is not what GET /v1/executions/%s answers:\n%s\nwant\n%s", id, id, lines[i], got.body)
		}
	}
	if !strings.Contains(lines[1], `"price":150.0`) || !strings.Contains(lines[1], `"id":9007199254740993`) || !strings.Contains(lines[1], `"<é>"`) {
		t.Errorf("the export's values are not as sent: %s", lines[1])
	}

	startedAt := func(id string) string {
		t.Helper()
		v, _ := h.get(t, id)
		return v.Execution.StartedAt.Format(time.RFC3339Nano)
	}
	for _, tt := range []struct {
		name  string
		query url.Values
		want  []string
	}{
		{"since (inclusive)", url.Values{"workflow": {wfA}, "since": {startedAt(a[1])}}, []string{a[1]}},
		{"until (exclusive)", url.Values{"workflow": {wfA}, "until": {startedAt(a[1])}}, []string{a[0]}},
		{"since and until, every workflow", url.Values{"since": {startedAt(a[0])}, "until": {startedAt(a[1])}}, []string{b, a[0]}},
		{"a date", url.Values{"workflow": {wfB}, "since": {"2000-01-01"}}, []string{b}},
		{"nothing", url.Values{"workflow": {"none-" + suffix}}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, l := range h.exportLines(t, h.url, tt.query) {
				got = append(got, lineID(t, l))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("exported %v, want %v", got, tt.want)
			}
		})
	}

	for _, tt := range []struct {
		query  string
		fields []string
	}{
		{"since=yesterday", []string{"since"}},
		{"until=2026-13-01", []string{"until"}},
		{"since=2026-11-02&until=2026-11-01", []string{"until"}},
		{"since=never&until=later", []string{"since", "until"}},
		{"status=failed", []string{"status"}},
		{"workflow=a&workflow=b", []string{"workflow"}},
	} {
		t.Run(tt.query, func(t *testing.T) {
			resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/export?" + tt.query, key: h.key["reader"]})
			p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
			if !slices.Equal(p.fields(), tt.fields) {
				t.Errorf("fields %v, want %v; %+v", p.fields(), tt.fields, p)
			}
		})
	}
	problem(t, h.do(t, h.url, request{method: "GET", path: "/v1/executions/export", key: h.key["writer"]}), http.StatusForbidden, gateway.TypeForbidden)
}

// pausedExport is the store with an Export that waits, after its first
// execution, until resume is closed, then fails with fail (when not nil)
// once it has emitted every execution.
type pausedExport struct {
	*chainstore.Store
	resume chan struct{}
	fail   error
}

func (s *pausedExport) Export(ctx context.Context, f chainstore.ExportFilter, emit func(*chainstore.ExecutionChain) error) error {
	n := 0
	err := s.Store.Export(ctx, f, func(c *chainstore.ExecutionChain) error {
		if n++; n == 2 {
			select {
			case <-s.resume:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return emit(c)
	})
	if err == nil {
		err = s.fail
	}
	return err
}

// TestExportStreams: each execution of an export is sent as soon as it is
// read, and an export the store cuts short ends without the response's
// end, so that the client sees it incomplete.
func TestExportStreams(t *testing.T) {
	suffix := uuid.NewString()[:8]
	wf := "export-stream-" + suffix
	for range 2 {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions?wait=60s", key: h.key["writer"],
			body: startBody(`"definition": ` + chain(wf, `context["a"] = 1`))})
		decode(t, resp, http.StatusOK, &completionDoc{})
	}
	h.waitAudit(t)

	for _, tt := range []struct {
		name string
		fail error
	}{{"whole", nil}, {"cut short", errors.New("the store went away")}} {
		t.Run(tt.name, func(t *testing.T) {
			store := &pausedExport{Store: h.store, resume: make(chan struct{}), fail: tt.fail}
			base, err := h.serve(gateway.Deps{Keys: h.keys, Store: store})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/v1/executions/export?workflow="+wf, nil)
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+h.key["reader"])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("status %d", resp.StatusCode)
			}
			body := bufio.NewReader(resp.Body)
			// The store holds the second execution until the first is read.
			first, err := body.ReadString('\n')
			if err != nil {
				t.Fatalf("the first execution did not come before the export went on: %v", err)
			}
			lineID(t, first)
			close(store.resume)
			second, err := body.ReadString('\n')
			if err != nil {
				t.Fatalf("the second execution: %v", err)
			}
			lineID(t, second)
			rest, err := io.ReadAll(body)
			switch {
			case tt.fail == nil && (err != nil || len(rest) != 0):
				t.Errorf("after the last execution: %q, %v; want the end of the answer", rest, err)
			case tt.fail != nil && !errors.Is(err, io.ErrUnexpectedEOF):
				t.Errorf("an export cut short ends with %q, %v; want an incomplete answer (unexpected EOF)", rest, err)
			}
		})
	}
}
