package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/execution"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// steerDefinition is a workflow start -> check (code) -> approve (wait for
// signal approve, whose payload must have approved, a boolean) -> end.
func steerDefinition() *novav1.WorkflowDefinition {
	return &novav1.WorkflowDefinition{Name: "refund", Nodes: []*novav1.Node{
		{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
		{Id: "check", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: "context['checked'] = True"},
		{Id: "approve", Type: novav1.NodeType_NODE_TYPE_WAIT, Signal: "approve", Description: "Approve the refund",
			Schema: `{"type": "object", "required": ["approved"], "properties": {"approved": {"type": "boolean"}}}`},
		{Id: "end", Type: novav1.NodeType_NODE_TYPE_END},
	}, Edges: []*novav1.Edge{{From: "start", To: "check"}, {From: "check", To: "approve"}, {From: "approve", To: "end"}}}
}

// steerStack is an embedded NATS server with NOVA's streams and the
// engine's bucket of states, which nova cancel and nova signal reach
// through NATS_URL. No engine runs: the tests store the states it would
// and answer the commands as it would.
type steerStack struct {
	bus *bus.Bus
	kv  jetstream.KeyValue
}

func newSteerStack(ctx context.Context, t *testing.T) *steerStack {
	t.Helper()
	b := devstacktest.Bus(ctx, t, "steer-test")
	t.Setenv("NATS_URL", b.Conn().ConnectedUrl())
	kv, err := b.JetStream().CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bus.BucketExecutions})
	if err != nil {
		t.Fatal(err)
	}
	return &steerStack{bus: b, kv: kv}
}

// put stores st as the engine's state of its execution.
func (s *steerStack) put(ctx context.Context, t *testing.T, st *novav1.ExecutionState) {
	t.Helper()
	if st.Definition == nil {
		st.Definition = steerDefinition()
	}
	st.StartedAt = timestamppb.New(time.Now().Add(-time.Minute))
	b, err := proto.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.kv.Put(ctx, st.ExecutionId, b); err != nil {
		t.Fatal(err)
	}
}

// lastCommand is the last command on the graph engine's subject, its
// sequence 0 when there is none.
func (s *steerStack) lastCommand(ctx context.Context, t *testing.T) (uint64, *event.Event) {
	t.Helper()
	st, err := s.bus.JetStream().Stream(ctx, bus.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, bus.CommandSubject(bus.AgentGraphEngine))
	if err != nil {
		return 0, nil
	}
	ev, err := bus.DecodeNATS(raw.Header, raw.Data)
	if err != nil {
		t.Fatalf("the command is not a CloudEvent: %v", err)
	}
	return raw.Sequence, ev
}

