// Package service feeds the audit store from the bus: every fact of every
// execution (nova.evt.>) becomes a document of the chain of work.
package service

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Consumer is the audit service's durable consumer.
const Consumer = "audit"

// Deps are what the audit service needs.
type Deps struct {
	Bus     *bus.Bus
	Store   *chainstore.Store
	Logger  *slog.Logger
	Workers int
	// HoldFor and MaxHeld replace the defaults of the same names (0: the
	// default).
	HoldFor time.Duration
	MaxHeld int
	// KeepEnded and PurgeEvery replace the defaults of the same names (0:
	// the default).
	KeepEnded  time.Duration
	PurgeEvery time.Duration
	// Outage is how the consumer rides out a store that does not answer
	// (nil: one that probes the store every second). Its state is what the
	// service's readiness reports.
	Outage *bus.Outage
	// Backoff replaces the consumer's delays between deliveries of an
	// event the store refused (tests of an outage longer than them).
	Backoff []time.Duration
	// Retention is how long an ended execution's chain of work is kept (0:
	// for ever); SweepEvery replaces sweepEvery(Retention).
	Retention  time.Duration
	SweepEvery time.Duration
}

// Run records events until ctx ends.
func Run(ctx context.Context, d Deps) error {
	if err := d.Bus.EnsureStreams(ctx); err != nil {
		return err
	}
	if err := d.Store.EnsureIndexes(ctx); err != nil {
		return err
	}
	serverDeletes, err := d.Store.EnsureRetention(ctx, d.Retention)
	if err != nil {
		return err
	}
	h := &holder{started: map[string]*heldStart{}, held: make(chan struct{}, 1), holdFor: cmp.Or(d.HoldFor, HoldFor), max: cmp.Or(d.MaxHeld, MaxHeld)}
	stopExpiring := h.expire(ctx, d.Store)
	// The events stream is purged of what no one needs any more beside the
	// recording.
	purging, stopPurging := context.WithCancel(ctx)
	purged := make(chan struct{})
	go func() {
		defer close(purged)
		newRetention(d.Bus, cmp.Or(d.KeepEnded, KeepEnded), cmp.Or(d.PurgeEvery, PurgeEvery), d.Logger).run(purging)
	}()
	swept := make(chan struct{})
	go func() {
		defer close(swept)
		if d.Retention > 0 && !serverDeletes {
			(&sweeper{st: d.Store, keep: d.Retention, every: cmp.Or(d.SweepEvery, sweepEvery(d.Retention)), log: d.Logger}).run(purging)
		}
	}()
	spec := ConsumerSpec(d.Workers)
	spec.Backoff = d.Backoff
	spec.Outage = d.Outage
	if spec.Outage == nil {
		spec.Outage = NewOutage(d.Store)
	}
	err = d.Bus.ConsumeBatch(ctx, spec, func(ctx context.Context, evs []event.Event) []error {
		return record(ctx, d.Store, h, evs)
	})
	stopPurging()
	<-purged
	<-swept
	stopExpiring()
	// What is still held is written now, running, rather than left to a
	// redelivery after AckWait.
	flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	h.write(flushCtx, d.Store, h.take(func(*heldStart) bool { return true }))
	return err
}

// ConsumerSpec describes the audit consumer: the execution events it
// records (recorded), in batches, several at once (writes are idempotent,
// so order does not matter). A batch is written with one write per
// collection; under load the events wait in the stream while a batch is
// written and make the next one.
func ConsumerSpec(workers int) bus.Consumer {
	filters := make([]string, len(recorded))
	for i, r := range recorded {
		filters[i] = bus.EventFilter(r.kind)
	}
	return bus.Consumer{
		Stream:     bus.StreamEvents,
		Durable:    Consumer,
		Filters:    filters,
		Workers:    max(workers, 2),
		Batch:      BatchSize,
		BatchWait:  BatchWait,
		BatchFlush: EndsBatch,
		MaxDeliver: 10,
	}
}

// EndsBatch ends a batch at a workflow's completion when every execution
// with events in the batch has completed in it: one at a time, each
// workflow is then one batch, written at once (a client that saw it
// complete may read its chain of work next: POST /v1/executions?wait, then
// GET), its execution document inserted whole. While other executions run,
// a completion does not end the batch: their documents are written running
// and completed later whatever the batch, and a batch ended at every
// completion (several a second) would cost its writes for each. The batch
// then goes at Batch events or BatchWait, the completion with it. Agents'
// replies to runs outside any workflow (the gateway's execute), which
// never complete, do not count.
func EndsBatch(subjects []string) bool {
	if _, kind, ok := bus.ParseEventSubject(subjects[len(subjects)-1]); !ok || kind != bus.KindWorkflowCompleted {
		return false
	}
	completed := map[string]bool{} // of the executions with events in the batch
	for _, s := range subjects {
		if id, kind, ok := bus.ParseEventSubject(s); ok && !bus.IsReplyKind(kind) {
			completed[id] = completed[id] || kind == bus.KindWorkflowCompleted
		}
	}
	for _, done := range completed {
		if !done {
			return false
		}
	}
	return true
}

