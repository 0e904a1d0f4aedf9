// Package bus carries NOVA's CloudEvents over NATS JetStream: publishing with
// de-duplication ids and trace context, durable pull consumers with ack after
// success, Nak with backoff, and dead letters for what cannot be handled.
package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"
)

const instrumentation = "github.com/novaflow/nova/pkg/bus"

// Bus is a connection to NATS JetStream that speaks CloudEvents.
type Bus struct {
	nc        *nats.Conn
	js        jetstream.JetStream
	log       *slog.Logger
	tracer    trace.Tracer
	prop      propagation.TextMapPropagator
	source    string
	metrics   metrics
	streamCfg StreamOptions
	// publishBudget bounds the retries of one publish.
	publishBudget time.Duration
	// atomicBatches: PublishAll sends events as an atomic batch
	// (WithAtomicBatches).
	atomicBatches bool
	// envelopes: PublishAll puts the events of enveloped kinds of one
	// execution in one message (WithEnvelopes).
	envelopes bool
	// reconnects is closed, and replaced, when the connection reconnects:
	// the pull requests the server held are gone with the old connection.
	reconnectsMu sync.Mutex
	reconnects   chan struct{}
}

// StreamOptions are the durability settings of the streams NOVA declares.
type StreamOptions struct {
	// Replicas of every stream (1 for the embedded server, 3 in production).
	Replicas int
	// EventsMaxAge bounds how long execution events are kept.
	EventsMaxAge time.Duration
	// DuplicateWindow is how long NOVA_CMD and NOVA_DLQ remember a
	// Nats-Msg-Id to drop a repeated publish (default DefaultDuplicateWindow).
	DuplicateWindow time.Duration
	// EventsDuplicateWindow is the same for NOVA_EVT (default
	// DefaultEventsDuplicateWindow).
	EventsDuplicateWindow time.Duration
}

// DefaultDuplicateWindow is how long NOVA_CMD and NOVA_DLQ remember the ids
// of what was published to them, by default.
//
// A service publishes the same command or event id again when its handler
// runs again on a redelivery: after a failed attempt's backoff (at most 7.6 s
// in all, see Consumer.Backoff), after AckWait when the process that held the
// delivery died (5 s each, at most MaxDeliver times), or while Publish
// retries (at most DefaultPublishRetryBudget, 20 s). Two minutes cover each of
// these several times over, so a command (work an agent would do again: a
// program run, a model call) is not stored twice. A producer's start repeated
// after the window names the execution the first one started (its execution
// id, or its event id), which the engine then finds in its state and does not
// start again; a registration repeated registers the same definition, which
// the engine leaves as it is.
const DefaultDuplicateWindow = 2 * time.Minute

// DefaultEventsDuplicateWindow is how long NOVA_EVT remembers the ids of the
// events published to it, by default: twice a publish's retries
// (DefaultPublishRetryBudget), the one repetition that happens without a
// failure (an acknowledgement that did not arrive in time while the stream
// stored the event).
//
// The server keeps every id of a window in memory, in the Go heap of the
// process it runs in (about 160 bytes each, and nats-server 2.15 keeps the
// entries of expired ids in its list until it is three times the live ones),
// and a 3-node workflow publishes some 16 events and 4 commands. With the
// events' ids kept two minutes, like the commands', they were 80% of the ids:
// some 33 MB at 90 workflows a second, which the embedded server's
// process (nova dev) marked at every collection. An event repeated after
// this window (a handler run again after a failure) is stored again and
// handled as what it is: the engine ignores what its stored state has passed,
// the audit store keys its documents by what they record; a reader following an
// execution's events sees it twice, with the same ce-id.
const DefaultEventsDuplicateWindow = 2 * DefaultPublishRetryBudget

type options struct {
	name    string
	log     *slog.Logger
	tp      trace.TracerProvider
	mp      metric.MeterProvider
	natsOpt []nats.Option
	streams StreamOptions
	budget  time.Duration
	atomic  *bool
	noEnv   bool
}

// Option configures Connect.
type Option func(*options)

// WithName names the connection and is the CloudEvents source of what it publishes.
func WithName(name string) Option { return func(o *options) { o.name = name } }

// WithLogger sets the logger used for handler outcomes.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithTracerProvider sets where spans go.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(o *options) { o.tp = tp } }

