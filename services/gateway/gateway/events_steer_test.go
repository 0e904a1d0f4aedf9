package gateway_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/gateway/gateway"
)

// steerAnswer is the answer of POST /v1/events to a cancel, a signal or a
// schedule event.
type steerAnswer struct {
	ID          string `json:"id"`
	Type        string `json:"type"`
	ExecutionID string `json:"execution_id"`
	Workflow    string `json:"workflow"`
	Schedule    string `json:"schedule"`
	Status      string `json:"status"`
	Signal      string `json:"signal"`
	Node        string `json:"node"`
	Links       struct {
		Self string `json:"self"`
	} `json:"links"`
}

// TestEventsSteerAndSchedule: POST /v1/events takes cancel, signal and
// schedule events, each with the scope and the checks of its own route,
// and publishes the command the engine reads, naming the API key as who
// sent it.
func TestEventsSteerAndSchedule(t *testing.T) {
	wf := "ingress-" + uuid.NewString()[:8]
	h.register(t, scheduledYAML(wf))
	withoutEngine(t)
	ids := steeredStates(t, time.Now().Add(time.Hour))
	const approved = `{"approved": true, "amount": 9007199254740993, "ratio": 150.0}`

	refused := []struct {
		name, key  string
		structured bool
		typ, data  string
		status     int
		problem    string
		fields     []string
		detail     string
	}{
		{"a cancel with a signalling key", "signaller", false, bus.TypeExecutionCancel, `{"executionId": "` + ids["running"] + `"}`,
			403, gateway.TypeForbidden, nil, "executions:write"},
		{"a cancel with a reading key", "reader", true, bus.TypeExecutionCancel, `{"executionId": "` + ids["running"] + `"}`,
			403, gateway.TypeForbidden, nil, "executions:write"},
		{"a cancel of no execution", "writer", false, bus.TypeExecutionCancel, `{"reason": "x"}`,
			400, gateway.TypeInvalidRequest, []string{"data.executionId"}, ""},
		{"a cancel of an unknown execution", "writer", true, bus.TypeExecutionCancel, `{"executionId": "no-such-execution"}`,
			404, gateway.TypeNotFound, nil, "no-such-execution"},
		{"a cancel of an ended execution", "writer", false, bus.TypeExecutionCancel, `{"executionId": "` + ids["succeeded"] + `"}`,
			409, gateway.TypeExecutionEnded, nil, "succeeded"},
		{"a cancel with a reason too long", "writer", false, bus.TypeExecutionCancel,
			`{"executionId": "` + ids["running"] + `", "reason": "` + strings.Repeat("x", 1001) + `"}`,
			400, gateway.TypeInvalidRequest, []string{"data.reason"}, ""},
		{"a signal with a starting key", "writer", false, bus.TypeExecutionSignal,
			`{"executionId": "` + ids["waiting"] + `", "signal": "approve", "payload": ` + approved + `}`,
			403, gateway.TypeForbidden, nil, "signal"},
		{"a signal nobody waits for", "signaller", true, bus.TypeExecutionSignal,
			`{"executionId": "` + ids["waiting"] + `", "signal": "reject", "payload": {}}`,
			409, gateway.TypeNotWaiting, []string{"data.signal"}, `"approve"`},
		{"a signal for an ended execution", "signaller", false, bus.TypeExecutionSignal,
			`{"executionId": "` + ids["cancelled"] + `", "signal": "approve", "payload": ` + approved + `}`,
			409, gateway.TypeExecutionEnded, nil, "cancelled"},
		{"a payload that fails the schema", "signaller", false, bus.TypeExecutionSignal,
			`{"executionId": "` + ids["waiting"] + `", "signal": "approve", "payload": {"approved": "yes"}}`,
			422, gateway.TypeInvalidPayload, []string{"data.payload.approved"}, ""},
		{"a payload that is no object", "signaller", true, bus.TypeExecutionSignal,
			`{"executionId": "` + ids["waiting"] + `", "signal": "approve", "payload": [true]}`,
			422, gateway.TypeInvalidPayload, []string{"data.payload"}, ""},
		{"a signal name that is none", "signaller", false, bus.TypeExecutionSignal,
			`{"executionId": "` + ids["waiting"] + `", "signal": "a.b"}`,
			400, gateway.TypeInvalidRequest, []string{"data.signal"}, ""},
		{"a schedule with a starting key", "writer", false, bus.TypeSchedulePut,
			`{"workflow": "` + wf + `", "schedule": {"id": "hourly", "cron": "@hourly"}}`, 403, gateway.TypeForbidden, nil, "admin"},
		{"a schedule with four cron fields", "admin", true, bus.TypeSchedulePut,
			`{"workflow": "` + wf + `", "schedule": {"id": "five", "cron": "*/5 * * *"}}`,
			422, gateway.TypeInvalidSchedule, []string{"data.schedule.cron"}, "has 4 fields; want 5"},
		{"a schedule without id", "admin", false, bus.TypeSchedulePut,
			`{"workflow": "` + wf + `", "schedule": {"everySeconds": 60}}`,
			422, gateway.TypeInvalidSchedule, []string{"data.schedule.id"}, "id is required"},
		{"a schedule of a workflow not registered", "admin", false, bus.TypeSchedulePut,
			`{"workflow": "never-registered", "schedule": {"id": "hourly", "cron": "@hourly"}}`,
			422, gateway.TypeUnknownWorkflow, []string{"data.workflow"}, "never-registered"},
		{"deleting a schedule there is not", "admin", true, bus.TypeScheduleDelete,
			`{"workflow": "` + wf + `", "scheduleId": "hourly"}`, 404, gateway.TypeNotFound, []string{"data.scheduleId"}, "hourly"},
	}
	commands := h.lastCommand(t)
	for _, c := range refused {
		t.Run(c.name, func(t *testing.T) {
			resp := sendEvent(t, h.key[c.key], c.structured, newEvent("ev-"+uuid.NewString(), c.typ, c.data))
			p := problem(t, resp, c.status, c.problem)
			if c.fields != nil && !slices.Equal(p.fields(), c.fields) {
				t.Errorf("fields %v, want %v: %s", p.fields(), c.fields, resp.body)
			}
			if !strings.Contains(p.Detail+fmt.Sprint(p.Errors), c.detail) {
				t.Errorf("the problem does not say %q: %s", c.detail, resp.body)
			}
		})
	}
	if got := h.lastCommand(t); got != commands {
		t.Fatalf("NOVA_CMD's last sequence went from %d to %d: a refused event was published", commands, got)
	}

	t.Run("cancel", func(t *testing.T) {
		commands := h.lastCommand(t)
		evID := "cancel-from-" + uuid.NewString()
		resp := sendEvent(t, h.key["writer"], false, newEvent(evID, bus.TypeExecutionCancel,
			`{"executionId": "`+ids["running"]+`", "reason": "wrong input", "requestedBy": "someone else"}`))
		var a steerAnswer
		decode(t, resp, http.StatusAccepted, &a)
		if a.ID != evID || a.ExecutionID != ids["running"] || a.Status != "cancelling" || a.Links.Self != "/v1/executions/"+ids["running"] {
			t.Errorf("answer %s", resp.body)
		}
		var cmd novav1.CancelExecution
		got := takeCommand(t, commands, &cmd)
		if got.typ != bus.TypeExecutionCancel || got.id != evID || got.execution != ids["running"] ||
			cmd.ExecutionId != ids["running"] || cmd.Reason != "wrong input" || cmd.RequestedBy != "writer" {
			t.Errorf("command %+v: %v", got, &cmd)
		}
		// Cancelled already: said so, nothing sent.
		commands = h.lastCommand(t)
		resp = sendEvent(t, h.key["writer"], true, newEvent("ev-"+uuid.NewString(), bus.TypeExecutionCancel,
			`{"executionId": "`+ids["cancelled"]+`"}`))
		decode(t, resp, http.StatusOK, &a)
		if a.Status != "cancelled" || h.lastCommand(t) != commands {
			t.Errorf("a cancel of an execution cancelled already: %s", resp.body)
		}
	})
	t.Run("signal", func(t *testing.T) {
		commands := h.lastCommand(t)
		evID := "decision-" + uuid.NewString()
		resp := sendEvent(t, h.key["signaller"], true, newEvent(evID, bus.TypeExecutionSignal,
			`{"executionId": "`+ids["waiting"]+`", "signal": "approve", "payload": `+approved+`, "sentBy": "someone else"}`))
		var a steerAnswer
		decode(t, resp, http.StatusAccepted, &a)
		if a.ID != evID || a.ExecutionID != ids["waiting"] || a.Signal != "approve" || a.Node != "approve" {
			t.Errorf("answer %s", resp.body)
		}
		var cmd novav1.SignalExecution
		got := takeCommand(t, commands, &cmd)
		if got.typ != bus.TypeExecutionSignal || got.id != evID || got.execution != ids["waiting"] ||
			cmd.Signal != "approve" || cmd.SentBy != "signaller" {
			t.Errorf("command %+v: %v", got, &cmd)
		}
		payload := jsonvalue.MustObject(cmd.Payload)
		if string(payload["amount"]) != "9007199254740993" || string(payload["ratio"]) != "150.0" {
			t.Errorf("payload %s: numbers not as written", payload.Bytes())
		}
	})
	t.Run("schedule", func(t *testing.T) {
		commands := h.lastCommand(t)
		resp := sendEvent(t, h.key["admin"], false, newEvent("put-"+uuid.NewString(), bus.TypeSchedulePut,
			`{"workflow": "`+wf+`", "schedule": {"id": "hourly", "cron": "0 * * * *", "timezone": "Europe/Madrid", "context": {"n": 1.50}}}`))
		var a steerAnswer
		decode(t, resp, http.StatusAccepted, &a)
		if a.Workflow != wf || a.Schedule != "hourly" || a.Links.Self != "/v1/schedules/"+wf+"/hourly" ||
			resp.header.Get("Location") != a.Links.Self {
			t.Errorf("answer %s", resp.body)
		}
		var put novav1.PutSchedule
		got := takeCommand(t, commands, &put)
		if got.typ != bus.TypeSchedulePut || put.Workflow != wf || put.Schedule.GetId() != "hourly" ||
			put.Schedule.GetTimezone() != "Europe/Madrid" || string(put.Schedule.GetContext().GetRaw()) != `{"n":1.50}` {
			t.Errorf("command %+v: %v", got, &put)
		}
	})
}

