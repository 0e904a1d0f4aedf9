package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/propagation"
)

// Handler handles one event. A nil error acks it; an error marked Permanent
// (or a malformed event) terminates and dead-letters it; any other error
// naks it with backoff until MaxDeliver, then dead-letters it.
type Handler func(ctx context.Context, ev event.Event) error

// Middleware wraps a Handler (recover, tracing, logging, metrics, ...).
type Middleware func(Handler) Handler

// Consumer describes a durable pull consumer.
type Consumer struct {
	Stream  string
	Durable string
	// Filters are the subjects this consumer reads.
	Filters []string
	// AckWait is how long a delivery held by a process that stopped waits
	// before it is redelivered (default DefaultAckWait). While a handler
	// runs, in-progress acks every AckWait/4 keep its delivery, however long
	// it takes.
	AckWait time.Duration
	// MaxDeliver bounds the handler's attempts; the last failed one is
	// dead-lettered. The server does not bound deliveries: one beyond
	// MaxDeliver (the process stopped during each, or dead-lettering failed)
	// is dead-lettered without running the handler, so nothing stays in a
	// stream unseen.
	MaxDeliver int
	// Backoff is the Nak delay after the n-th failed delivery (the last
	// value repeats).
	Backoff []time.Duration
	// Workers is how many events this process handles at once; with
	// ConsumeBatch, how many batches.
	Workers int
	// Batch is the most events one call of a BatchHandler gets
	// (ConsumeBatch only; default 1).
	Batch int
	// BatchWait is how long ConsumeBatch waits, after a batch's first event,
	// for more before it handles a batch smaller than Batch. Zero takes only
	// the events already waiting.
	BatchWait time.Duration
	// BatchFlush, when set, is asked as each event joins a batch whether the
	// batch ends there (ConsumeBatch only): it gets the subjects of the
	// batch's events so far, the newest last. A batch it ends is handled at
	// once, and the events after it begin the next. It ends a batch that a
	// reader waits for, when handling it now costs no more than waiting.
	BatchFlush func(subjects []string) bool
	// Middleware wraps the handler, outermost first, inside the bus's own
	// recover, tracing, logging and metrics.
	Middleware []Middleware
	// Outage, when set, keeps the events whose handler returned an
	// Unavailable error, without counting a delivery, until what the
	// handler writes to answers again (see Outage).
	Outage *Outage
}

// DefaultAckWait is the default Consumer.AckWait: a command held by a
// replica that died is redelivered within about this long.
const DefaultAckWait = 5 * time.Second

func (c *Consumer) defaults() {
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.MaxDeliver <= 0 {
		c.MaxDeliver = 5
	}
	if len(c.Backoff) == 0 {
		c.Backoff = []time.Duration{100 * time.Millisecond, 500 * time.Millisecond, 2 * time.Second, 5 * time.Second}
	}
	if c.Workers <= 0 {
		c.Workers = 1
	}
	if c.Batch <= 0 {
		c.Batch = 1
	}
}

// DeclareConsumer creates or updates the durable consumer without reading
// from it (so that events published before a service starts are kept for it).
func (b *Bus) DeclareConsumer(ctx context.Context, c Consumer) (jetstream.Consumer, error) {
	c.defaults()
	cons, err := b.js.CreateOrUpdateConsumer(ctx, c.Stream, jetstream.ConsumerConfig{
		Durable:        c.Durable,
		FilterSubjects: withEnvelopes(c.Filters),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.AckWait,
		MaxDeliver:     -1, // counted by handle, see Consumer.MaxDeliver
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxAckPending:  max(64, c.Workers*4, c.Workers*c.Batch),
	})
	if err != nil {
		return nil, fmt.Errorf("declare consumer %s on %s: %w", c.Durable, c.Stream, err)
	}
	return cons, nil
}