// answer plays the engine: once a command comes after sequence after, it
// calls respond with it (respond publishes what the engine would).
func (s *steerStack) answer(ctx context.Context, t *testing.T, after uint64, respond func(*event.Event)) {
	t.Helper()
	done := make(chan struct{})
	t.Cleanup(func() { <-done })
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			if seq, ev := s.lastCommand(ctx, t); seq > after {
				respond(ev)
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
}

// publish publishes msg as an event of execution id, as the engine does.
func (s *steerStack) publish(ctx context.Context, t *testing.T, id, kind, eventID, typ string, msg proto.Message) {
	if err := s.bus.PublishProto(ctx, bus.EventSubject(id, kind), eventID, typ, msg,
		map[string]string{bus.ExtensionExecutionID: id}); err != nil {
		t.Error(err)
	}
}

// runCLI runs a nova command function and returns its exit code, stdout
// and stderr.
func runCLI(ctx context.Context, cmd func(context.Context, []string, io.Writer, io.Writer) int, args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	code := cmd(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// nova cancel refuses wrong arguments before it connects to anything.
func TestCancelArguments(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "want exactly one EXECUTION_ID"},
		{[]string{"a", "b"}, "want exactly one EXECUTION_ID"},
		{[]string{"a", "--reason", strings.Repeat("x", 1001)}, "--reason is 1001 bytes"},
		{[]string{"a", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"a", "--no-such-flag"}, "flag provided but not defined"},
	} {
		code, out, errOut := runCLI(t.Context(), cmdCancel, c.args...)
		if code != exitInvalid || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("nova cancel %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// nova cancel checks the execution's state, sends the cancel command the
// engine reads, and waits for the execution's completion.
func TestCancel(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s := newSteerStack(ctx, t)
	for _, st := range []*novav1.ExecutionState{
		{ExecutionId: "done", Status: execution.StatusSucceeded},
		{ExecutionId: "cancelled", Status: execution.StatusCancelled, CancelledBy: "ops", CancelReason: "duplicate refund"},
		{ExecutionId: "run-1", Status: execution.StatusRunning, CurrentNode: "check"},
		{ExecutionId: "run-2", Status: execution.StatusRunning, CurrentNode: "approve", WaitingFor: "approve"},
		{ExecutionId: "run-3", Status: execution.StatusRunning, CurrentNode: "check"},
		{ExecutionId: "run-4", Status: execution.StatusRunning, CurrentNode: "check"},
	} {
		s.put(ctx, t, st)
	}

	t.Run("refused", func(t *testing.T) {
		for _, c := range []struct {
			id, want string
		}{
			{"nope", `no execution "nope"`},
			{"no.such", `no execution "no.such" (not an execution id)`},
			{"done", "execution done is succeeded: only a running execution can be steered"},
		} {
			code, out, errOut := runCLI(ctx, cmdCancel, c.id)
			if code != exitInvalid || out != "" || !strings.Contains(errOut, c.want) {
				t.Errorf("nova cancel %s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.id, code, out, errOut, c.want)
			}
		}
		if seq, _ := s.lastCommand(ctx, t); seq != 0 {
			t.Errorf("a command was sent for a refused cancel")
		}
	})
	t.Run("cancelled already", func(t *testing.T) {
		code, out, errOut := runCLI(ctx, cmdCancel, "cancelled")
		if code != exitOK || out != "execution cancelled was cancelled already by ops: duplicate refund\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		code, out, _ = runCLI(ctx, cmdCancel, "cancelled", "--json")
		var res cancelResult
		if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || !res.Already || res.Status != "cancelled" || res.CancelledBy != "ops" {
			t.Errorf("--json: exit %d, %s", code, out)
		}
		if seq, _ := s.lastCommand(ctx, t); seq != 0 {
			t.Errorf("a command was sent for an execution cancelled already")
		}
	})
	t.Run("sent without waiting", func(t *testing.T) {
		code, out, errOut := runCLI(ctx, cmdCancel, "run-1", "--reason", "wrong input file", "--timeout", "0", "--json")
		var res cancelResult
		if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Status != "cancelling" || res.ExecutionID != "run-1" {
			t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
		_, ev := s.lastCommand(ctx, t)
		var cmd novav1.CancelExecution
		if ev == nil || bus.Decode(*ev, &cmd) != nil {
			t.Fatalf("no cancel command: %v", ev)
		}
		if ev.Type() != bus.TypeExecutionCancel || ev.ID() != execution.CancelEventID("run-1") || ev.Extensions()[bus.ExtensionExecutionID] != "run-1" {
			t.Errorf("command %s", ev)
		}
		if cmd.ExecutionId != "run-1" || cmd.Reason != "wrong input file" || cmd.RequestedBy != cliUser() {
			t.Errorf("CancelExecution %v", &cmd)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		after, _ := s.lastCommand(ctx, t)
		s.answer(ctx, t, after, func(ev *event.Event) {
			var cmd novav1.CancelExecution
			if err := bus.Decode(*ev, &cmd); err != nil {
				t.Error(err)
				return
			}
			s.publish(ctx, t, cmd.ExecutionId, bus.KindWorkflowCompleted, cmd.ExecutionId+"/completed", bus.TypeWorkflowCompleted,
				&novav1.WorkflowCompleted{ExecutionId: cmd.ExecutionId, Status: execution.StatusCancelled, CancelledBy: cmd.RequestedBy,
					CancelReason: cmd.Reason, Error: "cancelled by " + cmd.RequestedBy + ": " + cmd.Reason})
		})
		code, out, errOut := runCLI(ctx, cmdCancel, "run-2", "--reason", "not needed")
		if want := "execution run-2 cancelled by " + cliUser() + ": not needed\n"; code != exitOK || out != want {
			t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
		}
	})
	t.Run("ended otherwise first", func(t *testing.T) {
		after, _ := s.lastCommand(ctx, t)
		s.answer(ctx, t, after, func(*event.Event) {
			s.publish(ctx, t, "run-3", bus.KindWorkflowCompleted, "run-3/completed", bus.TypeWorkflowCompleted,
				&novav1.WorkflowCompleted{ExecutionId: "run-3", Status: execution.StatusSucceeded})
		})
		code, out, errOut := runCLI(ctx, cmdCancel, "run-3")
		if code != exitFailed || out != "execution run-3 ended succeeded before the cancel took effect\n" {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("no answer", func(t *testing.T) {
		code, out, errOut := runCLI(ctx, cmdCancel, "run-4", "--timeout", "300ms")
		if code != exitFailed || !strings.Contains(out, "the cancel was sent; the execution had not ended within 300ms") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
}
