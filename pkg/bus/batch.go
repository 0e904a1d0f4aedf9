package bus

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
)

// BatchHandler handles events together (one write to a store for all of
// them, say). It returns nil when it handled them all, else one error per
// event, in order, nil for each it handled. An event's error means what a
// Handler's does: Permanent dead-letters it, any other naks it with backoff
// until MaxDeliver; a *Held keeps it for the handler to settle later.
type BatchHandler func(ctx context.Context, evs []event.Event) []error

// Held is what a BatchHandler returns for an event it handles later,
// together with events still to come (a document it writes whole once the
// rest of it arrives, say). The bus neither acks nor naks the delivery: it
// keeps it alive with in-progress acks until the handler calls Settle,
// and then settles it as it settles a handler's error (nil acks it). A
// handler that keeps events must settle each within a bound of its own: a
// held delivery counts against the consumer's acks pending, and until it
// is settled nothing redelivers it (unless the process stops).
type Held struct {
	mu      sync.Mutex
	settle  func(error) // the bus's, once it keeps the delivery
	settled bool
	err     error // what Settle was given before the bus kept the delivery
}

// Hold returns a Held for an event a BatchHandler keeps.
func Hold() *Held { return &Held{} }

func (h *Held) Error() string { return "held by the handler, to be settled later" }

// Settle ends the hold: the delivery is acked (err nil), retried or
// dead-lettered as a handler's err would have it. Only the first call
// counts.
func (h *Held) Settle(err error) {
	h.mu.Lock()
	if h.settled {
		h.mu.Unlock()
		return
	}
	h.settled, h.err = true, err
	settle := h.settle
	h.mu.Unlock()
	if settle != nil {
		settle(err)
	}
}

// keep is the bus taking the delivery: settle runs at Settle, or at once
// when the handler settled it already.
func (h *Held) keep(settle func(error)) {
	h.mu.Lock()
	h.settle = settle
	settled, err := h.settled, h.err
	h.mu.Unlock()
	if settled {
		settle(err)
	}
}

// heldBy tells the *Held an error is, if it is one.
func heldBy(err error) (*Held, bool) {
	h, ok := err.(*Held)
	return h, ok
}

// ConsumeBatch is Consume for a handler of batches: the events waiting, up
// to c.Batch (waiting c.BatchWait for more after the first, and none once
// c.BatchFlush ends the batch), go to h together, up to c.Workers batches
// at once. Each event is then settled on its own as Consume settles it:
// acked only once h has handled it, retried or dead-lettered alone when it
// failed. A batch whose handler panics is handled again one event at a
// time, so that only an event that panics on its own is dead-lettered.
//
// One pull request at a time asks for as many events as the free workers'
// batches hold (c.Workers × c.Batch, less those being gathered or
// handled), so that a busy consumer makes one pull request for many events
// and an idle one a request per pullWait. An event waits in the process
// only while its batch is gathered (c.BatchWait at most) or waits for a
// free worker: c.BatchWait and a handler's time must be well below
// c.AckWait.
//
// c.Middleware wraps one event's Handler; ConsumeBatch refuses it.
func (b *Bus) ConsumeBatch(ctx context.Context, c Consumer, h BatchHandler) error {
	c.defaults()
	if len(c.Middleware) > 0 {
		return fmt.Errorf("consume %s in batches: middleware wraps a handler of one event", c.Durable)
	}
	cons, err := b.DeclareConsumer(ctx, c)
	if err != nil {
		return err
	}
	handlerCtx := context.WithoutCancel(ctx)
	capacity := c.Workers * c.Batch
	// free holds a token per event the consumer may take now; workers one
	// per worker not handling a batch.
	free, workers := tokens(capacity), tokens(c.Workers)
	incoming := make(chan jetstream.Msg, capacity)
	var handling sync.WaitGroup
	gathered := make(chan struct{})
	go func() {
		defer close(gathered)
		for msgs := range gather(c, incoming) {
			<-workers
			handling.Go(func() {
				defer func() {
					workers <- struct{}{}
					for range msgs {
						free <- struct{}{}
					}
				}()
				b.handleBatch(handlerCtx, ctx.Done(), c, msgs, h)
			})
		}
	}()
	defer func() {
		close(incoming)
		<-gathered
		handling.Wait()
	}()
	return b.pullEach(ctx, c, cons, free, func(msg jetstream.Msg) { incoming <- msg })
}

// gather makes the batches of the events that come in, one at a time, until
// in is closed: a batch begins with the next event and takes those that
// follow, up to c.Batch, until c.BatchWait has passed since its first (with
// none, those that have come in already) or c.BatchFlush ends it, at once.
// The events after it begin the next.
func gather(c Consumer, in <-chan jetstream.Msg) <-chan []jetstream.Msg {
	out := make(chan []jetstream.Msg)
	go func() {
		defer close(out)
		for first := range in {
			var bt batch
			if !bt.add(c, first) {
				bt.fill(c, in)
			}
			out <- bt.msgs
		}
	}()
	return out
}

