package client

import (
	"context"
	"errors"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Progress is one fact of an execution as it happens: exactly one of its
// fields is set.
type Progress struct {
	Started       *novav1.WorkflowStarted
	NodeStarted   *novav1.NodeStarted
	StepCompleted *novav1.StepCompleted
	NodeCompleted *novav1.NodeCompleted
	Completed     *novav1.WorkflowCompleted
	// Waiting: a node waits (a signal, a sleep, a retry, a lock).
	Waiting *novav1.NodeWaiting
	// Kept: a signal no wait node waited for yet, kept for the first.
	Kept *novav1.SignalKept
}

// Follow calls each with the facts of execution id in the order they
// happened, from its start (one that began earlier is replayed), until
// stop is called. each runs on one goroutine, one fact at a time.
func (c *Client) Follow(ctx context.Context, id string, each func(Progress)) (stop func(), err error) {
	return c.bus.Watch(ctx, "follow execution "+id, bus.StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.ExecutionFilter(id)}},
		func(m jetstream.Msg, ev *event.Event) {
			var p Progress
			var msg proto.Message
			switch bus.EventKind(id, m.Subject()) {
			case bus.KindWorkflowStarted:
				p.Started = &novav1.WorkflowStarted{}
				msg = p.Started
			case bus.KindNodeStarted:
				p.NodeStarted = &novav1.NodeStarted{}
				msg = p.NodeStarted
			case bus.KindStepCompleted:
				p.StepCompleted = &novav1.StepCompleted{}
				msg = p.StepCompleted
			case bus.KindNodeCompleted:
				p.NodeCompleted = &novav1.NodeCompleted{}
				msg = p.NodeCompleted
			case bus.KindWorkflowCompleted:
				p.Completed = &novav1.WorkflowCompleted{}
				msg = p.Completed
			case bus.KindNodeWaiting:
				p.Waiting = &novav1.NodeWaiting{}
				msg = p.Waiting
			case bus.KindSignalKept:
				p.Kept = &novav1.SignalKept{}
				msg = p.Kept
			default:
				return
			}
			if bus.Decode(*ev, msg) == nil {
				each(p)
			}
		})
}

// Purged is the completion of execution id, from the engine's state, when
// it has ended and its events are no longer kept (the audit service purges
// them auditservice.KeepEnded after the end), so that Follow would show
// nothing; nil when it runs, is unknown, or its events are kept.
func (c *Client) Purged(ctx context.Context, id string) (*novav1.WorkflowCompleted, error) {
	kv, err := c.bus.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	st, err := execution.ReadState(ctx, kv, id)
	if err != nil || st == nil {
		return nil, err
	}
	if st.GetStatus() == execution.StatusRunning {
		return nil, nil
	}
	kept, err := c.bus.CompletionKept(ctx, id)
	if err != nil || kept {
		return nil, err
	}
	return execution.Completion(st), nil
}
