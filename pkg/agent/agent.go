// Package agent is the shape shared by NOVA's AI-pipeline agents: take one
// command from the agent's work queue, do the step, publish the result for
// the graph engine under an id derived from the step, so redelivery never
// duplicates it. Each agent step is a span named "<agent> <verb>" carrying
// execution.id, node.id and attempt.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/llm"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Spec names an agent and its events.
type Spec struct {
	// Name is the agent ("code-generator"); its queue is nova.cmd.<Name>.
	Name string
	// Verb names its step in spans ("generate").
	Verb        string
	CommandType string
	ResultType  string
	Workers     int
	// AckWait is how long a command held by a replica that stopped waits
	// to be redelivered (default bus.DefaultAckWait); in-progress acks keep
	// a slow model call's delivery meanwhile.
	AckWait time.Duration
}

// Consumer is the agent's durable work-queue consumer, shared by replicas.
func (s Spec) Consumer() bus.Consumer {
	return bus.Consumer{
		Stream:     bus.StreamCommands,
		Durable:    s.Name,
		Filters:    []string{bus.CommandSubject(s.Name)},
		Workers:    max(s.Workers, 1),
		AckWait:    s.AckWait,
		MaxDeliver: 3,
	}
}

// Command is what every agent command carries.
type Command interface {
	proto.Message
	GetRef() *novav1.StepRef
}

// BudgetRefused records in outcome a model call err says was refused for
// want of budget (the step's status becomes "error", with the refusal), and
// reports whether it was one.
func BudgetRefused(outcome *novav1.AgentOutcome, err error) bool {
	be, ok := llm.AsBudgetError(err)
	if !ok {
		return false
	}
	outcome.Status = "error"
	outcome.Error = err.Error()
	outcome.BudgetExceeded = be
	return true
}

// Serve handles commands until ctx ends (tp may be nil: no spans). newCmd returns an empty command;
// handle returns the result message (which must echo the command's ref). A
// handler error is retried; wrap it with bus.Permanent when retrying cannot
// help.
//
// Each command is handled under a context that the cancellation of its
// execution ends (bus.Cancels, cause bus.ErrExecutionCancelled), which aborts
// the model call in flight. A command of an execution cancelled before it was
// handled, or while it was, is acked without a result: the graph engine
// ignores the results of an execution that ended, and nothing is redelivered.
func Serve[C Command](ctx context.Context, b *bus.Bus, tp trace.TracerProvider, spec Spec,
	newCmd func() C, handle func(context.Context, C) (proto.Message, error)) error {
	if err := b.EnsureStreams(ctx); err != nil {
		if ctx.Err() != nil {
			return nil // stopped while it started: a clean stop
		}
		return err
	}
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	tracer := tp.Tracer("github.com/novaflow/nova/pkg/agent")
	cancels, err := b.NewCancels(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer cancels.Close()
	return b.Consume(ctx, spec.Consumer(), func(ctx context.Context, ev event.Event) error {
		if ev.Type() != spec.CommandType {
			return bus.Permanent(fmt.Errorf("%s does not handle event type %q", spec.Name, ev.Type()))
		}
		cmd := newCmd()
		if err := bus.Decode(ev, cmd); err != nil {
			return err
		}
		ref := cmd.GetRef()
		if ref.GetExecutionId() == "" || ref.GetStepId() == "" {
			return bus.Permanent(errors.New("command without execution_id or step_id"))
		}
		stepAttrs := []attribute.KeyValue{
			attribute.String("execution.id", ref.ExecutionId),
			attribute.String("node.id", ref.NodeId),
			attribute.Int("attempt", int(ref.Attempt)),
			attribute.Int("step.number", int(ref.StepNumber)),
		}
		ctx, span := tracer.Start(ctx, spec.Name+" "+spec.Verb, trace.WithAttributes(stepAttrs...))
		ctx = llm.WithSpanAttributes(ctx, stepAttrs...) // the model calls' spans name the step too
		// Every model call of the step is held to what the engine allows it.
		ctx = llm.WithAllowance(ctx, ref.GetAllowance())
		defer span.End()
		subject, err := bus.ResultSubject(ref.ExecutionId, spec.Name, ref.ReplyKind)
		if err != nil {
			return bus.Permanent(err)
		}
		stepCtx, release := cancels.StartStep(ref.ExecutionId, ref.StepId, ctx)
		defer release()
		if cancelled(stepCtx) {
			span.SetAttributes(attribute.Bool("cancelled", true))
			return nil
		}
		res, err := handle(stepCtx, cmd)
		if cancelled(stepCtx) {
			// Whatever the step gave, its execution has ended.
			span.SetAttributes(attribute.Bool("cancelled", true))
			return nil
		}
		if err != nil {
			span.RecordError(err)
			return err
		}
		return b.PublishProto(ctx, subject,
			ref.StepId+"/result", spec.ResultType, res, map[string]string{bus.ExtensionExecutionID: ref.ExecutionId})
	})
}

// cancelled tells whether ctx ended because its execution was cancelled.
func cancelled(ctx context.Context) bool {
	return ctx.Err() != nil && errors.Is(context.Cause(ctx), bus.ErrExecutionCancelled)
}

// Service is an agent whose work-queue consumer is declared, so commands
// published from now on are kept for it; Run serves them.
type Service struct {
	run func(context.Context) error
}

// Run serves commands until ctx ends.
func (s *Service) Run(ctx context.Context) error { return s.run(ctx) }

// Start declares the agent's streams and its durable consumer, and returns
// the Service that serves them as Serve does. Every agent's constructor
// ends with it.
func Start[C Command](ctx context.Context, b *bus.Bus, tp trace.TracerProvider, spec Spec,
	newCmd func() C, handle func(context.Context, C) (proto.Message, error)) (*Service, error) {
	if err := b.EnsureStreams(ctx); err != nil {
		return nil, err
	}
	if _, err := b.DeclareConsumer(ctx, spec.Consumer()); err != nil {
		return nil, err
	}
	return &Service{run: func(ctx context.Context) error { return Serve(ctx, b, tp, spec, newCmd, handle) }}, nil
}

// Option gives an agent's constructor what its caller already holds.
type Option func(*Options)

// Options are what the options gave.
type Options struct {
	// LLM is the model client to call instead of one built from the
	// settings (nova dev's, shared with its scripted server).
	LLM *llm.Client
}

// WithLLM calls the model through c.
func WithLLM(c *llm.Client) Option { return func(o *Options) { o.LLM = c } }

// Apply is the options given.
func Apply(opts []Option) Options {
	var o Options
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// Client is the model client of an agent: the one WithLLM gave, else one
// built from s for agent.
func (o Options) Client(s llm.Settings, agent string, log *slog.Logger, mp metric.MeterProvider, tp trace.TracerProvider) (*llm.Client, error) {
	if o.LLM != nil {
		return o.LLM, nil
	}
	return s.Client(agent, log, mp, tp)
}
