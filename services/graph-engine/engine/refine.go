package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// A refinement (StartRefinement) runs as an execution of its own, driven by
// the agents' results like an AI node's pipeline: package flow, refine.go,
// says how. The engine starts it and reads large outputs back for it.

// MaxRefineAttempts bounds StartRefinement.max_attempts.
const MaxRefineAttempts = 10

// startRefinement handles a StartRefinement command.
func (e *Engine) startRefinement(ctx context.Context, ev event.Event) error {
	var cmd novav1.StartRefinement
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	id := cmd.ExecutionId
	if id == "" || execution.ID(id) != id {
		return bus.Permanent(fmt.Errorf("refinement: execution id %q must be letters, digits, '-', '_' or '='", id))
	}
	ctx, span := e.tracer.Start(ctx, "graph-engine refine", trace.WithAttributes(attribute.String("execution.id", id)))
	defer span.End()
	if _, err := e.execs.Get(ctx, id); err == nil {
		return nil // a redelivered or repeated start
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("read execution %s: %w", id, err)
	}
	input := cmd.GetRefinement().GetTestContext()
	if input == nil {
		input = jsonvalue.Object{}.Proto()
	}
	st := &novav1.ExecutionState{
		ExecutionId: id,
		Status:      statusRunning,
		Context:     input,
		StartedAt:   timestamppb.New(e.now()),
		Nodes:       map[string]*novav1.NodeState{},
		Refine:      &novav1.RefineRun{Request: &cmd},
	}
	t := e.newTransition(st)
	if _, err := jsonvalue.FromProto(input); err != nil {
		t.RefineStart()
		t.RefineFail(fmt.Sprintf("the refinement's test context must be a JSON object: %v", err))
	} else if msg := checkRefinement(&cmd); msg != "" {
		t.RefineStart()
		t.RefineFail(msg)
	} else {
		if err := e.shrink(ctx, t); err != nil {
			return err
		}
		t.RefineStart()
		t.RefineAttempt(1)
	}
	return e.create(ctx, t)
}

// checkRefinement names what makes a command impossible to run ("" when
// nothing does). The gateway checks requests in detail; this guards the
// engine against any other producer.
func checkRefinement(cmd *novav1.StartRefinement) string {
	rf := cmd.GetRefinement()
	switch {
	case rf == nil:
		return "the refinement command carries no refinement"
	case strings.TrimSpace(rf.GetOriginalCode()) == "":
		return "the refinement has no code to refine"
	case len(rf.GetFeedback()) == 0:
		return "the refinement has no feedback"
	case cmd.GetLanguage() != "python" && cmd.GetLanguage() != "javascript":
		return fmt.Sprintf("the refinement's language %q is neither python nor javascript", cmd.GetLanguage())
	case cmd.GetMaxAttempts() < 1 || cmd.GetMaxAttempts() > MaxRefineAttempts:
		return fmt.Sprintf("the refinement's max_attempts %d is not between 1 and %d", cmd.GetMaxAttempts(), MaxRefineAttempts)
	}
	return ""
}

// bindValues lets t read large values back from the value store, for a
// refinement's output.
func (e *Engine) bindValues(ctx context.Context, t *flow.Transition) {
	if e.values == nil {
		return
	}
	t.Expand = func(o jsonvalue.Object) error { return e.values.Expand(ctx, o) }
	t.ReadValue = func(raw []byte) ([]byte, error) {
		o := jsonvalue.Object{"v": raw}
		if err := e.values.Expand(ctx, o); err != nil {
			return nil, err
		}
		return o["v"], nil
	}
}
