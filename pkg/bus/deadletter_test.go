package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/internal/natstest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func eventConsumer(durable string) bus.Consumer {
	return bus.Consumer{
		Stream:     bus.StreamEvents,
		Durable:    durable,
		Filters:    []string{"nova.evt.>"},
		MaxDeliver: 2,
		Backoff:    []time.Duration{10 * time.Millisecond},
	}
}

func refuse(context.Context, event.Event) error { return bus.Permanent(errors.New("refused")) }

// Two consumers that give up on the same stream message each get their dead
// letter: the ids name the consumer, so JetStream does not drop the second.
func TestTwoConsumersDeadLetterOneMessage(t *testing.T) {
	b := connect(t, natstest.URL(t))
	audit, results := deadLetters(t, b, "audit"), deadLetters(t, b, "graph-engine-results")
	consume(t, b, eventConsumer("audit"), refuse)
	consume(t, b, eventConsumer("graph-engine-results"), refuse)
	subject := bus.EventSubject("exec-1", bus.KindSandboxResult)
	if err := b.PublishProto(t.Context(), subject, "r-1", bus.TypeSandboxExecuted, &novav1.CodeExecuted{ExecutionId: "exec-1"}, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a dead letter for each consumer", func() bool { return len(audit()) == 1 && len(results()) == 1 })
	for _, dl := range []*novav1.DeadLetter{audit()[0], results()[0]} {
		if dl.Stream != bus.StreamEvents || dl.StreamSequence != 1 || dl.Subject != subject || dl.Truncated {
			t.Errorf("%s: stream %s seq %d subject %s truncated %v", dl.Consumer, dl.Stream, dl.StreamSequence, dl.Subject, dl.Truncated)
		}
	}
}

// Events stored as an atomic batch carry the batch's headers; their dead
// letters leave them out, so that a replay publishes the event, not a
// piece of a batch the server would refuse.
func TestBatchedEventsAreDeadLetteredWithoutTheBatch(t *testing.T) {
	b := connect(t, natstest.URL(t), bus.WithAtomicBatches(true))
	dlq := deadLetters(t, b, "audit")
	consume(t, b, eventConsumer("audit"), refuse)
	var out []bus.Outgoing
	for i := range 2 {
		ev, err := bus.NewEvent(fmt.Sprintf("batched-%d", i), bus.TypeSandboxExecuted, "test", &novav1.CodeExecuted{ExecutionId: "exec-1"})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, bus.Outgoing{Subject: bus.EventSubject("exec-1", bus.KindSandboxResult), Event: ev})
	}
	if err := b.PublishAll(t.Context(), out); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "two dead letters", func() bool { return len(dlq()) == 2 })
	for _, dl := range dlq() {
		for k := range dl.Headers {
			if bus.PublishControl(k) {
				t.Errorf("dead letter of %s keeps header %s", dl.Headers["ce-id"], k)
			}
		}
		orig, err := b.DeadLetterOriginal(t.Context(), dl)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.JetStream().PublishMsg(t.Context(), &nats.Msg{Subject: orig.Subject, Header: orig.Header, Data: orig.Data}); err != nil {
			t.Errorf("publishing the dead letter's message again: %v", err)
		}
	}
}

// A message close to the payload limit is dead-lettered with an excerpt;
// the whole message is kept beside it and can be read back.
func TestLargeMessageIsDeadLettered(t *testing.T) {
	for _, tt := range []struct {
		name     string
		consumer bus.Consumer
		subject  string
		typ      string
	}{
		{"command on a work queue", commandConsumer("sandbox"), bus.CommandSubject("sandbox"), bus.TypeSandboxExecute},
		{"result on the events stream", eventConsumer("graph-engine-results"), bus.EventSubject("exec-1", bus.KindSandboxResult), bus.TypeSandboxExecuted},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := connect(t, natstest.URL(t))
			dlq := deadLetters(t, b, tt.consumer.Durable)
			consume(t, b, tt.consumer, refuse)
			cmd := sample("big")
			cmd.Code = strings.Repeat("x", 900<<10) // 900 KiB
			if err := b.PublishProto(t.Context(), tt.subject, "big-1", tt.typ, cmd, nil); err != nil {
				t.Fatal(err)
			}
			waitFor(t, "the dead letter", func() bool { return len(dlq()) == 1 })
			dl := dlq()[0]
			if !dl.Truncated || len(dl.Data) != bus.DeadLetterExcerpt || dl.DataSize < 900<<10 || dl.OriginalSequence == 0 {
				t.Fatalf("dead letter: truncated %v, %d bytes of %d, original at %d", dl.Truncated, len(dl.Data), dl.DataSize, dl.OriginalSequence)
			}
			if dl.Stream != tt.consumer.Stream || dl.StreamSequence == 0 {
				t.Errorf("dead letter locates the message at %s %d", dl.Stream, dl.StreamSequence)
			}
			orig, err := b.DeadLetterOriginal(t.Context(), dl)
			if err != nil {
				t.Fatal(err)
			}
			if orig.Subject != tt.subject || uint64(len(orig.Data)) != dl.DataSize || !bytes.HasPrefix(orig.Data, dl.Data) || orig.Header.Get("ce-id") != "big-1" {
				t.Errorf("original: subject %s, %d bytes, ce-id %q", orig.Subject, len(orig.Data), orig.Header.Get("ce-id"))
			}
		})
	}
}

