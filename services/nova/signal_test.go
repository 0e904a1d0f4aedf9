package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// nova signal refuses wrong arguments and payloads before it connects to
// anything.
func TestSignalArguments(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "want EXECUTION_ID and SIGNAL"},
		{[]string{"a"}, "want EXECUTION_ID and SIGNAL"},
		{[]string{"a", "b", "c"}, "want EXECUTION_ID and SIGNAL"},
		{[]string{"a", "approve", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"a", "approve", "--data", "[1]"}, "--data: the payload must be a JSON object"},
		{[]string{"a", "approve", "--data", "{"}, "--data: the payload must be a JSON object"},
		{[]string{"a", "approve", "--set", "novalue"}, `--set "novalue": want key=value`},
		{[]string{"a", "approve", "--set", "=1"}, `--set "=1": want key=value`},
		{[]string{"a", "approve.now"}, `"approve.now" is not a signal name`},
	} {
		code, out, errOut := runCLI(t.Context(), cmdSignal, c.args...)
		if code != exitInvalid || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("nova signal %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// --data and --set make the payload, numbers kept as written; a --set
// value is JSON when it is valid JSON, else a string.
func TestSignalPayload(t *testing.T) {
	got, err := signalPayload(`{"a": 1, "id": 9007199254740993, "keep": [1.50]}`,
		[]string{"a=2", "ok=true", "n=12", "price=150.0", "name=ana", `quoted="x"`, `obj={"k": 1.50}`, "sentence=not json", "empty="})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "2", "id": "9007199254740993", "keep": "[1.50]", "ok": "true", "n": "12", "price": "150.0",
		"name": `"ana"`, "quoted": `"x"`, "obj": `{"k":1.50}`, "sentence": `"not json"`, "empty": `""`}
	if len(got) != len(want) {
		t.Errorf("payload %s, want the keys of %v", got.Bytes(), want)
	}
	for k, v := range want {
		if string(got[k]) != v {
			t.Errorf("payload[%q] = %s, want %s", k, got[k], v)
		}
	}
}

// nova signal checks the execution's state and the payload against the
// wait node's schema, sends the signal the engine reads, and says whether
// the node moved on or the engine rejected it.
func TestSignal(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := newSteerStack(ctx, t)
	waiting := func(id string) *novav1.ExecutionState {
		return &novav1.ExecutionState{ExecutionId: id, Status: execution.StatusRunning, CurrentNode: "approve", WaitingFor: "approve",
			Nodes: map[string]*novav1.NodeState{"approve": {Visits: 2}}}
	}
	for _, st := range []*novav1.ExecutionState{
		{ExecutionId: "done", Status: execution.StatusFailed},
		{ExecutionId: "busy", Status: execution.StatusRunning, CurrentNode: "check"},
		waiting("wait-1"), waiting("wait-2"), waiting("wait-3"), waiting("wait-4"),
	} {
		s.put(ctx, t, st)
	}

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			args []string
			want string
		}{
			{[]string{"nope", "approve"}, `no execution "nope"`},
			{[]string{"done", "approve"}, "execution done is failed: only a running execution can be steered"},
			{[]string{"wait-1", "reject"}, `execution wait-1: no wait node of workflow "refund" waits for signal "reject"`},
			{[]string{"wait-1", "approve"}, `payload field "approved": is required (the schema of wait node "approve")`},
			{[]string{"wait-1", "approve", "--set", "approved=yes"}, `payload field "approved": must be true or false`},
			{[]string{"wait-1", "approve", "--data", `{"approved": 1}`}, `payload field "approved": must be true or false`},
		} {
			code, out, errOut := runCLI(ctx, cmdSignal, c.args...)
			if code != exitInvalid || out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("nova signal %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
			}
		}
		if seq, _ := s.lastCommand(ctx, t); seq != 0 {
			t.Errorf("a command was sent for a refused signal")
		}
	})
	t.Run("sent without waiting", func(t *testing.T) {
		code, out, errOut := runCLI(ctx, cmdSignal, "wait-1", "approve", "--data", `{"amount": 9007199254740993}`,
			"--set", "approved=true", "--set", "note=<ok>", "--timeout", "0", "--json")
		var res signalResult
		if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != signalSent || res.Node != "approve" || res.EventID == "" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		_, ev := s.lastCommand(ctx, t)
		var cmd novav1.SignalExecution
		if ev == nil || bus.Decode(*ev, &cmd) != nil {
			t.Fatalf("no signal command: %v", ev)
		}
		if ev.Type() != bus.TypeExecutionSignal || ev.ID() != res.EventID || ev.Extensions()[bus.ExtensionExecutionID] != "wait-1" {
			t.Errorf("command %s", ev)
		}
		if cmd.ExecutionId != "wait-1" || cmd.Signal != "approve" || cmd.SentBy != cliUser() {
			t.Errorf("SignalExecution %v", &cmd)
		}
		if got := string(jsonvalue.MustObject(cmd.Payload).Bytes()); got != `{"amount":9007199254740993,"approved":true,"note":"<ok>"}` {
			t.Errorf("payload %s", got)
		}
	})
	// respond plays the engine for the next signal sent.
	respond := func(t *testing.T, answer func(cmd *novav1.SignalExecution, eventID string)) {
		after, _ := s.lastCommand(ctx, t)
		s.answer(ctx, t, after, func(ev *event.Event) {
			var cmd novav1.SignalExecution
			if err := bus.Decode(*ev, &cmd); err != nil {
				t.Error(err)
				return
			}
			answer(&cmd, ev.ID())
		})
	}
	t.Run("taken", func(t *testing.T) {
		respond(t, func(cmd *novav1.SignalExecution, _ string) {
			id := cmd.ExecutionId
			// The node's earlier visit, then this one.
			for visit := int32(1); visit <= 2; visit++ {
				s.publish(ctx, t, id, bus.KindNodeCompleted, fmt.Sprintf("%s/approve/%d", id, visit), bus.TypeNodeCompleted,
					&novav1.NodeCompleted{ExecutionId: id, NodeId: "approve", NodeType: "wait", Visit: visit, Status: execution.NodeSuccess,
						PathTaken: map[int32]string{1: "check", 2: "end"}[visit],
						Signal:    &novav1.SignalReceived{Name: cmd.Signal, Payload: cmd.Payload, SentBy: cmd.SentBy}})
			}
		})
		code, out, errOut := runCLI(ctx, cmdSignal, "wait-2", "approve", "--set", "approved=true")
		if code != exitOK || out != "execution wait-2: signal \"approve\" taken; node approve moved on to end\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("rejected", func(t *testing.T) {
		respond(t, func(cmd *novav1.SignalExecution, eventID string) {
			id := cmd.ExecutionId
			// Another signal's rejection, then this one's.
			for _, of := range []string{"signal-other", eventID} {
				s.publish(ctx, t, id, bus.KindSignalRejected, id+"/signal-rejected/"+of, bus.TypeSignalRejected,
					&novav1.SignalRejected{ExecutionId: id, Signal: cmd.Signal, SignalEventId: of, Reason: "rejected: " + of})
			}
		})
		code, out, errOut := runCLI(ctx, cmdSignal, "wait-3", "approve", "--set", "approved=false", "--json")
		var res signalResult
		if code != exitFailed || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != signalRejected ||
			res.Reason != "rejected: "+res.EventID {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("kept", func(t *testing.T) {
		// No wait node waits for it yet (busy runs check): the engine keeps it.
		respond(t, func(cmd *novav1.SignalExecution, eventID string) {
			id := cmd.ExecutionId
			s.publish(ctx, t, id, bus.KindSignalKept, id+"/signal-kept/"+eventID, bus.TypeSignalKept,
				&novav1.SignalKept{ExecutionId: id, Signal: cmd.Signal, SignalEventId: eventID, Kept: 1})
		})
		code, out, errOut := runCLI(ctx, cmdSignal, "busy", "approve", "--set", "approved=true")
		if code != exitOK || out != "execution busy: signal \"approve\" kept: no wait node waits for it yet; the first to come takes it (1 kept)\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		code, out, errOut := runCLI(ctx, cmdSignal, "wait-4", "approve", "--set", "approved=true", "--timeout", "300ms")
		if code != exitFailed || !strings.Contains(out, "the signal was sent; no answer within 300ms") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
}
