package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// approvalSchema is the schema of the approval wait node of steeredStates.
const approvalSchema = `{"type": "object", "required": ["approved"], "properties": {"approved": {"type": "boolean"},
	"amount": {"type": "number", "minimum": 0}, "note": {"type": "string", "maxLength": 20}}}`

// steeredStates stores in the engine's bucket the states of four
// executions, as the engine writes them: one waiting at wait node
// "approve" for signal "approve" (until due), one running a code node,
// one that succeeded and one cancelled. It returns their ids by those
// names and removes them when the test ends.
func steeredStates(t *testing.T, due time.Time) map[string]string {
	t.Helper()
	ctx := t.Context()
	kv, err := h.bus.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if err != nil {
		t.Fatal(err)
	}
	def := &novav1.WorkflowDefinition{Name: "refund", Nodes: []*novav1.Node{
		{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
		{Id: "check", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: "context['checked'] = True"},
		{Id: "approve", Type: novav1.NodeType_NODE_TYPE_WAIT, Signal: "approve", Schema: approvalSchema,
			Description: "Approve the refund", DecideOn: "approved", TimeoutSeconds: 3600},
		{Id: "end", Type: novav1.NodeType_NODE_TYPE_END},
	}, Edges: []*novav1.Edge{{From: "start", To: "check"}, {From: "check", To: "approve"}, {From: "approve", To: "end"}}}
	started := timestamppb.New(time.Now().Add(-time.Minute))
	base := "steer-" + uuid.NewString()[:8]
	states := map[string]*novav1.ExecutionState{
		"waiting": {Status: execution.StatusRunning, CurrentNode: "approve", WaitingFor: "approve",
			Path:  []string{"start", "check", "approve"},
			Timer: &novav1.Timer{Id: "approve-1-wait_timeout", Kind: "wait_timeout", NodeId: "approve", DueAt: timestamppb.New(due), Visit: 1}},
		"running":   {Status: execution.StatusRunning, CurrentNode: "check", Path: []string{"start", "check"}},
		"succeeded": {Status: execution.StatusSucceeded, Path: []string{"start", "check", "approve", "end"}, CompletedAt: timestamppb.Now()},
		"cancelled": {Status: execution.StatusCancelled, CancelledBy: "ops", CancelReason: "duplicate refund",
			Path: []string{"start", "check"}, CompletedAt: timestamppb.Now(), Error: "cancelled by ops: duplicate refund"},
	}
	ids := map[string]string{}
	for name, st := range states {
		id := base + "-" + name
		ids[name] = id
		st.ExecutionId, st.Definition, st.StartedAt = id, def, started
		b, err := proto.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := kv.Put(ctx, id, b); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for _, id := range ids {
			_ = kv.Purge(ctx, id)
		}
	})
	return ids
}

// withoutEngine stops the graph engine until the test ends, so that the
// commands the gateway publishes stay in NOVA_CMD for the test to read.
func withoutEngine(t *testing.T) {
	t.Helper()
	if err := h.stopModule("graph-engine"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := h.startModule(ctx, "graph-engine"); err != nil {
			t.Errorf("restart the graph engine: %v", err)
		}
	})
}

// takeCommand reads the last command on the graph engine's subject, as the
// engine would, decodes its data into msg and removes it from the stream.
func takeCommand(t *testing.T, after uint64, msg proto.Message) *commandRead {
	t.Helper()
	ctx := t.Context()
	s, err := h.bus.JetStream().Stream(ctx, bus.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := s.GetLastMsgForSubject(ctx, bus.CommandSubject(bus.AgentGraphEngine))
	if err != nil {
		t.Fatalf("no command on %s: %v", bus.CommandSubject(bus.AgentGraphEngine), err)
	}
	if raw.Sequence <= after {
		t.Fatalf("no command published after sequence %d", after)
	}
	if err := s.DeleteMsg(ctx, raw.Sequence); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatal(err)
	}
	ev, err := bus.DecodeNATS(raw.Header, raw.Data)
	if err != nil {
		t.Fatalf("the command is not a CloudEvent: %v", err)
	}
	if err := bus.Decode(*ev, msg); err != nil {
		t.Fatalf("command %s: %v", ev.Type(), err)
	}
	ext, _ := ev.Extensions()[bus.ExtensionExecutionID].(string)
	return &commandRead{typ: ev.Type(), id: ev.ID(), execution: ext, msgID: raw.Header.Get(jetstream.MsgIDHeader)}
}