// fill adds the events of in to bt until it is full, c.BatchWait has
// passed, c.BatchFlush ends it or in is closed.
func (bt *batch) fill(c Consumer, in <-chan jetstream.Msg) {
	var timeout <-chan time.Time
	if c.BatchWait > 0 {
		t := time.NewTimer(c.BatchWait)
		defer t.Stop()
		timeout = t.C
	}
	for len(bt.msgs) < c.Batch {
		if timeout == nil {
			select {
			case msg, ok := <-in:
				if !ok || bt.add(c, msg) {
					return
				}
			default:
				return
			}
			continue
		}
		select {
		case msg, ok := <-in:
			if !ok || bt.add(c, msg) {
				return
			}
		case <-timeout:
			return
		}
	}
}

// batch is a batch being filled.
type batch struct {
	msgs     []jetstream.Msg
	subjects []string // of msgs, for c.BatchFlush
}

// add adds msg and tells whether c.BatchFlush ends the batch there.
func (bt *batch) add(c Consumer, msg jetstream.Msg) (ends bool) {
	bt.msgs = append(bt.msgs, msg)
	if c.BatchFlush == nil {
		return false
	}
	bt.subjects = append(bt.subjects, msg.Subject())
	return c.BatchFlush(bt.subjects)
}

// delivery is an event of a batch with what settling it needs.
type delivery struct {
	ctx context.Context // with the producer's trace, then the consumer's span
	msg jetstream.Msg
	md  *jetstream.MsgMetadata
	ev  *event.Event
}

func (b *Bus) handleBatch(ctx context.Context, stop <-chan struct{}, c Consumer, msgs []jetstream.Msg, h BatchHandler) {
	ds := make([]delivery, 0, len(msgs))
	for _, msg := range msgs {
		ds = append(ds, b.accept(ctx, c, msg)...)
	}
	if len(ds) > 0 {
		b.handleDeliveries(ctx, stop, c, ds, h)
	}
}

// handleDeliveries runs h on ds and settles each: at once, when h holds it,
// or, when h found what it writes to down, once that answers again.
func (b *Bus) handleDeliveries(ctx context.Context, stop <-chan struct{}, c Consumer, ds []delivery, h BatchHandler) {
	stopHeartbeat := heartbeat(ctx, c.AckWait/4, messages(ds)...)
	errs := b.runBatch(ctx, c.Durable, ds, h)
	stopHeartbeat()
	again := func(ds []delivery) { b.handleDeliveries(ctx, stop, c, ds, h) }
	var down []delivery
	var cause error
	for i, d := range ds {
		if hold, ok := heldBy(errs[i]); ok {
			stopHold := heartbeat(ctx, c.AckWait/4, d.msg)
			hold.keep(func(err error) {
				stopHold()
				if c.Outage != nil && IsUnavailable(err) {
					go b.keepForOutage(ctx, stop, c, []delivery{d}, err, again)
					return
				}
				b.settle(d.ctx, c, d.msg, d.md, d.ev, err)
			})
			continue
		}
		if c.Outage != nil && IsUnavailable(errs[i]) {
			down, cause = append(down, d), errs[i]
			continue
		}
		b.settle(d.ctx, c, d.msg, d.md, d.ev, errs[i])
	}
	if len(down) > 0 {
		b.keepForOutage(ctx, stop, c, down, cause, again)
	}
}

// messages are the deliveries' messages.
func messages(ds []delivery) []jetstream.Msg {
	msgs := make([]jetstream.Msg, len(ds))
	for i, d := range ds {
		msgs[i] = d.msg
	}
	return msgs
}

// runBatch runs h on the deliveries ds, each observed (span, log, metrics)
// as Consume observes one, and returns one error per event.
func (b *Bus) runBatch(ctx context.Context, consumer string, ds []delivery, h BatchHandler) []error {
	evs := make([]event.Event, len(ds))
	dones := make([]func(error), len(ds))
	for i := range ds {
		ds[i].ctx, dones[i] = b.observe(ds[i].ctx, consumer, *ds[i].ev)
		evs[i] = *ds[i].ev
	}
	if len(ds) == 1 {
		ctx = ds[0].ctx // the handling of one event continues its trace
	}
	errs, panicked := b.callBatch(ctx, consumer, evs, h)
	if panicked && len(evs) > 1 {
		// Which event made it panic is unknown: each is handled again on its
		// own, and only one that panics alone fails.
		for i := range evs {
			one, _ := b.callBatch(ds[i].ctx, consumer, evs[i:i+1], h)
			errs[i] = one[0]
		}
	}
	for i, done := range dones {
		done(errs[i])
	}
	return errs
}

// callBatch calls h and returns one error per event. A panic is a
// permanent failure of every event of the call.
func (b *Bus) callBatch(ctx context.Context, consumer string, evs []event.Event, h BatchHandler) (errs []error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			attrs := []any{"consumer", consumer, "event_id", evs[0].ID()}
			if len(evs) > 1 {
				attrs = []any{"consumer", consumer, "events", len(evs), "first_event_id", evs[0].ID()}
			}
			err := b.recovered(ctx, r, attrs...)
			errs, panicked = make([]error, len(evs)), true
			for i := range errs {
				errs[i] = err
			}
		}
	}()
	errs = h(ctx, evs)
	switch {
	case errs == nil:
		return make([]error, len(evs)), false
	case len(errs) != len(evs):
		err := fmt.Errorf("batch handler of %s returned %d errors for %d events", consumer, len(errs), len(evs))
		errs = make([]error, len(evs))
		for i := range errs {
			errs[i] = err
		}
	}
	return errs, false
}
