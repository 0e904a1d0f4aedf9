package bus

import (
	"context"
	"sync"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Waits shares one ordered consumer of a stream among every wait of a
// process for an event that process is about to cause: the completion of a
// workflow it starts, the dead letter of a command it sends. A Watch per
// wait costs a consumer made and deleted (two API requests, the server's
// consumer with its goroutines): a wait for a completion, the completion
// published and received, took 1.03-1.07 ms of CPU (client and embedded
// server) with a consumer of its own and 0.33-0.38 ms with Waits, where a
// wait is an entry in a map (BenchmarkWaits, a 2-core machine).
//
// The consumer delivers what the stream stores after it is made, which Add
// makes sure of before it returns: a wait added before the command that
// leads to its event is published cannot miss the event. A wait for an
// event that may already be stored (an execution started earlier) needs a
// Watch or First, which read the stream from its start.
type Waits struct {
	b      *Bus
	stream string
	filter string
	// key names the wait an event is for ("" for none).
	key func(subject string, ev *event.Event) string

	mu      sync.Mutex
	stop    func() // nil until the consumer is made
	waiters map[string]map[*waiter]struct{}
}

type waiter struct{ each func(*event.Event) }

// NewWaits is the waits for events of stream that match filter; key names
// the wait each event is for. Its consumer is made on the first Add.
func (b *Bus) NewWaits(stream, filter string, key func(subject string, ev *event.Event) string) *Waits {
	return &Waits{b: b, stream: stream, filter: filter, key: key, waiters: map[string]map[*waiter]struct{}{}}
}

// CompletionWaits is the waits for workflow completions
// (nova.evt.*.workflow.completed), each wait keyed by its completion's
// subject (EventSubject(execution, KindWorkflowCompleted)).
func (b *Bus) CompletionWaits() *Waits {
	return b.NewWaits(StreamEvents, EventFilter(KindWorkflowCompleted), SubjectKey)
}

// SubjectKey is the key of Waits for events whose subject names the wait
// (nova.evt.<execution>.workflow.completed).
func SubjectKey(subject string, _ *event.Event) string { return subject }

// Add calls each with every event for key stored from now on, until cancel
// is called; each runs on the consumer's goroutine and must not block. The
// first Add makes the shared consumer (other Adds wait for it); if that
// fails, Add returns the error and the next Add tries again.
func (w *Waits) Add(ctx context.Context, key string, each func(*event.Event)) (cancel func(), err error) {
	wt := &waiter{each: each}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stop == nil {
		// The consumer outlives this call: its context only bounds the making.
		stop, err := w.b.Watch(ctx, "wait for "+w.filter, w.stream,
			jetstream.OrderedConsumerConfig{FilterSubjects: []string{w.filter}, DeliverPolicy: jetstream.DeliverNewPolicy},
			w.deliver)
		if err != nil {
			return nil, err
		}
		w.stop = stop
	}
	set := w.waiters[key]
	if set == nil {
		set = map[*waiter]struct{}{}
		w.waiters[key] = set
	}
	set[wt] = struct{}{}
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if set := w.waiters[key]; set != nil {
			delete(set, wt)
			if len(set) == 0 {
				delete(w.waiters, key)
			}
		}
	}, nil
}

// WaitFirst adds to w a wait for the first event for key that decodes as
// M; the channel gets it once. Call cancel when done.
func WaitFirst[M any, PM interface {
	*M
	proto.Message
}](ctx context.Context, w *Waits, key string) (<-chan PM, func(), error) {
	got := make(chan PM, 1)
	cancel, err := w.Add(ctx, key, func(ev *event.Event) { offer(got, ev) })
	if err != nil {
		return nil, nil, err
	}
	return got, cancel, nil
}

func (w *Waits) deliver(m jetstream.Msg, ev *event.Event) {
	key := w.key(m.Subject(), ev)
	w.mu.Lock()
	var each []func(*event.Event)
	for wt := range w.waiters[key] {
		each = append(each, wt.each)
	}
	w.mu.Unlock()
	for _, f := range each {
		f(ev)
	}
}

// Len is how many waits are open.
func (w *Waits) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for _, set := range w.waiters {
		n += len(set)
	}
	return n
}

// Close stops the shared consumer and deletes it; open waits get nothing
// more. A later Add makes a new one.
func (w *Waits) Close() {
	w.mu.Lock()
	stop := w.stop
	w.stop = nil
	w.mu.Unlock()
	// Outside the lock: a delivery in progress takes it.
	if stop != nil {
		stop()
	}
}

// DeadLetterKey is the key of Waits for dead letters: the id of the event
// that was dead-lettered (its ce-id header).
func DeadLetterKey(_ string, ev *event.Event) string {
	var dl novav1.DeadLetter
	if Decode(*ev, &dl) != nil {
		return ""
	}
	return dl.GetHeaders()["ce-id"]
}
