package bus

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

type metrics struct {
	handled      metric.Int64Counter
	duration     metric.Float64Histogram
	redelivered  metric.Int64Counter
	deadLettered metric.Int64Counter
	// deadLetterFailed counts failed dead-letter publishes; the message
	// stays in its stream and is dead-lettered again later.
	deadLetterFailed metric.Int64Counter
	// sinkDown is 1 while a consumer is paused because what its handler
	// writes to does not answer (Outage).
	sinkDown metric.Int64UpDownCounter
}

func newMetrics(m metric.Meter) (metrics, error) {
	var ms metrics
	var err error
	if ms.handled, err = m.Int64Counter("nova.events.handled",
		metric.WithDescription("Events handled, by consumer, type and outcome")); err != nil {
		return ms, err
	}
	if ms.duration, err = m.Float64Histogram("nova.handler.duration",
		metric.WithUnit("s"), metric.WithDescription("Handler latency"),
		// Handlers take from a fraction of a millisecond (the engine) to a
		// program's whole run (the sandbox).
		metric.WithExplicitBucketBoundaries(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)); err != nil {
		return ms, err
	}
	if ms.redelivered, err = m.Int64Counter("nova.events.redelivered",
		metric.WithDescription("Deliveries after the first")); err != nil {
		return ms, err
	}
	if ms.deadLettered, err = m.Int64Counter("nova.events.dead_lettered",
		metric.WithDescription("Events terminated and sent to the dead-letter stream")); err != nil {
		return ms, err
	}
	if ms.deadLetterFailed, err = m.Int64Counter("nova.events.dead_letter_failed",
		metric.WithDescription("Dead-letter publishes that failed; the event stays in its stream and is tried again")); err != nil {
		return ms, err
	}
	if ms.sinkDown, err = m.Int64UpDownCounter("nova.consumer.sink_down",
		metric.WithDescription("1 while the consumer is paused because what it writes to does not answer (a store outage)")); err != nil {
		return ms, err
	}
	return ms, nil
}

func consumerAttr(c string) metric.MeasurementOption {
	return metric.WithAttributes(attribute.String("consumer", c))
}

// instrument wraps h with the bus's own middleware: recover (a panic is a
// permanent failure of that event, never of the process), a consumer span
// that continues the producer's trace, a log line per failure, and metrics.
func (b *Bus) instrument(consumer string, h Handler) Handler {
	return func(ctx context.Context, ev event.Event) (err error) {
		ctx, done := b.observe(ctx, consumer, ev)
		defer func() {
			if r := recover(); r != nil {
				err = b.recovered(ctx, r, "consumer", consumer, "event_id", ev.ID())
			}
			done(err)
		}()
		return h(ctx, ev)
	}
}

// recovered logs a handler's panic, with attrs, and returns it as a
// permanent failure.
func (b *Bus) recovered(ctx context.Context, r any, attrs ...any) error {
	b.log.ErrorContext(ctx, "handler panic", append(attrs, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))...)
	return Permanent(fmt.Errorf("handler panic: %v", r))
}

// observe starts the handling of ev: a consumer span that continues the
// producer's trace. done ends it with the handler's error: the span's
// status, a log line per failure, and metrics.
func (b *Bus) observe(ctx context.Context, consumer string, ev event.Event) (_ context.Context, done func(error)) {
	start := time.Now()
	ctx, span := b.tracer.Start(ctx, consumer+" handle "+ev.Type(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.consumer.group.name", consumer),
			attribute.String("messaging.message.id", ev.ID()),
			attribute.String("cloudevents.event_type", ev.Type()),
		))
	return ctx, func(err error) {
		outcome := "ack"
		if _, ok := heldBy(err); ok {
			outcome, err = "held", nil
		}
		if err != nil {
			outcome = "retry"
			if IsPermanent(err) {
				outcome = "dead_letter"
			}
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			b.log.WarnContext(ctx, "handler failed",
				"consumer", consumer, "event_type", ev.Type(), "event_id", ev.ID(), "outcome", outcome, "err", err)
		}
		span.End()
		attrs := metric.WithAttributes(
			attribute.String("consumer", consumer),
			attribute.String("event_type", ev.Type()),
			attribute.String("outcome", outcome))
		b.metrics.handled.Add(ctx, 1, attrs)
		b.metrics.duration.Record(ctx, time.Since(start).Seconds(), attrs)
	}
}
