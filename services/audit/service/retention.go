package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
)

// RetentionConsumer is the durable consumer through which the audit service
// purges the events of ended executions. It holds each completion until
// its execution's events are due to go, so it always has the last
// KeepEnded's completions pending: that is its schedule, not a backlog.
const RetentionConsumer = "audit-retention"

// KeepEnded is how long the events of an ended execution stay in NOVA_EVT
// after its completion. A follower that comes later (the gateway's event
// stream, nova watch) gets the execution from the audit store and the
// engine's state instead. The events stream's per-subject state, which
// every kept execution adds to (about 1 KB each, in the NATS server's
// heap), then holds the executions of the last KeepEnded, not of 7 days.
const KeepEnded = 2 * time.Minute

// retentionAckWait is how long a completion held by a replica that stopped
// waits before another takes it; while one waits for its time, it says so
// every retentionAckWait/3.
const retentionAckWait = 30 * time.Second

// retention purges the events of ended executions: each completion, in
// the order of the stream, once keep has passed since it was stored and
// every durable consumer of the stream has acknowledged every message up
// to it (the audit service has recorded the execution; the engine has read
// its results; a consumer of the deployment's own, stopped for a while,
// still gets its events). It purges the execution's events up to where
// every consumer had read when it last looked; any published after that
// (none in the normal course) stay until the stream's MaxAge.
type retention struct {
	js   jetstream.JetStream
	keep time.Duration
	log  *slog.Logger
	// poll is how often it looks again at consumers still behind.
	poll time.Duration
	// read is a stream sequence up to which every durable consumer had
	// acknowledged every message when last looked at.
	read uint64
}

// run purges until ctx ends.
func (r *retention) run(ctx context.Context) error {
	cons, err := r.declare(ctx)
	if err != nil {
		return err
	}
	stream, err := r.js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		return fmt.Errorf("retention: stream %s: %w", bus.StreamEvents, err)
	}
	for {
		m, err := cons.Next(jetstream.FetchContext(ctx))
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			if errors.Is(err, jetstream.ErrConsumerDeleted) || errors.Is(err, jetstream.ErrConsumerNotFound) {
				if cons, err = r.declare(ctx); err != nil {
					return err
				}
				continue
			}
			r.log.WarnContext(ctx, "retention: taking the next completion failed", "err", err)
			if !sleep(ctx, time.Second) {
				return nil
			}
			continue
		}
		if err := r.purge(ctx, stream, m); err != nil {
			if ctx.Err() != nil {
				_ = m.Nak() // for the next replica, or this one's next start, at once
				return nil
			}
			r.log.WarnContext(ctx, "retention: the events of an ended execution were not purged; trying again",
				"subject", m.Subject(), "err", err)
			_ = m.NakWithDelay(5 * time.Second)
			continue
		}
		_ = m.Ack()
	}
}

func (r *retention) declare(ctx context.Context) (jetstream.Consumer, error) {
	cons, err := r.js.CreateOrUpdateConsumer(ctx, bus.StreamEvents, jetstream.ConsumerConfig{
		Durable:        RetentionConsumer,
		Description:    "purges the events of ended executions once they are recorded and their time is up",
		FilterSubjects: []string{bus.EventFilter(bus.KindWorkflowCompleted)},
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        retentionAckWait,
		MaxAckPending:  1, // in the stream's order, one replica at a time
		DeliverPolicy:  jetstream.DeliverAllPolicy,
	})
	if err != nil {
		return nil, fmt.Errorf("declare consumer %s on %s: %w", RetentionConsumer, bus.StreamEvents, err)
	}
	return cons, nil
}

// purge waits until the events of the execution that m completes are due
// to go and every durable consumer has read past its completion, then
// purges them up to where every consumer has read.
func (r *retention) purge(ctx context.Context, stream jetstream.Stream, m jetstream.Msg) error {
	md, err := m.Metadata()
	if err != nil {
		return err
	}
	execution, _, ok := bus.ParseEventSubject(m.Subject())
	if !ok {
		return nil // not an execution's completion: nothing to purge
	}
	held := time.Now()
	if !r.hold(ctx, m, time.Until(md.Timestamp.Add(r.keep)), &held) {
		return ctx.Err()
	}
	for r.read < md.Sequence.Stream {
		read, err := r.readUpTo(ctx, stream)
		if err != nil {
			return err
		}
		r.read = max(r.read, read)
		if r.read < md.Sequence.Stream && !r.hold(ctx, m, r.poll, &held) {
			return ctx.Err()
		}
	}
	return stream.Purge(ctx, jetstream.WithPurgeSubject("nova.evt."+execution+".>"), jetstream.WithPurgeSequence(r.read+1))
}

// readUpTo is the stream sequence up to which every durable consumer of the
// stream (other than the retention consumer) has acknowledged every
// message: the least of their acknowledgement floors, where one with
// nothing pending and nothing unacknowledged counts as having read the
// whole stream.
func (r *retention) readUpTo(ctx context.Context, stream jetstream.Stream) (uint64, error) {
	info, err := stream.Info(ctx)
	if err != nil {
		return 0, err
	}
	read := info.State.LastSeq // read before the consumers, so each is at least there
	infos := stream.ListConsumers(ctx)
	for ci := range infos.Info() {
		if ci.Config.Durable == "" || ci.Name == RetentionConsumer {
			continue
		}
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			read = min(read, ci.AckFloor.Stream)
		}
	}
	return read, infos.Err()
}

// hold waits d (nothing when d <= 0), telling the server that m is in
// progress at least every retentionAckWait/3 since *since; false when ctx
// ended first.
func (r *retention) hold(ctx context.Context, m jetstream.Msg, d time.Duration, since *time.Time) bool {
	for d > 0 {
		step := min(d, retentionAckWait/3)
		if !sleep(ctx, step) {
			return false
		}
		d -= step
		if time.Since(*since) >= retentionAckWait/3 {
			_ = m.InProgress()
			*since = time.Now()
		}
	}
	return true
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
