package bus_test

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/internal/natstest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// consumers is how many consumers stream has.
func consumers(t testing.TB, b *bus.Bus, stream string) int {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), stream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Consumers
}

func completed(t testing.TB, b *bus.Bus, id, eventID string) {
	t.Helper()
	if err := b.PublishProto(context.Background(), bus.EventSubject(id, bus.KindWorkflowCompleted), eventID,
		bus.TypeWorkflowCompleted, &novav1.WorkflowCompleted{ExecutionId: id, Status: "succeeded"}, nil); err != nil {
		t.Fatal(err)
	}
}

// addCompletion adds a wait for the completion of id, whose events land on
// the returned channel.
func addCompletion(t testing.TB, w *bus.Waits, id string) (<-chan string, func()) {
	t.Helper()
	got := make(chan string, 4)
	cancel, err := w.Add(context.Background(), bus.EventSubject(id, bus.KindWorkflowCompleted), func(ev *event.Event) {
		var wc novav1.WorkflowCompleted
		if bus.Decode(*ev, &wc) == nil {
			got <- wc.ExecutionId + " " + ev.ID()
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	return got, cancel
}

func receive(t testing.TB, got <-chan string, want string) {
	t.Helper()
	select {
	case g := <-got:
		if g != want {
			t.Fatalf("got %q, want %q", g, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no event; want %q", want)
	}
}

func nothing(t testing.TB, got <-chan string) {
	t.Helper()
	select {
	case g := <-got:
		t.Fatalf("got %q, want nothing", g)
	default:
	}
}

func TestWaitsShareOneConsumer(t *testing.T) {
	b := connect(t, natstest.URL(t))
	w := b.CompletionWaits()
	t.Cleanup(w.Close)
	before := consumers(t, b, bus.StreamEvents)

	const n = 20
	var chans []<-chan string
	for i := range n {
		got, cancel := addCompletion(t, w, fmt.Sprintf("e%d", i))
		t.Cleanup(cancel)
		chans = append(chans, got)
	}
	if got := consumers(t, b, bus.StreamEvents); got != before+1 {
		t.Fatalf("%d waits made %d consumers, want 1", n, got-before)
	}
	for i := n - 1; i >= 0; i-- {
		completed(t, b, fmt.Sprintf("e%d", i), fmt.Sprintf("done-%d", i))
	}
	completed(t, b, "nobody-waits", "done-x")
	for i, got := range chans {
		receive(t, got, fmt.Sprintf("e%d done-%d", i, i))
	}
	if w.Len() != n {
		t.Fatalf("Len = %d, want %d", w.Len(), n)
	}
}

func TestWaitsCancelAndClose(t *testing.T) {
	b := connect(t, natstest.URL(t))
	w := b.CompletionWaits()
	before := consumers(t, b, bus.StreamEvents)

	first, cancelFirst := addCompletion(t, w, "a")
	second, cancelSecond := addCompletion(t, w, "a")
	completed(t, b, "a", "one")
	receive(t, first, "a one")
	receive(t, second, "a one")

	cancelFirst()
	completed(t, b, "a", "two")
	receive(t, second, "a two") // delivered, and not to the cancelled wait
	nothing(t, first)
	cancelSecond()
	if w.Len() != 0 {
		t.Fatalf("Len = %d after every cancel, want 0", w.Len())
	}

	w.Close()
	waitFor(t, "the closed waits' consumer to be deleted", func() bool { return consumers(t, b, bus.StreamEvents) == before })
	// Used again, it makes a new consumer.
	again, cancel := addCompletion(t, w, "b")
	defer cancel()
	defer w.Close()
	completed(t, b, "b", "three")
	receive(t, again, "b three")
}

// A wait gets what is stored after its Waits' consumer was made, not what
// was stored before: it is for events the process is about to cause.
func TestWaitsDeliverOnlyNewEvents(t *testing.T) {
	b := connect(t, natstest.URL(t))
	completed(t, b, "old", "before")
	w := b.CompletionWaits()
	t.Cleanup(w.Close)
	got, cancel := addCompletion(t, w, "old")
	defer cancel()
	completed(t, b, "old", "after")
	receive(t, got, "old after")
	nothing(t, got)
}

func TestWaitsForDeadLetters(t *testing.T) {
	b := connect(t, natstest.URL(t))
	w := b.NewWaits(bus.StreamDeadLetters, bus.DeadLetterSubject(bus.AgentGraphEngine), bus.DeadLetterKey)
	t.Cleanup(w.Close)
	got := make(chan string, 2)
	cancel, err := w.Add(context.Background(), "start-1", func(ev *event.Event) {
		var dl novav1.DeadLetter
		if bus.Decode(*ev, &dl) == nil {
			got <- dl.Reason
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	for _, dl := range []*novav1.DeadLetter{
		{Reason: "someone else's", Headers: map[string]string{"ce-id": "start-2"}},
		{Reason: "mine", Headers: map[string]string{"ce-id": "start-1"}},
	} {
		if err := b.PublishProto(context.Background(), bus.DeadLetterSubject(bus.AgentGraphEngine), "dl-"+dl.Reason,
			bus.TypeDeadLetter, dl, nil); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, got, "mine")
	nothing(t, got)
}

// BenchmarkWaits is one wait for a completion, the completion published and
// received: with a consumer of its own (First, as every wait was made
// before Waits) and with Waits. cpu-us/wait is this process's CPU time, the
// embedded NATS server's included, per wait.
func BenchmarkWaits(b *testing.B) {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	run := func(b *testing.B, wait func(nb *bus.Bus, id string) (<-chan string, func())) {
		nb := connect(b, natstest.URL(b))
		start := cpu()
		for i := 0; b.Loop(); i++ {
			id := fmt.Sprintf("e%d", i)
			got, stop := wait(nb, id)
			completed(b, nb, id, "done-"+id)
			receive(b, got, id+" done-"+id)
			stop()
		}
		// The stopped watches' consumers are deleted in the background.
		waitFor(b, "the consumers to be deleted", func() bool { return consumers(b, nb, bus.StreamEvents) <= 1 })
		b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N), "cpu-us/wait")
	}
	b.Run("consumer-per-wait", func(b *testing.B) {
		run(b, func(nb *bus.Bus, id string) (<-chan string, func()) {
			done, stop, err := bus.First[novav1.WorkflowCompleted](context.Background(), nb,
				bus.EventSubject(id, bus.KindWorkflowCompleted))
			if err != nil {
				b.Fatal(err)
			}
			got := make(chan string, 1)
			go func() {
				if wc, ok := <-done; ok {
					got <- wc.ExecutionId + " done-" + wc.ExecutionId
				}
			}()
			return got, stop
		})
	})
	b.Run("shared", func(b *testing.B) {
		var w *bus.Waits
		run(b, func(nb *bus.Bus, id string) (<-chan string, func()) {
			if w == nil {
				w = nb.CompletionWaits()
				b.Cleanup(w.Close)
			}
			return addCompletion(b, w, id)
		})
	})
}