// When the dead letter cannot be published the message stays in its stream
// and is dead-lettered at a later delivery, once that works again.
func TestFailedDeadLetterIsTriedAgain(t *testing.T) {
	// One attempt per dead-letter publish: the stream stays away longer.
	b := connect(t, natstest.URL(t), bus.WithPublishRetryBudget(0))
	if err := b.JetStream().DeleteStream(t.Context(), bus.StreamDeadLetters); err != nil {
		t.Fatal(err)
	}
	var calls atomic.Int32
	consume(t, b, commandConsumer("sandbox"), func(context.Context, event.Event) error {
		calls.Add(1)
		return errors.New("always fails")
	})
	if err := b.PublishProto(t.Context(), bus.CommandSubject("sandbox"), "poison", bus.TypeSandboxExecute, sample("p"), nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the handler's three attempts", func() bool { return calls.Load() == 3 })
	// A fourth delivery: dead-lettering the third failed.
	waitFor(t, "a delivery after the handler's last", func() bool {
		cons, err := b.JetStream().Consumer(t.Context(), bus.StreamCommands, "sandbox")
		if err != nil {
			return false
		}
		info, err := cons.Info(t.Context())
		return err == nil && info.Delivered.Consumer >= 4
	})
	if err := b.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	var dl *novav1.DeadLetter
	waitFor(t, "the dead letter in its stream", func() bool {
		dl = storedDeadLetter(t, b, "sandbox")
		return dl != nil
	})
	if dl.Deliveries <= 3 || !strings.Contains(dl.Reason, "without being handled") {
		t.Errorf("dead letter after %d deliveries: %s", dl.Deliveries, dl.Reason)
	}
	if calls.Load() != 3 {
		t.Errorf("handler ran %d times, want 3 (MaxDeliver)", calls.Load())
	}
}

// A command held by a replica that stops is handled by another after the
// short ack wait, not after a long one; a delivery beyond MaxDeliver is
// dead-lettered without running the handler again.
func TestCommandOfAStoppedReplica(t *testing.T) {
	url := natstest.URL(t)
	for _, tt := range []struct {
		name       string
		maxDeliver int
		handled    bool
	}{
		{"another replica handles it", 3, true},
		{"deliveries exhausted", 1, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			durable := "sandbox-" + map[bool]string{true: "a", false: "b"}[tt.handled]
			c := commandConsumer(durable)
			c.MaxDeliver = tt.maxDeliver
			c.AckWait = time.Second
			dying := connect(t, url)
			held, release := make(chan struct{}), make(chan struct{})
			defer close(release)
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			go func() {
				err := dying.Consume(ctx, c, func(context.Context, event.Event) error {
					close(held)
					<-release
					return nil
				})
				t.Logf("dying replica's Consume returned %v", err)
			}()
			b := connect(t, url)
			if err := b.PublishProto(t.Context(), bus.CommandSubject(durable), "cmd-"+durable, bus.TypeSandboxExecute, sample("c"), nil); err != nil {
				t.Fatal(err)
			}
			<-held
			dying.Close() // as if killed: no ack, no more in-progress acks

			dlq := deadLetters(t, b, durable)
			var calls atomic.Int32
			consume(t, b, c, func(context.Context, event.Event) error { calls.Add(1); return nil })
			if tt.handled {
				waitFor(t, "the other replica to handle it", func() bool { return calls.Load() == 1 })
				return
			}
			waitFor(t, "the dead letter", func() bool { return len(dlq()) == 1 })
			if calls.Load() != 0 || dlq()[0].Deliveries != 2 {
				t.Errorf("handler ran %d times; dead letter after %d deliveries", calls.Load(), dlq()[0].Deliveries)
			}
		})
	}
}

