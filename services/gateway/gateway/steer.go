package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Steering a running execution: POST /v1/executions/{id}/cancel and
// POST /v1/executions/{id}/signals/{name}. Both check the request against
// the engine's state of the execution, as the engine will, so that a
// request that cannot be taken is refused with its reason at once; the
// engine checks again when it takes the command.

// Problem types of steering.
const (
	// TypeExecutionEnded: the execution ended; only a running one can be
	// cancelled or signalled (409).
	TypeExecutionEnded = typePrefix + "execution-ended"
	// TypeNotWaiting: the execution does not wait for that signal (409).
	TypeNotWaiting = typePrefix + "not-waiting"
	// TypeInvalidPayload: a signal's payload is not a JSON object or fails
	// the wait node's schema (422).
	TypeInvalidPayload = typePrefix + "invalid-payload"
)

// Status of a cancel asked for and not yet taken by the engine.
const statusCancelling = "cancelling"

// maxReason is the longest cancel reason accepted, in bytes.
const maxReason = 1000

// cancelAnswer is the answer to POST /v1/executions/{id}/cancel.
type cancelAnswer struct {
	ExecutionID string `json:"execution_id"`
	// Status is "cancelling" (asked; the execution ends "cancelled" once
	// the engine took it) or "cancelled" (it was cancelled already).
	Status       string `json:"status"`
	CancelledBy  string `json:"cancelled_by,omitempty"`
	CancelReason string `json:"cancel_reason,omitempty"`
	Links        links  `json:"links"`
}

// signalAnswer is the answer to POST /v1/executions/{id}/signals/{name}.
// What became of a signal sent (signalAnswer.Status).
const (
	signalTaken = "taken"
	signalKept  = "kept"
)

type signalAnswer struct {
	ExecutionID string `json:"execution_id"`
	Signal      string `json:"signal"`
	// Status is "taken" when a wait node waits for the signal now, "kept"
	// when none does yet: the execution keeps it, and the first wait node
	// for it that comes takes it.
	Status string `json:"status"`
	// Node is the wait node the signal is for (none while it is kept).
	Node string `json:"node,omitempty"`
	// EventID is the signal's CloudEvent id; a signal.rejected event of
	// the execution names it when the engine does not take the signal.
	EventID string `json:"event_id"`
	Links   links  `json:"links"`
}

// sender is who the command names as its sender: the API key's name.
func sender(r *http.Request) string {
	if name := keyName(r); name != "" {
		return name
	}
	return "api"
}

// cancelExecution is POST /v1/executions/{id}/cancel, body {"reason": ...}
// (optional): 404 for an unknown execution, 409 for one that ended, 200
// for one cancelled already, else the cancel command is published and the
// answer is 202 "cancelling".
func (g *Gateway) cancelExecution(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id := r.PathValue("id")
	if p := checkQuery(r); p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	reason, p := parseCancel(body)
	if p != nil {
		return p
	}
	st, p := g.steeredState(r, id)
	if p != nil {
		return p
	}
	if err := st.CheckCancel(); err != nil {
		return steerProblem(err)
	}
	self := executionLinks(id)
	if st.Status == execution.StatusCancelled {
		writeJSON(w, http.StatusOK, cancelAnswer{ExecutionID: id, Status: execution.StatusCancelled,
			CancelledBy: st.CancelledBy, CancelReason: st.CancelReason, Links: self})
		return nil
	}
	err = execution.PublishCancel(ctx, g.bus, &novav1.CancelExecution{ExecutionId: id, Reason: reason, RequestedBy: sender(r)})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return g.unavailable(r, "the cancel command was not acknowledged by the bus; try again", err)
	}
	w.Header().Set("Location", self.Self)
	writeJSON(w, http.StatusAccepted, cancelAnswer{ExecutionID: id, Status: statusCancelling, Links: self})
	return nil
}

// parseCancel reads the body of a cancel: empty, or {"reason": "..."}.
func parseCancel(body []byte) (string, *Problem) {
	if len(strings.TrimSpace(string(body))) == 0 {
		return "", nil
	}
	members, err := jsonvalue.ParseObject(body)
	if err != nil {
		return "", invalid(fmt.Sprintf("the body must be empty or a JSON object with reason: %v", err))
	}
	var errs []FieldError
	for _, k := range members.Keys() {
		if k != "reason" {
			errs = append(errs, FieldError{Field: k, Detail: "unknown field (known: reason)"})
		}
	}
	var reason string
	if raw, ok := members["reason"]; ok {
		if err := json.Unmarshal(raw, &reason); err != nil {
			errs = append(errs, FieldError{Field: "reason", Detail: "must be a string"})
		} else if len(reason) > maxReason {
			errs = append(errs, FieldError{Field: "reason", Detail: fmt.Sprintf("must be at most %d bytes", maxReason)})
		}
	}
	if len(errs) > 0 {
		return "", invalid(problemsDetail("the request", len(errs)), errs...)
	}
	return reason, nil
}