type commandRead struct{ typ, id, execution, msgID string }

// TestCancel: POST /v1/executions/{id}/cancel refuses what cannot be
// cancelled, publishes the command the engine reads for what can, and is
// idempotent for an execution cancelled already.
func TestCancel(t *testing.T) {
	withoutEngine(t)
	ids := steeredStates(t, time.Now().Add(time.Hour))
	router := openapiRouter(t)
	cancel := func(key, id, body string) (request, response) {
		req := request{method: "POST", path: "/v1/executions/" + id + "/cancel", key: key, body: body}
		resp := h.do(t, h.url, req)
		documented(t, router, req, resp)
		return req, resp
	}

	t.Run("unknown", func(t *testing.T) {
		_, resp := cancel(h.key["writer"], "no-such-execution", "")
		p := problem(t, resp, http.StatusNotFound, gateway.TypeNotFound)
		if !strings.Contains(p.Detail, "no-such-execution") {
			t.Errorf("detail %q does not name the execution", p.Detail)
		}
	})
	t.Run("ended", func(t *testing.T) {
		commands := h.lastCommand(t)
		_, resp := cancel(h.key["writer"], ids["succeeded"], `{"reason": "too late"}`)
		p := problem(t, resp, http.StatusConflict, gateway.TypeExecutionEnded)
		if !strings.Contains(p.Detail, "succeeded") {
			t.Errorf("detail %q does not name the status", p.Detail)
		}
		if got := h.lastCommand(t); got != commands {
			t.Errorf("a command was published for an ended execution")
		}
	})
	t.Run("scope", func(t *testing.T) {
		for _, key := range []string{"reader", "signaller"} {
			_, resp := cancel(h.key[key], ids["running"], "")
			problem(t, resp, http.StatusForbidden, gateway.TypeForbidden)
		}
	})
	t.Run("invalid body", func(t *testing.T) {
		for body, field := range map[string]string{
			`{"reason": 5}`: "reason",
			`{"why": "x"}`:  "why",
			`{"reason": "` + strings.Repeat("x", 1001) + `"}`: "reason",
		} {
			_, resp := cancel(h.key["writer"], ids["running"], body)
			p := problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
			if !slices.Equal(p.fields(), []string{field}) {
				t.Errorf("body %.40s: fields %v, want [%s]", body, p.fields(), field)
			}
		}
		_, resp := cancel(h.key["writer"], ids["running"], `[]`)
		problem(t, resp, http.StatusBadRequest, gateway.TypeInvalidRequest)
	})
	t.Run("running", func(t *testing.T) {
		for _, c := range []struct{ name, id, body, key, by, reason string }{
			{"a code node", ids["running"], `{"reason": "wrong input file"}`, "writer", "writer", "wrong input file"},
			{"a wait node, no body", ids["waiting"], "", "admin", "admin", ""},
		} {
			t.Run(c.name, func(t *testing.T) {
				commands := h.lastCommand(t)
				_, resp := cancel(h.key[c.key], c.id, c.body)
				var a struct {
					ExecutionID string `json:"execution_id"`
					Status      string `json:"status"`
					Links       struct {
						Self string `json:"self"`
					} `json:"links"`
				}
				decode(t, resp, http.StatusAccepted, &a)
				if a.ExecutionID != c.id || a.Status != "cancelling" || a.Links.Self != "/v1/executions/"+c.id {
					t.Errorf("answer %s", resp.body)
				}
				var cmd novav1.CancelExecution
				got := takeCommand(t, commands, &cmd)
				if got.typ != bus.TypeExecutionCancel || got.execution != c.id || got.id != execution.CancelEventID(c.id) || got.msgID != got.id {
					t.Errorf("command %+v", got)
				}
				if cmd.ExecutionId != c.id || cmd.Reason != c.reason || cmd.RequestedBy != c.by {
					t.Errorf("CancelExecution %v, want execution %s, reason %q, requested by %s", &cmd, c.id, c.reason, c.by)
				}
			})
		}
	})
	t.Run("cancelled already", func(t *testing.T) {
		commands := h.lastCommand(t)
		_, resp := cancel(h.key["writer"], ids["cancelled"], `{"reason": "again"}`)
		var a struct {
			Status       string `json:"status"`
			CancelledBy  string `json:"cancelled_by"`
			CancelReason string `json:"cancel_reason"`
		}
		decode(t, resp, http.StatusOK, &a)
		if a.Status != "cancelled" || a.CancelledBy != "ops" || a.CancelReason != "duplicate refund" {
			t.Errorf("answer %s", resp.body)
		}
		if got := h.lastCommand(t); got != commands {
			t.Errorf("a command was published for an execution cancelled already")
		}
	})
}

