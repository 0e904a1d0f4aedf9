package bus_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/internal/natstest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
	)
}

func connect(t testing.TB, url string, opts ...bus.Option) *bus.Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := bus.Connect(ctx, url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

func sample(id string) *novav1.ExecuteCode {
	return &novav1.ExecuteCode{ExecutionId: "exec-1", NodeId: "n1", StepId: id, Code: "context['x'] = 1"}
}

// consume runs Consume in the background until the test ends.
func consume(t *testing.T, b *bus.Bus, c bus.Consumer, h bus.Handler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Consume(ctx, c, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consume returned %v", err)
		}
	})
}

func commandConsumer(durable string) bus.Consumer {
	return bus.Consumer{
		Stream:     bus.StreamCommands,
		Durable:    durable,
		Filters:    []string{bus.CommandSubject(durable)},
		MaxDeliver: 3,
		Backoff:    []time.Duration{10 * time.Millisecond},
	}
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// commandsDone tells whether the commands stream, a work queue, holds no
// message: each has been settled for good.
func commandsDone(b *bus.Bus) func() bool {
	return func() bool {
		s, err := b.JetStream().Stream(context.Background(), bus.StreamCommands)
		if err != nil {
			return false
		}
		info, err := s.Info(context.Background())
		return err == nil && info.State.Msgs == 0
	}
}

// deadLetters collects what lands on a consumer's dead-letter subject.
func deadLetters(t *testing.T, b *bus.Bus, consumer string) func() []*novav1.DeadLetter {
	t.Helper()
	var mu sync.Mutex
	var got []*novav1.DeadLetter
	sub, err := b.Conn().Subscribe(bus.DeadLetterSubject(consumer), func(m *nats.Msg) {
		dl := &novav1.DeadLetter{}
		ev, err := bus.DecodeNATS(m.Header, m.Data)
		if err == nil {
			err = bus.Decode(*ev, dl)
		}
		if err != nil {
			t.Errorf("dead letter undecodable: %v", err)
			return
		}
		mu.Lock()
		got = append(got, dl)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func() []*novav1.DeadLetter {
		mu.Lock()
		defer mu.Unlock()
		return append([]*novav1.DeadLetter(nil), got...)
	}
}

func TestRoundTripBinaryMode(t *testing.T) {
	url := natstest.URL(t)
	b := connect(t, url, bus.WithName("producer"))
	ctx := context.Background()

	// Read the raw message as any NATS client would see it.
	raw := make(chan *nats.Msg, 1)
	sub, err := b.Conn().Subscribe(bus.CommandSubject("sandbox"), func(m *nats.Msg) { raw <- m })
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()

	if err := b.PublishProto(ctx, bus.CommandSubject("sandbox"), "evt-1", bus.TypeSandboxExecute, sample("s1"),
		map[string]string{"executionid": "exec-1"}); err != nil {
		t.Fatal(err)
	}
	m := <-raw
	for h, want := range map[string]string{
		"ce-specversion": "1.0",
		"ce-id":          "evt-1",
		"ce-type":        bus.TypeSandboxExecute,
		"ce-source":      "nova/producer",
		"ce-dataschema":  "proto:nova.v1.ExecuteCode",
		"ce-executionid": "exec-1",
		"content-type":   "application/json",
		"Nats-Msg-Id":    "evt-1",
	} {
		if got := m.Header.Get(h); got != want {
			t.Errorf("header %s = %q, want %q", h, got, want)
		}
	}

	got := make(chan *novav1.ExecuteCode, 1)
	consume(t, b, commandConsumer("sandbox"), func(ctx context.Context, ev event.Event) error {
		var msg novav1.ExecuteCode
		if err := bus.Decode(ev, &msg); err != nil {
			return err
		}
		got <- &msg
		return nil
	})
	select {
	case msg := <-got:
		if !proto.Equal(msg, sample("s1")) {
			t.Errorf("decoded %v, want %v", msg, sample("s1"))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("event not consumed")
	}
}

func TestDuplicatePublishIsStoredOnce(t *testing.T) {
	b := connect(t, natstest.URL(t))
	ctx := context.Background()
	for range 3 {
		if err := b.PublishProto(ctx, bus.EventSubject("exec-1", bus.KindSandboxResult), "same-id",
			bus.TypeSandboxExecuted, &novav1.CodeExecuted{ExecutionId: "exec-1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 1 {
		t.Fatalf("stream holds %d messages, want 1", info.State.Msgs)
	}
}

// An event larger than the server takes is refused before it is sent,
// with an error that names both sizes and where large values go; one just
// under the limit, headers counted, is published.
func TestPublishTooLarge(t *testing.T) {
	b := connect(t, natstest.URL(t))
	ctx := context.Background()
	limit := b.Conn().MaxPayload()
	subject := bus.EventSubject("exec-large", bus.KindSandboxResult)
	publish := func(id string, stdout int) error {
		return b.PublishProto(ctx, subject, id, bus.TypeSandboxExecuted,
			&novav1.CodeExecuted{ExecutionId: "exec-large", Stdout: strings.Repeat("x", stdout)}, nil)
	}
	err := publish("too-large", int(limit))
	var big *bus.TooLargeError
	if !errors.Is(err, bus.ErrTooLarge) || !errors.As(err, &big) || big.Limit != limit || big.Size <= int(limit) {
		t.Fatalf("publish of %d bytes: %v, want ErrTooLarge naming the limit %d", limit, err, limit)
	}
	for _, want := range []string{fmt.Sprint(limit), "max_payload", "$ref", bus.TypeSandboxExecuted} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The largest body that fits with this event's headers.
	fits := int(limit) - (big.Size - int(limit)) - 64
	for ; fits < int(limit); fits += 8 {
		if err := publish(fmt.Sprintf("fits-%d", fits), fits); err != nil {
			if !errors.Is(err, bus.ErrTooLarge) {
				t.Fatalf("publish of a %d-byte output: %v", fits, err)
			}
			break
		}
	}
	s, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs == 0 {
		t.Fatal("no event up to the limit was published: the check refuses what the server takes")
	}
	last, err := s.GetLastMsgForSubject(ctx, subject)
	if err != nil {
		t.Fatal(err)
	}
	if id := last.Header.Get(jetstream.MsgIDHeader); id == "too-large" {
		t.Error("the refused event reached the stream")
	}
}

// Every stream keeps its default window, whose ids the server holds in
// memory, also on a data dir whose streams were declared with longer ones
// (NOVA_CMD had ten minutes, NOVA_EVT two).
func TestDuplicateWindows(t *testing.T) {
	url := natstest.URL(t)
	ctx := context.Background()
	old := connect(t, url, bus.WithStreamOptions(bus.StreamOptions{
		DuplicateWindow: 10 * time.Minute, EventsDuplicateWindow: 10 * time.Minute}))
	connect(t, url) // declares the streams again, with the defaults
	want := map[string]time.Duration{
		bus.StreamCommands:    bus.DefaultDuplicateWindow,
		bus.StreamEvents:      bus.DefaultEventsDuplicateWindow,
		bus.StreamDeadLetters: bus.DefaultDuplicateWindow,
	}
	for name, window := range want {
		s, err := old.JetStream().Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := s.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if info.Config.Duplicates != window {
			t.Errorf("%s remembers ids for %v, want %v", name, info.Config.Duplicates, window)
		}
	}
	if bus.DefaultDuplicateWindow < 2*(bus.DefaultPublishRetryBudget+5*bus.DefaultAckWait) {
		t.Errorf("the window %v does not cover twice a publish's retries and five redeliveries",
			bus.DefaultDuplicateWindow)
	}
	if bus.DefaultEventsDuplicateWindow < 2*bus.DefaultPublishRetryBudget {
		t.Errorf("the events' window %v does not cover twice a publish's retries",
			bus.DefaultEventsDuplicateWindow)
	}
}

func TestOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		handler     func(calls int32) error
		wantCalls   int32
		wantDLQ     bool
		wantReason  string
		wantPending bool
	}{
		{name: "success acks once", handler: func(int32) error { return nil }, wantCalls: 1},
		{name: "transient errors are retried with backoff", handler: func(n int32) error {
			if n < 3 {
				return errors.New("store unavailable")
			}
			return nil
		}, wantCalls: 3},
		{name: "permanent error is dead-lettered at once", handler: func(int32) error {
			return bus.Permanent(errors.New("definition invalid"))
		}, wantCalls: 1, wantDLQ: true, wantReason: "definition invalid"},
		{name: "max deliver dead-letters", handler: func(int32) error {
			return errors.New("always down")
		}, wantCalls: 3, wantDLQ: true, wantReason: "always down"},
		{name: "panic is contained and dead-lettered", handler: func(int32) error {
			panic("boom")
		}, wantCalls: 1, wantDLQ: true, wantReason: "handler panic: boom"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := connect(t, natstest.URL(t))
			agent := fmt.Sprintf("agent%d", i)
			dlq := deadLetters(t, b, agent)
			var calls atomic.Int32
			consume(t, b, commandConsumer(agent), func(ctx context.Context, ev event.Event) error {
				return tt.handler(calls.Add(1))
			})
			if err := b.PublishProto(context.Background(), bus.CommandSubject(agent), "e1", bus.TypeSandboxExecute, sample("s"), nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "handler calls", func() bool { return calls.Load() >= tt.wantCalls })
			if tt.wantDLQ {
				waitFor(t, "dead letter", func() bool { return len(dlq()) == 1 })
				dl := dlq()[0]
				if dl.Consumer != agent || dl.Headers["ce-id"] != "e1" || len(dl.Data) == 0 {
					t.Errorf("dead letter %+v lacks consumer, original id or data", dl)
				}
				if got := dl.Reason; len(got) < len(tt.wantReason) || got[:len(tt.wantReason)] != tt.wantReason {
					t.Errorf("reason %q, want prefix %q", got, tt.wantReason)
				}
			}
			// Nothing is redelivered after the outcome: the work queue is
			// empty. Each call came before its delivery was settled, and the
			// command left the queue at its last settlement.
			waitFor(t, "work queue empty", commandsDone(b))
			if got := calls.Load(); got != tt.wantCalls {
				t.Errorf("handler called %d times, want %d", got, tt.wantCalls)
			}
		})
	}
}

func TestMalformedEventIsDeadLettered(t *testing.T) {
	b := connect(t, natstest.URL(t))
	dlq := deadLetters(t, b, "sandbox")
	var calls atomic.Int32
	var decodeErr atomic.Value
	consume(t, b, commandConsumer("sandbox"), func(ctx context.Context, ev event.Event) error {
		calls.Add(1)
		var msg novav1.ExecuteCode
		err := bus.Decode(ev, &msg)
		decodeErr.Store(fmt.Sprint(err))
		return err
	})
	ctx := context.Background()
	// No CloudEvents headers at all.
	if _, err := b.JetStream().Publish(ctx, bus.CommandSubject("sandbox"), []byte("hello")); err != nil {
		t.Fatal(err)
	}
	// A valid envelope whose data is not the message it claims to be.
	m := nats.NewMsg(bus.CommandSubject("sandbox"))
	for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": "bad-data", "ce-type": bus.TypeSandboxExecute,
		"ce-source": "test", "content-type": "application/json"} {
		m.Header.Set(k, v)
	}
	m.Data = []byte(`{"executionId": 12`)
	if _, err := b.JetStream().PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two dead letters", func() bool { return len(dlq()) == 2 })
	if calls.Load() != 1 {
		t.Errorf("handler saw %d events, want only the well-enveloped one", calls.Load())
	}
	for _, dl := range dlq() {
		if dl.Deliveries != 1 {
			t.Errorf("malformed event delivered %d times before dead-lettering, want 1", dl.Deliveries)
		}
	}
	if s, _ := decodeErr.Load().(string); s == "" || s == "<nil>" {
		t.Errorf("Decode accepted malformed data")
	}
}

func TestWorkQueueSharedByReplicas(t *testing.T) {
	url := natstest.URL(t)
	var mu sync.Mutex
	seen := map[string]int{}
	perReplica := [2]atomic.Int32{}
	for r := range 2 {
		b := connect(t, url)
		c := commandConsumer("sandbox")
		c.Workers = 2
		consume(t, b, c, func(ctx context.Context, ev event.Event) error {
			mu.Lock()
			seen[ev.ID()]++
			mu.Unlock()
			perReplica[r].Add(1)
			time.Sleep(2 * time.Millisecond)
			return nil
		})
	}
	pub := connect(t, url)
	const n = 200
	for i := range n {
		if err := pub.PublishProto(context.Background(), bus.CommandSubject("sandbox"), fmt.Sprintf("e%d", i),
			bus.TypeSandboxExecute, sample("s"), nil); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "all handled", func() bool { mu.Lock(); defer mu.Unlock(); return len(seen) == n })
	mu.Lock()
	defer mu.Unlock()
	for id, c := range seen {
		if c != 1 {
			t.Errorf("event %s handled %d times", id, c)
		}
	}
	if perReplica[0].Load() == 0 || perReplica[1].Load() == 0 {
		t.Errorf("work not shared: %d / %d", perReplica[0].Load(), perReplica[1].Load())
	}
}

func TestTraceContextCrossesTheBus(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	defer tp.Shutdown(context.Background())
	b := connect(t, natstest.URL(t), bus.WithTracerProvider(tp))

	handled := make(chan struct{})
	consume(t, b, commandConsumer("sandbox"), func(ctx context.Context, ev event.Event) error {
		if ev.Extensions()[bus.TraceParentExtension] == nil {
			t.Error("event lacks the distributed-tracing extension")
		}
		close(handled)
		return nil
	})
	ctx, root := tp.Tracer("test").Start(context.Background(), "producer")
	if err := b.PublishProto(ctx, bus.CommandSubject("sandbox"), "t1", bus.TypeSandboxExecute, sample("s"), nil); err != nil {
		t.Fatal(err)
	}
	root.End()
	<-handled
	var spans tracetest.SpanStubs
	waitFor(t, "consumer span", func() bool {
		spans = exp.GetSpans()
		return len(spans) == 3
	})
	byName := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		byName[s.Name] = s
	}
	pub, ok1 := byName["publish "+bus.TypeSandboxExecute]
	con, ok2 := byName["sandbox handle "+bus.TypeSandboxExecute]
	if !ok1 || !ok2 {
		t.Fatalf("spans %v", byName)
	}
	if pub.Parent.SpanID() != root.SpanContext().SpanID() || con.Parent.SpanID() != pub.SpanContext.SpanID() {
		t.Errorf("want producer -> publish -> handle, got parents %s, %s", pub.Parent.SpanID(), con.Parent.SpanID())
	}
	if con.SpanContext.TraceID() != root.SpanContext().TraceID() {
		t.Error("consumer span is in another trace")
	}
}

func TestLongHandlerIsKeptAlive(t *testing.T) {
	b := connect(t, natstest.URL(t))
	var calls atomic.Int32
	c := commandConsumer("sandbox")
	// 1 s (heartbeats every 250 ms): with 300 ms, a busy machine once
	// delayed a heartbeat past it.
	c.AckWait = time.Second
	// A second worker, idle, takes at once a delivery again: a worker
	// that holds one pulls no other.
	c.Workers = 2
	done := make(chan struct{})
	consume(t, b, c, func(ctx context.Context, ev event.Event) error {
		if calls.Add(1) == 1 {
			time.Sleep(3500 * time.Millisecond) // over three AckWaits
			close(done)
		}
		return nil
	})
	if err := b.PublishProto(context.Background(), bus.CommandSubject("sandbox"), "slow", bus.TypeSandboxExecute, sample("s"), nil); err != nil {
		t.Fatal(err)
	}
	<-done
	// Once acked, the command has left the work queue: no delivery comes
	// after.
	waitFor(t, "the slow event acked", commandsDone(b))
	if calls.Load() != 1 {
		t.Errorf("slow event redelivered: %d calls", calls.Load())
	}
}

// PublishAll stores every event once, in order, across streams, and a
// second PublishAll of the same events (a transition published again)
// stores nothing more; an event for a subject no stream takes fails it.
func TestPublishAll(t *testing.T) {
	for _, atomic := range []bool{false, true} {
		t.Run(fmt.Sprintf("atomic batches %v", atomic), func(t *testing.T) { testPublishAll(t, atomic) })
	}
}

func testPublishAll(t *testing.T, atomic bool) {
	b := connect(t, natstest.URL(t), bus.WithAtomicBatches(atomic))
	ctx := context.Background()
	var out []bus.Outgoing
	for i := range 5 {
		ev, err := bus.NewEvent(fmt.Sprintf("ev-%d", i), bus.TypeSandboxExecuted, "test", &novav1.CodeExecuted{ExecutionId: fmt.Sprint(i)})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bus.Outgoing{Subject: bus.EventSubject("exec-1", bus.KindSandboxResult), Event: ev})
	}
	cmd, err := bus.NewEvent("cmd-1", bus.TypeWorkflowStart, "test", &novav1.StartWorkflow{ExecutionId: "exec-1"})
	if err != nil {
		t.Fatal(err)
	}
	out = append(out, bus.Outgoing{Subject: bus.CommandSubject(bus.AgentGraphEngine), Event: cmd})
	for range 2 {
		if err := b.PublishAll(ctx, out); err != nil {
			t.Fatal(err)
		}
	}
	s, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 5 {
		t.Fatalf("events stream holds %d messages, want 5", info.State.Msgs)
	}
	for seq := uint64(1); seq <= 5; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		if id := m.Header.Get(jetstream.MsgIDHeader); id != fmt.Sprintf("ev-%d", seq-1) {
			t.Errorf("message %d is %s, want ev-%d: the order was not kept", seq, id, seq-1)
		}
	}
	first, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if batched := first.Header.Get("Nats-Batch-Id") != ""; batched != atomic {
		t.Errorf("stored as an atomic batch: %v, want %v (headers %v)", batched, atomic, first.Header)
	}
	// A batch with an event stored before is refused as a whole; each of
	// its events is then published on its own, the old one dropped.
	newer, err := bus.NewEvent("ev-5", bus.TypeSandboxExecuted, "test", &novav1.CodeExecuted{ExecutionId: "5"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PublishAll(ctx, []bus.Outgoing{out[0], {Subject: out[0].Subject, Event: newer}}); err != nil {
		t.Fatal(err)
	}
	if info, err := s.Info(ctx); err != nil || info.State.Msgs != 6 {
		t.Fatalf("events stream after a batch with one old event: %v, %+v; want 6 messages", err, info)
	}
	cs, err := b.JetStream().Stream(ctx, bus.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	if ci, err := cs.Info(ctx); err != nil || ci.State.Msgs != 1 {
		t.Fatalf("commands stream: %v, %+v; want the one command", err, ci)
	}

	bad, _ := bus.NewEvent("bad-1", bus.TypeSandboxExecuted, "test", &novav1.CodeExecuted{})
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	err = b.PublishAll(short, append(out[:1:1], bus.Outgoing{Subject: "nowhere.at.all", Event: bad}))
	if err == nil || !strings.Contains(err.Error(), "nowhere.at.all") {
		t.Errorf("publishing to a subject no stream takes: %v, want an error naming it", err)
	}
}

// A stopped watch leaves no consumer behind: stop deletes it rather than
// leaving it to the server's inactive threshold (10 s), within which a
// process that watches each execution it starts would hold hundreds.
func TestWatchStopDeletesItsConsumer(t *testing.T) {
	b := connect(t, natstest.URL(t))
	ctx := t.Context()
	subject := bus.EventSubject("exec-watch", bus.KindWorkflowCompleted)
	got := make(chan struct{}, 1)
	stop, err := b.Watch(ctx, "watch", bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}},
		func(jetstream.Msg, *event.Event) { got <- struct{}{} })
	if err != nil {
		t.Fatal(err)
	}
	if n := consumers(t, b, bus.StreamEvents); n != 1 {
		t.Fatalf("%d consumers of %s while watching, want 1", n, bus.StreamEvents)
	}
	if err := b.PublishProto(ctx, subject, "completed-1", bus.TypeWorkflowCompleted, &novav1.WorkflowCompleted{ExecutionId: "exec-watch"}, nil); err != nil {
		t.Fatal(err)
	}
	<-got
	stop()
	// Deleted in the background, within a round trip: well before the
	// inactive threshold (10 s) would remove it.
	deadline := time.Now().Add(2 * time.Second)
	for consumers(t, b, bus.StreamEvents) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d consumers of %s 2 s after stop, want 0", consumers(t, b, bus.StreamEvents), bus.StreamEvents)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop() // a second stop is harmless
}