// signalExecution is POST /v1/executions/{id}/signals/{name}, the body the
// signal's payload (a JSON object, numbers kept as written): 404 for an
// unknown execution, 409 for one that ended or does not wait for the
// signal, 422 for a payload that is not an object or fails the wait node's
// schema, else the signal is published and the answer is 202.
// Idempotency-Key makes a retry send the same event, which the bus stores
// once.
func (g *Gateway) signalExecution(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	id, name := r.PathValue("id"), r.PathValue("name")
	if p := checkQuery(r); p != nil {
		return p
	}
	if !workflow.ValidToken(name) {
		return invalidField("signal", fmt.Sprintf("%q is not a signal name: letters, digits, '-' and '_'", name))
	}
	idem, p := idempotencyKey(r)
	if p != nil {
		return p
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	payload, err := jsonvalue.ParseObject(body)
	switch {
	case errors.Is(err, jsonvalue.ErrNotObject):
		return newProblem(http.StatusUnprocessableEntity, TypeInvalidPayload,
			fmt.Sprintf("signal %q: the payload must be a JSON object (the body), got %s", name, jsonvalue.KindOf(body)),
			FieldError{Field: "payload", Detail: "must be a JSON object"})
	case err != nil:
		return invalid(fmt.Sprintf("the body is not JSON: %v", err))
	}
	st, p := g.steeredState(r, id)
	if p != nil {
		return p
	}
	status := signalTaken
	if err := st.CheckSignal(name); err != nil {
		var notWaiting *execution.NotWaitingError
		if !errors.As(err, &notWaiting) || !notWaiting.Keeps {
			return steerProblem(err)
		}
		// A wait node for it comes later: the execution keeps it, and the
		// node holds the payload to its schema when it takes it.
		status = signalKept
	}
	node := st.WaitNode(name)
	if node != nil {
		if p := checkPayload(node, name, payload); p != nil {
			return p
		}
	}
	eventID := "signal-" + uuid.NewString()
	if idem != "" {
		eventID = "signal-" + uuid.NewSHA1(idempotencyNamespace, []byte(keyName(r)+"\x00"+id+"\x00"+name+"\x00"+idem)).String()
	}
	err = execution.PublishSignal(ctx, g.bus, eventID,
		&novav1.SignalExecution{ExecutionId: id, Signal: name, Payload: payload.Proto(), SentBy: sender(r)})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if big := (*bus.TooLargeError)(nil); errors.As(err, &big) {
			return newProblem(http.StatusRequestEntityTooLarge, TypeBodyTooLarge,
				fmt.Sprintf("the signal event would be %d bytes; the bus takes at most %d bytes a message", big.Size, big.Limit))
		}
		return g.unavailable(r, "the signal was not acknowledged by the bus; try again (with the same Idempotency-Key)", err)
	}
	writeJSON(w, http.StatusAccepted, signalAnswer{ExecutionID: id, Signal: name, Status: status, Node: node.GetId(), EventID: eventID,
		Links: executionLinks(id)})
	return nil
}

// checkPayload holds a signal's payload to its wait node's schema: 422
// naming every field at fault (errors), the first of them in detail.
func checkPayload(node *novav1.Node, name string, payload jsonvalue.Object) *Problem {
	decoded, err := payload.Decoded()
	if err != nil {
		return newProblem(http.StatusUnprocessableEntity, TypeInvalidPayload, fmt.Sprintf("signal %q: %v", name, err),
			FieldError{Field: "payload", Detail: err.Error()})
	}
	err = workflow.CheckPayload(node, decoded)
	if err == nil {
		return nil
	}
	each := []error{err}
	if all, ok := err.(interface{ Unwrap() []error }); ok {
		each = all.Unwrap()
	}
	fields := make([]FieldError, 0, len(each))
	for _, e := range each {
		fe := FieldError{Field: "payload", Node: node.GetId(), Detail: e.Error()}
		var pe *workflow.PayloadError
		if errors.As(e, &pe) {
			if pe.Field != "" {
				fe.Field = pe.Field
			}
			fe.Detail = pe.Problem
		}
		fields = append(fields, fe)
	}
	return newProblem(http.StatusUnprocessableEntity, TypeInvalidPayload,
		fmt.Sprintf("signal %q: the payload does not meet the schema of wait node %q: %s", name, node.GetId(), err),
		fields...)
}

// steeredState is the engine's state of execution id for a cancel or a
// signal: 404 when neither the engine nor the audit store knows it, 409
// when only the audit store does (its state is gone: it ended a while ago).
func (g *Gateway) steeredState(r *http.Request, id string) (*execution.View, *Problem) {
	ctx := r.Context()
	st, err := g.liveState(ctx, id)
	if err != nil {
		return nil, g.unavailable(r, "the execution state cannot be read", err)
	}
	if st != nil {
		return st, nil
	}
	doc, err := g.store.Execution(ctx, id)
	switch {
	case errors.Is(err, chainstore.ErrNotFound):
		return nil, newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no execution %q", id))
	case err != nil:
		return nil, g.unavailable(r, "the audit store cannot be read", err)
	}
	if !execution.Ended(doc.Status) {
		// Recorded running, but the engine no longer keeps it.
		return nil, newProblem(http.StatusConflict, TypeExecutionEnded,
			fmt.Sprintf("execution %s is no longer in the engine's state: only a running execution can be steered", id))
	}
	return nil, steerProblem(&execution.EndedError{ID: id, Status: doc.Status})
}

