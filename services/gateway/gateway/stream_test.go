package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// sseEvent is one Server-Sent Event as a client reads it.
type sseEvent struct {
	id, event, data string
}

func (e sseEvent) String() string { return e.event + "#" + e.id }

// readSSE reads events from an SSE body until it ends, calling each (when
// not nil) as it arrives.
func readSSE(t *testing.T, body *bufio.Reader, each func(sseEvent)) []sseEvent {
	t.Helper()
	var events []sseEvent
	for {
		e, ok := readEvent(t, body)
		if !ok {
			return events
		}
		events = append(events, e)
		if each != nil {
			each(e)
		}
	}
}

// readEvent reads the next event of an SSE body, past comments and retry
// lines; false when the body ends first.
func readEvent(t *testing.T, body *bufio.Reader) (sseEvent, bool) {
	t.Helper()
	var cur sseEvent
	for {
		line, err := body.ReadString('\n')
		if err != nil {
			return sseEvent{}, false
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "":
			if cur.event != "" || cur.data != "" {
				return cur, true
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, ":"), strings.HasPrefix(line, "retry: "):
		case strings.HasPrefix(line, "id: "):
			cur.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "event: "):
			cur.event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			cur.data += strings.TrimPrefix(line, "data: ")
		default:
			t.Errorf("unexpected SSE line %q", line)
		}
	}
}

// openStream opens GET /v1/executions/{id}/events on base.
func openStream(t *testing.T, ctx context.Context, base, key, id, lastEventID string) *http.Response {
	t.Helper()
	return openSSE(t, ctx, base+"/v1/executions/"+id+"/events", key, lastEventID)
}

// openSSE opens an event stream at url with an API key and, when not
// empty, a Last-Event-ID.
func openSSE(t *testing.T, ctx context.Context, url, key, lastEventID string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func (h *harness) startRunning(t *testing.T, name string, codes ...string) string {
	t.Helper()
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
		body: startBody(`"definition": `+chain(name, codes...), `"context": {"x": 9007199254740993}`)})
	var a acceptedDoc
	decode(t, resp, http.StatusAccepted, &a)
	return a.ExecutionID
}