// TestSignal: POST /v1/executions/{id}/signals/{name} takes the signal
// scope, refuses a signal nobody waits for and a payload that fails the
// wait node's schema, and publishes the signal the engine reads, with its
// payload's numbers as written.
func TestSignal(t *testing.T) {
	withoutEngine(t)
	ids := steeredStates(t, time.Now().Add(time.Hour))
	router := openapiRouter(t)
	signal := func(key, id, name, body string, header map[string]string) response {
		req := request{method: "POST", path: "/v1/executions/" + id + "/signals/" + name, key: key, body: body, header: header}
		resp := h.do(t, h.url, req)
		documented(t, router, req, resp)
		return resp
	}
	const approved = `{"approved": true, "amount": 9007199254740993, "ratio": 150.0, "note": "<ok>"}`

	t.Run("scope", func(t *testing.T) {
		for _, key := range []string{"writer", "reader"} {
			p := problem(t, signal(h.key[key], ids["waiting"], "approve", approved, nil), http.StatusForbidden, gateway.TypeForbidden)
			if !strings.Contains(p.Detail, "signal") {
				t.Errorf("detail %q does not name the scope", p.Detail)
			}
		}
	})
	t.Run("unknown", func(t *testing.T) {
		problem(t, signal(h.key["signaller"], "no-such-execution", "approve", approved, nil), http.StatusNotFound, gateway.TypeNotFound)
	})
	t.Run("ended", func(t *testing.T) {
		for _, name := range []string{"succeeded", "cancelled"} {
			p := problem(t, signal(h.key["signaller"], ids[name], "approve", approved, nil), http.StatusConflict, gateway.TypeExecutionEnded)
			if !strings.Contains(p.Detail, name) {
				t.Errorf("detail %q does not name the status %s", p.Detail, name)
			}
		}
	})
	t.Run("not waiting", func(t *testing.T) {
		p := problem(t, signal(h.key["signaller"], ids["waiting"], "reject", approved, nil), http.StatusConflict, gateway.TypeNotWaiting)
		if !strings.Contains(p.Detail, `"approve"`) || !slices.Equal(p.fields(), []string{"signal"}) {
			t.Errorf("problem %+v does not name the signal waited for", p)
		}
	})
	t.Run("kept", func(t *testing.T) {
		// Running check: no wait node waits for approve yet, one will.
		resp := signal(h.key["signaller"], ids["running"], "approve", approved, nil)
		var got struct{ Status, Node string }
		if resp.status != http.StatusAccepted || json.Unmarshal(resp.body, &got) != nil || got.Status != "kept" || got.Node != "" {
			t.Errorf("%d %s; want 202 kept", resp.status, resp.body)
		}
	})
	t.Run("payload", func(t *testing.T) {
		commands := h.lastCommand(t)
		p := problem(t, signal(h.key["signaller"], ids["waiting"], "approve", `{"approved": "yes"}`, nil),
			http.StatusUnprocessableEntity, gateway.TypeInvalidPayload)
		if len(p.Errors) != 1 || !strings.Contains(p.Errors[0].Field, "approved") || p.Errors[0].Node != "approve" {
			t.Errorf("problem %+v does not name the field approved of node approve", p)
		}
		p = problem(t, signal(h.key["signaller"], ids["waiting"], "approve", `{}`, nil),
			http.StatusUnprocessableEntity, gateway.TypeInvalidPayload)
		if len(p.Errors) != 1 || !strings.Contains(p.Errors[0].Field+p.Errors[0].Detail, "approved") {
			t.Errorf("problem %+v does not name the missing field approved", p)
		}
		// Every field at fault at once, in path order; the detail keeps
		// the first one's words.
		p = problem(t, signal(h.key["signaller"], ids["waiting"], "approve", `{"approved": "yes", "amount": -1, "note": "far longer than twenty characters"}`, nil),
			http.StatusUnprocessableEntity, gateway.TypeInvalidPayload)
		var got []string
		for _, e := range p.Errors {
			got = append(got, e.Node+" "+e.Field+": "+e.Detail)
		}
		want := []string{"approve amount: must be at least 0", "approve approved: must be true or false", "approve note: must be at most 20 characters long"}
		if !slices.Equal(got, want) || !strings.HasSuffix(p.Detail, `: payload field "amount": must be at least 0`) {
			t.Errorf("problem %+v\nwant errors %q and the first in its detail", p, want)
		}
		p = problem(t, signal(h.key["signaller"], ids["waiting"], "approve", `[true]`, nil),
			http.StatusUnprocessableEntity, gateway.TypeInvalidPayload)
		if !slices.Equal(p.fields(), []string{"payload"}) {
			t.Errorf("fields %v, want [payload]", p.fields())
		}
		problem(t, signal(h.key["signaller"], ids["waiting"], "approve", `{"approved": tru`, nil),
			http.StatusBadRequest, gateway.TypeInvalidRequest)
		if got := h.lastCommand(t); got != commands {
			t.Errorf("a command was published for a refused signal")
		}
	})
	t.Run("sent", func(t *testing.T) {
		for _, key := range []string{"signaller", "admin"} {
			commands := h.lastCommand(t)
			resp := signal(h.key[key], ids["waiting"], "approve", approved, nil)
			var a struct {
				ExecutionID string `json:"execution_id"`
				Signal      string `json:"signal"`
				Node        string `json:"node"`
				EventID     string `json:"event_id"`
			}
			decode(t, resp, http.StatusAccepted, &a)
			if a.ExecutionID != ids["waiting"] || a.Signal != "approve" || a.Node != "approve" || a.EventID == "" {
				t.Errorf("answer %s", resp.body)
			}
			var cmd novav1.SignalExecution
			got := takeCommand(t, commands, &cmd)
			if got.typ != bus.TypeExecutionSignal || got.execution != ids["waiting"] || got.id != a.EventID || got.msgID != got.id {
				t.Errorf("command %+v, answer %s", got, resp.body)
			}
			if cmd.ExecutionId != ids["waiting"] || cmd.Signal != "approve" || cmd.SentBy != key {
				t.Errorf("SignalExecution %v", &cmd)
			}
			payload, err := jsonvalue.FromProto(cmd.Payload)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]string{"approved": "true", "amount": "9007199254740993", "ratio": "150.0", "note": `"<ok>"`}
			for k, v := range want {
				if string(payload[k]) != v {
					t.Errorf("payload[%q] = %s, want %s", k, payload[k], v)
				}
			}
		}
	})
	t.Run("Idempotency-Key", func(t *testing.T) {
		send := func() string {
			resp := signal(h.key["signaller"], ids["waiting"], "approve", `{"approved": false}`, map[string]string{"Idempotency-Key": "decision-7"})
			var a struct {
				EventID string `json:"event_id"`
			}
			decode(t, resp, http.StatusAccepted, &a)
			return a.EventID
		}
		commands := h.lastCommand(t)
		first := send()
		var cmd novav1.SignalExecution
		if got := takeCommand(t, commands, &cmd); got.id != first {
			t.Errorf("command %+v, answer's event %s", got, first)
		}
		commands = h.lastCommand(t)
		if again := send(); again != first {
			t.Errorf("a retry with the same Idempotency-Key sent event %s, then %s", first, again)
		}
		if got := h.lastCommand(t); got != commands {
			t.Errorf("a retry with the same Idempotency-Key was stored again")
		}
	})
}