// steerProblem answers the errors of execution.CheckCancel and
// execution.CheckSignalTarget.
func steerProblem(err error) *Problem {
	var ended *execution.EndedError
	var notWaiting *execution.NotWaitingError
	switch {
	case errors.As(err, &ended):
		return newProblem(http.StatusConflict, TypeExecutionEnded, err.Error())
	case errors.As(err, &notWaiting):
		detail := "the execution waits for no signal"
		if notWaiting.WaitingFor != "" {
			detail = fmt.Sprintf("node %q waits for signal %q", notWaiting.Node, notWaiting.WaitingFor)
		}
		return newProblem(http.StatusConflict, TypeNotWaiting, err.Error(), FieldError{Field: "signal", Node: notWaiting.Node, Detail: detail})
	}
	return newProblem(http.StatusConflict, TypeExecutionEnded, err.Error())
}

// waitingView is what a running execution waits for, in GET
// /v1/executions/{id}: the wait node and its signal, what the people asked
// are told (description), the JSON Schema the payload must meet, the
// payload key that decides the edge, and when the wait ends on its own.
type waitingView struct {
	Node        string          `json:"node"`
	Signal      string          `json:"signal"`
	Description string          `json:"description,omitempty"`
	Schema      json.RawMessage `json:"schema,omitempty"`
	DecideOn    string          `json:"decide_on,omitempty"`
	Until       *time.Time      `json:"until,omitempty"`
}

// waitingOf is the signal st waits for (the first of its lines that waits
// for one), nil when it waits for none.
func waitingOf(st *execution.View) *waitingView {
	w := st.Waiting
	if w == nil {
		return nil
	}
	v := &waitingView{Node: w.Line.Node, Signal: w.Line.WaitingFor, Until: timeOf(w.Line.Until)}
	if n := w.Node; n != nil {
		v.Description, v.DecideOn, v.Schema = n.GetDescription(), n.GetDecideOn(), schemaJSON(n.GetSchema())
	}
	return v
}

// keptView is a signal a running execution keeps until a wait node takes
// it.
type keptView struct {
	Signal  string    `json:"signal"`
	SentBy  string    `json:"sent_by,omitempty"`
	EventID string    `json:"event_id"`
	KeptAt  time.Time `json:"kept_at"`
}

// keptOf are the signals st keeps, oldest first.
func keptOf(st *execution.View) []keptView {
	var out []keptView
	for _, k := range st.Kept {
		out = append(out, keptView{Signal: k.GetSignal(), SentBy: k.GetSentBy(), EventID: k.GetEventId(), KeptAt: k.GetKeptAt().AsTime()})
	}
	return out
}

// branchView is one branch of a running execution that runs several at
// once.
type branchView struct {
	ID         string `json:"id"`
	Node       string `json:"node,omitempty"`
	WaitingFor string `json:"waiting_for,omitempty"`
	// A map's item: its position.
	Item *int32 `json:"item,omitempty"`
}

// branchesOf are st's branches, nil when it follows one line.
func branchesOf(st *execution.View) []branchView {
	var out []branchView
	for _, l := range st.Lines {
		out = append(out, branchView{ID: l.ID, Node: l.Node, WaitingFor: l.WaitingFor, Item: l.Item})
	}
	return out
}

// schemaJSON is a wait node's schema as JSON: the schema itself, or, should
// it not be JSON, its text as a JSON string; nil for none.
func schemaJSON(schema string) json.RawMessage {
	s := strings.TrimSpace(schema)
	switch {
	case s == "":
		return nil
	case json.Valid([]byte(s)):
		return jsonvalue.Compact([]byte(s))
	}
	b, _ := json.Marshal(s)
	return b
}

// addLive adds to view what the engine's state says and the audit store's
// document does not: the node it is at and what it waits for while it
// runs, who cancelled it and why when the document does not say.
func addLive(view *executionDoc, st *execution.View) {
	switch st.Status {
	case execution.StatusRunning:
		view.CurrentNode = st.CurrentNode
		view.Waiting = waitingOf(st)
		view.KeptSignals = keptOf(st)
		view.Branches = branchesOf(st)
	case execution.StatusCancelled:
		if view.CancelledBy == "" {
			view.CancelledBy, view.CancelReason = st.CancelledBy, st.CancelReason
		}
	}
}

// liveFor reads the engine's state of id for GET /v1/executions/{id} when
// the audit store's document leaves out what only the state holds; a state
// that cannot be read leaves the answer without it.
func (g *Gateway) liveFor(ctx context.Context, view *executionDoc) {
	switch {
	case view.Status == execution.StatusRunning:
	case view.Status == execution.StatusCancelled && view.CancelledBy == "":
	default:
		return
	}
	st, err := g.liveState(ctx, view.ExecutionID)
	if err != nil || st == nil || st.Status != view.Status {
		return
	}
	addLive(view, st)
}