// storedDeadLetter reads the last dead letter of consumer kept in the
// dead-letter stream, or nil.
func storedDeadLetter(t *testing.T, b *bus.Bus, consumer string) *novav1.DeadLetter {
	t.Helper()
	s, err := b.JetStream().Stream(t.Context(), bus.StreamDeadLetters)
	if err != nil {
		return nil
	}
	raw, err := s.GetLastMsgForSubject(t.Context(), bus.DeadLetterSubject(consumer))
	if err != nil {
		return nil
	}
	ev, err := bus.DecodeNATS(raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	dl := &novav1.DeadLetter{}
	if err := bus.Decode(*ev, dl); err != nil {
		t.Fatal(err)
	}
	return dl
}

// BenchmarkRedeliveryAfterReplicaStops measures how long a command held by a
// replica that stops waits before another replica handles it: with the
// sandbox's former 15 s ack wait (the baseline) and with the default one.
// Run with -benchtime 1x (each iteration waits out an ack wait).
func BenchmarkRedeliveryAfterReplicaStops(b *testing.B) {
	url := natstest.URL(b)
	for _, ackWait := range []time.Duration{15 * time.Second, bus.DefaultAckWait} {
		b.Run("ackwait="+ackWait.String(), func(b *testing.B) {
			var total time.Duration
			n := 0
			for b.Loop() {
				n++
				durable := fmt.Sprintf("bench-%s-%d", ackWait, n)
				c := commandConsumer(durable)
				c.AckWait = ackWait
				dying, err := bus.Connect(b.Context(), url)
				if err != nil {
					b.Fatal(err)
				}
				if err := dying.EnsureStreams(b.Context()); err != nil {
					b.Fatal(err)
				}
				held, release := make(chan struct{}), make(chan struct{})
				go func() {
					_ = dying.Consume(b.Context(), c, func(context.Context, event.Event) error { close(held); <-release; return nil })
				}()
				other, err := bus.Connect(b.Context(), url)
				if err != nil {
					b.Fatal(err)
				}
				if err := other.EnsureStreams(b.Context()); err != nil {
					b.Fatal(err)
				}
				if err := other.PublishProto(b.Context(), bus.CommandSubject(durable), "cmd-"+durable, bus.TypeSandboxExecute, sample("c"), nil); err != nil {
					b.Fatal(err)
				}
				<-held
				stopped := time.Now()
				dying.Close()
				handled := make(chan time.Time, 1)
				ctx, cancel := context.WithCancel(b.Context())
				go func() {
					_ = other.Consume(ctx, c, func(context.Context, event.Event) error {
						select {
						case handled <- time.Now():
						default:
						}
						return nil
					})
				}()
				total += (<-handled).Sub(stopped)
				cancel()
				close(release)
				other.Close()
			}
			b.ReportMetric(total.Seconds()/float64(n), "s/redelivery")
		})
	}
}

// A publish while the stream cannot answer (a leader being elected, a
// server restarting; here: the stream is not there yet) is tried again with
// the same message id until it is stored, once.
func TestPublishTriesAgainUntilTheStreamAnswers(t *testing.T) {
	url := natstest.URL(t)
	b := connect(t, url)
	if err := b.JetStream().DeleteStream(t.Context(), bus.StreamCommands); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	sent := b.Conn().Stats().OutMsgs
	go func() {
		done <- b.PublishProto(t.Context(), bus.CommandSubject("sandbox"), "late-1", bus.TypeSandboxExecute, sample("late"), nil)
	}()
	// Each attempt is a message out on the connection, which publishes
	// nothing else meanwhile.
	waitFor(t, "the publish's third attempt, or its end", func() bool {
		return b.Conn().Stats().OutMsgs >= sent+3 || len(done) > 0
	})
	select {
	case err := <-done:
		t.Fatalf("publish returned while the stream was missing: %v", err)
	default:
	}
	if err := b.EnsureStreams(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("publish: %v", err)
	}
	info, err := b.JetStream().Stream(t.Context(), bus.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Msgs; n != 1 {
		t.Errorf("%d messages in %s, want 1", n, bus.StreamCommands)
	}

	// Without a retry budget the same publish fails at once.
	once := connect(t, url, bus.WithPublishRetryBudget(0))
	if err := once.JetStream().DeleteStream(t.Context(), bus.StreamCommands); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	err = once.PublishProto(t.Context(), bus.CommandSubject("sandbox"), "late-2", bus.TypeSandboxExecute, sample("late"), nil)
	if err == nil || time.Since(start) > 2*time.Second {
		t.Errorf("publish without a budget to a missing stream: %v after %s, want a prompt error", err, time.Since(start))
	}
}