// BenchmarkConsumerLeftBehind prints what an ordered consumer that is
// stopped but not deleted holds in the NATS server until its inactive
// threshold passes (what Watch's stop saves), and what is left once it is
// deleted: go test -run XXX -bench ConsumerLeftBehind -benchtime 500x
func BenchmarkConsumerLeftBehind(b *testing.B) {
	nb := connect(b, natstest.URL(b))
	ctx := b.Context()
	js := nb.JetStream()
	type usage struct {
		heap, stack int64
		goroutines  int
	}
	measure := func() usage {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return usage{int64(m.HeapAlloc), int64(m.StackInuse), runtime.NumGoroutine()}
	}
	before := measure()
	var names []string
	for i := 0; b.Loop(); i++ {
		subject := bus.EventSubject(fmt.Sprintf("e%d", i), bus.KindWorkflowCompleted)
		cons, err := js.OrderedConsumer(ctx, bus.StreamEvents, jetstream.OrderedConsumerConfig{
			FilterSubjects: []string{subject}, InactiveThreshold: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		cc, err := cons.Consume(func(jetstream.Msg) {})
		if err != nil {
			b.Fatal(err)
		}
		cc.Stop()
		names = append(names, cons.CachedInfo().Name)
	}
	n := int64(len(names))
	stopped := measure()
	for _, name := range names {
		if err := js.DeleteConsumer(ctx, bus.StreamEvents, name); err != nil {
			b.Fatal(err)
		}
	}
	deleted := measure()
	b.ReportMetric(float64((stopped.heap-before.heap)/n), "heap-B/stopped")
	b.ReportMetric(float64((stopped.stack-before.stack)/n), "stack-B/stopped")
	b.ReportMetric(float64(stopped.goroutines-before.goroutines)/float64(n), "goroutines/stopped")
	b.ReportMetric(float64((deleted.heap-before.heap)/n), "heap-B/deleted")
	b.ReportMetric(float64(deleted.goroutines-before.goroutines)/float64(n), "goroutines/deleted")
}