// TestGetWaitingAndCancelled: GET /v1/executions/{id} says what a running
// execution waits for, and who cancelled a cancelled one.
func TestGetWaitingAndCancelled(t *testing.T) {
	due := time.Now().Add(time.Hour).UTC().Truncate(time.Millisecond)
	ids := steeredStates(t, due)
	router := openapiRouter(t)
	get := func(id string) json.RawMessage {
		req := request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]}
		resp := h.do(t, h.url, req)
		documented(t, router, req, resp)
		var v struct {
			Execution json.RawMessage `json:"execution"`
		}
		decode(t, resp, http.StatusOK, &v)
		return v.Execution
	}
	var waiting struct {
		Status      string `json:"status"`
		CurrentNode string `json:"current_node"`
		Waiting     *struct {
			Node        string          `json:"node"`
			Signal      string          `json:"signal"`
			Description string          `json:"description"`
			Schema      json.RawMessage `json:"schema"`
			DecideOn    string          `json:"decide_on"`
			Until       time.Time       `json:"until"`
		} `json:"waiting"`
	}
	raw := get(ids["waiting"])
	if err := json.Unmarshal(raw, &waiting); err != nil {
		t.Fatal(err)
	}
	w := waiting.Waiting
	if waiting.Status != "running" || waiting.CurrentNode != "approve" || w == nil {
		t.Fatalf("execution %s", raw)
	}
	var schema map[string]any
	if w.Node != "approve" || w.Signal != "approve" || w.Description != "Approve the refund" || w.DecideOn != "approved" ||
		!w.Until.Equal(due) || json.Unmarshal(w.Schema, &schema) != nil || schema["type"] != "object" {
		t.Errorf("waiting %s", raw)
	}

	raw = get(ids["running"])
	if strings.Contains(string(raw), `"waiting"`) || !strings.Contains(string(raw), `"current_node":"check"`) {
		t.Errorf("a running execution at a code node: %s", raw)
	}
	var cancelled struct {
		Status       string `json:"status"`
		CancelledBy  string `json:"cancelled_by"`
		CancelReason string `json:"cancel_reason"`
	}
	raw = get(ids["cancelled"])
	if err := json.Unmarshal(raw, &cancelled); err != nil {
		t.Fatal(err)
	}
	if cancelled.Status != "cancelled" || cancelled.CancelledBy != "ops" || cancelled.CancelReason != "duplicate refund" {
		t.Errorf("cancelled execution %s", raw)
	}
}

