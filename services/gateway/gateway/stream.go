package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TypeGone says the events of an execution are no longer kept.
const TypeGone = typePrefix + "gone"

// Stream events: the SSE event names of GET /v1/executions/{id}/events, the
// kinds of the execution's events on the bus. Agents' results (result.*,
// reply.*) are the pipeline's own traffic and are not streamed; what they
// lead to is (a step completed, a node completed, a node that waits).
var streamedKinds = map[string]bool{
	bus.KindWorkflowStarted:    true,
	bus.KindNodeStarted:        true,
	bus.KindStepCompleted:      true,
	bus.KindNodeCompleted:      true,
	bus.KindNodeWaiting:        true,
	bus.KindExecutionCancelled: true,
	bus.KindSignalRejected:     true,
	bus.KindSignalKept:         true,
	bus.KindWorkflowCompleted:  true,
}

// firstEventWait is how long a stream of an execution that neither the
// engine nor the audit store knows yet waits for its first event (a start
// just accepted) before it answers 404.
const firstEventWait = 3 * time.Second

// streamView is the data of a workflow.started event.
type startedView struct {
	ExecutionID  string          `json:"execution_id"`
	WorkflowName string          `json:"workflow_name"`
	StartedAt    *time.Time      `json:"started_at,omitempty"`
	Context      json.RawMessage `json:"context"`
}

// nodeStartedView is the data of a node.started event.
type nodeStartedView struct {
	ExecutionID string     `json:"execution_id"`
	NodeID      string     `json:"node_id"`
	NodeType    string     `json:"node_type"`
	Visit       int32      `json:"visit"`
	AI          bool       `json:"ai"`
	Sequence    int32      `json:"sequence"`
	StartedAt   *time.Time `json:"started_at,omitempty"`
	// The branch the visit runs in ("" when the execution follows one
	// line), and a map item's position.
	Branch string `json:"branch,omitempty"`
	Item   *int32 `json:"item,omitempty"`
}

