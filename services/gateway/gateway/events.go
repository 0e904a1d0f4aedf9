package gateway

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/eventjson"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ingressTypes are the CloudEvents types POST /v1/events takes: the
// commands a producer could publish on nova.cmd.graph-engine itself.
var ingressTypes = []string{bus.TypeWorkflowStart, bus.TypeWorkflowRegister, bus.TypeExecutionCancel, bus.TypeExecutionSignal,
	bus.TypeSchedulePut, bus.TypeScheduleDelete}

// ingressScopes is the scope each type of ingressTypes takes: the one its
// own route takes (POST /v1/executions, /v1/workflows,
// /v1/executions/{id}/cancel, /v1/executions/{id}/signals/{name},
// /v1/schedules).
var ingressScopes = map[string]Scope{
	bus.TypeWorkflowStart:    ScopeExecutionsWrite,
	bus.TypeWorkflowRegister: ScopeAdmin,
	bus.TypeExecutionCancel:  ScopeExecutionsWrite,
	bus.TypeExecutionSignal:  ScopeSignal,
	bus.TypeSchedulePut:      ScopeAdmin,
	bus.TypeScheduleDelete:   ScopeAdmin,
}

// eventAccepted is the answer to an event the bus has stored.
type eventAccepted struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// ExecutionID is the execution a start event starts, or a cancel or a
	// signal steers.
	ExecutionID string `json:"execution_id,omitempty"`
	// Workflow is the name a register event registers, or whose schedule a
	// schedule event puts or deletes (Schedule, its id).
	Workflow string `json:"workflow,omitempty"`
	Schedule string `json:"schedule,omitempty"`
	// Status is a cancel's: "cancelling" (sent) or "cancelled" (it was
	// cancelled already; nothing was sent).
	Status string `json:"status,omitempty"`
	// Signal is a signal's name and Node the wait node it is for.
	Signal string `json:"signal,omitempty"`
	Node   string `json:"node,omitempty"`
	Links  any    `json:"links"`
}

// ingress is what an accepted event stands for.
type ingress struct {
	// cmd is the command to publish, with the extensions it carries on.
	cmd        proto.Message
	extensions map[string]string
	answer     eventAccepted
	// location is the URL of what the event names.
	location string
	// done: there is nothing to send (a cancel of an execution cancelled
	// already); the answer is 200.
	done bool
}

// receiveEvent is POST /v1/events: one CloudEvent, in binary or structured
// HTTP content mode, that starts or registers a workflow, cancels or
// signals an execution, or puts or deletes a schedule. It is checked as
// the graph engine would check it (and as the route of its own checks it),
// republished on the engine's command subject with its id as the
// Nats-Msg-Id (a repeated id is stored once), and answered 202 once
// JetStream has stored it.
//
// Each type takes the scope of its own route (ingressScopes). The body is
// never logged: a context may hold secrets.
func (g *Gateway) receiveEvent(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if p := checkQuery(r); p != nil {
		return p
	}
	if cehttp.IsHTTPBatch(r.Header) {
		return invalidField("Content-Type", "batched events are not accepted: send one event per request")
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return err
	}
	ev, p := readEvent(r, body)
	if p != nil {
		return p
	}
	trace.SpanFromContext(ctx).SetAttributes(
		attribute.String("cloudevents.event_id", ev.ID()),
		attribute.String("cloudevents.event_type", ev.Type()),
		attribute.String("cloudevents.event_source", ev.Source()))
	if !slices.Contains(ingressTypes, ev.Type()) {
		return invalidField("type", fmt.Sprintf("events of type %q are not accepted; accepted types: %s",
			ev.Type(), strings.Join(ingressTypes, ", ")))
	}
	if _, p := g.authenticate(r, ingressScopes[ev.Type()]); p != nil {
		return p
	}
	if p := checkDataContentType(ev); p != nil {
		return p
	}

	in, p := g.ingressCommand(r, ev)
	if p != nil {
		return p
	}
	if in.location != "" {
		w.Header().Set("Location", in.location)
	}
	if in.done {
		writeJSON(w, http.StatusOK, in.answer)
		return nil
	}

	// The producer's id, source and time travel on; the data is written
	// afresh, in the encoding and with the dataschema every NOVA event has.
	out, err := bus.NewEvent(ev.ID(), ev.Type(), ev.Source(), in.cmd)
	if err != nil {
		return err
	}
	if !ev.Time().IsZero() {
		out.SetTime(ev.Time())
	}
	for k, v := range in.extensions {
		out.SetExtension(k, v)
	}
	if err := g.bus.Publish(ctx, bus.CommandSubject(bus.AgentGraphEngine), out); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if big := (*bus.TooLargeError)(nil); errors.As(err, &big) {
			return newProblem(http.StatusRequestEntityTooLarge, TypeBodyTooLarge,
				fmt.Sprintf("the event would be %d bytes; the bus takes at most %d bytes a message", big.Size, big.Limit))
		}
		return g.unavailable(r, "the event was not acknowledged by the bus; send it again (with the same id)", err)
	}
	writeJSON(w, http.StatusAccepted, in.answer)
	return nil
}