// approvalYAML waits at node approval for signal approval, whose payload's
// approved picks the edge.
const approvalYAML = `name: approval
nodes:
  - {id: start, type: start}
  - {id: total, type: action, code: 'context["total"] = 1250'}
  - id: approval
    type: wait
    signal: approval
    description: Approve the payment of the invoice
    timeout: 1h
    decide_on: approved
    schema:
      type: object
      required: [approved]
      properties:
        approved: {type: boolean}
        limit: {type: number}
  - {id: pay, type: action, code: 'context["paid"] = True'}
  - {id: hold, type: action, code: 'context["paid"] = False'}
  - {id: done, type: end}
edges:
  - {from: start, to: total}
  - {from: total, to: approval}
  - {from: approval, to: pay, condition: "true"}
  - {from: approval, to: hold, condition: "false"}
  - {from: pay, to: done}
  - {from: hold, to: done}
`

// TestSteerWithTheEngine: an execution waiting for a signal is shown
// waiting, resumed by a signal sent through the gateway, and another is
// cancelled through it; the engine takes both commands as the gateway
// sends them.
func TestSteerWithTheEngine(t *testing.T) {
	start := func(t *testing.T) string {
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
			body: startBody(`"definition": `+jsonString(approvalYAML), `"context": {}`)})
		var a acceptedDoc
		decode(t, resp, http.StatusAccepted, &a)
		return a.ExecutionID
	}
	// awaitWaiting reads the execution until it waits for its signal.
	awaitWaiting := func(t *testing.T, id string) map[string]any {
		deadline := time.Now().Add(time.Minute)
		for {
			var v struct {
				Execution struct {
					Waiting map[string]any `json:"waiting"`
				} `json:"execution"`
			}
			// A start just accepted is not known yet (404).
			if resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]}); resp.status != http.StatusNotFound {
				decode(t, resp, http.StatusOK, &v)
			}
			if v.Execution.Waiting != nil {
				return v.Execution.Waiting
			}
			if time.Now().After(deadline) {
				t.Fatalf("execution %s never waited for its signal", id)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	t.Run("signal", func(t *testing.T) {
		id := start(t)
		w := awaitWaiting(t, id)
		if w["node"] != "approval" || w["signal"] != "approval" || w["description"] != "Approve the payment of the invoice" ||
			w["decide_on"] != "approved" || w["until"] == nil || w["schema"] == nil {
			t.Errorf("waiting %v", w)
		}
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions/" + id + "/signals/approval", key: h.key["signaller"],
			body: `{"approved": true, "limit": 1500.0}`})
		decode(t, resp, http.StatusAccepted, &struct{}{})
		wc := h.awaitCompletion(t, id)
		ctx := jsonvalue.MustObject(wc.GetContext())
		if wc.GetStatus() != "succeeded" || !slices.Contains(wc.GetPath(), "pay") || string(ctx["limit"]) != "1500.0" || string(ctx["paid"]) != "true" {
			t.Errorf("completion: status %s, path %v, context %s", wc.GetStatus(), wc.GetPath(), ctx.Bytes())
		}
	})
	t.Run("cancel", func(t *testing.T) {
		id := start(t)
		awaitWaiting(t, id)
		resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions/" + id + "/cancel", key: h.key["writer"],
			body: `{"reason": "not needed"}`})
		decode(t, resp, http.StatusAccepted, &struct{}{})
		wc := h.awaitCompletion(t, id)
		if wc.GetStatus() != "cancelled" || wc.GetCancelledBy() != "writer" || wc.GetCancelReason() != "not needed" {
			t.Errorf("completion: status %s, cancelled by %q: %q", wc.GetStatus(), wc.GetCancelledBy(), wc.GetCancelReason())
		}
		// The engine publishes the completion before it stores the state
		// the gateway reads: wait for the state too.
		kv, err := h.bus.JetStream().KeyValue(t.Context(), bus.BucketExecutions)
		if err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if st, err := execution.ReadState(t.Context(), kv, id); err == nil && st.GetStatus() == "cancelled" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the engine's state of %s does not say cancelled", id)
			}
		}
		// Again: nothing to do.
		var again struct {
			Status      string `json:"status"`
			CancelledBy string `json:"cancelled_by"`
		}
		resp = h.do(t, h.url, request{method: "POST", path: "/v1/executions/" + id + "/cancel", key: h.key["writer"]})
		decode(t, resp, http.StatusOK, &again)
		if again.Status != "cancelled" || again.CancelledBy != "writer" {
			t.Errorf("a second cancel: %s", resp.body)
		}
		// A signal for it now is refused, naming its status.
		p := problem(t, h.do(t, h.url, request{method: "POST", path: "/v1/executions/" + id + "/signals/approval",
			key: h.key["signaller"], body: `{"approved": true}`}), http.StatusConflict, gateway.TypeExecutionEnded)
		if !strings.Contains(p.Detail, "cancelled") {
			t.Errorf("detail %q", p.Detail)
		}
	})
}
