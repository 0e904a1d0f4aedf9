package gateway

import (
	"net/http"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// streamExecutions is GET /v1/executions/events: a Server-Sent Events
// stream of every execution's start and end as they happen, each event's
// data the execution as GET /v1/executions lists it at that moment, so a
// list can update its rows without asking again. It starts with what
// happens next, or after Last-Event-ID; ?workflow= keeps one workflow's.
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
	next, stop, err := g.followEvents(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventFilter(bus.KindWorkflowStarted), bus.EventFilter(bus.KindWorkflowCompleted)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:    after + 1,
	})
	if err != nil {
		return g.unavailable(r, "the events cannot be read", err)
	}
	defer stop()
	g.relay(ctx, w, nil, next, func(m jetstream.Msg) ([]byte, bool) {
		frame, err := executionFrame(m, workflow)
		if err != nil {
			g.log.WarnContext(ctx, "event not streamed", "subject", m.Subject(), "err", err)
		}
		return frame, false
	})
	return nil
}

// executionFrame is a workflow.started or workflow.completed message as an
// SSE event whose data is the execution's list item; nil for another
// workflow's when workflow is not empty.
func executionFrame(m jetstream.Msg, workflow string) ([]byte, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, err
	}
	ev, err := bus.DecodeNATS(m.Headers(), m.Data())
	if err != nil {
		return nil, err
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
			Status: chainstore.StatusRunning, StartedAt: timeOf(s.GetStartedAt())}
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
