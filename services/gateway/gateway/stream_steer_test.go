package gateway_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestStreamWaitRejectCancel: an execution's event stream, and the stream
// of every execution of its workflow, pass on that it waits for a signal
// (node.waiting), that a signal was rejected (signal.rejected) and that it
// was cancelled (execution.cancelled); the replay from the audit store has
// the cancel too.
func TestStreamWaitRejectCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	name := "approval-" + uuid.NewString()[:8]
	def := strings.Replace(approvalYAML, "name: approval\n", "name: "+name+"\n", 1)
	all := openExecutionsStream(t, ctx, url.Values{"workflow": {name}}, "")
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
		body: startBody(`"definition": `+jsonString(def), `"context": {}`)})
	var a acceptedDoc
	decode(t, resp, http.StatusAccepted, &a)
	id := a.ExecutionID

	stream := openStream(t, ctx, h.url, h.key["reader"], id, "")
	defer stream.Body.Close()
	if stream.StatusCode != http.StatusOK {
		t.Fatalf("status %d", stream.StatusCode)
	}
	body := bufio.NewReader(stream.Body)
	next := func(kind string) sseEvent {
		t.Helper()
		for {
			e, ok := readEvent(t, body)
			if !ok {
				t.Fatalf("the stream ended before %s", kind)
			}
			if e.event == kind {
				return e
			}
		}
	}

	waiting := next("node.waiting")
	var w struct {
		ExecutionID string         `json:"execution_id"`
		NodeID      string         `json:"node_id"`
		Visit       int            `json:"visit"`
		Kind        string         `json:"kind"`
		Signal      string         `json:"signal"`
		Description string         `json:"description"`
		Schema      map[string]any `json:"schema"`
		DecideOn    string         `json:"decide_on"`
		Until       *time.Time     `json:"until"`
	}
	if err := json.Unmarshal([]byte(waiting.data), &w); err != nil || waiting.id == "" {
		t.Fatalf("node.waiting %+v: %v", waiting, err)
	}
	if w.ExecutionID != id || w.NodeID != "approval" || w.Visit != 1 || w.Kind != "signal" || w.Signal != "approval" ||
		w.Description != "Approve the payment of the invoice" || w.Schema["type"] != "object" || w.DecideOn != "approved" ||
		w.Until == nil || !w.Until.After(time.Now().Add(50*time.Minute)) {
		t.Errorf("node.waiting data %s", waiting.data)
	}

	// A signal nobody waits for, sent past the gateway's checks: the
	// engine rejects it.
	if err := execution.PublishSignal(ctx, h.bus, "signal-"+uuid.NewString(), &novav1.SignalExecution{ExecutionId: id,
		Signal: "refund", Payload: jsonvalue.Object{}.Proto(), SentBy: "test"}); err != nil {
		t.Fatal(err)
	}
	rejected := next("signal.rejected")
	var rj struct {
		ExecutionID   string `json:"execution_id"`
		Signal        string `json:"signal"`
		Reason        string `json:"reason"`
		WaitingFor    string `json:"waiting_for"`
		SignalEventID string `json:"signal_event_id"`
	}
	if err := json.Unmarshal([]byte(rejected.data), &rj); err != nil || rj.ExecutionID != id || rj.Signal != "refund" ||
		rj.WaitingFor != "approval" || rj.Reason == "" || !strings.HasPrefix(rj.SignalEventID, "signal-") {
		t.Errorf("signal.rejected data %s (%v)", rejected.data, err)
	}

	resp = h.do(t, h.url, request{method: "POST", path: "/v1/executions/" + id + "/cancel", key: h.key["writer"],
		body: `{"reason": "not needed"}`})
	decode(t, resp, http.StatusAccepted, &struct{}{})
	cancelled := next("execution.cancelled")
	var c struct {
		ExecutionID string     `json:"execution_id"`
		NodeID      string     `json:"node_id"`
		Reason      string     `json:"reason"`
		RequestedBy string     `json:"requested_by"`
		CancelledAt *time.Time `json:"cancelled_at"`
	}
	if err := json.Unmarshal([]byte(cancelled.data), &c); err != nil || c.ExecutionID != id || c.NodeID != "approval" ||
		c.Reason != "not needed" || c.RequestedBy != "writer" || c.CancelledAt == nil {
		t.Errorf("execution.cancelled data %s (%v)", cancelled.data, err)
	}
	rest := readSSE(t, body, nil)
	if len(rest) != 2 || rest[0].event != "node.completed" || rest[1].event != "workflow.completed" {
		t.Errorf("after execution.cancelled: %v, want node.completed, workflow.completed", rest)
	}

	// The stream of the workflow's executions has the same events, their
	// data with the execution's list members.
	listed := all.readUntil(t, id)
	var kinds []string
	for _, e := range listed {
		kinds = append(kinds, e.event)
		for _, want := range []sseEvent{waiting, rejected, cancelled} {
			if e.event != want.event {
				continue
			}
			var got, members map[string]json.RawMessage
			if e.id != want.id || json.Unmarshal([]byte(e.data), &got) != nil || json.Unmarshal([]byte(want.data), &members) != nil {
				t.Fatalf("executions stream: %s #%s %s", e.event, e.id, e.data)
			}
			for k, v := range members {
				if string(got[k]) != string(v) {
					t.Errorf("executions stream: %s %s: %s is %s, want %s", e.event, e.data, k, got[k], v)
				}
			}
			// The list members are the engine's state's when the stream
			// relayed the event, which on a busy machine may be after the
			// cancel that follows it: running, or cancelled already.
			if e.item.WorkflowName != name || e.item.Status != "running" && e.item.Status != "cancelled" || e.item.StartedAt == nil ||
				e.item.Links.Self != "/v1/executions/"+id {
				t.Errorf("executions stream: %s %s: not the execution's list item", e.event, e.data)
			}
		}
	}
	if want := []string{"workflow.started", "node.waiting", "signal.rejected", "execution.cancelled", "workflow.completed"}; !slices.Equal(kinds, want) {
		t.Errorf("executions stream of %s: %v, want %v", name, kinds, want)
	}

	// Replayed from the audit store once its events are purged: the cancel
	// is there, before the node's end.
	h.waitAudit(t)
	events, err := h.bus.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if err := events.Purge(ctx, jetstream.WithPurgeSubject(bus.ExecutionFilter(id))); err != nil {
		t.Fatal(err)
	}
	replay := openStream(t, ctx, h.url, h.key["reader"], id, "")
	defer replay.Body.Close()
	stored := readSSE(t, bufio.NewReader(replay.Body), nil)
	names := describe(t, stored)
	i := slices.Index(names, "execution.cancelled")
	if i < 0 || i+1 >= len(names) || names[i+1] != "node.completed:approval" || names[len(names)-1] != "workflow.completed" {
		t.Fatalf("replayed from the store: %v", names)
	}
	var sc struct {
		ExecutionID string     `json:"execution_id"`
		NodeID      string     `json:"node_id"`
		Reason      string     `json:"reason"`
		RequestedBy string     `json:"requested_by"`
		CancelledAt *time.Time `json:"cancelled_at"`
	}
	if err := json.Unmarshal([]byte(stored[i].data), &sc); err != nil || sc.ExecutionID != id || sc.NodeID != "approval" ||
		sc.Reason != "not needed" || sc.RequestedBy != "writer" || sc.CancelledAt == nil {
		t.Errorf("replayed execution.cancelled %s (%v)", stored[i].data, err)
	}
}
