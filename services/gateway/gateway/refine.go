package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/feedback"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// POST /v1/refine is the field-feedback refinement, for any kind of code:
// the code generator improves code from people's feedback on the fields of
// its output, the sandbox runs each attempt with the test context, and every
// feedback item is checked against the new output (pkg/feedback says when
// one is resolved), until all are or the attempts run out. The gateway
// checks the request and hands it to the graph engine, which runs the
// attempts as an execution of its own (refine-<uuid>, one node "refine")
// with its state in KV, recorded in the chain of work like an AI node. The
// client follows the engine's messages (info, progress, then complete or
// error) as Server-Sent Events, each with its place in the stream as id:
// after a lost connection, GET /v1/refine/{id}/events with Last-Event-ID
// gives the rest.

// TypeConflict says the resource is not in a state the request needs (an
// execution still running, a definition changed meanwhile).
const TypeConflict = typePrefix + "conflict"

// RefineWorkflow is the workflow name of refinement executions.
const RefineWorkflow = execution.RefineWorkflow

const (
	defaultRefineAttempts = 5
	maxRefineAttempts     = 10
	maxFeedbackItems      = 50
	maxFeedbackExamples   = 20
	maxFeedbackText       = 10_000
	// refinePrefix begins every refinement's execution id.
	refinePrefix = "refine-"
)

// refine is POST /v1/refine.
func (g *Gateway) refine(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r); p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	req, p := parseRefine(body, g.limits.MaxExecuteTimeout)
	if p != nil {
		return p
	}
	if req.executionID != "" {
		if err := g.fromExecution(r, req); err != nil {
			return err
		}
	}
	if p := req.checkWrongFeedback(); p != nil {
		return p
	}
	release, p := g.streams.acquire(keyName(r))
	if p != nil {
		return p
	}
	defer release()
	cmd, err := g.refinementCommand(ctx, req, refinePrefix+uuid.NewString())
	if err != nil {
		return err
	}
	// The refinement exists before the stream starts: one the bus cannot
	// take is refused, not streamed.
	if err := g.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), cmd.ExecutionId+"/refine", bus.TypeRefinementStart, cmd,
		map[string]string{bus.ExtensionExecutionID: cmd.ExecutionId}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return g.unavailable(r, "the refinement could not be handed to the graph engine; try again", err)
	}
	return g.followRefinement(w, r, cmd.ExecutionId, 0)
}

// refinementCommand is the graph engine's command for req: the test context
// with its large values in the value store.
func (g *Gateway) refinementCommand(ctx context.Context, req *refineRequest, id string) (*novav1.StartRefinement, error) {
	input := req.context.Clone()
	if g.values != nil {
		if err := g.values.Shrink(ctx, input); err != nil {
			return nil, fmt.Errorf("store a large context value: %w", err)
		}
	}
	analysis, err := structpb.NewStruct(req.analysis)
	if err != nil {
		return nil, invalidField("outputAnalysis", "cannot be carried: "+err.Error())
	}
	return &novav1.StartRefinement{
		ExecutionId: id,
		Refinement: &novav1.Refinement{AgentType: req.agentType, OriginalCode: req.code, OutputAnalysis: analysis,
			Feedback: feedback.ToProto(req.feedback), TestContext: input.Proto()},
		Language: req.language, Model: req.model, MaxAttempts: int32(req.maxAttempts), TimeoutSeconds: req.timeout.Seconds(),
		Network: req.network, AllowHosts: req.allowHosts, RefinedExecution: req.executionID, RefinedNode: req.nodeID,
	}, nil
}

// refineEvents is GET /v1/refine/{id}/events: the messages of refinement id
// after Last-Event-ID (all of them without one).
func (g *Gateway) refineEvents(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if !strings.HasPrefix(id, refinePrefix) || !execution.ValidKey(id) {
		return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("%q is no refinement id (refine-<uuid>)", id))
	}
	after, release, p := g.beginStream(r)
	if p != nil {
		return p
	}
	defer release()
	st, err := g.liveState(r.Context(), id)
	if err != nil {
		return g.unavailable(r, "the refinement's state could not be read; try again", err)
	}
	if st == nil || !st.Refinement {
		return newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no refinement %s", id))
	}
	if st.Status != execution.StatusRunning && int64(after) >= int64(st.RefinementMessages) {
		// The client has seen the last message of an ended refinement:
		// nothing follows it, and 204 tells an EventSource not to reconnect.
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	if st.Status != execution.StatusRunning {
		kept, err := g.bus.EventKept(r.Context(), id, bus.KindRefinement)
		if err != nil {
			return g.unavailable(r, "the events stream could not be read; try again", err)
		}
		if !kept {
			return newProblem(http.StatusGone, TypeGone, fmt.Sprintf(
				"refinement %s ended (%s) and its messages are no longer kept; its result is in its chain of work, GET %s",
				id, st.Status, executionLinks(id).Self))
		}
	}
	return g.followRefinement(w, r, id, after)
}

