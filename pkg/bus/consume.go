package bus

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
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
	// AckWait is how long a delivery may stay unacknowledged before it is
	// redelivered; handlers that run longer are kept alive with heartbeats.
	AckWait time.Duration
	// MaxDeliver bounds deliveries; the last failed one is dead-lettered.
	MaxDeliver int
	// Backoff is the Nak delay after the n-th failed delivery (the last
	// value repeats).
	Backoff []time.Duration
	// Workers is how many events this process handles at once.
	Workers int
	// Middleware wraps the handler, outermost first, inside the bus's own
	// recover, tracing, logging and metrics.
	Middleware []Middleware
}

func (c *Consumer) defaults() {
	if c.AckWait <= 0 {
		c.AckWait = 30 * time.Second
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
}

// DeclareConsumer creates or updates the durable consumer without reading
// from it (so that events published before a service starts are kept for it).
func (b *Bus) DeclareConsumer(ctx context.Context, c Consumer) (jetstream.Consumer, error) {
	c.defaults()
	cons, err := b.js.CreateOrUpdateConsumer(ctx, c.Stream, jetstream.ConsumerConfig{
		Durable:        c.Durable,
		FilterSubjects: c.Filters,
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        c.AckWait,
		MaxDeliver:     c.MaxDeliver,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		MaxAckPending:  max(64, c.Workers*4),
	})
	if err != nil {
		return nil, fmt.Errorf("declare consumer %s on %s: %w", c.Durable, c.Stream, err)
	}
	return cons, nil
}

// Consume declares the durable consumer and handles its events until ctx is
// cancelled; then it stops pulling, finishes the events already received
// and returns nil.
func (b *Bus) Consume(ctx context.Context, c Consumer, h Handler) error {
	c.defaults()
	cons, err := b.DeclareConsumer(ctx, c)
	if err != nil {
		return err
	}
	handler := h
	for i := len(c.Middleware) - 1; i >= 0; i-- {
		handler = c.Middleware[i](handler)
	}
	handler = b.instrument(c.Durable, handler)

	it, err := cons.Messages(jetstream.PullMaxMessages(c.Workers + 1))
	if err != nil {
		return fmt.Errorf("pull from %s: %w", c.Durable, err)
	}
	// Handlers finish the event they hold even when ctx ends, so that a
	// shutdown never leaves half-done work; the iterator is drained instead.
	handlerCtx := context.WithoutCancel(ctx)
	msgs := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range c.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for msg := range msgs {
				b.handle(handlerCtx, c, msg, handler)
			}
		}()
	}
	stop := context.AfterFunc(ctx, it.Drain)
	defer stop()

	var readErr error
	for {
		msg, err := it.Next()
		if err != nil {
			if !errors.Is(err, jetstream.ErrMsgIteratorClosed) {
				readErr = fmt.Errorf("read from %s: %w", c.Durable, err)
				it.Stop()
			}
			break
		}
		msgs <- msg
	}
	close(msgs)
	wg.Wait()
	if readErr != nil && ctx.Err() == nil {
		return readErr
	}
	return nil
}

func (b *Bus) handle(ctx context.Context, c Consumer, msg jetstream.Msg, h Handler) {
	md, err := msg.Metadata()
	if err != nil {
		b.log.Error("message without metadata", "consumer", c.Durable, "subject", msg.Subject(), "err", err)
		_ = msg.Term()
		return
	}
	if md.NumDelivered > 1 {
		b.metrics.redelivered.Add(ctx, 1, consumerAttr(c.Durable))
	}
	ev, err := fromNATS(ctx, msg.Headers(), msg.Data())
	if err != nil {
		b.deadLetter(ctx, c, msg, md, err)
		return
	}
	ctx = b.prop.Extract(ctx, headerCarrier(msg.Headers()))

	// Keep the delivery alive while a long handler runs.
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(c.AckWait / 3)
		defer t.Stop()
		for {
			select {
			case <-hbCtx.Done():
				return
			case <-t.C:
				_ = msg.InProgress()
			}
		}
	}()
	err = h(ctx, *ev)
	stopHeartbeat()

	switch {
	case err == nil:
		if ackErr := msg.DoubleAck(ctx); ackErr != nil {
			// The event will be redelivered; handlers are idempotent.
			b.log.WarnContext(ctx, "ack failed", "consumer", c.Durable, "event_id", ev.ID(), "err", ackErr)
		}
	case IsPermanent(err) || int(md.NumDelivered) >= c.MaxDeliver:
		b.deadLetter(ctx, c, msg, md, err)
	default:
		delay := c.Backoff[min(int(md.NumDelivered)-1, len(c.Backoff)-1)]
		_ = msg.NakWithDelay(delay)
	}
}

// deadLetter terminates msg and publishes it, with the reason, on the
// consumer's dead-letter subject. Publishing first means a failure to
// dead-letter leaves the message to be redelivered rather than lost.
func (b *Bus) deadLetter(ctx context.Context, c Consumer, msg jetstream.Msg, md *jetstream.MsgMetadata, cause error) {
	headers := map[string]string{}
	for k, v := range msg.Headers() {
		if len(v) > 0 {
			headers[k] = v[0]
		}
	}
	dl := &novav1.DeadLetter{
		Consumer:   c.Durable,
		Subject:    msg.Subject(),
		Reason:     cause.Error(),
		Deliveries: md.NumDelivered,
		Headers:    headers,
		Data:       msg.Data(),
		FailedAt:   timestamppb.Now(),
	}
	id := fmt.Sprintf("dlq:%s:%d", md.Stream, md.Sequence.Stream)
	if err := b.PublishProto(ctx, DeadLetterSubject(c.Durable), id, TypeDeadLetter, dl, nil); err != nil {
		b.log.ErrorContext(ctx, "dead-letter publish failed; message left for redelivery",
			"consumer", c.Durable, "subject", msg.Subject(), "err", err)
		_ = msg.NakWithDelay(time.Second)
		return
	}
	b.metrics.deadLettered.Add(ctx, 1, consumerAttr(c.Durable))
	b.log.WarnContext(ctx, "event dead-lettered",
		"consumer", c.Durable, "subject", msg.Subject(), "deliveries", md.NumDelivered, "reason", cause.Error())
	_ = msg.Term()
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
