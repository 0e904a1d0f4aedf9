// Package service feeds the audit store from the bus: every fact of every
// execution (nova.evt.>) becomes a document of the chain of work.
package service

import (
	"context"
	"log/slog"

	"github.com/cloudevents/sdk-go/v2/event"

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
	return d.Bus.Consume(ctx, ConsumerSpec(d.Workers), func(ctx context.Context, ev event.Event) error {
		return record(ctx, d.Store, ev)
	})
}

// ConsumerSpec describes the audit consumer: every execution event, in
// parallel (writes are idempotent upserts, so order does not matter).
func ConsumerSpec(workers int) bus.Consumer {
	return bus.Consumer{
		Stream:     bus.StreamEvents,
		Durable:    Consumer,
		Filters:    []string{"nova.evt.>"},
		Workers:    max(workers, 4),
		MaxDeliver: 10,
	}
}

func record(ctx context.Context, s *store.Store, ev event.Event) error {
	switch ev.Type() {
	case bus.TypeWorkflowStarted:
		var m novav1.WorkflowStarted
		if err := bus.Decode(ev, &m); err != nil {
			return err
		}
		return s.RecordWorkflowStarted(ctx, &m)
	case bus.TypeWorkflowCompleted:
		var m novav1.WorkflowCompleted
		if err := bus.Decode(ev, &m); err != nil {
			return err
		}
		return s.RecordWorkflowCompleted(ctx, &m)
	case bus.TypeNodeCompleted:
		var m novav1.NodeCompleted
		if err := bus.Decode(ev, &m); err != nil {
			return err
		}
		return s.RecordNode(ctx, &m)
	case bus.TypeStepCompleted:
		var m novav1.StepCompleted
		if err := bus.Decode(ev, &m); err != nil {
			return err
		}
		return s.RecordStep(ctx, &m)
	default:
		// Agents' results (the sandbox's among them) are recorded through the
		// steps the engine derives from them; a newer producer's facts are
		// kept in the stream until the audit service learns them.
		return nil
	}
}