// ingressCommand is what an accepted event stands for: the command, with
// the extensions it carries on, the answer and the Location of what it
// names.
func (g *Gateway) ingressCommand(r *http.Request, ev *event.Event) (ingress, *Problem) {
	in := ingress{answer: eventAccepted{ID: ev.ID(), Type: ev.Type()}}
	switch ev.Type() {
	case bus.TypeWorkflowStart:
		start, p := g.startCommand(r, ev)
		if p != nil {
			return in, p
		}
		in.answer.ExecutionID = start.ExecutionId
		links := executionLinks(start.ExecutionId)
		in.answer.Links, in.location = links, links.Self
		in.cmd, in.extensions = start, map[string]string{bus.ExtensionExecutionID: start.ExecutionId}
	case bus.TypeWorkflowRegister:
		reg, p := registerCommand(ev)
		if p != nil {
			return in, p
		}
		in.answer.Workflow = reg.Definition.Name
		in.answer.Links = workflowLinksOf(reg.Definition.Name)
		in.cmd = reg
	case bus.TypeExecutionCancel:
		cancel, st, p := g.cancelCommand(r, ev)
		if p != nil {
			return in, p
		}
		id := cancel.ExecutionId
		links := executionLinks(id)
		in.answer.ExecutionID, in.answer.Links, in.location = id, links, links.Self
		in.answer.Status = statusCancelling
		if st.Status == execution.StatusCancelled {
			in.answer.Status, in.done = execution.StatusCancelled, true
		}
		in.cmd, in.extensions = cancel, map[string]string{bus.ExtensionExecutionID: id}
	case bus.TypeExecutionSignal:
		sig, node, p := g.signalCommand(r, ev)
		if p != nil {
			return in, p
		}
		id := sig.ExecutionId
		in.answer.ExecutionID, in.answer.Signal, in.answer.Node, in.answer.Links = id, sig.Signal, node, executionLinks(id)
		in.cmd, in.extensions = sig, map[string]string{bus.ExtensionExecutionID: id}
	case bus.TypeSchedulePut:
		put, p := g.schedulePutCommand(r, ev)
		if p != nil {
			return in, p
		}
		links := scheduleLinksOf(put.Workflow, put.Schedule.GetId())
		in.answer.Workflow, in.answer.Schedule, in.answer.Links, in.location = put.Workflow, put.Schedule.GetId(), links, links.Self
		in.cmd = put
	default: // bus.TypeScheduleDelete: ingressTypes has no other
		del, p := g.scheduleDeleteCommand(r, ev)
		if p != nil {
			return in, p
		}
		in.answer.Workflow, in.answer.Schedule, in.answer.Links = del.Workflow, del.ScheduleId, scheduleLinksOf(del.Workflow, del.ScheduleId)
		in.cmd = del
	}
	return in, nil
}

// readEvent reads a request with its body as one CloudEvent and checks its
// attributes.
func readEvent(r *http.Request, body []byte) (*event.Event, *Problem) {
	msg := cehttp.NewMessage(r.Header, io.NopCloser(bytes.NewReader(body)))
	if msg.ReadEncoding() == binding.EncodingUnknown {
		return nil, invalid("the request is not a CloudEvent: send it in binary mode (ce-specversion, ce-id, ce-source " +
			"and ce-type headers, the data as the body) or in structured mode (Content-Type: application/cloudevents+json)")
	}
	ev, err := binding.ToEvent(r.Context(), msg)
	if err != nil {
		return nil, invalid(fmt.Sprintf("the request is not a valid CloudEvent: %v", err))
	}
	if err := ev.Validate(); err != nil {
		var verr event.ValidationError
		if !errors.As(err, &verr) {
			return nil, invalid(fmt.Sprintf("the request is not a valid CloudEvent: %v", err))
		}
		attrs := make([]string, 0, len(verr))
		for a := range verr {
			attrs = append(attrs, a)
		}
		slices.Sort(attrs)
		errs := make([]FieldError, len(attrs))
		for i, a := range attrs {
			errs[i] = FieldError{Field: a, Detail: verr[a].Error()}
		}
		return nil, invalid(problemsDetail("the CloudEvent", len(errs)), errs...)
	}
	return ev, nil
}