// TestEventStream follows an execution live over SSE from the moment it
// is accepted, then replays it whole and after a Last-Event-ID.
func TestEventStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	id := h.startRunning(t, "streamed", `context["y"] = context["x"] + 1`, "import time\ntime.sleep(1.5)\ncontext[\"slept\"] = True")

	resp := openStream(t, ctx, h.url, h.key["reader"], id, "")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("status %d, Content-Type %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	// Events arrive as they happen: when the sleeping node has started,
	// the execution is still running.
	var statusAtSleep string
	live := readSSE(t, bufio.NewReader(resp.Body), func(e sseEvent) {
		if e.event == "node.started" && strings.Contains(e.data, `"node_id":"step2"`) {
			v, _ := h.get(t, id)
			statusAtSleep = v.Execution.Status
		}
	})
	if statusAtSleep != "running" {
		t.Errorf("when step2 started the execution was %q, want running (events streamed as they happen)", statusAtSleep)
	}
	want := []string{
		"workflow.started", "node.completed:start",
		"node.started:step1", "step.completed:step1", "node.completed:step1",
		"node.started:step2", "step.completed:step2", "node.completed:step2",
		"node.completed:end", "workflow.completed",
	}
	if got := describe(t, live); !slices.Equal(got, want) {
		t.Fatalf("events %v\nwant %v", got, want)
	}
	// The id is the stream sequence of the message that carried the event;
	// of the events an envelope carried, only the last has it, so that a
	// client that resumes has seen the whole envelope.
	var prev uint64
	for _, e := range live {
		if e.id == "" {
			continue
		}
		n, err := strconv.ParseUint(e.id, 10, 64)
		if err != nil || n <= prev {
			t.Errorf("event ids %v are not increasing integers", live)
		}
		prev = n
	}
	if live[len(live)-1].id == "" || live[2].id == "" {
		t.Errorf("the completion and the last event of the start's transition (node.started:step1) have no id: %v", live)
	}
	// Exact numbers travel as they are; the completion is the one ?wait answers.
	if !strings.Contains(live[0].data, `"x":9007199254740993`) {
		t.Errorf("workflow.started data %s", live[0].data)
	}
	var c completionDoc
	if err := json.Unmarshal([]byte(live[len(live)-1].data), &c); err != nil || c.Status != "succeeded" || c.ExecutionID != id {
		t.Errorf("workflow.completed data %s (%v)", live[len(live)-1].data, err)
	}
	if !strings.Contains(string(c.Context), `"y":9007199254740994`) {
		t.Errorf("final context %s", c.Context)
	}
	var node struct {
		NodeID       string                     `json:"node_id"`
		Status       string                     `json:"status"`
		CodeExecuted string                     `json:"code_executed"`
		OutputResult map[string]json.RawMessage `json:"output_result"`
	}
	if err := json.Unmarshal([]byte(live[4].data), &node); err != nil || node.NodeID != "step1" || node.Status != "success" ||
		string(node.OutputResult["y"]) != "9007199254740994" {
		t.Errorf("node.completed of step1: %s (%v)", live[4].data, err)
	}

	// A late subscriber gets the whole execution, the same events with the
	// same ids; with Last-Event-ID, what came after it.
	replay := func(last string) []sseEvent {
		resp := openStream(t, ctx, h.url, h.key["reader"], id, last)
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("replay after %q: status %d", last, resp.StatusCode)
		}
		return readSSE(t, bufio.NewReader(resp.Body), nil)
	}
	if got := replay(""); !slices.Equal(got, live) {
		t.Errorf("replay %v\nwant %v", got, live)
	}
	if got := replay(live[2].id); !slices.Equal(got, live[3:]) {
		t.Errorf("replay after %s: %v\nwant %v", live[2].id, got, live[3:])
	}
	// At or past its completion nothing follows: 204 at once, which stops
	// an EventSource's retries.
	for _, last := range []string{live[len(live)-1].id, "99999999"} {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		resp := openStream(t, ctx, h.url, h.key["reader"], id, last)
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		cancel()
		if err != nil || resp.StatusCode != http.StatusNoContent || len(body) != 0 {
			t.Errorf("after the completion's id %s: %d %q (%v), want 204 at once", last, resp.StatusCode, body, err)
		}
	}

	// Once its events are purged (the audit service does it KeepEnded
	// after the end), the execution is replayed from the audit store: the
	// same events with the same data (times to the millisecond, as the
	// store keeps them), without ids; after a Last-Event-ID there is
	// nothing to resume from, 410.
	h.waitAudit(t)
	events, err := h.bus.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSubject(bus.ExecutionFilter(id))); err != nil {
		t.Fatal(err)
	}
	stored := replay("")
	if len(stored) != len(live) {
		t.Fatalf("replayed from the store: %v\nwant %v", describe(t, stored), describe(t, live))
	}
	for i, e := range stored {
		if e.id != "" || e.event != live[i].event || e.data != toMillis(t, live[i].data) {
			t.Errorf("replayed from the store, event %d:\n%s #%s %s\nwant\n%s %s", i, e.event, e.id, e.data, live[i].event, live[i].data)
		}
	}
	resp = openStream(t, ctx, h.url, h.key["reader"], id, live[2].id)
	resp.Body.Close()
	if resp.StatusCode != http.StatusGone {
		t.Errorf("after Last-Event-ID with the events purged: status %d, want 410", resp.StatusCode)
	}
}

// rfc3339 matches the times in JSON data.
var rfc3339 = regexp.MustCompile(`"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z"`)

// toMillis is data with its times truncated to the millisecond.
func toMillis(t *testing.T, data string) string {
	return rfc3339.ReplaceAllStringFunc(data, func(q string) string {
		ts, err := time.Parse(time.RFC3339Nano, strings.Trim(q, `"`))
		if err != nil {
			t.Fatal(err)
		}
		return `"` + ts.Truncate(time.Millisecond).Format(time.RFC3339Nano) + `"`
	})
}