// nodeWaitingView is the data of a node.waiting event: the current node
// waits for a signal (kind "signal": its name, what the people asked are
// told, the JSON Schema of its payload, the payload member that decides the
// edge), for a sleep to end ("sleep") or before its next attempt ("retry"),
// until Until when the wait ends on its own.
type nodeWaitingView struct {
	ExecutionID string          `json:"execution_id"`
	NodeID      string          `json:"node_id"`
	Visit       int32           `json:"visit"`
	Kind        string          `json:"kind"`
	Signal      string          `json:"signal,omitempty"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	DecideOn    string          `json:"decide_on,omitempty"`
	Until       *time.Time      `json:"until,omitempty"`
	Attempt     int32           `json:"attempt,omitempty"`
	Sequence    int32           `json:"sequence"`
}

// cancelledView is the data of an execution.cancelled event: who cancelled
// the execution, why, and the node that was running.
type cancelledView struct {
	ExecutionID string     `json:"execution_id"`
	NodeID      string     `json:"node_id,omitempty"`
	Reason      string     `json:"reason,omitempty"`
	RequestedBy string     `json:"requested_by,omitempty"`
	CancelledAt *time.Time `json:"cancelled_at,omitempty"`
}

// signalRejectedView is the data of a signal.rejected event: the signal the
// engine did not take and why, the signal the execution waits for (if
// any), and the rejected signal's event id.
// signalKeptView is the data of a signal.kept event: a signal no wait node
// waited for, kept for the first that comes.
type signalKeptView struct {
	ExecutionID   string     `json:"execution_id"`
	Signal        string     `json:"signal"`
	SignalEventID string     `json:"signal_event_id"`
	Kept          int32      `json:"kept"`
	ExpiresAt     *time.Time `json:"expires_at,omitempty"`
}

type signalRejectedView struct {
	ExecutionID   string `json:"execution_id"`
	Signal        string `json:"signal"`
	Reason        string `json:"reason"`
	WaitingFor    string `json:"waiting_for,omitempty"`
	SignalEventID string `json:"signal_event_id,omitempty"`
}

// streamEvents is GET /v1/executions/{id}/events: a Server-Sent Events
// stream of the execution's events as they happen, from its start (or after
// Last-Event-ID, an event's stream sequence), ending with its completion.
func (g *Gateway) streamEvents(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("id")
	if p := checkQuery(r); p != nil {
		return p
	}
	after, release, p := g.beginStream(r)
	if p != nil {
		return p
	}
	defer release()

	known, finished, err := g.knownExecution(ctx, id)
	if err != nil {
		return g.unavailable(r, "the execution cannot be looked up", err)
	}
	if finished {
		end, err := g.bus.LastEventSeq(ctx, id, bus.KindWorkflowCompleted)
		if err != nil {
			return g.unavailable(r, "the events cannot be read", err)
		}
		kept := end > 0
		switch {
		case kept && after >= end:
			// The client has seen the completion: nothing follows it, and
			// 204 tells an EventSource not to reconnect.
			w.WriteHeader(http.StatusNoContent)
			return nil
		case !kept && after > 0:
			return newProblem(http.StatusGone, TypeGone, fmt.Sprintf(
				"the events of execution %q are no longer kept, so there is no event after %d; "+
					"GET /v1/executions/%s/events without Last-Event-ID replays it from its chain of work", id, after, id))
		case !kept:
			return g.replayStored(w, r, id)
		}
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.ExecutionFilter(id)}}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	next, stop, err := g.followEvents(ctx, cfg)
	if err != nil {
		return g.unavailable(r, "the events cannot be read", err)
	}
	defer stop()

	var first jetstream.Msg
	if !known || (finished && after == 0) {
		// An execution nobody knows may be a start just accepted; a finished
		// one must still have its events kept.
		wait := time.NewTimer(firstEventWait)
		select {
		case first = <-next:
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return ctx.Err()
		}
		wait.Stop()
		switch {
		case first == nil && !known:
			return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no execution %q", id))
		case first == nil:
			// Purged between the look above and the consumer's start.
			return g.replayStored(w, r, id)
		}
	}

	g.relay(ctx, w, first, next, func(m jetstream.Msg) ([]byte, bool) {
		frame, last, err := sseFrame(id, m)
		if err != nil {
			g.log.WarnContext(ctx, "event not streamed", "execution", id, "err", err)
		}
		return frame, last
	})
	return nil
}

// replayStored answers the event stream of an ended execution whose events
// are no longer kept from the audit store: the same events, in the order
// they happened, with the data the live ones carry as the store recorded
// it, and without ids (they have no place in the events stream any more).
func (g *Gateway) replayStored(w http.ResponseWriter, r *http.Request, id string) error {
	ctx := r.Context()
	doc, err := g.store.Execution(ctx, id)
	if errors.Is(err, chainstore.ErrNotFound) {
		return newProblem(http.StatusGone, TypeGone, fmt.Sprintf(
			"the events of execution %q are no longer kept and the audit store has not recorded it", id))
	}
	if err != nil {
		return g.unavailable(r, "the audit store cannot be read", err)
	}
	nodes, err := g.store.Chain(ctx, id)
	if err != nil {
		return g.unavailable(r, "the chain of work cannot be read", err)
	}
	frames, err := storedFrames(doc, nodes)
	if err != nil {
		return err
	}
	sse := startSSE(w, g.limits.Timeout)
	for _, f := range frames {
		sse.write(f)
	}
	return nil
}

// storedFrames are the SSE events of an ended execution made from its
// documents in the audit store.
func storedFrames(doc *chainstore.ExecutionDoc, nodes []chainstore.NodeDoc) ([][]byte, error) {
	ai := map[string]bool{}
	if defNodes, ok := doc.Definition["nodes"].([]any); ok {
		for _, n := range defNodes {
			if n, ok := n.(map[string]any); ok {
				id, _ := n["id"].(string)
				prompt, _ := n["prompt"].(string)
				ai[id] = prompt != ""
			}
		}
	}
	ctxJSON := func(m map[string]any) (json.RawMessage, error) {
		if m == nil {
			return json.RawMessage("{}"), nil
		}
		return marshalCompact(m)
	}
	var frames [][]byte
	add := func(kind string, data any) error {
		body, err := marshalCompact(data)
		if err != nil {
			return fmt.Errorf("%s of execution %s: %w", kind, doc.ExecutionID, err)
		}
		frames = append(frames, fmt.Appendf(nil, "event: %s\ndata: %s\n\n", kind, body))
		return nil
	}
	initial, err := ctxJSON(doc.InitialContext)
	if err != nil {
		return nil, err
	}
	if err := add(bus.KindWorkflowStarted, startedView{ExecutionID: doc.ExecutionID, WorkflowName: doc.WorkflowName,
		StartedAt: doc.StartedAt, Context: initial}); err != nil {
		return nil, err
	}
	// A cancelled execution's execution.cancelled, until it is added.
	var cancelled *cancelledView
	if doc.Status == execution.StatusCancelled {
		cancelled = &cancelledView{ExecutionID: doc.ExecutionID, Reason: doc.CancelReason, RequestedBy: doc.CancelledBy,
			CancelledAt: doc.CompletedAt}
	}
	for _, n := range nodes {
		if n.NodeType != "start" && n.NodeType != "end" {
			// The engine announces the nodes it dispatches to an agent.
			started := nodeStartedView{ExecutionID: n.ExecutionID, NodeID: n.NodeID,
				NodeType: n.NodeType, Visit: int32(n.Visit), AI: ai[n.NodeID], Sequence: int32(n.Sequence),
				StartedAt: n.StartedAt, Branch: n.Branch}
			if n.Item != nil {
				started.Item = new(int32(*n.Item))
			}
			if err := add(bus.KindNodeStarted, started); err != nil {
				return nil, err
			}
		}
		for _, st := range n.Steps {
			if err := add(bus.KindStepCompleted, st); err != nil {
				return nil, err
			}
		}
		if n.Status == execution.NodeCancelled && cancelled != nil {
			// The engine says why before it ends the node's visit.
			cancelled.NodeID = n.NodeID
			if err := add(bus.KindExecutionCancelled, cancelled); err != nil {
				return nil, err
			}
			cancelled = nil
		}
		if n.Status != chainstore.StatusRunning {
			n.Steps = nil
			if err := add(bus.KindNodeCompleted, n); err != nil {
				return nil, err
			}
		}
	}
	if cancelled != nil {
		if err := add(bus.KindExecutionCancelled, cancelled); err != nil {
			return nil, err
		}
	}
	final, err := ctxJSON(doc.FinalContext)
	if err != nil {
		return nil, err
	}
	c := completion{ExecutionID: doc.ExecutionID, Status: doc.Status, Context: final, Path: doc.Path,
		Nodes: []completionNode{}, Error: doc.Error, CostUSD: doc.CostUSD, ModelCalls: int32(doc.ModelCalls)}
	if c.Path == nil {
		c.Path = []string{}
	}
	for _, n := range doc.Nodes {
		c.Nodes = append(c.Nodes, completionNode{ID: n.ID, Status: n.Status, Attempts: int32(n.Attempts), Error: n.Error,
			CostUSD: n.CostUSD, ModelCalls: int32(n.ModelCalls)})
	}
	if err := add(bus.KindWorkflowCompleted, c); err != nil {
		return nil, err
	}
	return frames, nil
}

// knownExecution tells whether the engine or the audit store knows the
// execution, and whether it has ended.
func (g *Gateway) knownExecution(ctx context.Context, id string) (known, finished bool, err error) {
	st, err := g.liveState(ctx, id)
	if err != nil {
		return false, false, err
	}
	if st != nil {
		return true, st.Status != chainstore.StatusRunning, nil
	}
	doc, err := g.store.Execution(ctx, id)
	switch {
	case errors.Is(err, chainstore.ErrNotFound):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return true, doc.Status != chainstore.StatusRunning, nil
}

// sseFrame is one stream message as an SSE event (nil for a kind that is
// not streamed), and whether it ends the stream.
func sseFrame(id string, m jetstream.Msg) ([]byte, bool, error) {
	md, err := m.Metadata()
	if err != nil {
		return nil, false, err
	}
	kind := bus.EventKind(id, m.Subject())
	if !streamedKinds[kind] {
		return nil, false, nil
	}
	ev, err := bus.EventOf(m)
	if err != nil {
		return nil, false, err
	}
	data, err := eventData(kind, ev)
	if err != nil {
		return nil, false, err
	}
	seq := md.Sequence.Stream
	if i, n := bus.PartOf(m); i < n-1 {
		seq = 0 // not the envelope's last event: no id (see eventFrame)
	}
	frame, err := eventFrame(seq, kind, data)
	if err != nil {
		return nil, false, err
	}
	return frame, kind == bus.KindWorkflowCompleted, nil
}

// eventData is the data of an execution's event of a streamed kind, as
// the event streams show it.
func eventData(kind string, ev *event.Event) (any, error) {
	var data any
	switch kind {
	case bus.KindWorkflowStarted:
		var s novav1.WorkflowStarted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = startedView{ExecutionID: s.GetExecutionId(), WorkflowName: s.GetWorkflowName(),
			StartedAt: timeOf(s.GetStartedAt()), Context: jsonvalue.MustObject(s.GetContext()).Bytes()}
	case bus.KindNodeStarted:
		var s novav1.NodeStarted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = nodeStartedView{ExecutionID: s.GetExecutionId(), NodeID: s.GetNodeId(), NodeType: s.GetNodeType(),
			Visit: s.GetVisit(), AI: s.GetAi(), Sequence: s.GetSequence(), StartedAt: timeOf(s.GetStartedAt()),
			Branch: s.GetBranch(), Item: s.Item}
	case bus.KindStepCompleted:
		var s novav1.StepCompleted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = chainstore.StepDocOf(&s)
	case bus.KindNodeCompleted:
		var s novav1.NodeCompleted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = chainstore.NodeDocOf(&s)
	case bus.KindWorkflowCompleted:
		var s novav1.WorkflowCompleted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = toCompletion(&s)
	case bus.KindNodeWaiting:
		var s novav1.NodeWaiting
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = nodeWaitingView{ExecutionID: s.GetExecutionId(), NodeID: s.GetNodeId(), Visit: s.GetVisit(), Kind: s.GetKind(),
			Signal: s.GetSignal(), Description: s.GetDescription(), Schema: schemaJSON(s.GetSchema()), DecideOn: s.GetDecideOn(),
			Until: timeOf(s.GetUntil()), Attempt: s.GetAttempt(), Sequence: s.GetSequence()}
	case bus.KindExecutionCancelled:
		var s novav1.ExecutionCancelled
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = cancelledView{ExecutionID: s.GetExecutionId(), NodeID: s.GetNodeId(), Reason: s.GetReason(),
			RequestedBy: s.GetRequestedBy(), CancelledAt: timeOf(s.GetCancelledAt())}
	case bus.KindSignalRejected:
		var s novav1.SignalRejected
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = signalRejectedView{ExecutionID: s.GetExecutionId(), Signal: s.GetSignal(), Reason: s.GetReason(),
			WaitingFor: s.GetWaitingFor(), SignalEventID: s.GetSignalEventId()}
	case bus.KindSignalKept:
		var s novav1.SignalKept
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, err
		}
		data = signalKeptView{ExecutionID: s.GetExecutionId(), Signal: s.GetSignal(), SignalEventID: s.GetSignalEventId(),
			Kept: s.GetKept(), ExpiresAt: timeOf(s.GetExpiresAt())}
	default:
		return nil, fmt.Errorf("event kind %q is not streamed", kind)
	}
	return data, nil
}

func timeOf(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}