// Consume declares the durable consumer and handles its events until ctx is
// cancelled; then it stops pulling, finishes the events already received
// and returns nil. It returns ErrClosed when the connection is closed.
//
// One pull request at a time asks for as many events as there are free
// workers, and each event goes to a worker as it arrives: no delivery waits
// in a client-side buffer, where nothing would keep it alive, while others
// are handled, and an idle consumer costs one pull request per pullWait.
func (b *Bus) Consume(ctx context.Context, c Consumer, h Handler) error {
	c.defaults()
	handler := h
	for i := len(c.Middleware) - 1; i >= 0; i-- {
		handler = c.Middleware[i](handler)
	}
	handler = b.instrument(c.Durable, handler)
	cons, err := b.DeclareConsumer(ctx, c)
	if err != nil {
		return err
	}
	// Handlers finish the event they hold even when ctx ends, so that a
	// shutdown never leaves half-done work.
	handlerCtx := context.WithoutCancel(ctx)
	free := tokens(c.Workers)
	var handling sync.WaitGroup
	defer handling.Wait()
	return b.pullEach(ctx, c, cons, free, func(msg jetstream.Msg) {
		handling.Go(func() {
			defer func() { free <- struct{}{} }()
			b.handle(handlerCtx, ctx.Done(), c, msg, handler)
		})
	})
}

// pullEach keeps one pull request at a time for cons, asking for as many
// events as free holds tokens (one per event the consumer may take now),
// and gives each event to each as it arrives, until ctx ends. Whoever
// takes an event puts its token back into free once done with it.
func (b *Bus) pullEach(ctx context.Context, c Consumer, cons jetstream.Consumer, free chan struct{}, each func(jetstream.Msg)) error {
	var r retrier
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-free:
		}
		n := 1
	more:
		for n < cap(free) {
			select {
			case <-free:
				n++
			default:
				break more
			}
		}
		got, err := b.fetch(ctx, cons, n, each)
		for range n - got {
			free <- struct{}{}
		}
		if again, err := r.after(ctx, b, c, &cons, err); !again {
			return err
		}
	}
}

// tokens is a channel holding n tokens.
func tokens(n int) chan struct{} {
	ch := make(chan struct{}, n)
	for range n {
		ch <- struct{}{}
	}
	return ch
}

// fetch makes one pull request for up to n events of cons and gives each
// to each as it arrives. The request ends when it has brought n, when
// pullWait has passed, when ctx ends, or when the connection reconnects
// (the server no longer holds it). It returns how many it brought.
func (b *Bus) fetch(ctx context.Context, cons jetstream.Consumer, n int, each func(jetstream.Msg)) (int, error) {
	pullCtx, cancel := b.pullContext(ctx)
	defer cancel()
	batch, err := cons.Fetch(n, jetstream.FetchContext(pullCtx))
	if err != nil {
		return 0, err
	}
	got := 0
	for msg := range batch.Messages() {
		got++
		each(msg)
	}
	return got, batch.Error()
}

// pullWait bounds one pull request; an idle consumer renews it. The
// server's heartbeats (every 5 s, nats.go's default for a request this
// long) tell a request it lost sooner.
var pullWait = 30 * time.Second

// pullContext bounds one pull request: pullWait, ctx, and the connection's
// next reconnect.
func (b *Bus) pullContext(ctx context.Context) (context.Context, context.CancelFunc) {
	pullCtx, cancel := context.WithTimeout(ctx, pullWait)
	reconnected := b.reconnected()
	go func() {
		select {
		case <-reconnected:
			cancel()
		case <-pullCtx.Done():
		}
	}()
	return pullCtx, cancel
}

// retrier decides, after a pull request, whether to pull again: at once
// after one that ended as pull requests do (it brought events, it expired,
// the connection reconnected), after a backoff that grows with the failures
// in a row otherwise. The consumer is declared again when the server lost
// it.
type retrier struct{ failures int }