// describe names each event, with its node for node events.
func describe(t *testing.T, events []sseEvent) []string {
	var out []string
	for _, e := range events {
		var d struct {
			NodeID string `json:"node_id"`
		}
		if err := json.Unmarshal([]byte(e.data), &d); err != nil {
			t.Errorf("%s data is not JSON: %s", e.event, e.data)
		}
		if strings.HasPrefix(e.event, "node.") || e.event == "step.completed" {
			out = append(out, e.event+":"+d.NodeID)
		} else {
			out = append(out, e.event)
		}
	}
	return out
}

func TestEventStreamErrors(t *testing.T) {
	resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/no-such-execution/events", key: h.key["reader"]})
	problem(t, resp, http.StatusNotFound, gateway.TypeNotFound)

	resp = h.do(t, h.url, request{method: "GET", path: "/v1/executions/x/events", key: h.key["reader"],
		header: map[string]string{"Last-Event-ID": "seven"}})
	if p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest); !slices.Equal(p.fields(), []string{"Last-Event-ID"}) {
		t.Errorf("fields %v", p.fields())
	}
	resp = h.do(t, h.url, request{method: "GET", path: "/v1/executions/x/events", key: h.key["writer"]})
	problem(t, resp, http.StatusForbidden, gateway.TypeForbidden)
	resp = h.do(t, h.url, request{method: "GET", path: "/v1/executions/x/events"})
	problem(t, resp, http.StatusUnauthorized, gateway.TypeUnauthorized)
}

// TestStreamAndRateLimits: a key may hold so many streams, and make so
// many requests a second; over either it gets 429 with Retry-After.
func TestStreamAndRateLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	url, err := h.serve(gateway.Deps{Keys: h.keys, Limits: gateway.Limits{MaxStreamsPerKey: 1, Rate: 2, Burst: 4}})
	if err != nil {
		t.Fatal(err)
	}
	id := h.startRunning(t, "held-stream", "import time\ntime.sleep(2)")
	first := openStream(t, ctx, url, h.key["reader"], id, "")
	defer first.Body.Close()
	if first.StatusCode != http.StatusOK {
		t.Fatalf("first stream: status %d", first.StatusCode)
	}
	resp := h.do(t, url, request{method: "GET", path: "/v1/executions/" + id + "/events", key: h.key["reader"]})
	p := problem(t, resp, http.StatusTooManyRequests, gateway.TypeTooManyRequests)
	if resp.header.Get("Retry-After") == "" || !strings.Contains(p.Detail, "event streams open") {
		t.Errorf("second stream: Retry-After %q, %+v", resp.header.Get("Retry-After"), p)
	}
	// Another key is not held back by this one's streams.
	other := openStream(t, ctx, url, h.key["admin"], id, "")
	other.Body.Close()
	if other.StatusCode != http.StatusOK {
		t.Errorf("another key's stream: status %d", other.StatusCode)
	}
	// Once the first stream ends, its slot is free again.
	readSSE(t, bufio.NewReader(first.Body), nil)
	first.Body.Close()
	var again response
	for range 50 {
		if again = h.do(t, url, request{method: "GET", path: "/v1/executions/" + id + "/events", key: h.key["reader"]}); again.status != http.StatusTooManyRequests || !strings.Contains(string(again.body), "streams") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if again.status != http.StatusOK {
		t.Errorf("stream after the first ended: status %d %s", again.status, again.body)
	}

	// The admin key has made one request on this gateway: the rest of its
	// burst of 4 goes through, then it must wait. The requests go at once:
	// one after another on a busy machine, each took long enough for the
	// 2 a second to refill the burst.
	statuses := make([]int, 12)
	retries := make([]string, len(statuses))
	var wg sync.WaitGroup
	for i := range statuses {
		wg.Go(func() {
			resp := h.do(t, url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["admin"]})
			statuses[i], retries[i] = resp.status, resp.header.Get("Retry-After")
		})
	}
	wg.Wait()
	served, limited := 0, 0
	for i, st := range statuses {
		switch st {
		case http.StatusOK:
			served++
		case http.StatusTooManyRequests:
			limited++
			if s, _ := strconv.Atoi(retries[i]); s < 1 {
				t.Errorf("Retry-After %q is not a positive number of seconds", retries[i])
			}
		default:
			t.Errorf("status %d", st)
		}
	}
	if served == 0 || limited == 0 {
		t.Errorf("statuses %v: want the burst served, then 429 with Retry-After", statuses)
	}
}
