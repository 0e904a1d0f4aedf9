package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/audit/store"
)

// TypeGone says the events of an execution are no longer kept.
const TypeGone = typePrefix + "gone"

// Stream events: the SSE event names of GET /v1/executions/{id}/events, the
// kinds of the execution's events on the bus. Agents' results (result.*,
// reply.*) are the pipeline's own traffic and are not streamed; what they
// lead to is (a step completed, a node completed).
var streamedKinds = map[string]bool{
	bus.KindWorkflowStarted:   true,
	bus.KindNodeStarted:       true,
	bus.KindStepCompleted:     true,
	bus.KindNodeCompleted:     true,
	bus.KindWorkflowCompleted: true,
}

// firstEventWait is how long a stream of an execution that neither the
// engine nor the audit store knows yet waits for its first event (a start
// just accepted) before it answers 404.
const firstEventWait = 3 * time.Second

// keepAlive is how often an idle stream sends a comment, so proxies and
// clients can tell a quiet execution from a dead connection.
const keepAlive = 15 * time.Second

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
	var after uint64
	if v := r.Header.Get("Last-Event-ID"); v != "" {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil {
			return invalid("Last-Event-ID must be the id of an event of this stream",
				FieldError{Field: "Last-Event-ID", Detail: fmt.Sprintf("%q is not an event id (a positive integer)", v)})
		}
		after = n
	}
	release, p := g.streams.acquire(keyName(r))
	if p != nil {
		return p
	}
	defer release()

	known, finished, err := g.knownExecution(ctx, id)
	if err != nil {
		return g.unavailable(r, "the execution cannot be looked up", err)
	}
	cfg := jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.ExecutionFilter(id)}}
	if after > 0 {
		cfg.DeliverPolicy, cfg.OptStartSeq = jetstream.DeliverByStartSequencePolicy, after+1
	}
	cons, err := g.bus.JetStream().OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return g.unavailable(r, "the events cannot be read", err)
	}
	msgs, err := cons.Messages()
	if err != nil {
		return g.unavailable(r, "the events cannot be read", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	next := make(chan jetstream.Msg)
	done := make(chan struct{})
	defer func() {
		cancel()
		msgs.Stop()
		<-done
	}()
	go func() {
		defer close(done)
		defer close(next)
		for {
			m, err := msgs.Next()
			if err != nil {
				return // stopped
			}
			select {
			case next <- m:
			case <-ctx.Done():
				return
			}
		}
	}()

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
			return newProblem(http.StatusGone, TypeGone, fmt.Sprintf(
				"the events of execution %q are no longer kept; GET /v1/executions/%s has its chain of work", id, id))
		}
	}

	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) error {
		// A stream outlives the server's write timeout; each write gets its
		// own deadline, so a client that stops reading is let go.
		_ = rc.SetWriteDeadline(time.Now().Add(g.limits.Timeout))
		if _, err := w.Write(b); err != nil {
			return err
		}
		return rc.Flush()
	}
	// retry tells EventSource clients how soon to reconnect.
	if err := write([]byte("retry: 2000\n\n")); err != nil {
		return nil
	}
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	m := first
	for {
		if m != nil {
			frame, last, err := sseFrame(id, m)
			if err != nil {
				g.log.WarnContext(ctx, "event not streamed", "execution", id, "err", err)
			} else if frame != nil {
				if err := write(frame); err != nil {
					return nil // the client went away
				}
			}
			if last {
				return nil
			}
		}
		m = nil
		select {
		case m = <-next:
			if m == nil {
				return nil
			}
		case <-tick.C:
			if err := write([]byte(": keep-alive\n\n")); err != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		}
	}
}

// knownExecution tells whether the engine or the audit store knows the
// execution, and whether it has ended.
func (g *Gateway) knownExecution(ctx context.Context, id string) (known, finished bool, err error) {
	st, err := g.liveState(ctx, id)
	if err != nil {
		return false, false, err
	}
	if st != nil {
		return true, st.GetStatus() != store.StatusRunning, nil
	}
	doc, err := g.store.Execution(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return true, doc.Status != store.StatusRunning, nil
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
	ev, err := bus.DecodeNATS(m.Headers(), m.Data())
	if err != nil {
		return nil, false, err
	}
	var data any
	switch kind {
	case bus.KindWorkflowStarted:
		var s novav1.WorkflowStarted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, false, err
		}
		data = startedView{ExecutionID: s.GetExecutionId(), WorkflowName: s.GetWorkflowName(),
			StartedAt: timeOf(s.GetStartedAt()), Context: jsonvalue.MustObject(s.GetContext()).Bytes()}
	case bus.KindNodeStarted:
		var s novav1.NodeStarted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, false, err
		}
		data = nodeStartedView{ExecutionID: s.GetExecutionId(), NodeID: s.GetNodeId(), NodeType: s.GetNodeType(),
			Visit: s.GetVisit(), AI: s.GetAi(), Sequence: s.GetSequence(), StartedAt: timeOf(s.GetStartedAt())}
	case bus.KindStepCompleted:
		var s novav1.StepCompleted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, false, err
		}
		data = store.StepDocOf(&s)
	case bus.KindNodeCompleted:
		var s novav1.NodeCompleted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, false, err
		}
		data = store.NodeDocOf(&s)
	case bus.KindWorkflowCompleted:
		var s novav1.WorkflowCompleted
		if err := bus.Decode(*ev, &s); err != nil {
			return nil, false, err
		}
		data = toCompletion(&s)
	}
	body, err := marshalCompact(data)
	if err != nil {
		return nil, false, err
	}
	frame := fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", md.Sequence.Stream, kind, body)
	return frame, kind == bus.KindWorkflowCompleted, nil
}

// marshalCompact is v as one line of JSON (an SSE data line), numbers as
// they are, without HTML escaping.
func marshalCompact(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}

func timeOf(ts *timestamppb.Timestamp) *time.Time {
	if ts == nil {
		return nil
	}
	t := ts.AsTime()
	return &t
}