func (r *retrier) after(ctx context.Context, b *Bus, c Consumer, cons *jetstream.Consumer, err error) (again bool, _ error) {
	switch {
	case ctx.Err() != nil:
		return false, nil
	case err == nil, errors.Is(err, nats.ErrTimeout), errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, context.Canceled), errors.Is(err, jetstream.ErrNoMessages), errors.Is(err, jetstream.ErrNoHeartbeat):
		r.failures = 0
		return true, nil
	case b.nc.IsClosed():
		return false, fmt.Errorf("read from %s: %w", c.Durable, ErrClosed)
	case errors.Is(err, jetstream.ErrConsumerNotFound), errors.Is(err, jetstream.ErrConsumerDeleted):
		if redeclared, derr := b.DeclareConsumer(ctx, c); derr == nil {
			*cons = redeclared
		}
	}
	r.failures++
	if r.failures == 3 {
		b.log.WarnContext(ctx, "pulling events keeps failing; retrying", "consumer", c.Durable, "err", err)
	}
	select {
	case <-ctx.Done():
		return false, nil
	case <-time.After(min(50*time.Millisecond<<min(r.failures, 6), 2*time.Second)):
		return true, nil
	}
}

func (b *Bus) handle(ctx context.Context, stop <-chan struct{}, c Consumer, msg jetstream.Msg, h Handler) {
	// An envelope's events are handled one after the other, in order.
	for _, d := range b.accept(ctx, c, msg) {
		b.handleAccepted(ctx, stop, c, d, h)
	}
}

// handleAccepted runs h on d and settles it, or keeps it through an outage
// of what h writes to.
func (b *Bus) handleAccepted(ctx context.Context, stop <-chan struct{}, c Consumer, d delivery, h Handler) {
	// In-progress acks keep the delivery while the handler runs, however
	// long; a delivery whose process died comes back after AckWait.
	stopHeartbeat := heartbeat(ctx, c.AckWait/4, d.msg)
	err := h(d.ctx, *d.ev)
	stopHeartbeat()
	if c.Outage != nil && IsUnavailable(err) {
		b.keepForOutage(ctx, stop, c, []delivery{d}, err, func(ds []delivery) { b.handleAccepted(ctx, stop, c, ds[0], h) })
		return
	}
	b.settle(d.ctx, c, d.msg, d.md, d.ev, err)
}

