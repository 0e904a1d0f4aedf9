package bus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// unavailableError marks a handler's error as its sink being down.
type unavailableError struct{ err error }

func (e *unavailableError) Error() string { return e.err.Error() }
func (e *unavailableError) Unwrap() error { return e.err }

// Unavailable wraps err, a failure to reach what the handler writes to (a
// store that does not answer), to say that the event is not at fault: a
// consumer with an Outage keeps the event and handles it again once the
// sink answers, without counting a delivery, and never dead-letters it for
// that. Without an Outage it is any error.
func Unavailable(err error) error {
	if err == nil {
		return nil
	}
	return &unavailableError{err: err}
}

// IsUnavailable reports whether err (or an error it wraps) was marked
// Unavailable.
func IsUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

// Outage is how a consumer rides out its sink being down (Consumer.Outage).
// A handler's Unavailable error begins an outage: the consumer is paused on
// the server (JetStream consumer pause: it delivers nothing more, and
// `nats consumer info` shows it paused), the events in hand are kept with
// in-progress acks, Probe is called every Every, and once it answers the
// consumer is resumed and the events kept are handled again. Their delivery
// count does not move, so an outage of any length dead-letters nothing, and
// what purges a stream up to its consumers' acknowledgements stops where
// the first of them is.
//
// The pause lasts PauseFor and is renewed while the outage lasts, so that
// a process that stops in the middle of one does not leave the consumer
// paused for longer. The same Outage serves every worker of a consumer.
type Outage struct {
	// Probe tells whether the sink answers (nil) or not.
	Probe func(context.Context) error
	// Every is how often Probe is called while the sink is down (default 1 s).
	Every time.Duration
	// PauseFor is how long each pause of the consumer on the server lasts
	// before it is renewed (default 30 s).
	PauseFor time.Duration

	mu     sync.Mutex
	up     chan struct{} // closed when the sink answers again; nil while up
	since  time.Time
	reason string
	total  int
}

// OutageState is what an Outage says of its sink.
type OutageState struct {
	Down   bool
	Since  time.Time // when the outage began, while Down
	Reason string    // the error that began it, while Down
	// Outages counts the outages so far.
	Outages int
}

// State is the sink's state now.
func (o *Outage) State() OutageState {
	o.mu.Lock()
	defer o.mu.Unlock()
	return OutageState{Down: o.up != nil, Since: o.since, Reason: o.reason, Outages: o.total}
}

// Err is nil while the sink answers, else an error that says since when
// and why (for a readiness check).
func (o *Outage) Err() error {
	s := o.State()
	if !s.Down {
		return nil
	}
	return fmt.Errorf("unreachable since %s (%s ago): %s; the consumer is paused and resumes when it answers",
		s.Since.UTC().Format(time.RFC3339), time.Since(s.Since).Round(time.Second), s.Reason)
}

func (o *Outage) every() time.Duration {
	if o.Every > 0 {
		return o.Every
	}
	return time.Second
}

func (o *Outage) pauseFor() time.Duration {
	if o.PauseFor > 0 {
		return o.PauseFor
	}
	return 30 * time.Second
}

// down begins an outage for cause unless one is on, and returns a channel
// closed when the sink answers again.
func (o *Outage) down(b *Bus, c Consumer, cause error, stop <-chan struct{}) <-chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.up != nil {
		return o.up
	}
	o.up, o.since, o.reason = make(chan struct{}), time.Now(), cut(cause.Error(), deadLetterReasonLimit)
	o.total++
	b.metrics.sinkDown.Add(context.Background(), 1, consumerAttr(c.Durable))
	b.log.Error("what the consumer writes to does not answer: consumer paused, its events kept until it answers",
		"consumer", c.Durable, "err", cause)
	go o.watch(b, c, o.up, stop)
	return o.up
}

// watch pauses the consumer and probes the sink until it answers (or the
// consumer stops), then resumes the consumer and closes up.
func (o *Outage) watch(b *Bus, c Consumer, up chan struct{}, stop <-chan struct{}) {
	log := b.log.With("consumer", c.Durable)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-up:
		}
	}()
	pausedUntil := b.pause(ctx, c, o.pauseFor(), log)
	t := time.NewTicker(o.every())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// The process stops: the pause lapses by itself.
			return
		case <-t.C:
		}
		pctx, pcancel := context.WithTimeout(ctx, max(o.every(), time.Second))
		err := o.Probe(pctx)
		pcancel()
		if err == nil {
			break
		}
		if time.Until(pausedUntil) < o.pauseFor()/2 {
			pausedUntil = b.pause(ctx, c, o.pauseFor(), log)
		}
	}
	if _, err := b.js.ResumeConsumer(ctx, c.Stream, c.Durable); err != nil {
		log.Warn("resuming the consumer failed; its pause lapses by itself", "err", err)
	}
	o.mu.Lock()
	since := o.since
	o.up, o.reason = nil, ""
	o.mu.Unlock()
	close(up)
	b.metrics.sinkDown.Add(context.Background(), -1, consumerAttr(c.Durable))
	log.Info("what the consumer writes to answers again: consumer resumed, kept events handled again",
		"outage", time.Since(since).Round(time.Millisecond))
}

// pause pauses c on the server for d and returns until when.
func (b *Bus) pause(ctx context.Context, c Consumer, d time.Duration, log *slog.Logger) time.Time {
	until := time.Now().Add(d)
	if _, err := b.js.PauseConsumer(ctx, c.Stream, c.Durable, until); err != nil && ctx.Err() == nil {
		// The workers hold what they took; nothing is lost, the pause only
		// keeps the other replicas from taking more.
		log.Warn("pausing the consumer on the server failed", "err", err)
	}
	return until
}

// keepForOutage keeps ds, whose handler found the sink down, with
// in-progress acks until the sink answers, then handles them again; when
// the consumer stops first they are released for a later delivery.
func (b *Bus) keepForOutage(ctx context.Context, stop <-chan struct{}, c Consumer, ds []delivery, cause error, again func([]delivery)) {
	msgs := messages(ds)
	stopHeartbeat := heartbeat(ctx, c.AckWait/4, msgs...)
	select {
	case <-c.Outage.down(b, c, cause, stop):
		stopHeartbeat()
		again(ds)
	case <-stop:
		stopHeartbeat()
		for _, m := range msgs {
			_ = m.NakWithDelay(c.Backoff[0])
		}
	}
}