// checkDataContentType refuses data that is not JSON: NOVA's events carry
// the JSON of a nova.v1 message (no datacontenttype means JSON, too).
func checkDataContentType(ev *event.Event) *Problem {
	ct := ev.DataContentType()
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json")) {
		return nil
	}
	return invalidField("datacontenttype", fmt.Sprintf("%q is not accepted: the data must be JSON (application/json)", ct))
}

// decodeData reads the event's data into msg as the graph engine does
// (bus.Decode: the dataschema, when given, must name msg's type; the data
// is msg's JSON, unknown fields ignored), with each problem named by the
// attribute at fault.
func decodeData(ev *event.Event, msg proto.Message) *Problem {
	want := bus.SchemaOf(msg)
	if s := ev.DataSchema(); s != "" && s != want {
		return invalidField("dataschema", fmt.Sprintf("%q does not match the type %s, whose data is %s", s, ev.Type(), want))
	}
	name := string(msg.ProtoReflect().Descriptor().FullName())
	if len(bytes.TrimSpace(ev.Data())) == 0 {
		return invalidField("data", "is required: the JSON of "+name)
	}
	if err := eventjson.Unmarshal(ev.Data(), msg); err != nil {
		return invalidField("data", fmt.Sprintf("is not the JSON of %s: %v", name, err))
	}
	return nil
}

// startCommand is the StartWorkflow of a start event, checked for what
// would fail the execution at once, with its execution id set: the one the
// data names, else the event's id, made an execution id as the engine makes
// it (execution.ID).
func (g *Gateway) startCommand(r *http.Request, ev *event.Event) (*novav1.StartWorkflow, *Problem) {
	var cmd novav1.StartWorkflow
	if p := decodeData(ev, &cmd); p != nil {
		return nil, p
	}
	var errs []FieldError
	if cmd.Definition == nil && cmd.WorkflowName == "" {
		errs = append(errs, FieldError{Field: "data.workflowName", Detail: "either workflowName or definition is required"})
	}
	initial, err := jsonvalue.FromProto(cmd.Context)
	if err != nil {
		errs = append(errs, FieldError{Field: "data.context", Detail: "must be a JSON object"})
	}
	if len(errs) > 0 {
		return nil, invalid(problemsDetail("the event's data", len(errs)), errs...)
	}
	if cmd.Definition != nil {
		if p := validateDefinition(cmd.Definition, false); p != nil {
			return nil, under("data", p)
		}
	} else if p := g.checkRegistered(r, cmd.WorkflowName); p != nil {
		for i := range p.Errors {
			p.Errors[i].Field = "data.workflowName"
		}
		return nil, p
	}
	if g.values != nil {
		if err := g.values.Shrink(r.Context(), initial); err != nil {
			return nil, g.unavailable(r, "a large context value could not be stored", err)
		}
		cmd.Context = initial.Proto()
	}
	id := cmd.ExecutionId
	if id == "" {
		id = ev.ID()
	}
	cmd.ExecutionId = execution.ID(id)
	return &cmd, nil
}

// registerCommand is the RegisterWorkflow of a register event, whose
// definition the engine will store.
func registerCommand(ev *event.Event) (*novav1.RegisterWorkflow, *Problem) {
	var cmd novav1.RegisterWorkflow
	if p := decodeData(ev, &cmd); p != nil {
		return nil, p
	}
	if cmd.Definition == nil {
		return nil, invalidField("data.definition", "is required: the workflow to register")
	}
	if p := validateDefinition(cmd.Definition, true); p != nil {
		return nil, under("data", p)
	}
	return &cmd, nil
}

// under puts the fields a problem names under parent ("definition.name"
// becomes "data.definition.name").
func under(parent string, p *Problem) *Problem {
	for i := range p.Errors {
		p.Errors[i].Field = parent + "." + p.Errors[i].Field
	}
	return p
}

