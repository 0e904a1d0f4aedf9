package service_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
	// last is the stream's last sequence: of the message just published
	// (asked with a filter, unlike a purge pass's, see retentionRequests).
	last := func() uint64 {
		t.Helper()
		info, err := stream.Info(ctx, jetstream.WithSubjectFilter(bus.EventFilter(bus.KindWorkflowCompleted)))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.LastSeq
	}
	const every = 100 * time.Millisecond // a purge's period
	reqs := watchRetention(ctx, t, e.b)

	// Within KeepEnded, the events stay once recorded.
	stop := e.run(ctx, t, auditservice.Deps{KeepEnded: time.Hour, PurgeEvery: every, HoldFor: time.Hour})
	start("ended")
	complete("ended")
	e.waitAcks(ctx, t, 0)
	// Of the passes that begin once the completion is delivered to the
	// retention, the first may still run before it takes it in; the second
	// does not.
	reqs.waitRead(ctx, t, stream, last())
	reqs.waitPasses(t, 2, time.Now(), "after the retention read the ended execution's completion")
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
	// The running execution's start is recorded, running, after a short
	// HoldFor: then the retention alone keeps its events, not the audit
	// consumer's held delivery.
	running := time.Now()
	e.run(ctx, t, auditservice.Deps{KeepEnded: 200 * time.Millisecond, PurgeEvery: every, HoldFor: 40 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	start("running")
	e.waitAcks(ctx, t, 0)
	// A pass lists the consumers only once the ended execution is past
	// KeepEnded by the retention's own account; the second list shows the
	// first one's pass done, purge included.
	reqs.waitConsumerLists(t, 2, running, "with the ended execution past KeepEnded")
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
	// Each purge is logged: from where, up to where, how long it took
	// (once the purge has returned: after the events are gone).
	purged := regexp.MustCompile(`msg="retention: purged the front of the events stream" first=\d+ up_to=\d+ took=\S+`)
	for deadline := time.Now().Add(10 * time.Second); !purged.MatchString(logs.String()); {
		if time.Now().After(deadline) {
			t.Errorf("no purge in the audit service's log:\n%s", logs.String())
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := stream.GetLastMsgForSubject(ctx, bus.EventSubject("ended", bus.KindWorkflowCompleted)); !errors.Is(err, jetstream.ErrMsgNotFound) {
		t.Fatalf("the completion of the ended execution: %v, want it purged", err)
	}
	doc, err := e.st.Execution(ctx, "ended")
	if err != nil || doc.Status != "succeeded" {
		t.Fatalf("the ended execution in the store: %+v, %v", doc, err)
	}

	// An execution that started after the running one and ended stays
	// while the running one runs: the stream goes from its front. Every
	// consumer has read it, so the running execution alone keeps it.
	start("after")
	complete("after")
	ended := time.Now()
	read(1)
	e.waitAcks(ctx, t, 0)
	reqs.waitRead(ctx, t, stream, last())
	since := time.Now() // every consumer has read it, and the retention
	if past := ended.Add(200 * time.Millisecond); past.After(since) {
		since = past // it is past KeepEnded
	}
	reqs.waitPasses(t, 2, since, "once the execution that ended after the running one's start was past KeepEnded")
	if n, m := kept("running"), kept("after"); n != 2 || m != 3 {
		t.Fatalf("while one runs: %d of its events kept (want 2), %d of one ended after its start (want 3)", n, m)
	}
	complete("running")
	read(1)
	waitGone("running")
	waitGone("after")
}

// retentionRequests are the requests for the events stream that the audit
// service's retention makes, seen by a subscriber of the JetStream API's
// subjects. The retention logs only the purges it makes; these show the
// passes that purge nothing: each pass asks for the stream's info (the
// test's own requests for it name a subject filter), lists the stream's
// consumers, for their acknowledgement floors, only when its own floor is
// past the stream's first message, and then purges, or not.
type retentionRequests struct {
	mu   sync.Mutex
	seen []retentionRequest
}

type retentionRequest struct {
	kind string // "pass", "list" or "purge"
	at   time.Time
}

func watchRetention(ctx context.Context, t *testing.T, b *bus.Bus) *retentionRequests {
	t.Helper()
	r := &retentionRequests{}
	kinds := map[string]string{
		"$JS.API.STREAM.INFO." + bus.StreamEvents:   "pass",
		"$JS.API.CONSUMER.LIST." + bus.StreamEvents: "list",
		"$JS.API.STREAM.PURGE." + bus.StreamEvents:  "purge",
	}
	// One subscription: its messages come in the order they were sent.
	sub, err := b.Conn().Subscribe("$JS.API.*.*."+bus.StreamEvents, func(m *nats.Msg) {
		kind, ok := kinds[m.Subject]
		if !ok || kind == "pass" && len(m.Data) > 0 { // the test's own, with a subject filter
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.seen = append(r.seen, retentionRequest{kind, time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := b.Conn().FlushWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	return r
}

// waitPasses waits for n purge passes begun after since to end: for the
// one after them to begin.
func (r *retentionRequests) waitPasses(t *testing.T, n int, since time.Time, what string) {
	t.Helper()
	r.waitFor(t, "pass", n+1, since, fmt.Sprintf("%d purge passes %s", n, what))
}

// waitConsumerLists waits for n lists of the stream's consumers after
// since: the passes of all but the last have ended.
func (r *retentionRequests) waitConsumerLists(t *testing.T, n int, since time.Time, what string) {
	t.Helper()
	r.waitFor(t, "list", n, since, fmt.Sprintf("%d lists of the consumers' acknowledgement floors %s", n, what))
}

// waitFor waits up to 10 s for n requests of kind after since, or for a
// purge after since and then a pass (the purge's pass has ended), and
// fails the test naming what did not happen.
func (r *retentionRequests) waitFor(t *testing.T, kind string, n int, since time.Time, what string) {
	t.Helper()
	wait(t, what, func() bool {
		r.mu.Lock()
		defer r.mu.Unlock()
		count, purged := 0, false
		for _, req := range r.seen {
			if !req.at.After(since) {
				continue
			}
			switch req.kind {
			case kind:
				count++
			case "purge":
				purged = true
			}
			if count == n || purged && req.kind == "pass" {
				return true
			}
		}
		return false
	})
}

// waitRead waits until the retention's watch of the starts and ends (the
// events stream's one consumer that is not durable) has been delivered the
// message at seq. It asks for the consumers by name: a list is what a
// purge pass requests.
func (r *retentionRequests) waitRead(ctx context.Context, t *testing.T, stream jetstream.Stream, seq uint64) {
	t.Helper()
	wait(t, fmt.Sprintf("delivery of message %d to the retention's watch", seq), func() bool {
		names := stream.ConsumerNames(ctx)
		for name := range names.Name() {
			c, err := stream.Consumer(ctx, name)
			if err != nil {
				continue
			}
			if ci := c.CachedInfo(); ci.Config.Durable == "" && ci.Delivered.Stream >= seq {
				return true
			}
		}
		return false
	})
}

// wait polls done for up to 10 s, and fails the test naming what did not
// happen.
func wait(t *testing.T, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s in 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