const (
	// BatchSize is the most events one batch records (FerretDB inserts up
	// to 100 documents per statement).
	BatchSize = 100
	// BatchWait is how long a batch waits for more events after its first.
	// A batch costs about what one event recorded alone costs, and a
	// workflow's events come tens of milliseconds apart. A workflow's
	// completion ends the batch when no other execution runs in it
	// (EndsBatch), and the next workflow's events begin the next one: one
	// at a time, a 3-node workflow that takes less than BatchWait is one
	// batch, whose execution document is inserted whole (without an update
	// for its completion). The chain of work is as much later in the store;
	// `nova run --chain` and the tests wait for the consumer to be idle,
	// which covers it.
	BatchWait = 100 * time.Millisecond

	// HoldFor is how long the audit service keeps a started event whose
	// execution has not completed in its batch, waiting for the
	// completion: the execution's document is then inserted once, whole,
	// where it would have been inserted running and updated at its
	// completion (on FerretDB an update finds, rewrites and reindexes the
	// document in a transaction of its own: at 32 workflows in flight the
	// largest single cost of the store). Until then `GET /v1/executions`
	// does not list the execution, whose node visits and steps are
	// recorded as they come, and `GET /v1/executions/{id}` answers from the
	// engine's state.
	HoldFor = 1500 * time.Millisecond
	// MaxHeld bounds the started events kept at once: each counts against
	// the consumer's acks pending (ConsumerSpec's MaxAckPending is
	// Workers × BatchSize), and beyond it a started event is written at
	// once, running.
	MaxHeld = 64
)

// holder keeps the started events of executions still running (HoldFor).
type holder struct {
	holdFor time.Duration
	max     int

	mu      sync.Mutex
	started map[string]*heldStart // by execution id
	// held is signalled when the holder, empty, takes a started event:
	// expire ticks only while it holds some, so an idle audit service
	// wakes for nothing.
	held chan struct{}
}

// heldStart is a started event kept, with its delivery.
type heldStart struct {
	fact  *novav1.WorkflowStarted
	hold  *bus.Held
	until time.Time
}

// keep holds fact until its execution completes or h.holdFor passes, and
// returns the bus's Held for its delivery; nil when h.max are held.
// A repeated started event of an execution held (a redelivery) takes the
// place of the one held, whose delivery is acked: the same fact is
// recorded through the newer.
func (h *holder) keep(fact *novav1.WorkflowStarted, now time.Time) *bus.Held {
	h.mu.Lock()
	id := fact.GetExecutionId()
	old := h.started[id]
	if old == nil && len(h.started) >= h.max {
		h.mu.Unlock()
		return nil
	}
	hs := &heldStart{fact: fact, hold: bus.Hold(), until: now.Add(h.holdFor)}
	h.started[id] = hs
	if len(h.started) == 1 {
		select {
		case h.held <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
	if old != nil {
		old.hold.Settle(nil)
	}
	return hs.hold
}

// empty tells whether h holds no started event.
func (h *holder) empty() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.started) == 0
}

// take removes and returns the started events held for which release is
// true.
func (h *holder) take(release func(*heldStart) bool) []*heldStart {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*heldStart
	for id, hs := range h.started {
		if release(hs) {
			out = append(out, hs)
			delete(h.started, id)
		}
	}
	return out
}

// write records started events taken from the holder and settles their
// deliveries.
func (h *holder) write(ctx context.Context, s *chainstore.Store, list []*heldStart) {
	if len(list) == 0 {
		return
	}
	facts := make([]proto.Message, len(list))
	for i, hs := range list {
		facts[i] = hs.fact
	}
	settle(list, s.RecordAll(ctx, facts))
}

// settle settles the deliveries of started events taken from the holder
// with what RecordAll returned for them (errs nil: all recorded).
func settle(list []*heldStart, errs []error) {
	for i, hs := range list {
		var err error
		if errs != nil {
			err = settleErr(errs[i])
		}
		hs.hold.Settle(err)
	}
}

// expire writes, running, the started events held for h.holdFor whose
// executions have not completed, also while no batch comes; until stopped.
func (h *holder) expire(ctx context.Context, s *chainstore.Store) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(h.holdFor / 4)
		defer t.Stop()
		for {
			if h.empty() {
				select {
				case <-ctx.Done():
					return
				case <-h.held:
					t.Reset(h.holdFor / 4)
				}
			}
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				h.write(ctx, s, h.take(func(hs *heldStart) bool { return !now.Before(hs.until) }))
			}
		}
	}()
	return func() { cancel(); <-done }
}