// cancelCommand is the CancelExecution of a cancel event, checked as POST
// /v1/executions/{id}/cancel checks a cancel (404 for an unknown execution,
// 409 for one that ended otherwise), with the API key's name as who asked;
// st is the execution's state.
func (g *Gateway) cancelCommand(r *http.Request, ev *event.Event) (*novav1.CancelExecution, *execution.View, *Problem) {
	var cmd novav1.CancelExecution
	if p := decodeData(ev, &cmd); p != nil {
		return nil, nil, p
	}
	var errs []FieldError
	if cmd.ExecutionId == "" {
		errs = append(errs, FieldError{Field: "data.executionId", Detail: "is required: the execution to cancel"})
	}
	if len(cmd.Reason) > maxReason {
		errs = append(errs, FieldError{Field: "data.reason", Detail: fmt.Sprintf("must be at most %d bytes", maxReason)})
	}
	if len(errs) > 0 {
		return nil, nil, invalid(problemsDetail("the event's data", len(errs)), errs...)
	}
	st, p := g.ingressState(r, cmd.ExecutionId)
	if p != nil {
		return nil, nil, p
	}
	if err := st.CheckCancel(); err != nil {
		return nil, nil, steerProblem(err)
	}
	cmd.RequestedBy = sender(r)
	return &cmd, st, nil
}

// signalCommand is the SignalExecution of a signal event, checked as POST
// /v1/executions/{id}/signals/{name} checks a signal (404 for an unknown
// execution, 409 for one that ended or does not wait for the signal, 422
// for a payload that is not an object or fails the wait node's schema),
// with the API key's name as its sender; node is the wait node it is for.
func (g *Gateway) signalCommand(r *http.Request, ev *event.Event) (*novav1.SignalExecution, string, *Problem) {
	var cmd novav1.SignalExecution
	if p := decodeData(ev, &cmd); p != nil {
		return nil, "", p
	}
	var errs []FieldError
	if cmd.ExecutionId == "" {
		errs = append(errs, FieldError{Field: "data.executionId", Detail: "is required: the execution to signal"})
	}
	if !workflow.ValidToken(cmd.Signal) {
		errs = append(errs, FieldError{Field: "data.signal",
			Detail: fmt.Sprintf("%q is not a signal name: letters, digits, '-' and '_'", cmd.Signal)})
	}
	if len(errs) > 0 {
		return nil, "", invalid(problemsDetail("the event's data", len(errs)), errs...)
	}
	payload, err := jsonvalue.FromProto(cmd.Payload)
	if err != nil {
		return nil, "", newProblem(http.StatusUnprocessableEntity, TypeInvalidPayload,
			fmt.Sprintf("signal %q: the payload must be a JSON object, got %s", cmd.Signal, jsonvalue.KindOf(cmd.Payload.GetRaw())),
			FieldError{Field: "data.payload", Detail: "must be a JSON object"})
	}
	st, p := g.ingressState(r, cmd.ExecutionId)
	if p != nil {
		return nil, "", p
	}
	if err := st.CheckSignal(cmd.Signal); err != nil {
		return nil, "", under("data", steerProblem(err))
	}
	node := st.WaitNode(cmd.Signal)
	if p := checkPayload(node, cmd.Signal, payload); p != nil {
		for i, e := range p.Errors {
			// The payload as a whole, or a field of it.
			p.Errors[i].Field = "data.payload"
			if e.Field != "payload" {
				p.Errors[i].Field += "." + e.Field
			}
		}
		return nil, "", p
	}
	cmd.Payload, cmd.SentBy = payload.Proto(), sender(r)
	return &cmd, node.GetId(), nil
}

// ingressState is the engine's state of the execution a cancel or a signal
// event names: 404 for one no id of which can be.
func (g *Gateway) ingressState(r *http.Request, id string) (*execution.View, *Problem) {
	if !execution.ValidKey(id) {
		return nil, newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no execution %q", id),
			FieldError{Field: "data.executionId", Detail: "no execution has this id"})
	}
	return g.steeredState(r, id)
}

