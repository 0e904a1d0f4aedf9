package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// listedKinds are the kinds of events GET /v1/executions/events streams:
// every execution's start and end, and what happens to a running one that
// a list shows (it waits, it was cancelled, a signal for it was rejected).
var listedKinds = []string{bus.KindWorkflowStarted, bus.KindNodeWaiting, bus.KindExecutionCancelled, bus.KindSignalRejected,
	bus.KindWorkflowCompleted}

// streamExecutions is GET /v1/executions/events: a Server-Sent Events
// stream of every execution's start and end as they happen, each event's
// data the execution as GET /v1/executions lists it at that moment, so a
// list can update its rows without asking again; and of each one's
// node.waiting, execution.cancelled and signal.rejected, their data as GET
// /v1/executions/{id}/events streams them with the members of the
// execution's list item. It starts with what happens next, or after
// Last-Event-ID; ?workflow= keeps one workflow's.
func (g *Gateway) streamExecutions(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r, "workflow"); p != nil {
		return p
	}
	workflow := r.URL.Query().Get("workflow")
	after, release, p := g.beginStream(r)
	if p != nil {
		return p
	}
	defer release()

	if after == 0 {
		// New events only: those after the stream's last message, rather
		// than DeliverNewPolicy, which an ordered consumer recreated before
		// its first message (a missed heartbeat) would apply again, losing
		// what came in between.
		s, err := g.bus.JetStream().Stream(ctx, bus.StreamEvents)
		if err != nil {
			return g.unavailable(r, "the events cannot be read", err)
		}
		after = s.CachedInfo().State.LastSeq
	}
	filters := make([]string, len(listedKinds))
	for i, k := range listedKinds {
		filters[i] = bus.EventFilter(k)
	}
	next, stop, err := g.followEvents(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: filters,
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    after + 1,
	})
	if err != nil {
		return g.unavailable(r, "the events cannot be read", err)
	}
	defer stop()
	g.relay(ctx, w, nil, next, func(m jetstream.Msg) ([]byte, bool) {
		frame, err := g.executionFrame(ctx, m, workflow)
		if err != nil {
			g.log.WarnContext(ctx, "event not streamed", "subject", m.Subject(), "err", err)
		}
		return frame, false
	})
	return nil
}

// executionFrame is a workflow.started or workflow.completed message as an
// SSE event whose data is the execution's list item; and a node.waiting,
// execution.cancelled or signal.rejected one as the execution's stream
// shows it, with the members of the execution's list item as the engine's
// state has them (steeredItem). nil for another workflow's when workflow
// is not empty.
func (g *Gateway) executionFrame(ctx context.Context, m jetstream.Msg, workflow string) ([]byte, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	ev, err := bus.EventOf(m)
	if err != nil {
		return nil, err
	}
	switch ev.Type() {
	case bus.TypeNodeWaiting, bus.TypeExecutionCancelled, bus.TypeSignalRejected:
		id, kind, ok := bus.ParseEventSubject(m.Subject())
		if !ok {
			return nil, nil
		}
		if eid, _ := ev.Extensions()[bus.ExtensionExecutionID].(string); eid != "" {
			id = eid
		}
		data, err := eventData(kind, ev)
		if err != nil {
			return nil, err
		}
		st, err := g.streamedState(ctx, id)
		if err != nil {
			g.log.WarnContext(ctx, "the state of a streamed execution cannot be read", "execution", id, "err", err)
		}
		if workflow != "" && workflowOf(st) != workflow {
			return nil, nil
		}
		item, err := steeredItem(st, data)
		if err != nil {
			return nil, err
		}
		return eventFrame(md.Sequence.Stream, kind, item)
	}
	var kind string
	var doc chainstore.ExecutionDoc
	switch ev.Type() {
	case bus.TypeWorkflowStarted:
		var s novav1.WorkflowStarted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		kind = bus.KindWorkflowStarted
		doc = chainstore.ExecutionDoc{ExecutionID: s.GetExecutionId(), WorkflowName: s.GetWorkflowName(),
			Status: chainstore.StatusRunning, StartedAt: timeOf(s.GetStartedAt()),
			ParentExecutionID: s.GetParent().GetExecutionId(), ParentNode: s.GetParent().GetNodeId()}
	case bus.TypeWorkflowCompleted:
		var s novav1.WorkflowCompleted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		kind = bus.KindWorkflowCompleted
		// As the audit service records it (chainstore.RecordWorkflowCompleted).
		doc = chainstore.ExecutionDoc{ExecutionID: s.GetExecutionId(), WorkflowName: s.GetWorkflowName(),
			Status: s.GetStatus(), Error: redact.Scrub(s.GetError(), nil),
			StartedAt: timeOf(s.GetStartedAt()), CompletedAt: timeOf(s.GetCompletedAt()),
			CostUSD: s.GetCostUsd(), ModelCalls: int(s.GetModelCalls())}
		if doc.StartedAt != nil && doc.CompletedAt != nil {
			doc.DurationMs = doc.CompletedAt.Sub(*doc.StartedAt).Milliseconds()
		}
	default:
		return nil, nil
	}
	if workflow != "" && doc.WorkflowName != workflow {
		return nil, nil
	}
	return eventFrame(md.Sequence.Stream, kind, listItemOf(&doc))
}

// workflowOf is the workflow of an execution by the engine's state ("" for
// none).
func workflowOf(st *execution.View) string { return st.Workflow }

// steeredItem is the data of a node.waiting, execution.cancelled or
// signal.rejected event in the stream of every execution: the event's
// data (view) with the members of the execution's list item as the
// engine's state st has them, so that a list can update the execution's
// row from it as from the other events. Without a state it is the event's
// data alone.
func steeredItem(st *execution.View, view any) (json.RawMessage, error) {
	data, err := marshalCompact(view)
	if err != nil || st == nil {
		return data, err
	}
	doc := chainstore.ExecutionDoc{ExecutionID: st.ID, WorkflowName: workflowOf(st), Status: st.Status,
		Error: redact.Scrub(st.Error, nil), StartedAt: timeOf(st.StartedAt), CompletedAt: timeOf(st.CompletedAt),
		CostUSD: st.CostUSD, ModelCalls: int(st.ModelCalls)}
	if doc.StartedAt != nil && doc.CompletedAt != nil {
		doc.DurationMs = doc.CompletedAt.Sub(*doc.StartedAt).Milliseconds()
	}
	itemJSON, err := marshalCompact(listItemOf(&doc))
	if err != nil {
		return nil, err
	}
	item, err := jsonvalue.ParseObject(itemJSON)
	if err != nil {
		return nil, err
	}
	members, err := jsonvalue.ParseObject(data)
	if err != nil {
		return nil, err
	}
	item.Merge(members)
	return item.Bytes(), nil
}

// stateWaits is how often, stateWait apart, the stream of every execution
// reads the state of an execution whose event came before the engine stored
// its state (it publishes an execution's events, then stores its state).
const (
	stateWaits = 5
	stateWait  = 20 * time.Millisecond
)

// streamedState is the engine's state of execution id for an event of it,
// nil when there is none.
func (g *Gateway) streamedState(ctx context.Context, id string) (*execution.View, error) {
	for i := 0; ; i++ {
		st, err := g.liveState(ctx, id)
		if st != nil || err != nil || i == stateWaits {
			return st, err
		}
		select {
		case <-time.After(stateWait):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}
