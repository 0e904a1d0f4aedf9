package service

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
)

// KeepEnded is how long the events of an ended execution stay in NOVA_EVT
// after its completion (until the next purge: up to PurgeEvery more). A
// follower that comes later (the gateway's event stream, nova watch) gets
// the execution from the audit store and the engine's state instead.
//
// The events stream's per-subject state, which every kept execution adds to
// (about 1 KB each, in the NATS server's heap), then holds the executions of
// the last minute, not of 7 days. In nova dev that heap is the one its Go
// collector marks at every cycle: with two minutes (2-2.5 kept), after 8,000
// workflows at 90 a second a cycle took some 30 ms instead of 5 on a fresh
// data dir, and nova dev held 270 MiB at 32 in flight; with 30 seconds,
// 233-244 MiB.
const KeepEnded = 30 * time.Second

// HoldRunning is how long a running execution keeps the events published
// after its start: one that runs longer (or never ends: a refinement whose
// gateway stopped) no longer holds back the purge of the rest, and a late
// follower of it sees its events from where the purge stopped.
const HoldRunning = time.Hour

// retention purges NOVA_EVT from its front, every PurgeEvery: every
// message before the first one something still needs. The stream's front
// goes by whole blocks, the way MaxAge would take it (the server still takes
// each purged message's subject out of its per-subject state, the stream
// held meanwhile: 50-170 ms for 30 s of events at 90 workflows a second);
// what follows it is kept whatever it is. Still needed is
//
//   - every event of an execution running (for up to holdRunning) or ended
//     less than keep ago: what a follower replays;
//   - every message less than keep old (an agent's reply to a run outside
//     any workflow, which a request waits for);
//   - every message a durable consumer of the stream has not yet
//     acknowledged (the audit service's own, so that the chain of work is
//     in the store; the engine's results; any of the deployment's own,
//     stopped for a while).
//
// It learns the executions from their workflow.started and
// workflow.completed events, read from the stream's front at start.
type retention struct {
	b           *bus.Bus
	keep        time.Duration
	holdRunning time.Duration
	log         *slog.Logger
	// every is how often it purges.
	every time.Duration

	running map[string]mark // first event by execution token
	ended   []endedExec     // in the order they ended
	recent  []mark          // starts and completions, oldest first
	// seen is the stream sequence of the last start or completion read.
	seen uint64
}

// mark is a message of the stream: its sequence and when it was stored.
type mark struct {
	seq uint64
	at  time.Time
}

// endedExec is an ended execution: its first event and its end.
type endedExec struct {
	first uint64
	at    time.Time
}

// PurgeEvery is how often the stream is purged: each purge also writes the
// stream's whole state (every subject it holds) to its index file, a cost
// of its own, and the block the purge stops in is rewritten once half of it
// has gone. The stream holds up to PurgeEvery more than it must.
const PurgeEvery = 30 * time.Second

func newRetention(b *bus.Bus, keep, every time.Duration, log *slog.Logger) *retention {
	if log == nil {
		log = slog.Default()
	}
	return &retention{b: b, keep: keep, holdRunning: HoldRunning, log: log, every: every, running: map[string]mark{}}
}

// run purges until ctx ends. When the stream cannot be read (a cluster
// electing a leader), it says so and tries again, from where it was.
func (r *retention) run(ctx context.Context) {
	for {
		err := r.follow(ctx)
		if ctx.Err() != nil {
			return
		}
		r.log.WarnContext(ctx, "retention: the executions' starts and ends cannot be read; trying again", "err", err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// follow reads the starts and ends after those seen (bus.Watch, whose
// ordered consumer starts again where it was after a gap) and purges,
// until ctx ends; it returns an error only when the reading cannot begin.
func (r *retention) follow(ctx context.Context) error {
	stream, err := r.b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		return fmt.Errorf("stream %s: %w", bus.StreamEvents, err)
	}
	cfg := jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventFilter(bus.KindWorkflowStarted), bus.EventFilter(bus.KindWorkflowCompleted)},
	}
	if r.seen > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, r.seen+1
	}
	type seenMsg struct {
		subject string
		mark    mark
	}
	next := make(chan seenMsg, 256)
	stop, err := r.b.Watch(ctx, "retention: the executions' starts and ends", bus.StreamEvents, cfg,
		func(m jetstream.Msg, _ *event.Event) {
			md, err := m.Metadata()
			if err != nil {
				return
			}
			select {
			case next <- seenMsg{m.Subject(), mark{md.Sequence.Stream, md.Timestamp}}:
			case <-ctx.Done():
			}
		})
	if err != nil {
		return err
	}
	defer stop()
	tick := time.NewTicker(r.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-next:
			r.see(m.subject, m.mark)
		case now := <-tick.C:
			if err := r.purge(ctx, stream, now); err != nil && ctx.Err() == nil {
				r.log.WarnContext(ctx, "retention: the front of the events stream was not purged; trying again", "err", err)
			}
		}
	}
}