// schedulePutCommand is the PutSchedule of a schedule put event, checked as
// POST /v1/schedules checks a schedule: 422 for a workflow that is not
// registered or a schedule the engine cannot run (an id is required), 409
// for the id of a schedule the workflow's definition declares.
func (g *Gateway) schedulePutCommand(r *http.Request, ev *event.Event) (*novav1.PutSchedule, *Problem) {
	var cmd novav1.PutSchedule
	if p := decodeData(ev, &cmd); p != nil {
		return nil, p
	}
	var errs []FieldError
	if cmd.Workflow == "" {
		errs = append(errs, FieldError{Field: "data.workflow", Detail: "is required: the name of a registered workflow"})
	}
	if cmd.Schedule == nil {
		errs = append(errs, FieldError{Field: "data.schedule", Detail: "is required: an object with id and cron or everySeconds"})
	}
	if len(errs) > 0 {
		return nil, invalid(problemsDetail("the event's data", len(errs)), errs...)
	}
	var verr *workflow.ValidationError
	if err := workflow.ValidateSchedule(cmd.Schedule); errors.As(err, &verr) {
		return nil, under("data", invalidSchedule(verr))
	} else if err != nil {
		return nil, invalidField("data.schedule", err.Error())
	}
	if len(cmd.Schedule.GetId()) > workflow.MaxScheduleID {
		return nil, newProblem(http.StatusUnprocessableEntity, TypeInvalidSchedule,
			fmt.Sprintf("schedule id %q is longer than %d characters", cmd.Schedule.GetId(), workflow.MaxScheduleID),
			FieldError{Field: "data.schedule.id", Detail: fmt.Sprintf("must be at most %d characters", workflow.MaxScheduleID)})
	}
	if !engineKey.MatchString(cmd.Workflow) {
		return nil, newProblem(http.StatusUnprocessableEntity, TypeUnknownWorkflow, fmt.Sprintf("workflow %q is not registered", cmd.Workflow),
			FieldError{Field: "data.workflow", Detail: "no workflow of this name is registered"})
	}
	if p := g.checkRegistered(r, cmd.Workflow); p != nil {
		return nil, under("data", p)
	}
	kv, err := g.bucket(r.Context(), bus.BucketSchedules)
	if err != nil {
		return nil, g.unavailable(r, "the schedules cannot be read; is the graph engine running?", err)
	}
	old, err := readSchedule(r.Context(), kv, cmd.Workflow, cmd.Schedule.GetId())
	if err != nil {
		return nil, g.unavailable(r, "the schedules cannot be read", err)
	}
	if old.GetFromDefinition() {
		return nil, newProblem(http.StatusConflict, TypeConflict, fmt.Sprintf(
			"schedule %q of workflow %q is declared in its definition: change it there and register the workflow again",
			cmd.Schedule.GetId(), cmd.Workflow),
			FieldError{Field: "data.schedule.id", Detail: "the id of a schedule the workflow's definition declares"})
	}
	return &cmd, nil
}

// scheduleDeleteCommand is the DeleteSchedule of a schedule delete event:
// 404 for a schedule there is not.
func (g *Gateway) scheduleDeleteCommand(r *http.Request, ev *event.Event) (*novav1.DeleteSchedule, *Problem) {
	var cmd novav1.DeleteSchedule
	if p := decodeData(ev, &cmd); p != nil {
		return nil, p
	}
	var errs []FieldError
	if cmd.Workflow == "" {
		errs = append(errs, FieldError{Field: "data.workflow", Detail: "is required: the workflow of the schedule"})
	}
	if cmd.ScheduleId == "" {
		errs = append(errs, FieldError{Field: "data.scheduleId", Detail: "is required: the id of the schedule to delete"})
	}
	if len(errs) > 0 {
		return nil, invalid(problemsDetail("the event's data", len(errs)), errs...)
	}
	notFound := newProblem(http.StatusNotFound, TypeNotFound,
		fmt.Sprintf("workflow %q has no schedule %q", cmd.Workflow, cmd.ScheduleId),
		FieldError{Field: "data.scheduleId", Detail: "no schedule of this id"})
	if !engineKey.MatchString(cmd.Workflow) || !workflow.ValidToken(cmd.ScheduleId) {
		return nil, notFound
	}
	kv, err := g.bucket(r.Context(), bus.BucketSchedules)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, g.unavailable(r, "the schedules cannot be read", err)
	}
	st, err := readSchedule(r.Context(), kv, cmd.Workflow, cmd.ScheduleId)
	if err != nil {
		return nil, g.unavailable(r, "the schedules cannot be read", err)
	}
	if st == nil {
		return nil, notFound
	}
	return &cmd, nil
}
