package service_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

// The events of an ended execution stay KeepEnded after its completion,
// and then only until every durable consumer of the stream has read them;
// then they are purged, the execution's chain of work in the store. A
// running execution's events stay.
func TestEndedExecutionsEventsPurged(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := newAuditEnv(ctx, t)
	js := e.b.JetStream()
	stream, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	publish := func(execution, kind, typ string, msg proto.Message) {
		t.Helper()
		if err := e.b.PublishProto(ctx, bus.EventSubject(execution, kind), execution+"/"+kind, typ, msg, nil); err != nil {
			t.Fatal(err)
		}
	}
	run := func(id string, complete bool) {
		publish(id, bus.KindWorkflowStarted, bus.TypeWorkflowStarted, &novav1.WorkflowStarted{
			ExecutionId: id, WorkflowName: "kept", StartedAt: timestamppb.New(t0), Context: jsonvalue.Proto([]byte(`{"a": 1}`))})
		publish(id, bus.KindNodeStarted, bus.TypeNodeStarted, &novav1.NodeStarted{
			ExecutionId: id, NodeId: "start", NodeType: "start", Visit: 1, Sequence: 1, StartedAt: timestamppb.New(t0)})
		if complete {
			publish(id, bus.KindWorkflowCompleted, bus.TypeWorkflowCompleted, &novav1.WorkflowCompleted{
				ExecutionId: id, WorkflowName: "kept", Status: "succeeded", Path: []string{"start"},
				StartedAt: timestamppb.New(t0), CompletedAt: timestamppb.New(t0.Add(time.Second))})
		}
	}
	kept := func(id string) int {
		t.Helper()
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(bus.ExecutionFilter(id)))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, c := range info.State.Subjects {
			n += int(c)
		}
		return n
	}

	// Within KeepEnded, the events stay once recorded.
	stop := e.run(ctx, t, auditservice.Deps{KeepEnded: time.Hour, HoldFor: time.Hour})
	run("ended", true)
	e.waitAcks(ctx, t, 0)
	time.Sleep(300 * time.Millisecond)
	if n := kept("ended"); n != 3 {
		t.Fatalf("within KeepEnded, %d events of the ended execution kept, want 3", n)
	}
	stop()

	// A consumer of the deployment's own that has not read them keeps them
	// past KeepEnded.
	own, err := js.CreateOrUpdateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{
		Durable: "own-completions", FilterSubjects: []string{bus.EventFilter(bus.KindWorkflowCompleted)},
		AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		t.Fatal(err)
	}
	e.run(ctx, t, auditservice.Deps{KeepEnded: 200 * time.Millisecond, HoldFor: time.Hour})
	run("running", false)
	e.waitAcks(ctx, t, 1) // the running execution's started event is held
	time.Sleep(time.Second)
	if n := kept("ended"); n != 3 {
		t.Fatalf("with a durable consumer that has not read them, %d events of the ended execution kept, want 3", n)
	}
	batch, err := own.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		if err := m.DoubleAck(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Once it has, they go; the running execution's stay, the ended one's
	// chain is in the store.
	for kept("ended") > 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("the ended execution's events are still kept: %d", kept("ended"))
		case <-time.After(50 * time.Millisecond):
		}
	}
	if _, err := stream.GetLastMsgForSubject(ctx, bus.EventSubject("ended", bus.KindWorkflowCompleted)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the completion of the ended execution: %v, want it purged", err)
	}
	if n := kept("running"); n != 2 {
		t.Fatalf("%d events of the running execution kept, want 2", n)
	}
	doc, err := e.st.Execution(ctx, "ended")
	if err != nil || doc.Status != "succeeded" {
		t.Fatalf("the ended execution in the store: %+v, %v", doc, err)
	}
}