// see records a start or a completion.
func (r *retention) see(subject string, m mark) {
	execution, kind, ok := bus.ParseEventSubject(subject)
	if !ok {
		return
	}
	r.seen = max(r.seen, m.seq)
	r.recent = append(r.recent, m)
	switch kind {
	case bus.KindWorkflowStarted:
		if _, ok := r.running[execution]; !ok {
			r.running[execution] = m
		}
	case bus.KindWorkflowCompleted:
		first := m.seq
		if start, ok := r.running[execution]; ok {
			first = start.seq
			delete(r.running, execution)
		}
		r.ended = append(r.ended, endedExec{first: first, at: m.at})
	}
}

// floor is the first stream sequence still needed as far as the starts and
// completions read say, at now: every message before it can go.
func (r *retention) floor(now time.Time) uint64 {
	old := now.Add(-r.keep)
	for len(r.recent) > 0 && !r.recent[0].at.After(old) {
		r.recent = r.recent[1:]
	}
	for len(r.ended) > 0 && !r.ended[0].at.After(old) {
		r.ended = r.ended[1:]
	}
	floor := r.seen + 1 // what has not been read yet
	if len(r.recent) > 0 {
		floor = min(floor, r.recent[0].seq)
	}
	for _, e := range r.ended {
		floor = min(floor, e.first)
	}
	tooLong := now.Add(-r.holdRunning)
	for id, start := range r.running {
		if !start.at.After(tooLong) {
			delete(r.running, id)
			continue
		}
		floor = min(floor, start.seq)
	}
	return floor
}

// purge purges the stream before the first message still needed.
func (r *retention) purge(ctx context.Context, stream jetstream.Stream, now time.Time) error {
	floor := r.floor(now)
	info, err := stream.Info(ctx)
	if err != nil {
		return err
	}
	if floor <= info.State.FirstSeq {
		return nil
	}
	read, err := r.readUpTo(ctx, stream, info.State.LastSeq)
	if err != nil {
		return err
	}
	floor = min(floor, read+1)
	if floor <= info.State.FirstSeq {
		return nil
	}
	start := time.Now()
	if err := stream.Purge(ctx, jetstream.WithPurgeSequence(floor)); err != nil {
		return err
	}
	r.log.InfoContext(ctx, "retention: purged the front of the events stream",
		"first", info.State.FirstSeq, "up_to", floor-1, "took", time.Since(start).Round(time.Microsecond))
	return nil
}

// readUpTo is the stream sequence up to which every durable consumer of the
// stream has acknowledged every message: the least of their
// acknowledgement floors, where one with nothing pending and nothing
// unacknowledged counts as having read up to last (the stream's last
// sequence, read before the consumers).
func (r *retention) readUpTo(ctx context.Context, stream jetstream.Stream, last uint64) (uint64, error) {
	read := last
	infos := stream.ListConsumers(ctx)
	for ci := range infos.Info() {
		if ci.Config.Durable == "" {
			continue
		}
		if ci.NumPending > 0 || ci.NumAckPending > 0 {
			read = min(read, ci.AckFloor.Stream)
		}
	}
	return read, infos.Err()
}

// sleep waits d; false when ctx ended first.
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