// TestEventsCancelWithTheEngine: a cancel CloudEvent ends a waiting
// execution cancelled, by the key that sent it.
func TestEventsCancelWithTheEngine(t *testing.T) {
	resp := h.do(t, h.url, request{method: "POST", path: "/v1/executions", key: h.key["writer"],
		body: startBody(`"definition": `+jsonString(approvalYAML), `"context": {}`)})
	var a acceptedDoc
	decode(t, resp, http.StatusAccepted, &a)
	id := a.ExecutionID
	deadline := time.Now().Add(time.Minute)
	for {
		var v struct {
			Execution struct {
				Waiting json.RawMessage `json:"waiting"`
			} `json:"execution"`
		}
		if resp := h.do(t, h.url, request{method: "GET", path: "/v1/executions/" + id, key: h.key["reader"]}); resp.status == http.StatusOK {
			decode(t, resp, http.StatusOK, &v)
		}
		if v.Execution.Waiting != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("execution %s never waited", id)
		}
		time.Sleep(20 * time.Millisecond)
	}
	resp = sendEvent(t, h.key["writer"], false, newEvent("ev-"+uuid.NewString(), bus.TypeExecutionCancel,
		`{"executionId": "`+id+`", "reason": "from the ingress"}`))
	decode(t, resp, http.StatusAccepted, &steerAnswer{})
	wc := h.awaitCompletion(t, id)
	if wc.GetStatus() != "cancelled" || wc.GetCancelledBy() != "writer" || wc.GetCancelReason() != "from the ingress" {
		t.Errorf("completion: status %s, cancelled by %q: %q", wc.GetStatus(), wc.GetCancelledBy(), wc.GetCancelReason())
	}
}
