package service_test

import (
	"context"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

// publishAged publishes the facts of an execution of two nodes and a step
// that started at start and, unless end is zero, ended at end, as the
// engine would, and returns the stream sequence of the first.
func publishAged(ctx context.Context, t *testing.T, b *bus.Bus, id string, start, end time.Time) uint64 {
	t.Helper()
	facts := []fact{
		{id + "/started", bus.KindWorkflowStarted, bus.TypeWorkflowStarted, &novav1.WorkflowStarted{
			ExecutionId: id, WorkflowName: "aged", StartedAt: timestamppb.New(start)}},
		{id + "/start", bus.KindNodeCompleted, bus.TypeNodeCompleted, &novav1.NodeCompleted{
			ExecutionId: id, NodeId: "start", NodeType: "start", Visit: 1, Sequence: 1, Status: "success"}},
		{id + "/step", bus.KindStepCompleted, bus.TypeStepCompleted, &novav1.StepCompleted{
			ExecutionId: id, NodeId: "work", Visit: 1, StepNumber: 1, StepId: id + "/work/1/execute",
			StepName: "execute", AgentName: "sandbox", Status: "success"}},
		{id + "/work", bus.KindNodeCompleted, bus.TypeNodeCompleted, &novav1.NodeCompleted{
			ExecutionId: id, NodeId: "work", NodeType: "action", Visit: 1, Sequence: 2, Status: "success"}},
	}
	if !end.IsZero() {
		facts = append(facts, fact{id + "/completed", bus.KindWorkflowCompleted, bus.TypeWorkflowCompleted, &novav1.WorkflowCompleted{
			ExecutionId: id, WorkflowName: "aged", Status: "succeeded", Path: []string{"start", "work"},
			StartedAt: timestamppb.New(start), CompletedAt: timestamppb.New(end)}})
	}
	var first uint64
	for _, f := range facts {
		if err := b.PublishProto(ctx, bus.EventSubject(id, f.kind), f.id, f.typ, f.msg, nil); err != nil {
			t.Fatal(err)
		}
		if first == 0 {
			s, err := b.JetStream().Stream(ctx, bus.StreamEvents)
			if err != nil {
				t.Fatal(err)
			}
			m, err := s.GetLastMsgForSubject(ctx, bus.EventSubject(id, f.kind))
			if err != nil {
				t.Fatal(err)
			}
			first = m.Sequence
		}
	}
	return first
}

// records is a slog.Handler that passes on the records whose message has
// a prefix.
type records struct {
	prefix string
	ch     chan slog.Record
}

func (r records) Enabled(context.Context, slog.Level) bool { return true }
func (r records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r records) WithGroup(string) slog.Handler            { return r }
func (r records) Handle(_ context.Context, rec slog.Record) error {
	if strings.HasPrefix(rec.Message, r.prefix) {
		r.ch <- rec
	}
	return nil
}

// With NOVA_AUDIT_RETENTION set, the audit service on the embedded store
// (FerretDB, no TTL indexes) deletes the executions that ended longer ago
// than the retention, every document of theirs, and leaves whole the
// running ones and those that ended since.
func TestAuditDeletesPastTheRetention(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	env := newAuditEnv(ctx, t)
	now := time.Now()
	publishAged(ctx, t, env.b, "old", now.Add(-3*time.Hour), now.Add(-2*time.Hour))
	publishAged(ctx, t, env.b, "young", now.Add(-10*time.Minute), now.Add(-5*time.Minute))
	publishAged(ctx, t, env.b, "running", now.Add(-3*time.Hour), time.Time{})

	log := records{prefix: "chain of work retention", ch: make(chan slog.Record, 10)}
	env.run(ctx, t, auditservice.Deps{Logger: slog.New(log), HoldFor: 100 * time.Millisecond,
		Retention: time.Hour, SweepEvery: 100 * time.Millisecond})
	select {
	case rec := <-log.ch:
		var deleted int64
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "deleted" {
				deleted = a.Value.Int64()
			}
			return true
		})
		if rec.Level != slog.LevelInfo || deleted != 1 {
			t.Fatalf("the sweep logged %s %q deleted=%d; want 1 deleted", rec.Level, rec.Message, deleted)
		}
	case <-ctx.Done():
		t.Fatal("no sweep deleted anything")
	}
	// The sweep that deleted old ran after every event was recorded:
	// old's completion is the last event of old, recorded with or after
	// the others.
	env.waitAcks(ctx, t, 0)
	counts, err := env.st.AllCounts(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if c, ok := counts["old"]; ok {
		t.Errorf("old ended 2 h ago, retention 1 h: documents left %v", c)
	}
	whole := map[string]int64{"executions": 1, "chain_of_work": 2, "chain_of_work_steps": 1}
	for _, id := range []string{"young", "running"} {
		if !maps.Equal(counts[id], whole) {
			t.Errorf("%s: documents %v, want %v", id, counts[id], whole)
		}
	}
}
