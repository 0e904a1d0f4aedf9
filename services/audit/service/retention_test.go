package service_test

import (
	"context"
	"errors"
	"log/slog"
	"regexp"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/syncbuf"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

// The stream is purged from its front of the events of executions ended
// KeepEnded ago, once every durable consumer of the stream has read them;
// a running execution keeps its events and what came after them.
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
	start := func(id string) {
		publish(id, bus.KindWorkflowStarted, bus.TypeWorkflowStarted, &novav1.WorkflowStarted{
			ExecutionId: id, WorkflowName: "kept", StartedAt: timestamppb.New(t0), Context: jsonvalue.Proto([]byte(`{"a": 1}`))})
		publish(id, bus.KindNodeStarted, bus.TypeNodeStarted, &novav1.NodeStarted{
			ExecutionId: id, NodeId: "start", NodeType: "start", Visit: 1, Sequence: 1, StartedAt: timestamppb.New(t0)})
	}
	complete := func(id string) {
		publish(id, bus.KindWorkflowCompleted, bus.TypeWorkflowCompleted, &novav1.WorkflowCompleted{
			ExecutionId: id, WorkflowName: "kept", Status: "succeeded", Path: []string{"start"},
			StartedAt: timestamppb.New(t0), CompletedAt: timestamppb.New(t0.Add(time.Second))})
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
	waitGone := func(id string) {
		t.Helper()
		for kept(id) > 0 {
			select {
			case <-ctx.Done():
				t.Fatalf("the events of %s are still kept: %d", id, kept(id))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	const every, purges = 100 * time.Millisecond, time.Second // a purge's period, and several

	// Within KeepEnded, the events stay once recorded.
	stop := e.run(ctx, t, auditservice.Deps{KeepEnded: time.Hour, PurgeEvery: every, HoldFor: time.Hour})
	start("ended")
	complete("ended")
	e.waitAcks(ctx, t, 0)
	time.Sleep(purges)
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
	var logs syncbuf.Buffer
	e.run(ctx, t, auditservice.Deps{KeepEnded: 200 * time.Millisecond, PurgeEvery: every, HoldFor: time.Hour,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	start("running")
	e.waitAcks(ctx, t, 1) // the running execution's started event is held
	time.Sleep(purges)
	if n := kept("ended"); n != 3 {
		t.Fatalf("with a durable consumer that has not read them, %d events of the ended execution kept, want 3", n)
	}
	read := func(n int) { // n completions by the consumer of our own
		t.Helper()
		batch, err := own.Fetch(n, jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.DoubleAck(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	read(1)
	// Once it has, they go; the running execution's stay, the ended one's
	// chain is in the store.
	waitGone("ended")
	// Each purge is logged: from where, up to where, how long it took.
	if l := logs.String(); !regexp.MustCompile(`msg="retention: purged the front of the events stream" first=\d+ up_to=\d+ took=\S+`).MatchString(l) {
		t.Errorf("no purge in the audit service's log:\n%s", l)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, bus.EventSubject("ended", bus.KindWorkflowCompleted)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the completion of the ended execution: %v, want it purged", err)
	}
	doc, err := e.st.Execution(ctx, "ended")
	if err != nil || doc.Status != "succeeded" {
		t.Fatalf("the ended execution in the store: %+v, %v", doc, err)
	}

	// An execution that started after the running one and ended stays
	// while the running one runs: the stream goes from its front.
	start("after")
	complete("after")
	time.Sleep(purges)
	if n, m := kept("running"), kept("after"); n != 2 || m != 3 {
		t.Fatalf("while one runs: %d of its events kept (want 2), %d of one ended after its start (want 3)", n, m)
	}
	complete("running")
	read(2)
	waitGone("running")
	waitGone("after")
}
