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
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/eventjson"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ingressTypes are the CloudEvents types POST /v1/events takes: the
// commands a producer could publish on nova.cmd.graph-engine itself.
var ingressTypes = []string{bus.TypeWorkflowStart, bus.TypeWorkflowRegister}

// eventAccepted is the answer to an event the bus has stored.
type eventAccepted struct {
	ID   string `json:"id"`
	Type string `json:"type"`
	// ExecutionID is the execution a start event starts.
	ExecutionID string `json:"execution_id,omitempty"`
	// Workflow is the name a register event registers.
	Workflow string `json:"workflow,omitempty"`
	Links    any    `json:"links"`
}

// receiveEvent is POST /v1/events: one CloudEvent, in binary or structured
// HTTP content mode, that starts or registers a workflow. It is checked as
// the graph engine would check it, republished on the engine's command
// subject with its id as the Nats-Msg-Id (a repeated id is stored once),
// and answered 202 once JetStream has stored it.
//
// The route takes executions:write; a register event needs admin too. The
// body is never logged: a context may hold secrets.
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
	if ev.Type() == bus.TypeWorkflowRegister {
		if _, p := g.authenticate(r, ScopeAdmin); p != nil {
			return p
		}
	}
	if p := checkDataContentType(ev); p != nil {
		return p
	}

	cmd, extensions, answer, location, p := g.ingressCommand(r, ev)
	if p != nil {
		return p
	}

	// The producer's id, source and time travel on; the data is written
	// afresh, in the encoding and with the dataschema every NOVA event has.
	out, err := bus.NewEvent(ev.ID(), ev.Type(), ev.Source(), cmd)
	if err != nil {
		return err
	}
	if !ev.Time().IsZero() {
		out.SetTime(ev.Time())
	}
	for k, v := range extensions {
		out.SetExtension(k, v)
	}
	if err := g.bus.Publish(ctx, bus.CommandSubject(bus.AgentGraphEngine), out); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return g.unavailable(r, "the event was not acknowledged by the bus; send it again (with the same id)", err)
	}
	if location != "" {
		w.Header().Set("Location", location)
	}
	writeJSON(w, http.StatusAccepted, answer)
	return nil
}

// ingressCommand is the command an accepted event stands for, with the
// extensions it carries on, the answer and the Location of what it names.
func (g *Gateway) ingressCommand(r *http.Request, ev *event.Event) (cmd proto.Message, extensions map[string]string,
	answer eventAccepted, location string, p *Problem) {
	answer = eventAccepted{ID: ev.ID(), Type: ev.Type()}
	switch ev.Type() {
	case bus.TypeWorkflowStart:
		start, p := g.startCommand(r, ev)
		if p != nil {
			return nil, nil, answer, "", p
		}
		answer.ExecutionID = start.ExecutionId
		links := executionLinks(start.ExecutionId)
		answer.Links = links
		return start, map[string]string{bus.ExtensionExecutionID: start.ExecutionId}, answer, links.Self, nil
	default: // bus.TypeWorkflowRegister: ingressTypes has no other
		reg, p := registerCommand(ev)
		if p != nil {
			return nil, nil, answer, "", p
		}
		answer.Workflow = reg.Definition.Name
		answer.Links = workflowLinksOf(reg.Definition.Name)
		return reg, nil, answer, "", nil
	}
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
