package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// ceHeaders are the binary-mode CloudEvents headers of an event.
func ceHeaders(id, typ, schema string) nats.Header {
	h := nats.Header{}
	h.Set("ce-specversion", "1.0")
	h.Set("ce-id", id)
	h.Set("ce-type", typ)
	h.Set("ce-source", "nova/e2e")
	h.Set("content-type", bus.DataContentType)
	if schema != "" {
		h.Set("ce-dataschema", schema)
	}
	return h
}

// deadLetterOf waits for the dead letter of the message whose data is data.
func (e *env) deadLetterOf(consumer string, data []byte) *novav1.DeadLetter {
	e.t.Helper()
	var dl novav1.DeadLetter
	_, err := e.waitMsg(bus.StreamDeadLetters, bus.DeadLetterSubject(consumer), func(m jetstream.Msg) bool {
		ev, err := bus.DecodeNATS(m.Headers(), m.Data())
		return err == nil && ev.Type() == bus.TypeDeadLetter && bus.Decode(*ev, &dl) == nil && bytes.Equal(dl.Data, data)
	})
	if err != nil {
		e.t.Fatalf("dead letter on %s: %v", bus.DeadLetterSubject(consumer), err)
	}
	return &dl
}

// TestMalformedEventsAreDeadLettered: what a service cannot read goes to the
// dead-letter stream with a reason, and the service goes on serving.
func TestMalformedEventsAreDeadLettered(t *testing.T) {
	e := startEnv(t)
	js := e.bus.JetStream()
	startSchema := bus.SchemaOf(&novav1.StartWorkflow{})
	executeSchema := bus.SchemaOf(&novav1.ExecuteCode{})
	tests := []struct {
		name     string
		agent    string
		header   func(id string) nats.Header
		data     string
		inReason []string
	}{
		{name: "raw bytes to the graph engine", agent: bus.AgentGraphEngine, data: "garbage %s", inReason: []string{"malformed event"}},
		{name: "raw bytes to the sandbox", agent: bus.AgentSandbox, data: "garbage %s", inReason: []string{"malformed event"}},
		{
			name: "start event with broken JSON", agent: bus.AgentGraphEngine, data: `{"executionId": "%s",`,
			header:   func(id string) nats.Header { return ceHeaders(id, bus.TypeWorkflowStart, startSchema) },
			inReason: []string{"malformed event", bus.TypeWorkflowStart},
		},
		{
			name: "execute command with broken JSON", agent: bus.AgentSandbox, data: `{"executionId": "%s", "code": 1`,
			header:   func(id string) nats.Header { return ceHeaders(id, bus.TypeSandboxExecute, executeSchema) },
			inReason: []string{"malformed event", bus.TypeSandboxExecute},
		},
		{
			name: "execute command carrying another message", agent: bus.AgentSandbox, data: `{"executionId": "%s"}`,
			header:   func(id string) nats.Header { return ceHeaders(id, bus.TypeSandboxExecute, startSchema) },
			inReason: []string{"malformed event", "carries " + startSchema},
		},
		{
			name: "execute command naming no execution", agent: bus.AgentSandbox, data: `{"code": "x = 1", "note": "%s"}`,
			header:   func(id string) nats.Header { return ceHeaders(id, bus.TypeSandboxExecute, executeSchema) },
			inReason: []string{"without execution_id or step_id"},
		},
		{
			name: "unknown event type for the graph engine", agent: bus.AgentGraphEngine, data: `{"x": "%s"}`,
			header:   func(id string) nats.Header { return ceHeaders(id, "io.nova.something.else.v1", "") },
			inReason: []string{`does not handle event type "io.nova.something.else.v1"`},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			id := uuid.NewString()
			msg := &nats.Msg{Subject: bus.CommandSubject(tc.agent), Data: fmt.Appendf(nil, tc.data, id), Header: nats.Header{}}
			if tc.header != nil {
				msg.Header = tc.header(id)
			}
			if _, err := js.PublishMsg(e.ctx, msg); err != nil {
				t.Fatal(err)
			}
			dl := e.deadLetterOf(tc.agent, msg.Data)
			if dl.Consumer != tc.agent || dl.Subject != msg.Subject || dl.Deliveries != 1 {
				t.Errorf("dead letter: consumer %q, subject %q, deliveries %d; want %s, %s, 1 (not retried)",
					dl.Consumer, dl.Subject, dl.Deliveries, tc.agent, msg.Subject)
			}
			mustContain(t, "dead letter reason", dl.Reason, tc.inReason...)
			if tc.header != nil && dl.Headers["ce-id"] != id {
				t.Errorf("dead letter headers = %v, want the original ce-id %s", dl.Headers, id)
			}
		})
	}

	t.Run("unreadable start naming its execution completes it as failed", func(t *testing.T) {
		id := uuid.NewString()
		h := ceHeaders("start-"+id, bus.TypeWorkflowStart, startSchema)
		h.Set("ce-executionid", id)
		data := []byte(`{"definition": {"name": 42}}`)
		if _, err := js.PublishMsg(e.ctx, &nats.Msg{Subject: bus.CommandSubject(bus.AgentGraphEngine), Header: h, Data: data}); err != nil {
			t.Fatal(err)
		}
		// Whoever waits for this execution learns that it failed.
		m, err := e.waitMsg(bus.StreamEvents, bus.EventSubject(id, bus.KindWorkflowCompleted), func(jetstream.Msg) bool { return true })
		if err != nil {
			t.Fatalf("no completion for the execution: %v", err)
		}
		ev, err := bus.DecodeNATS(m.Headers(), m.Data())
		if err != nil {
			t.Fatal(err)
		}
		var wc novav1.WorkflowCompleted
		if err := bus.Decode(*ev, &wc); err != nil {
			t.Fatal(err)
		}
		if wc.ExecutionId != id || wc.Status != "failed" {
			t.Errorf("completion: execution %q, status %q; want %s failed", wc.ExecutionId, wc.Status, id)
		}
		mustContain(t, "completion error", wc.Error, "start event start-"+id+" could not be read")
		mustContain(t, "dead letter reason", e.deadLetterOf(bus.AgentGraphEngine, data).Reason, "malformed event")
		e.auditIdle()
		if exec, err := e.s.Store.Execution(e.ctx, id); err != nil {
			t.Errorf("the failed execution is not in the audit store: %v", err)
		} else if exec.Status != "failed" || exec.Error != wc.Error {
			t.Errorf("audit execution: status %q, error %q; want failed with %q", exec.Status, exec.Error, wc.Error)
		}
	})

	t.Run("a command the sandbox dead-lettered fails its node", func(t *testing.T) {
		def := parse(t, `
name: dead-lettered-command
nodes:
  - {id: start, type: start}
  - id: slow
    type: action
    code: |
      import time
      time.sleep(1)
      context["slow"] = True
  - {id: after, type: action, code: 'context["after"] = True'}
  - {id: done, type: end}
edges:
  - {from: start, to: slow}
  - {from: slow, to: after}
  - {from: after, to: done}
`)
		exec, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		// What the sandbox's consumer would publish after giving up on the command.
		cmd := &novav1.ExecuteCode{ExecutionId: exec.ID, NodeId: "slow", StepId: exec.ID + "/slow/1/1", Visit: 1, Attempt: 1}
		data, err := protojson.Marshal(cmd)
		if err != nil {
			t.Fatal(err)
		}
		dl := &novav1.DeadLetter{Consumer: bus.AgentSandbox, Subject: bus.CommandSubject(bus.AgentSandbox),
			Reason: "run failed: no space left on device", Deliveries: 3, Data: data, FailedAt: timestamppb.Now()}
		if err := e.bus.PublishProto(e.ctx, bus.DeadLetterSubject(bus.AgentSandbox), "dlq-"+exec.ID, bus.TypeDeadLetter, dl, nil); err != nil {
			t.Fatal(err)
		}
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status != "failed" {
			t.Fatalf("status %q, want failed", wc.Status)
		}
		mustContain(t, "error", wc.Error, `node "slow" failed`, "the sandbox could not handle the command after 3 deliveries",
			"no space left on device")
		// The sandbox's late result for that step is stale and changes nothing.
		e.eventually(10*time.Second, "the sandbox's result is handled", func() bool {
			s := e.consumerInfo(bus.StreamCommands, bus.AgentSandbox)
			r := e.consumerInfo(bus.StreamEvents, bus.ConsumerEngineResults)
			return s.NumPending+uint64(s.NumAckPending) == 0 && r.NumPending+uint64(r.NumAckPending) == 0 && r.Delivered.Consumer > 0
		})
		nodes := e.chain(wc.ExecutionId)
		checkChain(t, def, wc, nodes)
		if got := chainIDs(nodes); !slices.Equal(got, []string{"start", "slow"}) {
			t.Errorf("chain of work = %v, want [start slow]: nothing may run after the failure", got)
		}
		exec2, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
		if err != nil || exec2.Status != "failed" || exec2.Error != wc.Error {
			t.Errorf("execution document = %+v (%v); want failed with %q", exec2, err, wc.Error)
		}
	})

	t.Run("a result whose subject and payload name different executions touches neither", func(t *testing.T) {
		def := parse(t, `
name: two-executions
nodes:
  - {id: start, type: start}
  - id: slow
    type: action
    code: |
      import time
      time.sleep(1.5)
      context["slow"] = True
  - {id: done, type: end}
edges:
  - {from: start, to: slow}
  - {from: slow, to: done}
`)
		a, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		// A failed run of b's running step, published where a's results go.
		res := &novav1.CodeExecuted{ExecutionId: b.ID, NodeId: "slow", StepId: b.ID + "/slow/1/1", Visit: 1, Attempt: 1,
			Status: "error", Error: "forged"}
		data, err := protojson.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		subject := bus.EventSubject(a.ID, bus.KindSandboxResult)
		h := ceHeaders("forged-"+a.ID, bus.TypeSandboxExecuted, bus.SchemaOf(res))
		if _, err := js.PublishMsg(e.ctx, &nats.Msg{Subject: subject, Header: h, Data: data}); err != nil {
			t.Fatal(err)
		}
		dl := e.deadLetterOf(bus.ConsumerEngineResults, data)
		if dl.Deliveries != 1 || dl.Subject != subject {
			t.Errorf("dead letter: subject %q, deliveries %d; want %s, 1 (not retried)", dl.Subject, dl.Deliveries, subject)
		}
		mustContain(t, "dead letter reason", dl.Reason, "names two executions", a.ID, b.ID, "neither is touched")
		for _, x := range []*client.Execution{a, b} {
			wc, err := x.Wait(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if wc.Status != "succeeded" || ctxMap(wc.Context)["slow"] != true {
				t.Errorf("execution %s: status %q, error %q; want succeeded as if nothing was published", x.ID, wc.Status, wc.Error)
			}
			for _, n := range wc.Nodes {
				if n.Id == "slow" && n.Attempts != 1 {
					t.Errorf("execution %s: node slow ran %d times, want 1", x.ID, n.Attempts)
				}
			}
		}
	})

	t.Run("a dead letter of an execution that does not exist is handled once", func(t *testing.T) {
		missing := "badwf-" + uuid.NewString()
		res := &novav1.CodeExecuted{ExecutionId: missing, NodeId: "n", StepId: missing + "/n/1/1", Status: "success"}
		data, err := protojson.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		dl := &novav1.DeadLetter{Consumer: bus.ConsumerEngineResults, Subject: bus.EventSubject(missing, bus.KindSandboxResult),
			Reason: "result for execution " + missing + ": no such execution", Deliveries: 10, Data: data,
			Headers: map[string]string{"ce-type": bus.TypeSandboxExecuted}}
		if err := e.bus.PublishProto(e.ctx, bus.DeadLetterSubject(bus.ConsumerEngineResults), "dlq-"+missing, bus.TypeDeadLetter, dl, nil); err != nil {
			t.Fatal(err)
		}
		stream, err := js.Stream(e.ctx, bus.StreamDeadLetters)
		if err != nil {
			t.Fatal(err)
		}
		last, err := stream.GetLastMsgForSubject(e.ctx, bus.DeadLetterSubject(bus.ConsumerEngineResults))
		if err != nil {
			t.Fatal(err)
		}
		// Once the engine's consumer has acknowledged it, anything it would
		// have done with it (a retry, a dead letter of its own) is done.
		e.eventually(10*time.Second, "the engine acknowledges the dead letter", func() bool {
			c := e.consumerInfo(bus.StreamDeadLetters, bus.ConsumerEngineDeadLetters)
			return c.AckFloor.Stream >= last.Sequence
		})
		if c := e.consumerInfo(bus.StreamDeadLetters, bus.ConsumerEngineDeadLetters); c.NumRedelivered != 0 {
			t.Errorf("the engine's dead-letter consumer redelivered %d messages; a dead letter that can never succeed is handled once", c.NumRedelivered)
		}
		if _, err := stream.GetLastMsgForSubject(e.ctx, bus.DeadLetterSubject(bus.ConsumerEngineDeadLetters)); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("a dead letter of the dead letter (%v); want none", err)
		}
	})

	t.Run("services keep serving", func(t *testing.T) {
		wc := e.run(routeWorkflow(t, `context["branch_decision"] = "high"`), nil)
		if wc.Status != "succeeded" || ctxMap(wc.Context)["took"] != "high" {
			t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
		}
		// An agent acknowledges its command just after it publishes the
		// result, so the workflow can complete a moment before the last
		// acknowledgement lands: wait for it, then nothing may be left.
		for _, c := range []struct{ stream, durable string }{
			{bus.StreamCommands, bus.AgentGraphEngine}, {bus.StreamCommands, bus.AgentSandbox},
		} {
			settled := func() bool {
				info := e.consumerInfo(c.stream, c.durable)
				return info.NumAckPending == 0 && info.NumPending == 0
			}
			deadline := time.Now().Add(5 * time.Second)
			for !settled() && time.Now().Before(deadline) {
				time.Sleep(20 * time.Millisecond)
			}
			if info := e.consumerInfo(c.stream, c.durable); info.NumAckPending != 0 || info.NumPending != 0 {
				t.Errorf("consumer %s: %d pending, %d unacknowledged; want every bad event terminated",
					c.durable, info.NumPending, info.NumAckPending)
			}
		}
	})
}
