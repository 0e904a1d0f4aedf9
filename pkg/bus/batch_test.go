package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/internal/natstest"
	"github.com/novaflow/nova/pkg/syncbuf"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// consumeBatch runs ConsumeBatch in the background until the test ends.
func consumeBatch(t *testing.T, b *bus.Bus, c bus.Consumer, h bus.BatchHandler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.ConsumeBatch(ctx, c, h) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("consume returned %v", err)
		}
	})
}

// Events waiting are handled in batches, and each is settled on its own:
// one that fails is retried or dead-lettered alone, without the others of
// its batch being handled again, and a panic fails only the event that
// panics when handled alone.
func TestConsumeBatchOutcomes(t *testing.T) {
	const events, odd = 10, "e3"
	tests := []struct {
		name string
		// handle is what the handler does with the odd event at its n-th call.
		handle func(n int) error
		// panics: the handler panics on a batch that holds the odd event.
		panics     bool
		wantOdd    int // calls that saw the odd event
		wantOthers int // calls that saw each other event
		wantReason string
	}{
		{name: "all handled", handle: func(int) error { return nil }, wantOdd: 1, wantOthers: 1},
		{name: "a transient failure is retried alone", handle: func(n int) error {
			if n == 1 {
				return errors.New("store unavailable")
			}
			return nil
		}, wantOdd: 2, wantOthers: 1},
		{name: "a lasting failure is dead-lettered alone", handle: func(int) error {
			return errors.New("always down")
		}, wantOdd: 2, wantOthers: 1, wantReason: "always down"},
		{name: "a permanent failure is dead-lettered at once", handle: func(int) error {
			return bus.Permanent(errors.New("invalid"))
		}, wantOdd: 1, wantOthers: 1, wantReason: "invalid"},
		{name: "a panic fails the event that panics alone", panics: true,
			wantOdd: 2, wantOthers: 2, wantReason: "handler panic: boom"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := connect(t, natstest.URL(t))
			durable := fmt.Sprintf("batch%d", i)
			dlq := deadLetters(t, b, durable)
			for e := range events {
				id := fmt.Sprintf("e%d", e)
				if err := b.PublishProto(t.Context(), bus.EventSubject("exec-1", bus.KindSandboxResult), id,
					bus.TypeSandboxExecuted, &novav1.CodeExecuted{ExecutionId: "exec-1", StepId: id}, nil); err != nil {
					t.Fatal(err)
				}
			}

			var mu sync.Mutex
			calls := map[string]int{}
			var sizes []int
			c := eventConsumer(durable)
			c.Batch = events
			// The events waiting arrive one by one from the pull request: a
			// batch waits for the rest (and is handled once full), so that
			// a slow machine (the race detector) does not split them.
			c.BatchWait = 500 * time.Millisecond
			consumeBatch(t, b, c, func(ctx context.Context, evs []event.Event) []error {
				mu.Lock()
				defer mu.Unlock()
				sizes = append(sizes, len(evs))
				for _, ev := range evs {
					calls[ev.ID()]++
				}
				errs := make([]error, len(evs))
				for i, ev := range evs {
					if ev.ID() == odd {
						if tt.panics {
							panic("boom")
						}
						errs[i] = tt.handle(calls[odd])
					}
				}
				return errs
			})

			waitFor(t, "every event handled and settled", func() bool {
				// A consumer just declared may tell no pending message for
				// a moment, before its first delivery.
				mu.Lock()
				seen := len(calls)
				mu.Unlock()
				if seen < events {
					return false
				}
				cons, err := b.JetStream().Consumer(t.Context(), bus.StreamEvents, durable)
				if err != nil {
					return false
				}
				info, err := cons.Info(t.Context())
				return err == nil && info.NumPending == 0 && info.NumAckPending == 0 && info.NumRedelivered == 0
			})
			if tt.wantReason != "" {
				waitFor(t, "dead letter", func() bool { return len(dlq()) == 1 })
				if dl := dlq()[0]; dl.Headers["ce-id"] != odd || !strings.HasPrefix(dl.Reason, tt.wantReason) {
					t.Errorf("dead letter of %s, reason %q; want %s, %q", dl.Headers["ce-id"], dl.Reason, odd, tt.wantReason)
				}
			}
			// Every call came before its event was settled; each dead letter
			// was stored before its event was, and is received once.
			waitFor(t, "every dead letter stored received", func() bool { return len(dlq()) == storedDeadLetters(t, b, durable) })
			mu.Lock()
			defer mu.Unlock()
			if len(dlq()) != 0 && tt.wantReason == "" || len(dlq()) > 1 {
				t.Errorf("%d dead letters", len(dlq()))
			}
			for e := range events {
				id := fmt.Sprintf("e%d", e)
				want := tt.wantOthers
				if id == odd {
					want = tt.wantOdd
				}
				if calls[id] != want {
					t.Errorf("%s handled %d times, want %d (calls %v)", id, calls[id], want, calls)
				}
			}
			if slices.Max(sizes) < 2 {
				t.Errorf("batch sizes %v: the events waiting were not handled together", sizes)
			}
		})
	}
}