// followRefinement streams the messages of refinement id after the one
// numbered after, until its complete or error message.
func (g *Gateway) followRefinement(w http.ResponseWriter, r *http.Request, id string, after uint64) error {
	ctx := r.Context()
	next, stop, err := g.followEvents(ctx, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventSubject(id, bus.KindRefinement)}})
	if err != nil {
		return g.unavailable(r, "the refinement's messages could not be read; try again", err)
	}
	defer stop()
	g.relay(ctx, w, nil, next, func(m jetstream.Msg) ([]byte, bool) {
		ev, err := bus.DecodeNATS(m.Headers(), m.Data())
		var pm novav1.RefinementProgress
		if err == nil {
			err = bus.Decode(*ev, &pm)
		}
		if err != nil {
			g.log.WarnContext(ctx, "refinement message unreadable", "execution", id, "subject", m.Subject(), "err", err)
			return nil, false
		}
		last := pm.GetType() == "complete" || pm.GetType() == "error"
		if uint64(pm.GetSequence()) <= after {
			return nil, false
		}
		msg, err := g.refineMessage(ctx, &pm)
		if err != nil {
			g.log.ErrorContext(ctx, "refinement message", "execution", id, "err", err)
			msg = refineError{Type: "error", ExecutionID: id, Error: "the refinement's result could not be read: " + err.Error()}
			last = true
		}
		body, err := marshalCompact(msg)
		if err != nil {
			return nil, false
		}
		return fmt.Appendf(nil, "id: %d\ndata: %s\n\n", pm.GetSequence(), body), last
	})
	return nil
}

// refineMessage is one of the engine's messages as the client reads it.
func (g *Gateway) refineMessage(ctx context.Context, m *novav1.RefinementProgress) (any, error) {
	id := m.GetExecutionId()
	switch m.GetType() {
	case "progress":
		return refineProgress{Type: "progress", Message: m.GetMessage(), ExecutionID: id, Attempt: int(m.GetAttempt()),
			Fixed: nonNil(m.GetResolved()), Remaining: nonNil(m.GetRemaining()), Error: m.GetError(), Code: m.GetCode(),
			Analysis: analysisMap(m.GetAnalysis()), Model: m.GetModel(), Scripted: m.GetScripted()}, nil
	case "complete":
		var result json.RawMessage
		if m.GetExecution() != nil {
			res, err := g.executeResponse(ctx, jsonvalue.Object{}, m.GetExecution())
			if err != nil {
				return nil, err
			}
			result = res.Result
		}
		analysis := analysisMap(m.GetAnalysis())
		if analysis == nil {
			analysis = map[string]any{}
		}
		return refineComplete{Type: "complete", Message: m.GetMessage(), ExecutionID: id, Attempt: int(m.GetAttempt()),
			Attempts: int(m.GetAttempts()), Code: m.GetCode(), Output: m.GetCode(), Language: m.GetLanguage(), Analysis: analysis,
			Result: result, Resolved: nonNil(m.GetResolved()), Remaining: nonNil(m.GetRemaining()), PartialSuccess: m.GetPartialSuccess(),
			Model: m.GetModel(), Scripted: m.GetScripted(),
			Tokens:  tokenCounts{Prompt: m.GetPromptTokens(), Completion: m.GetCompletionTokens(), Total: m.GetPromptTokens() + m.GetCompletionTokens()},
			CostUSD: m.GetCostUsd(), Links: refineLinks{Execution: executionLinks(id).Self}}, nil
	case "error":
		return refineError{Type: "error", ExecutionID: id, Error: m.GetError()}, nil
	default:
		return refineInfo{Type: "info", Message: m.GetMessage(), ExecutionID: id, Attempt: int(m.GetAttempt()),
			MaxAttempts: int(m.GetMaxAttempts()), Model: m.GetModel(), Scripted: m.Scripted}, nil
	}
}

func analysisMap(s *structpb.Struct) map[string]any {
	if s == nil {
		return nil
	}
	return s.AsMap()
}

func nonNil(ss []string) []string {
	if ss == nil {
		return []string{}
	}
	return ss
}

// The refinement's messages, as clients read them.
type (
	refineInfo struct {
		Type        string `json:"type"`
		Message     string `json:"message"`
		ExecutionID string `json:"executionId"`
		Attempt     int    `json:"attempt,omitempty"`
		MaxAttempts int    `json:"maxAttempts,omitempty"`
		Model       string `json:"model,omitempty"`
		Scripted    *bool  `json:"scripted,omitempty"`
	}
	refineProgress struct {
		Type        string         `json:"type"`
		Message     string         `json:"message"`
		ExecutionID string         `json:"executionId"`
		Attempt     int            `json:"attempt"`
		Fixed       []string       `json:"fixed"`
		Remaining   []string       `json:"remaining"`
		Error       string         `json:"error,omitempty"`
		Code        string         `json:"code,omitempty"`
		Analysis    map[string]any `json:"analysis,omitempty"`
		Model       string         `json:"model,omitempty"`
		Scripted    bool           `json:"scripted"`
	}
	refineComplete struct {
		Type        string `json:"type"`
		Message     string `json:"message"`
		ExecutionID string `json:"executionId"`
		// Attempt is the attempt whose code this is; Attempts how many ran.
		Attempt  int    `json:"attempt"`
		Attempts int    `json:"attempts"`
		Code     string `json:"code"`
		// Output is the code under the name clients of the refinement read.
		Output   string         `json:"output"`
		Language string         `json:"language"`
		Analysis map[string]any `json:"analysis"`
		// Result is the attempt's result as POST /v1/execute answers it.
		Result         json.RawMessage `json:"result,omitempty"`
		Resolved       []string        `json:"resolved"`
		Remaining      []string        `json:"remaining"`
		PartialSuccess bool            `json:"partialSuccess"`
		Model          string          `json:"model,omitempty"`
		Scripted       bool            `json:"scripted"`
		Tokens         tokenCounts     `json:"tokens"`
		CostUSD        float64         `json:"costUsd"`
		Links          refineLinks     `json:"links"`
	}
	refineError struct {
		Type        string `json:"type"`
		ExecutionID string `json:"executionId"`
		Error       string `json:"error"`
	}
	tokenCounts struct {
		Prompt     int64 `json:"prompt"`
		Completion int64 `json:"completion"`
		Total      int64 `json:"total"`
	}
	refineLinks struct {
		Execution string `json:"execution"`
	}
)
