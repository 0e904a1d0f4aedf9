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

// ConsumeBatch is Consume for a handler of batches: a free worker takes the
// events waiting, up to c.Batch (waiting c.BatchWait for more after the
// first, and none once c.BatchFlush ends the batch), and hands them to h at
// once. One worker takes a batch at a time, so that events are not spread
// over batches that all wait; the others meanwhile handle theirs. Each
// event is then settled on its own as Consume settles it: acked only once h
// has handled it, retried or dead-lettered alone when it failed. A batch
// whose handler panics is handled again one event at a time, so that only
// an event that panics on its own is dead-lettered.
//
// c.Middleware wraps one event's Handler; ConsumeBatch refuses it.
func (b *Bus) ConsumeBatch(ctx context.Context, c Consumer, h BatchHandler) error {
	c.defaults()
	if len(c.Middleware) > 0 {
		return fmt.Errorf("consume %s in batches: middleware wraps a handler of one event", c.Durable)
	}
	var f filler
	return b.run(ctx, c, f.take, func(hctx context.Context, msgs []jetstream.Msg) {
		b.handleBatch(hctx, ctx.Done(), c, msgs, h)
	})
}

// fillSlice is how long one pull request of a filler waits: events come
// into a batch in slices of it until c.BatchWait has passed.
const fillSlice = 10 * time.Millisecond

// filler makes the batches of a consumer, one at a time.
//
// A batch ends where c.BatchFlush ends it, at once: the pull request that
// brought its last event may bring more until it ends (it cannot be ended
// early without losing what it brings), and what it brings begins the
// next batch. So a batch neither waits on after that event nor takes in
// the first events of what comes next (one at a time, the next workflow's
// start, which then comes with the rest of that workflow).
type filler struct {
	mu   sync.Mutex
	rest jetstream.MessageBatch // the pull request a batch ended in, while it brings more
}

// take returns the next batch: the deliveries waiting for c, up to c.Batch
// in all, waiting up to c.BatchWait for them after the first, and no more
// once c.BatchFlush ends the batch or ctx ends. Until the batch is
// handled, nothing keeps its events alive: c.BatchWait and a handler's time
// must be well below c.AckWait.
func (f *filler) take(ctx context.Context, c Consumer, cons jetstream.Consumer) ([]jetstream.Msg, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := ctx.Err(); err != nil {
		// The pull's time ran out while another worker took its batch:
		// an idle renewal, not a failure (nats.go refuses an ended
		// context as an invalid option).
		return nil, err
	}
	var bt batch
	if f.rest != nil {
		if f.read(c, f.rest, &bt) {
			return bt.msgs, nil
		}
	}
	if len(bt.msgs) == 0 {
		first, err := cons.Next(jetstream.FetchContext(ctx))
		if err != nil {
			return nil, err
		}
		if bt.add(c, first) {
			return bt.msgs, nil
		}
	}
	deadline := time.Now().Add(c.BatchWait)
	for len(bt.msgs) < c.Batch {
		var (
			more jetstream.MessageBatch
			err  error
			last bool
		)
		if wait := min(time.Until(deadline), fillSlice); wait >= time.Millisecond && ctx.Err() == nil {
			more, err = cons.Fetch(c.Batch-len(bt.msgs), jetstream.FetchMaxWait(wait))
		} else {
			more, err = cons.FetchNoWait(c.Batch - len(bt.msgs))
			last = true
		}
		if err != nil {
			// The batch goes with what it has; the worker meets the error, if
			// it lasts, when it next takes events.
			break
		}
		if f.read(c, more, &bt) || last {
			break
		}
	}
	return bt.msgs, nil
}

// read adds to bt what the pull request more brings, until it ends or
// c.BatchFlush ends the batch (flushed): more is then kept for the next
// batch.
func (f *filler) read(c Consumer, more jetstream.MessageBatch, bt *batch) (flushed bool) {
	f.rest = nil
	for msg := range more.Messages() {
		if bt.add(c, msg) {
			f.rest = more
			return true
		}
	}
	return false
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
		if dctx, ev, md, ok := b.accept(ctx, c, msg); ok {
			ds = append(ds, delivery{ctx: dctx, msg: msg, md: md, ev: ev})
		}
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