// Middleware wraps a handler of one event; ConsumeBatch says so rather
// than leave it out.
func TestConsumeBatchRefusesMiddleware(t *testing.T) {
	b := connect(t, natstest.URL(t))
	c := eventConsumer("batch")
	c.Middleware = []bus.Middleware{func(h bus.Handler) bus.Handler { return h }}
	err := b.ConsumeBatch(t.Context(), c, func(context.Context, []event.Event) []error { return nil })
	if err == nil {
		t.Fatal("ConsumeBatch accepted middleware")
	}
}

// A batch waits for more events no longer than until one that
// Consumer.BatchFlush names: its reader need not wait for BatchWait. And it
// ends there: events after it, even those the same pull request brought,
// begin the next batch.
func TestConsumeBatchFlushesOnAnEventNamed(t *testing.T) {
	b := connect(t, natstest.URL(t))
	c := eventConsumer("flush")
	c.Batch, c.BatchWait, c.AckWait = 10, time.Minute, 2*time.Minute
	c.BatchFlush = func(subjects []string) bool {
		return strings.HasSuffix(subjects[len(subjects)-1], "."+bus.KindWorkflowCompleted)
	}
	got := batchIDs(t, b, c)
	for _, e := range []struct{ id, kind string }{
		{"node", bus.KindNodeCompleted}, {"done", bus.KindWorkflowCompleted},
		{"next", bus.KindNodeCompleted}, {"done-next", bus.KindWorkflowCompleted},
	} {
		if err := b.PublishProto(t.Context(), bus.EventSubject("exec-1", e.kind), e.id,
			bus.TypeSandboxExecuted, &novav1.CodeExecuted{ExecutionId: "exec-1"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	wantBatches(t, got, "node,done", "next,done-next")
}

// batchIDs consumes c's events in batches and sends each batch's event ids.
func batchIDs(t *testing.T, b *bus.Bus, c bus.Consumer) <-chan []string {
	got := make(chan []string, 4)
	consumeBatch(t, b, c, func(ctx context.Context, evs []event.Event) []error {
		var ids []string
		for _, ev := range evs {
			ids = append(ids, ev.ID())
		}
		got <- ids
		return nil
	})
	return got
}

// wantBatches checks the next batches of batchIDs, each ids joined by commas.
func wantBatches(t *testing.T, got <-chan []string, want ...string) {
	t.Helper()
	for _, w := range want {
		select {
		case ids := <-got:
			if strings.Join(ids, ",") != w {
				t.Errorf("batch %v, want %s", ids, w)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("the batch %s waited on after the event that ends it", w)
		}
	}
}

// Consumer.BatchFlush decides on the batch so far, not on one event: here a
// batch ends at its second completion, and so holds two workflows.
func TestConsumeBatchFlushSeesTheBatchSoFar(t *testing.T) {
	b := connect(t, natstest.URL(t))
	c := eventConsumer("flush-two")
	c.Batch, c.BatchWait, c.AckWait = 10, time.Minute, 2*time.Minute
	c.BatchFlush = func(subjects []string) bool {
		completions := 0
		for _, s := range subjects {
			if strings.HasSuffix(s, "."+bus.KindWorkflowCompleted) {
				completions++
			}
		}
		return completions == 2
	}
	got := batchIDs(t, b, c)
	for i, kind := range []string{
		bus.KindNodeCompleted, bus.KindWorkflowCompleted, bus.KindNodeCompleted, bus.KindWorkflowCompleted,
		bus.KindNodeCompleted, bus.KindWorkflowCompleted, bus.KindNodeCompleted, bus.KindWorkflowCompleted,
	} {
		if err := b.PublishProto(t.Context(), bus.EventSubject(fmt.Sprintf("exec-%d", i/2), kind), fmt.Sprint(i),
			bus.TypeSandboxExecuted, &novav1.CodeExecuted{ExecutionId: "exec"}, nil); err != nil {
			t.Fatal(err)
		}
	}
	wantBatches(t, got, "0,1,2,3", "4,5,6,7")
}

// Idle workers of a batch consumer renew their pulls quietly: one whose pull
// time runs out while another holds the taking of batches meets no error.
func TestConsumeBatchIdleWorkersRenewQuietly(t *testing.T) {
	// Restored after the consumers this test starts have stopped (cleanups run
	// last registered first), which read it until then.
	t.Cleanup(bus.SetPullWait(50 * time.Millisecond))
	var logs syncbuf.Buffer
	b := connect(t, natstest.URL(t), bus.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))))
	c := eventConsumer("idle")
	c.Workers, c.Batch, c.BatchWait = 4, 10, 10*time.Millisecond
	// The pull requests, each of which the worker holding the taking lets
	// run out while the others' pull time runs out waiting for it.
	var pulls atomic.Int32
	sub, err := b.Conn().Subscribe(fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", bus.StreamEvents, c.Durable),
		func(*nats.Msg) { pulls.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	consumeBatch(t, b, c, func(ctx context.Context, evs []event.Event) []error { return nil })
	waitFor(t, "20 pull requests renewed", func() bool { return pulls.Load() >= 20 })
	if got := logs.String(); strings.Contains(got, "level=WARN") {
		t.Errorf("idle workers warned:\n%s", got)
	}
}

// A handler may keep an event to settle later (a Held): its delivery is
// kept alive past AckWait, neither acked nor redelivered, until Settle
// acks it or, with an error, has it delivered again.
func TestConsumeBatchHeldUntilSettled(t *testing.T) {
	for i, settleErr := range []error{nil, errors.New("store unavailable")} {
		t.Run(fmt.Sprint(settleErr), func(t *testing.T) {
			b := connect(t, natstest.URL(t))
			durable := fmt.Sprintf("held%d", i)
			for _, id := range []string{"e0", "e1", "e2"} {
				if err := b.PublishProto(t.Context(), bus.EventSubject("exec-1", bus.KindSandboxResult), id,
					bus.TypeSandboxExecuted, &novav1.CodeExecuted{ExecutionId: "exec-1", StepId: id}, nil); err != nil {
					t.Fatal(err)
				}
			}
			var mu sync.Mutex
			calls := map[string]int{}
			var hold *bus.Held
			c := eventConsumer(durable)
			c.AckWait = time.Second
			consumeBatch(t, b, c, func(ctx context.Context, evs []event.Event) []error {
				mu.Lock()
				defer mu.Unlock()
				errs := make([]error, len(evs))
				for i, ev := range evs {
					calls[ev.ID()]++
					if ev.ID() == "e1" && hold == nil {
						hold = bus.Hold()
						errs[i] = hold
					}
				}
				return errs
			})
			// info is the consumer's counts; ok is false until it is declared.
			info := func() (pending, ackPending, redelivered int, ok bool) {
				cons, err := b.JetStream().Consumer(t.Context(), bus.StreamEvents, durable)
				if err != nil {
					return 0, 0, 0, false
				}
				ci, err := cons.Info(t.Context())
				if err != nil {
					return 0, 0, 0, false
				}
				return int(ci.NumPending), ci.NumAckPending, ci.NumRedelivered, true
			}
			waitFor(t, "the others acked", func() bool {
				pending, ackPending, _, ok := info()
				return ok && pending == 0 && ackPending == 1
			})
			waitAckWaits(t, b, c.AckWait, 2) // while e1 is held
			if _, ackPending, redelivered, _ := info(); ackPending != 1 || redelivered != 0 {
				t.Fatalf("while held: %d acks pending, %d redelivered; want 1, 0", ackPending, redelivered)
			}
			mu.Lock()
			hold.Settle(settleErr)
			hold.Settle(nil) // only the first counts
			mu.Unlock()
			waitFor(t, "settled", func() bool {
				_, ackPending, _, ok := info()
				return ok && ackPending == 0
			})
			want := 1
			if settleErr != nil {
				want = 2 // delivered again, and then handled
			}
			waitFor(t, "the held event's deliveries", func() bool {
				mu.Lock()
				defer mu.Unlock()
				return calls["e1"] == want
			})
			// Every call came before its delivery was settled: with none
			// unsettled and none to come, no more come.
			waitFor(t, "every delivery settled", func() bool {
				pending, ackPending, _, ok := info()
				return ok && pending == 0 && ackPending == 0
			})
			mu.Lock()
			defer mu.Unlock()
			if calls["e0"] != 1 || calls["e1"] != want || calls["e2"] != 1 {
				t.Errorf("handled %v; want e0 and e2 once, e1 %d times", calls, want)
			}
		})
	}
}

// waitAckWaits waits until the server has redelivered n times, on a
// consumer of its own with that AckWait, a message of the events stream
// it delivers first now and that is never acknowledged: until a delivery
// made before now that nothing kept alive would have been redelivered n
// times.
func waitAckWaits(t *testing.T, b *bus.Bus, ackWait time.Duration, n int) {
	t.Helper()
	js := b.JetStream()
	const clock = "ack-wait-clock"
	cons, err := js.CreateOrUpdateConsumer(t.Context(), bus.StreamEvents, jetstream.ConsumerConfig{
		Durable: clock, AckPolicy: jetstream.AckExplicitPolicy, AckWait: ackWait, MaxAckPending: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = js.DeleteConsumer(context.WithoutCancel(t.Context()), bus.StreamEvents, clock) }()
	for delivered := uint64(0); delivered <= uint64(n); {
		msg, err := cons.Next(jetstream.FetchMaxWait(ackWait + 10*time.Second))
		if err != nil {
			t.Fatalf("a message never acknowledged was not delivered again after %d deliveries: %v", delivered, err)
		}
		md, err := msg.Metadata()
		if err != nil {
			t.Fatal(err)
		}
		delivered = md.NumDelivered
	}
}

// storedDeadLetters is how many dead letters of consumer the dead-letter
// stream holds.
func storedDeadLetters(t *testing.T, b *bus.Bus, consumer string) int {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), bus.StreamDeadLetters)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(bus.DeadLetterSubject(consumer)))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, c := range info.State.Subjects {
		n += int(c)
	}
	return n
}