// accept reads a delivery before its handler runs: its event (each event
// of an envelope that the consumer's filters match, see EnvelopeContentType),
// and ctx with the producer's trace. It settles a delivery no handler may
// have (without metadata, beyond MaxDeliver, malformed, an envelope with
// no event for the consumer) and then returns none.
func (b *Bus) accept(ctx context.Context, c Consumer, msg jetstream.Msg) []delivery {
	md, err := msg.Metadata()
	if err != nil {
		b.log.Error("message without metadata", "consumer", c.Durable, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return nil
	}
	if to := msg.Headers().Get(ReplayForHeader); to != "" && to != c.Durable {
		// A dead letter of another consumer, replayed to it alone.
		_ = msg.Ack()
		return nil
	}
	if md.NumDelivered > 1 {
		b.metrics.redelivered.Add(ctx, 1, consumerAttr(c.Durable))
	}
	if int(md.NumDelivered) > c.MaxDeliver {
		// The handler had its deliveries and none ended: the process that
		// held it stopped, or dead-lettering it failed. It must not wait in
		// the stream for good.
		b.deadLetter(ctx, c, msg, md, fmt.Errorf(
			"delivered %d times without being handled (limit %d): the handler failed, the process holding it stopped, or an earlier dead-letter publish failed",
			md.NumDelivered, c.MaxDeliver))
		return nil
	}
	msgs, evs, err := unpacked(ctx, msg, c.Filters)
	switch {
	case err != nil:
		b.deadLetter(ctx, c, msg, md, err)
		return nil
	case len(msgs) == 0:
		_ = msg.Ack() // an envelope of events this consumer does not read
		return nil
	}
	ds := make([]delivery, len(msgs))
	for i, m := range msgs {
		// The headers of the message: an envelope's for its events, whose
		// trace each carries itself.
		dctx := context.WithValue(ctx, subjectKey{}, m.Subject())
		dctx = context.WithValue(dctx, headerKey{}, msg.Headers())
		dctx = context.WithValue(dctx, deliveredKey{}, md.NumDelivered)
		dctx = context.WithValue(dctx, storedKey{}, md.Timestamp)
		if p, ok := m.(*partMsg); ok {
			dctx = b.prop.Extract(dctx, propagation.MapCarrier{"traceparent": p.traceparent()})
		} else {
			dctx = b.prop.Extract(dctx, headerCarrier(msg.Headers()))
		}
		ds[i] = delivery{ctx: dctx, msg: m, md: md, ev: evs[i]}
	}
	return ds
}

// ReplayForHeader names the one consumer a replayed dead letter is for
// (nova dlq replay sets it to the consumer that dead-lettered the
// message): every other consumer of its subject acknowledges it unread,
// and watches skip it.
const ReplayForHeader = "Nova-Replay-For"

type subjectKey struct{}

type headerKey struct{}

type deliveredKey struct{}

type storedKey struct{}

// Stored is when the stream stored the message a Handler handles (for a
// message schedule's, when the server fired it), from its ctx; the zero
// time outside one.
func Stored(ctx context.Context) time.Time {
	t, _ := ctx.Value(storedKey{}).(time.Time)
	return t
}

// Delivered is how many times the event a Handler handles has been
// delivered, this delivery included (1 the first time), from its ctx; 0
// outside one.
func Delivered(ctx context.Context) uint64 {
	n, _ := ctx.Value(deliveredKey{}).(uint64)
	return n
}

// Header is a NATS header of the message a Handler handles (one the server
// sets, such as a message schedule's Nats-Schedule-Next), from its ctx; ""
// outside one.
func Header(ctx context.Context, name string) string {
	h, _ := ctx.Value(headerKey{}).(nats.Header)
	return h.Get(name)
}

// Subject is the NATS subject of the event a Handler (or BatchHandler of
// one event) handles, from its ctx; "" outside one. The subject is where
// the bus's permissions let the publisher write (an execution's events are
// under nova.evt.<execution id>), so it is what a handler trusts where the
// payload says otherwise.
func Subject(ctx context.Context) string {
	s, _ := ctx.Value(subjectKey{}).(string)
	return s
}

// settle acks a delivery its handler handled (err nil), dead-letters one
// that failed for good or for the last time, and naks any other with
// backoff.
func (b *Bus) settle(ctx context.Context, c Consumer, msg jetstream.Msg, md *jetstream.MsgMetadata, ev *event.Event, err error) {
	switch {
	case err == nil:
		// The ack goes out on the connection before the worker's next pull
		// request, which the server reads after it; waiting for the server
		// to confirm it (a double ack) would cost a round trip per event for
		// nothing: an ack lost with the connection is a redelivery after
		// AckWait, which handlers are idempotent for, whether or not the
		// loss is seen here.
		if ackErr := msg.Ack(); ackErr != nil {
			b.log.WarnContext(ctx, "ack failed", "consumer", c.Durable, "event_id", ev.ID(), "err", ackErr)
		}
	case IsPermanent(err) || int(md.NumDelivered) >= c.MaxDeliver:
		b.deadLetter(ctx, c, msg, md, err)
	default:
		delay := c.Backoff[min(int(md.NumDelivered)-1, len(c.Backoff)-1)]
		_ = msg.NakWithDelay(delay)
	}
}

// heartbeat sends an in-progress ack for each of msgs every interval until
// stopped.
func heartbeat(ctx context.Context, interval time.Duration, msgs ...jetstream.Msg) (stop func()) {
	hbCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				for _, msg := range msgs {
					_ = msg.InProgress()
				}
			}
		}
	}()
	return func() { cancel(); <-done }
}

// headerCarrier adapts NATS headers to OpenTelemetry propagation.
type headerCarrier map[string][]string

func (h headerCarrier) Get(key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}
func (h headerCarrier) Set(key, value string) { h[key] = []string{value} }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}