// settleErr is how the bus is to settle an event the store did not record:
// one the store refuses is dead-lettered at once (no delivery will ever
// store it), one it did not answer for is kept until it does (an outage
// is not the event's fault), any other is retried.
func settleErr(err error) error {
	switch {
	case errors.Is(err, chainstore.ErrInvalidEvent):
		return bus.Permanent(err)
	case chainstore.Unreachable(err):
		return bus.Unavailable(err)
	}
	return err
}

// NewOutage is the audit consumer's way through a store outage: while the
// store does not answer, the consumer is paused and what it holds is kept,
// the store pinged every second, and nothing is dead-lettered for it.
func NewOutage(st *chainstore.Store) *bus.Outage {
	return &bus.Outage{Probe: st.Ping, Every: time.Second}
}

// recorded are the events the chain of work is made of, by kind (the
// consumer reads only those) and type, with the fact each carries. The
// others (a node's start, the agents' results, the sandbox's among them)
// are recorded through the steps and completions the engine derives from
// them; delivering them to the audit and acknowledging them would cost two
// messages each for nothing.
var recorded = []struct {
	kind, typ string
	fact      func() proto.Message
}{
	{bus.KindWorkflowStarted, bus.TypeWorkflowStarted, func() proto.Message { return &novav1.WorkflowStarted{} }},
	{bus.KindWorkflowCompleted, bus.TypeWorkflowCompleted, func() proto.Message { return &novav1.WorkflowCompleted{} }},
	{bus.KindNodeCompleted, bus.TypeNodeCompleted, func() proto.Message { return &novav1.NodeCompleted{} }},
	{bus.KindStepCompleted, bus.TypeStepCompleted, func() proto.Message { return &novav1.StepCompleted{} }},
}

// factOf is an empty fact of an event of type typ; nil for a type the
// chain of work does not record.
func factOf(typ string) proto.Message {
	for _, r := range recorded {
		if r.typ == typ {
			return r.fact()
		}
	}
	return nil
}

// record records the facts among evs; the others (agents' results, the
// sandbox's among them) are recorded through the steps the engine derives
// from them, and a newer producer's facts are kept in the stream until the
// audit service learns them. A started event whose execution does not
// complete among evs is kept in h (HoldFor), and one kept there is recorded
// with its execution's completion, so that the execution's document is
// inserted whole; h nil keeps none.
func record(ctx context.Context, s *chainstore.Store, h *holder, evs []event.Event) []error {
	errs := make([]error, len(evs))
	facts := make([]proto.Message, 0, len(evs))
	at := make([]int, 0, len(evs)) // the event of each fact
	completed := map[string]bool{}
	for i, ev := range evs {
		m := factOf(ev.Type())
		if m == nil {
			continue
		}
		if err := bus.Decode(ev, m); err != nil {
			errs[i] = err
			continue
		}
		if c, ok := m.(*novav1.WorkflowCompleted); ok && c.GetExecutionId() != "" {
			completed[c.GetExecutionId()] = true
		}
		facts = append(facts, m)
		at = append(at, i)
	}
	var released []*heldStart
	if h != nil {
		now := time.Now()
		kept, keptAt := facts[:0], at[:0] // the facts written now
		for j, m := range facts {
			if st, ok := m.(*novav1.WorkflowStarted); ok && st.GetExecutionId() != "" && !completed[st.GetExecutionId()] {
				if hold := h.keep(st, now); hold != nil {
					errs[at[j]] = hold
					continue
				}
			}
			kept, keptAt = append(kept, m), append(keptAt, at[j])
		}
		facts, at = kept, keptAt
		released = h.take(func(hs *heldStart) bool { return completed[hs.fact.GetExecutionId()] })
		for _, hs := range released {
			facts = append(facts, hs.fact)
		}
	}
	if len(facts) == 0 {
		return errs
	}
	recorded := s.RecordAll(ctx, facts)
	if recorded == nil {
		settle(released, nil)
		recorded = make([]error, len(facts)) // every fact was written
	} else {
		settle(released, recorded[len(at):])
	}
	for j, i := range at {
		errs[i] = settleErr(recorded[j])
		if errs[i] == nil {
			errs[i] = settleErr(linkRerun(ctx, s, facts[j]))
		}
	}
	return errs
}

// linkRerun records, on the execution a rerun reruns, the rerun's id
// (reruns), when m is a rerun's start or completion; repeated, it changes
// nothing.
func linkRerun(ctx context.Context, s *chainstore.Store, m proto.Message) error {
	var orig, rerun string
	switch ev := m.(type) {
	case *novav1.WorkflowStarted:
		orig, rerun = ev.GetRerun().GetExecutionId(), ev.GetExecutionId()
	case *novav1.WorkflowCompleted:
		orig, rerun = ev.GetRerunOf(), ev.GetExecutionId()
	}
	if orig == "" {
		return nil
	}
	return s.LinkRerun(ctx, orig, rerun)
}
