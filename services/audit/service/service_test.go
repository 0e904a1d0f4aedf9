package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

// fact is an event the audit service is to record, as published.
type fact struct {
	id, kind, typ string
	msg           proto.Message
}

// The events waiting for the audit service are recorded in batches: out
// of order, one of them published twice under two ids (as a producer that
// restarted publishes it again), the chain of work is the one documented;
// an event that cannot be recorded is dead-lettered at once on its own,
// and every other is acked.
func TestBatchRecordsWhatWaits(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := newAuditEnv(ctx, t)
	b, st := e.b, e.st
	var mu sync.Mutex
	var deadLetters []string
	sub, err := b.Conn().Subscribe(bus.DeadLetterSubject(auditservice.Consumer), func(m *nats.Msg) {
		var dl novav1.DeadLetter
		ev, err := bus.DecodeNATS(m.Header, m.Data)
		if err == nil {
			err = bus.Decode(*ev, &dl)
		}
		if err != nil {
			t.Errorf("dead letter undecodable: %v", err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		deadLetters = append(deadLetters, dl.Headers["ce-id"])
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })

	const id = "exec-batch"
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	node := func(n string, seq int32) *novav1.NodeCompleted {
		return &novav1.NodeCompleted{ExecutionId: id, NodeId: n, NodeType: "action", Visit: 1, Sequence: seq, Status: "success"}
	}
	step := &novav1.StepCompleted{ExecutionId: id, NodeId: "a", Visit: 1, StepNumber: 1, StepId: id + "/a/1/execute",
		StepName: "execute", AgentName: "sandbox", Status: "success"}
	facts := []fact{
		{"completed", bus.KindWorkflowCompleted, bus.TypeWorkflowCompleted, &novav1.WorkflowCompleted{
			ExecutionId: id, WorkflowName: "batch", Status: "succeeded", Path: []string{"start", "a", "end"},
			StartedAt: timestamppb.New(t0), CompletedAt: timestamppb.New(t0.Add(time.Second)),
		}},
		{"node-a", bus.KindNodeCompleted, bus.TypeNodeCompleted, node("a", 2)},
		{"step-a", bus.KindStepCompleted, bus.TypeStepCompleted, step},
		{"no-node-id", bus.KindNodeCompleted, bus.TypeNodeCompleted, &novav1.NodeCompleted{ExecutionId: id}},
		{"node-start", bus.KindNodeCompleted, bus.TypeNodeCompleted, node("start", 1)},
		{"node-a-again", bus.KindNodeCompleted, bus.TypeNodeCompleted, node("a", 2)},
		{"started", bus.KindWorkflowStarted, bus.TypeWorkflowStarted, &novav1.WorkflowStarted{
			ExecutionId: id, WorkflowName: "batch", StartedAt: timestamppb.New(t0),
		}},
		{"step-a-again", bus.KindStepCompleted, bus.TypeStepCompleted, step},
	}
	for _, f := range facts {
		if err := b.PublishProto(ctx, bus.EventSubject(id, f.kind), f.id, f.typ, f.msg, nil); err != nil {
			t.Fatal(err)
		}
	}
	// A fact whose data does not decode.
	m := nats.NewMsg(bus.EventSubject(id, bus.KindNodeCompleted))
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": "garbled", "ce-type": bus.TypeNodeCompleted,
		"ce-source": "test", "content-type": bus.DataContentType} {
		m.Header.Set(k, v)
	}
	m.Data = []byte(`{"executionId": 12`)
	if _, err := b.JetStream().PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	e.run(ctx, t, auditservice.Deps{})

	cons, err := b.JetStream().Consumer(ctx, bus.StreamEvents, auditservice.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		n := len(deadLetters)
		mu.Unlock()
		if info.NumPending == 0 && info.NumAckPending == 0 && n == 2 {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pending %d, ack pending %d, dead letters %d; want 0, 0, 2", info.NumPending, info.NumAckPending, n)
		case <-time.After(10 * time.Millisecond):
		}
	}
	mu.Lock()
	if got := strings.Join(deadLetters, ","); got != "no-node-id,garbled" && got != "garbled,no-node-id" {
		t.Errorf("dead letters of %s, want no-node-id and garbled", got)
	}
	mu.Unlock()

	exec, err := st.Execution(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if exec.Status != "succeeded" || exec.DurationMs != 1000 || exec.StartedAt == nil || !exec.StartedAt.Equal(t0) {
		t.Errorf("execution: status %q, duration %d ms, started %v; want succeeded, 1000, %v", exec.Status, exec.DurationMs, exec.StartedAt, t0)
	}
	chain, err := st.Chain(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, n := range chain {
		got = append(got, fmt.Sprintf("%s:%d steps", n.NodeID, len(n.Steps)))
	}
	if strings.Join(got, ",") != "start:0 steps,a:1 steps" {
		t.Errorf("chain = %v, want start, then a with its step", got)
	}
	counts, err := st.Counts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if w := map[string]int64{chainstore.ExecutionsCollection: 1, chainstore.ChainCollection: 2, chainstore.StepsCollection: 1}; fmt.Sprint(counts) != fmt.Sprint(w) {
		t.Errorf("counts = %v, want %v", counts, w)
	}
}
