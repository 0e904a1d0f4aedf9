// Package service feeds the audit store from the bus: every fact of every
// execution (nova.evt.>) becomes a document of the chain of work.
package service

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/audit/store"
)

// Consumer is the audit service's durable consumer.
const Consumer = "audit"

// Deps are what the audit service needs.
type Deps struct {
	Bus     *bus.Bus
	Store   *store.Store
	Logger  *slog.Logger
	Workers int
}

// Run records events until ctx ends.
func Run(ctx context.Context, d Deps) error {
	if err := d.Bus.EnsureStreams(ctx); err != nil {
		return err
	}
	if err := d.Store.EnsureIndexes(ctx); err != nil {
		return err
	}
	return d.Bus.ConsumeBatch(ctx, ConsumerSpec(d.Workers), func(ctx context.Context, evs []event.Event) []error {
		return record(ctx, d.Store, evs)
	})
}

// ConsumerSpec describes the audit consumer: every execution event, in
// batches, several at once (writes are idempotent, so order does not
// matter). A batch is written with one write per collection; under load the
// events wait in the stream while a batch is written and make the next one.
func ConsumerSpec(workers int) bus.Consumer {
	return bus.Consumer{
		Stream:     bus.StreamEvents,
		Durable:    Consumer,
		Filters:    []string{"nova.evt.>"},
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
// replies to runs outside any workflow (gateway execute and refine), which
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
)

// record records the facts among evs; the others (agents' results, the
// sandbox's among them) are recorded through the steps the engine derives
// from them, and a newer producer's facts are kept in the stream until the
// audit service learns them.
func record(ctx context.Context, s *store.Store, evs []event.Event) []error {
	errs := make([]error, len(evs))
	facts := make([]proto.Message, 0, len(evs))
	at := make([]int, 0, len(evs)) // the event of each fact
	for i, ev := range evs {
		var m proto.Message
		switch ev.Type() {
		case bus.TypeWorkflowStarted:
			m = &novav1.WorkflowStarted{}
		case bus.TypeWorkflowCompleted:
			m = &novav1.WorkflowCompleted{}
		case bus.TypeNodeCompleted:
			m = &novav1.NodeCompleted{}
		case bus.TypeStepCompleted:
			m = &novav1.StepCompleted{}
		default:
			continue
		}
		if err := bus.Decode(ev, m); err != nil {
			errs[i] = err
			continue
		}
		facts = append(facts, m)
		at = append(at, i)
	}
	if len(facts) > 0 {
		for j, err := range s.RecordAll(ctx, facts) {
			if errors.Is(err, store.ErrInvalidEvent) {
				err = bus.Permanent(err) // no delivery will ever store it
			}
			errs[at[j]] = err
		}
	}
	return errs
}
