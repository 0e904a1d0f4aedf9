package service_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

// auditEnv is an embedded NATS and store with the audit's streams and
// consumer declared, the service not running.
type auditEnv struct {
	b  *bus.Bus
	st *chainstore.Store
}

func newAuditEnv(ctx context.Context, t *testing.T) auditEnv {
	t.Helper()
	stack, err := devstack.Start(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stack.Close() })
	b, err := bus.Connect(ctx, stack.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := chainstore.Open(ctx, stack.MongoURI, "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })
	if _, err := b.DeclareConsumer(ctx, auditservice.ConsumerSpec(0)); err != nil {
		t.Fatal(err)
	}
	return auditEnv{b: b, st: st}
}

// run runs the audit service with deps' HoldFor and MaxHeld until stop,
// which returns once Run has.
func (e auditEnv) run(ctx context.Context, t *testing.T, deps auditservice.Deps) (stop func()) {
	t.Helper()
	deps.Bus, deps.Store = e.b, e.st
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- auditservice.Run(runCtx, deps) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func (e auditEnv) publish(ctx context.Context, t *testing.T, execution, kind, id, typ string, msg *novav1.WorkflowStarted) {
	t.Helper()
	if err := e.b.PublishProto(ctx, bus.EventSubject(execution, kind), id, typ, msg, nil); err != nil {
		t.Fatal(err)
	}
}

// waitAcks waits until the audit consumer has nothing left to deliver and
// ackPending deliveries unsettled, for 100 ms on end (a batch being written
// is unsettled for a moment too).
func (e auditEnv) waitAcks(ctx context.Context, t *testing.T, ackPending int) {
	t.Helper()
	cons, err := e.b.JetStream().Consumer(ctx, bus.StreamEvents, auditservice.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	var since time.Time
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case info.NumPending != 0 || info.NumAckPending != ackPending:
			since = time.Time{}
		case since.IsZero():
			since = time.Now()
		case time.Since(since) >= 100*time.Millisecond:
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pending %d, acks pending %d; want 0, %d", info.NumPending, info.NumAckPending, ackPending)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// A started event whose execution is still running is kept, unsettled,
// until the execution completes, and the execution's document is then
// written whole; one whose execution does not complete is written
// running when the service stops, or once HoldFor has passed even when no
// other event comes; beyond MaxHeld a started event is written at once.
func TestStartedHeldUntilCompletion(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := newAuditEnv(ctx, t)
	t0 := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	input := jsonvalue.Proto([]byte(`{"amount": 250}`))
	started := func(id string) {
		e.publish(ctx, t, id, bus.KindWorkflowStarted, id+"/started", bus.TypeWorkflowStarted,
			&novav1.WorkflowStarted{ExecutionId: id, WorkflowName: "held", StartedAt: timestamppb.New(t0), Context: input})
	}
	status := func(id string) string {
		exec, err := e.st.Execution(ctx, id)
		if err != nil {
			return "" // not recorded
		}
		return exec.Status
	}

	started("held-1")
	started("held-2")
	stop := e.run(ctx, t, auditservice.Deps{HoldFor: time.Hour})
	e.waitAcks(ctx, t, 2)
	if s1, s2 := status("held-1"), status("held-2"); s1 != "" || s2 != "" {
		t.Fatalf("while held, the store has the executions: %q, %q", s1, s2)
	}

	if err := e.b.PublishProto(ctx, bus.EventSubject("held-1", bus.KindWorkflowCompleted), "held-1/completed",
		bus.TypeWorkflowCompleted, &novav1.WorkflowCompleted{ExecutionId: "held-1", WorkflowName: "held", Status: "succeeded",
			StartedAt: timestamppb.New(t0), CompletedAt: timestamppb.New(t0.Add(time.Second))}, nil); err != nil {
		t.Fatal(err)
	}
	e.waitAcks(ctx, t, 1)
	exec, err := e.st.Execution(ctx, "held-1")
	if err != nil {
		t.Fatal(err)
	}
	if exec.Status != "succeeded" || exec.DurationMs != 1000 || fmt.Sprint(exec.InitialContext["amount"]) != "250" {
		t.Errorf("held-1: status %q, %d ms, initial context %v; want succeeded, 1000, amount 250",
			exec.Status, exec.DurationMs, exec.InitialContext)
	}
	if s := status("held-2"); s != "" {
		t.Errorf("held-2 recorded %q while it runs and is held", s)
	}

	stop()
	e.waitAcks(ctx, t, 0)
	if s := status("held-2"); s != chainstore.StatusRunning {
		t.Errorf("held-2 after the service stopped: %q; want %s", s, chainstore.StatusRunning)
	}

	// Held for a short time, and no other event comes.
	e.run(ctx, t, auditservice.Deps{HoldFor: 200 * time.Millisecond})
	started("held-3")
	e.waitAcks(ctx, t, 0)
	if s := status("held-3"); s != chainstore.StatusRunning {
		t.Errorf("held-3 after HoldFor: %q; want %s", s, chainstore.StatusRunning)
	}
}

// Beyond MaxHeld a started event is written at once, running.
func TestStartedHeldAtMostMaxHeld(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e := newAuditEnv(ctx, t)
	for _, id := range []string{"max-1", "max-2", "max-3"} {
		e.publish(ctx, t, id, bus.KindWorkflowStarted, id+"/started", bus.TypeWorkflowStarted,
			&novav1.WorkflowStarted{ExecutionId: id, WorkflowName: "held"})
	}
	e.run(ctx, t, auditservice.Deps{HoldFor: time.Hour, MaxHeld: 2})
	e.waitAcks(ctx, t, 2)
	list, err := e.st.ListExecutions(ctx, chainstore.ListFilter{Workflow: "held", Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Status != chainstore.StatusRunning {
		t.Errorf("recorded %+v; want one execution, running", list)
	}
}