// WithMeterProvider sets where metrics go.
func WithMeterProvider(mp metric.MeterProvider) Option { return func(o *options) { o.mp = mp } }

// WithNATSOptions passes options (credentials, TLS, ...) to nats.Connect.
func WithNATSOptions(opts ...nats.Option) Option {
	return func(o *options) { o.natsOpt = append(o.natsOpt, opts...) }
}

// WithPublishRetryBudget bounds how long Publish tries again while the
// stream cannot answer (default DefaultPublishRetryBudget; 0 or less: one
// attempt).
func WithPublishRetryBudget(d time.Duration) Option { return func(o *options) { o.budget = d } }

// WithAtomicBatches makes PublishAll send the events of one call as a
// JetStream atomic batch (off by default). Measured on nats-server 2.15 it
// costs more than the acknowledgements it saves: on one replica the server
// stages each batch in a file store of its own, created and removed per
// batch (a 3-node workflow's CPU 19 -> 32 ms on nova dev); on three it
// saves 1.5% of the servers' messages for no less CPU (make bench-messages).
func WithAtomicBatches(on bool) Option { return func(o *options) { o.atomic = &on } }

// WithEnvelopes(false) makes PublishAll publish every event alone, for
// readers of the events stream that do not read envelopes (on by default:
// see EnvelopeContentType).
func WithEnvelopes(on bool) Option { return func(o *options) { o.noEnv = !on } }

// WithStreamOptions sets replicas and retention of the declared streams.
func WithStreamOptions(s StreamOptions) Option { return func(o *options) { o.streams = s } }

// Connect dials NATS and opens JetStream.
func Connect(ctx context.Context, url string, opts ...Option) (*Bus, error) {
	o := options{
		budget: DefaultPublishRetryBudget,
		name:   "nova",
		log:    slog.Default(),
		tp:     tracenoop.NewTracerProvider(),
		mp:     metricnoop.NewMeterProvider(),
	}
	for _, opt := range opts {
		opt(&o)
	}
	if o.streams.Replicas <= 0 {
		o.streams.Replicas = 1
	}
	if o.streams.EventsMaxAge <= 0 {
		o.streams.EventsMaxAge = 7 * 24 * time.Hour
	}
	if o.streams.DuplicateWindow <= 0 {
		o.streams.DuplicateWindow = DefaultDuplicateWindow
	}
	if o.streams.EventsDuplicateWindow <= 0 {
		o.streams.EventsDuplicateWindow = DefaultEventsDuplicateWindow
	}
	natsOpts := append([]nats.Option{
		nats.Name(o.name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
	}, o.natsOpt...)
	nc, err := nats.Connect(url, natsOpts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("open JetStream: %w", err)
	}
	m, err := newMetrics(o.mp.Meter(instrumentation))
	if err != nil {
		nc.Close()
		return nil, err
	}
	b := &Bus{
		nc:            nc,
		js:            js,
		log:           o.log,
		tracer:        o.tp.Tracer(instrumentation),
		prop:          propagation.TraceContext{},
		source:        "nova/" + o.name,
		metrics:       m,
		streamCfg:     o.streams,
		publishBudget: o.budget,
		reconnects:    make(chan struct{}),
		envelopes:     !o.noEnv,
	}
	if o.atomic != nil {
		b.atomicBatches = *o.atomic
	}
	theirs := nc.Opts.ReconnectedCB
	nc.SetReconnectHandler(func(c *nats.Conn) {
		b.reconnectsMu.Lock()
		close(b.reconnects)
		b.reconnects = make(chan struct{})
		b.reconnectsMu.Unlock()
		if theirs != nil {
			theirs(c)
		}
	})
	return b, nil
}

// reconnected is closed when the connection next reconnects.
func (b *Bus) reconnected() <-chan struct{} {
	b.reconnectsMu.Lock()
	defer b.reconnectsMu.Unlock()
	return b.reconnects
}

// Conn is the underlying NATS connection.
func (b *Bus) Conn() *nats.Conn { return b.nc }

// MaxPayload is the largest message the NATS server takes (its
// max_payload), headers included; 0 before the connection knows it.
func (b *Bus) MaxPayload() int64 { return b.nc.MaxPayload() }

// JetStream is the underlying JetStream context (for KV and Object Store).
func (b *Bus) JetStream() jetstream.JetStream { return b.js }

// Source is the CloudEvents source of events this bus publishes.
func (b *Bus) Source() string { return b.source }

// Close drains the connection: pending publishes are flushed and
// subscriptions finish what they received.
func (b *Bus) Close() {
	if err := b.nc.Drain(); err != nil {
		b.nc.Close()
		return
	}
	for b.nc.IsDraining() {
		time.Sleep(5 * time.Millisecond)
	}
}

// EnsureStreams declares NOVA's streams; it is safe to call from every
// service at start-up.
func (b *Bus) EnsureStreams(ctx context.Context) error {
	streams := []jetstream.StreamConfig{
		{
			Name:        StreamCommands,
			Description: "NOVA agent commands, one work-queue subject per agent",
			Subjects:    []string{"nova.cmd.>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    b.streamCfg.Replicas,
			Duplicates:  b.streamCfg.DuplicateWindow,
		},
		{
			Name:        StreamEvents,
			Description: "NOVA execution results and facts",
			Subjects:    []string{"nova.evt.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    b.streamCfg.Replicas,
			MaxAge:      b.streamCfg.EventsMaxAge,
			Duplicates:  b.streamCfg.EventsDuplicateWindow,
			// For PublishAll's atomic batches (WithAtomicBatches).
			AllowAtomicPublish: true,
		},
		{
			Name:        StreamDeadLetters,
			Description: "NOVA events that could not be handled",
			Subjects:    []string{"nova.dlq.>"},
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    b.streamCfg.Replicas,
			MaxAge:      30 * 24 * time.Hour,
			Duplicates:  b.streamCfg.DuplicateWindow,
		},
		{
			Name:        StreamTimers,
			Description: "NOVA durable timers and workflow schedules (JetStream message schedules)",
			Subjects:    []string{"nova.timer.>", "nova.schedule.>"},
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			Replicas:    b.streamCfg.Replicas,
			Duplicates:  b.streamCfg.DuplicateWindow,
			// The server keeps each schedule and publishes its message when
			// it comes due; purging a timer's subject cancels it.
			AllowMsgSchedules: true,
			AllowRollup:       true,
		},
	}
	for _, cfg := range streams {
		err := Declare(ctx, "stream "+cfg.Name, func(ctx context.Context) error {
			_, err := b.js.CreateOrUpdateStream(ctx, cfg)
			return err
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Publish sends ev to subject and waits for JetStream's acknowledgement. The
// event id is the Nats-Msg-Id, so publishing the same event twice within the
// duplicate window stores it once. The caller's trace context travels in the
// traceparent header and the CloudEvents distributed-tracing extension.
func (b *Bus) Publish(ctx context.Context, subject string, ev event.Event) error {
	return b.publishOne(ctx, Outgoing{Subject: subject, Event: ev})
}

func (b *Bus) publishOne(ctx context.Context, o Outgoing) error {
	subject, ev := o.Subject, o.Event
	ctx, span, msg, err := b.prepare(ctx, subject, ev, o.Headers)
	defer span.End()
	if err != nil {
		return err
	}
	ack, attempts, err := b.publishRetrying(ctx, msg)
	return b.published(span, subject, ev, ack, attempts, err)
}

// Outgoing is one event for PublishAll.
type Outgoing struct {
	Subject string
	Event   event.Event
	// Headers are NATS headers besides the event's own, e.g. a message
	// schedule's (ScheduleAt).
	Headers map[string]string
}

// PublishAll publishes every event as Publish does, but sends them all at
// once, in order, and then waits for their acknowledgements together: one
// round trip to the streams instead of one per event. The events of
// enveloped kinds of one execution that follow one another among them go
// as one envelope (see EnvelopeContentType), unless the bus was made
// WithEnvelopes(false) or the envelope would be larger than the server
// takes. With WithAtomicBatches the other events among them (subjects of
// the events stream, no message schedule) go as one atomic batch, stored
// all or none and acknowledged once. An event or envelope whose
// acknowledgement fails or does not come in time (a batch refused: one of
// its events was stored before) is published again on its own with
// Publish's retries (its id keeps it stored once). It returns the first
// error; like a failed Publish, the caller publishes all again.
func (b *Bus) PublishAll(ctx context.Context, out []Outgoing) error {
	if len(out) == 1 {
		return b.publishOne(ctx, out[0])
	}
	type pending struct {
		span trace.Span
		ctx  context.Context
		msg  *nats.Msg
		fut  jetstream.PubAckFuture
		// batch is the message's place in the atomic batch (0: not in it).
		batch int
		// env is the envelope the event goes in (nil: alone).
		env *envelopeOut
	}
	ps := make([]pending, 0, len(out))
	defer func() {
		for _, p := range ps {
			p.span.End()
		}
	}()
	for _, o := range out {
		pctx, span, msg, err := b.prepare(ctx, o.Subject, o.Event, o.Headers)
		ps = append(ps, pending{span: span, ctx: pctx, msg: msg})
		if err != nil {
			return err
		}
	}
	if b.envelopes {
		for _, run := range envelopeRuns(out) {
			evs := make([]event.Event, len(run.events))
			for k, i := range run.events {
				evs[k] = out[i].Event
			}
			msg, err := envelopeOf(run.execution, evs)
			if err != nil || b.checkSize(msg, evs[0]) != nil {
				continue // each goes alone
			}
			env := &envelopeOut{msg: msg, first: run.events[0]}
			for _, i := range run.events {
				ps[i].env = env
			}
		}
	}
	var batched []int // of ps
	if b.atomicBatches {
		for i, o := range out {
			if _, _, event := ParseEventSubject(o.Subject); event && len(o.Headers) == 0 && ps[i].env == nil {
				batched = append(batched, i)
			}
		}
	}
	var commit jetstream.PubAckFuture
	if len(batched) >= 2 {
		id := nuid.Next()
		for n, i := range batched {
			msg := ps[i].msg
			ps[i].batch = n + 1
			msg.Header.Set(batchIDHeader, id)
			msg.Header.Set(batchSeqHeader, strconv.Itoa(n+1))
			if n < len(batched)-1 {
				// Acknowledged with the commit; a message lost on the way
				// fails the commit.
				if err := b.nc.PublishMsg(msg); err != nil {
					break
				}
				continue
			}
			msg.Header.Set(batchCommitHeader, "1")
			commit, _ = b.js.PublishMsgAsync(msg)
		}
	}
	for i := range ps {
		switch env := ps[i].env; {
		case env != nil && env.first == i:
			// An envelope goes where its first event was.
			env.fut, _ = b.js.PublishMsgAsync(env.msg)
		case env == nil && ps[i].batch == 0:
			// A message that cannot be sent now is published on its own below.
			ps[i].fut, _ = b.js.PublishMsgAsync(ps[i].msg)
		}
	}
	// The acknowledgements are awaited for one attempt's time in all.
	wait, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
	defer cancel()
	await := func(fut jetstream.PubAckFuture) (*jetstream.PubAck, error) {
		if fut == nil {
			return nil, errNotSent
		}
		select {
		case ack := <-fut.Ok():
			return ack, nil
		case err := <-fut.Err():
			return nil, err
		case <-wait.Done():
			return nil, wait.Err()
		}
	}
	var commitAck *jetstream.PubAck
	commitErr := errNotSent
	if commit != nil {
		commitAck, commitErr = await(commit)
	}
	var first error
	for i, p := range ps {
		var ack *jetstream.PubAck
		attempts := 1
		err := errNotSent
		switch {
		case p.env != nil:
			if !p.env.awaited {
				p.env.awaited = true
				p.env.ack, p.env.err = await(p.env.fut)
				p.env.attempts = 1
				if p.env.err != nil && ctx.Err() == nil {
					var n int
					p.env.ack, n, p.env.err = b.publishRetrying(p.ctx, p.env.msg)
					p.env.attempts += n
				}
			}
			ack, attempts, err = p.env.ack, p.env.attempts, p.env.err
		case p.batch == 0:
			ack, err = await(p.fut)
		case commitErr == nil:
			// The batch is stored in a row, its commit last.
			ack, err = &jetstream.PubAck{Stream: commitAck.Stream, Domain: commitAck.Domain,
				Sequence: commitAck.Sequence - uint64(len(batched)-p.batch)}, nil
		default:
			for _, h := range []string{batchIDHeader, batchSeqHeader, batchCommitHeader} {
				p.msg.Header.Del(h)
			}
		}
		if err != nil && p.env == nil && ctx.Err() == nil {
			var n int
			ack, n, err = b.publishRetrying(p.ctx, p.msg)
			attempts += n
		}
		if err = b.published(p.span, out[i].Subject, out[i].Event, ack, attempts, err); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// envelopeOut is an envelope PublishAll sends, and what became of it.
type envelopeOut struct {
	msg *nats.Msg
	// first is the index of its first event: where it is sent.
	first    int
	fut      jetstream.PubAckFuture
	awaited  bool
	ack      *jetstream.PubAck
	attempts int
	err      error
}

// envelopeRun is events of out (indexes, in order) that go in one envelope.
type envelopeRun struct {
	execution string
	events    []int
}

// envelopeRuns are the runs of out that go in envelopes: the events of
// enveloped kinds of one execution, two or more, with no other event of
// that execution between them, so that each execution's events are stored
// in the order they were given.
func envelopeRuns(out []Outgoing) []envelopeRun {
	var runs []envelopeRun
	open := map[string]int{} // execution -> its open run in runs
	for i, o := range out {
		execution, ok := envelopable(o)
		if !ok {
			if x, _, event := ParseEventSubject(o.Subject); event {
				delete(open, x)
			}
			continue
		}
		if r, ok := open[execution]; ok {
			runs[r].events = append(runs[r].events, i)
			continue
		}
		open[execution] = len(runs)
		runs = append(runs, envelopeRun{execution: execution, events: []int{i}})
	}
	kept := runs[:0]
	for _, r := range runs {
		if len(r.events) >= 2 {
			kept = append(kept, r)
		}
	}
	return kept
}

// The headers of JetStream's atomic batch publish (nats-server 2.12+).
const (
	batchIDHeader     = "Nats-Batch-Id"
	batchSeqHeader    = "Nats-Batch-Sequence"
	batchCommitHeader = "Nats-Batch-Commit"
)

// errNotSent marks a message PublishAll could not send at once.
var errNotSent = errors.New("not sent")

// prepare starts the publish span of ev and builds its message.
func (b *Bus) prepare(ctx context.Context, subject string, ev event.Event, headers map[string]string) (context.Context, trace.Span, *nats.Msg, error) {
	ctx, span := b.tracer.Start(ctx, "publish "+ev.Type(),
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.destination.name", subject),
			attribute.String("messaging.message.id", ev.ID()),
			attribute.String("cloudevents.event_type", ev.Type()),
		))
	carrier := propagation.MapCarrier{}
	b.prop.Inject(ctx, carrier)
	if tp := carrier.Get("traceparent"); tp != "" {
		ev.SetExtension(TraceParentExtension, tp)
	}
	msg, err := toNATS(ctx, subject, ev)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return ctx, span, nil, err
	}
	for k, v := range carrier {
		msg.Header.Set(k, v)
	}
	msg.Header.Set(jetstream.MsgIDHeader, ev.ID())
	for k, v := range headers {
		msg.Header.Set(k, v)
	}
	if err := b.checkSize(msg, ev); err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return ctx, span, nil, err
	}
	return ctx, span, msg, nil
}

// ErrTooLarge is returned by Publish for an event larger than the NATS
// server takes (its max_payload), before anything is sent. A *TooLargeError
// carries the figures.
var ErrTooLarge = errors.New("event larger than the bus takes")

// TooLargeError is an event refused for its size: Size bytes with its
// headers, where the server takes at most Limit.
type TooLargeError struct {
	Type  string
	Size  int
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s event of %d bytes: the NATS server takes messages of at most %d bytes (max_payload); "+
		"large values belong in the value store, passed as {\"$ref\": ...} (the gateway and nova run store them there)",
		e.Type, e.Size, e.Limit)
}

func (e *TooLargeError) Is(target error) bool { return target == ErrTooLarge }

// checkSize refuses msg when it is larger than the server's max_payload
// (headers and body count), which the server would refuse with no more
// than "maximum payload exceeded".
func (b *Bus) checkSize(msg *nats.Msg, ev event.Event) error {
	limit := b.nc.MaxPayload()
	if limit <= 0 {
		return nil // not connected yet: the server says what it takes once it is
	}
	size := len(msg.Data)
	if len(msg.Header) > 0 {
		// The header block as the client writes it: "NATS/1.0\r\n", each
		// "Key: value\r\n", and a closing "\r\n".
		size += len("NATS/1.0\r\n\r\n")
		for k, vs := range msg.Header {
			for _, v := range vs {
				size += len(k) + len(": ") + len(v) + len("\r\n")
			}
		}
	}
	if int64(size) > limit {
		return &TooLargeError{Type: ev.Type(), Size: size, Limit: limit}
	}
	return nil
}

// published records a publish's outcome on its span.
func (b *Bus) published(span trace.Span, subject string, ev event.Event, ack *jetstream.PubAck, attempts int, err error) error {
	if attempts > 1 {
		span.SetAttributes(attribute.Int("messaging.publish.attempts", attempts))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		return fmt.Errorf("publish %s to %s: %w", ev.Type(), subject, err)
	}
	if ack != nil && ack.Duplicate {
		span.SetAttributes(attribute.Bool("messaging.duplicate", true))
	}
	return nil
}

// Publish attempts: each waits at most publishAttemptTimeout for the
// stream's acknowledgement, and the attempts of one publish stop after the
// retry budget (DefaultPublishRetryBudget unless WithPublishRetryBudget) or
// when the caller's ctx ends.
const (
	publishAttemptTimeout = 3 * time.Second
	// DefaultPublishRetryBudget covers a stream leader election on a
	// cluster and a server restart.
	DefaultPublishRetryBudget = 20 * time.Second
)

// publishRetrying publishes msg, again while the stream cannot answer: a
// stream's leader that died takes the acknowledgement with it, and until a
// new leader is elected (seconds, on a cluster) or a restarted server is
// back, a publish times out or finds no responders. The Nats-Msg-Id makes a
// retry of a message that was stored after all a duplicate, stored once.
func (b *Bus) publishRetrying(ctx context.Context, msg *nats.Msg) (*jetstream.PubAck, int, error) {
	deadline := time.Now().Add(b.publishBudget)
	wait := 100 * time.Millisecond
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, publishAttemptTimeout)
		ack, err := b.js.PublishMsg(actx, msg)
		cancel()
		if err == nil || ctx.Err() != nil || !retryable(err) || time.Now().Add(wait).After(deadline) {
			return ack, attempt, err
		}
		select {
		case <-ctx.Done():
			return nil, attempt, err
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}

// retryable reports whether a failed publish or declaration may succeed
// when tried again: no acknowledgement in time, nobody answering on the stream's
// subject, a connection being re-established, or a clustered JetStream
// electing its leaders (503, "JetStream system temporarily unavailable").
func retryable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse) ||
		errors.Is(err, nats.ErrConnectionReconnecting) || errors.Is(err, nats.ErrDisconnected) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.Code == 503 || apiErr.ErrorCode == jsErrCodeTemporarilyUnavailable)
}

// jsErrCodeTemporarilyUnavailable is the JetStream API's error code for
// "JetStream system temporarily unavailable" (nats-server's
// JSClusterNotAvailErr), answered while a cluster has no meta leader.
const jsErrCodeTemporarilyUnavailable jetstream.ErrorCode = 10008

// PublishProto builds an event from msg (see ProtoEvent) and publishes it.
func (b *Bus) PublishProto(ctx context.Context, subject, id, typ string, msg proto.Message, extensions map[string]string) error {
	ev, err := b.ProtoEvent(id, typ, msg, extensions)
	if err != nil {
		return err
	}
	return b.Publish(ctx, subject, ev)
}

// ProtoEvent builds an event from msg (see NewEvent) with this bus as its
// source and the given extensions, as PublishProto sends it.
func (b *Bus) ProtoEvent(id, typ string, msg proto.Message, extensions map[string]string) (event.Event, error) {
	ev, err := NewEvent(id, typ, b.source, msg)
	if err != nil {
		return ev, err
	}
	for k, v := range extensions {
		ev.SetExtension(k, v)
	}
	return ev, nil
}

// ErrClosed is returned by Consume when the bus connection is closed.
var ErrClosed = errors.New("bus closed")
