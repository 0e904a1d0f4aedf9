// Package client is a producer of workflows: it starts them with the
// documented CloudEvent and waits for their completion event, exactly as any
// other producer would.
package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Client starts workflows and waits for them.
type Client struct {
	bus    *bus.Bus
	values *valueref.Store
	// One consumer each for every wait of the client: the completions of
	// the executions it starts, the dead letters of its commands.
	completions, deadLetters *bus.Waits
}

// New returns a client. values, when set, carries large initial context
// values by reference (events are limited to the server's max payload).
func New(b *bus.Bus, values *valueref.Store) *Client {
	return &Client{bus: b, values: values,
		completions: b.CompletionWaits(),
		deadLetters: b.NewWaits(bus.StreamDeadLetters, bus.DeadLetterSubject(bus.AgentGraphEngine), bus.DeadLetterKey),
	}
}

// Close deletes the client's consumers (made by its first Start or
// Register); a client used again makes new ones.
func (c *Client) Close() {
	c.completions.Close()
	c.deadLetters.Close()
}

// ErrDeadLettered is returned when the engine could not read the start event.
var ErrDeadLettered = errors.New("start event dead-lettered")

// Execution is a started workflow.
type Execution struct {
	ID      string
	EventID string

	done <-chan *novav1.WorkflowCompleted
	dead <-chan *novav1.DeadLetter
	stop func()
}

// Start publishes a StartWorkflow event (type io.nova.workflow.start.v1 on
// nova.cmd.graph-engine). def may be nil when name is a registered workflow.
// Its completion and the start's dead letter are waited for with the
// client's two consumers, shared by all its starts (made by the first Start
// or Register, before its publish): a start costs the server no consumer of
// its own, and its outcome cannot come before the wait.
// initial is the initial context, in any form jsonvalue.ObjectOf takes; pass
// JSON text or a jsonvalue.Object to control every number's text.
func (c *Client) Start(ctx context.Context, def *novav1.WorkflowDefinition, name string, initial any) (*Execution, error) {
	obj, err := jsonvalue.ObjectOf(initial)
	if err != nil {
		return nil, fmt.Errorf("initial context: %w", err)
	}
	if c.values != nil {
		if err := c.values.Shrink(ctx, obj); err != nil {
			return nil, err
		}
	}
	st := obj.Proto()
	id := uuid.NewString()
	eventID := "start-" + id
	exec, err := c.watch(ctx, id, eventID)
	if err != nil {
		return nil, fmt.Errorf("execution %s not started: its completion cannot be waited for: %w", id, err)
	}
	err = c.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), eventID, bus.TypeWorkflowStart,
		&novav1.StartWorkflow{ExecutionId: id, Definition: def, WorkflowName: name, Context: st},
		map[string]string{bus.ExtensionExecutionID: id})
	if err != nil {
		exec.stop()
		return nil, err
	}
	return exec, nil
}

// Register stores a definition under its name for later starts by name. It
// returns once the engine has stored it (so a start that follows finds it),
// or with the engine's reason when the definition was refused.
func (c *Client) Register(ctx context.Context, def *novav1.WorkflowDefinition) error {
	eventID := "register-" + uuid.NewString()
	dead, stop, err := bus.WaitFirst[novav1.DeadLetter](ctx, c.deadLetters, eventID)
	if err != nil {
		return err
	}
	defer stop()
	if err := c.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), eventID,
		bus.TypeWorkflowRegister, &novav1.RegisterWorkflow{Definition: def}, nil); err != nil {
		return err
	}
	for {
		if kv, err := c.bus.JetStream().KeyValue(ctx, workflowsBucket); err == nil {
			if entry, err := kv.Get(ctx, def.GetName()); err == nil {
				var stored novav1.WorkflowDefinition
				if proto.Unmarshal(entry.Value(), &stored) == nil && proto.Equal(&stored, def) {
					return nil
				}
			}
		}
		select {
		case dl := <-dead:
			return fmt.Errorf("workflow %q refused: %s", def.GetName(), dl.Reason)
		case <-ctx.Done():
			return fmt.Errorf("waiting for workflow %q to be registered: %w", def.GetName(), ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// workflowsBucket is the engine's KV bucket of registered definitions.
const workflowsBucket = "nova_workflows"

// watch waits for the completion of execution id and the dead letter of
// its start event eventID, both published after the call (the start is
// published after it; the execution id is new).
func (c *Client) watch(ctx context.Context, id, eventID string) (*Execution, error) {
	done, stopDone, err := bus.WaitFirst[novav1.WorkflowCompleted](ctx, c.completions, bus.EventSubject(id, bus.KindWorkflowCompleted))
	if err != nil {
		return nil, err
	}
	dead, stopDead, err := bus.WaitFirst[novav1.DeadLetter](ctx, c.deadLetters, eventID)
	if err != nil {
		stopDone()
		return nil, err
	}
	return &Execution{ID: id, EventID: eventID, done: done, dead: dead, stop: func() { stopDone(); stopDead() }}, nil
}

// Wait blocks until the execution completes (or its start event is
// dead-lettered, or ctx ends).
func (e *Execution) Wait(ctx context.Context) (*novav1.WorkflowCompleted, error) {
	defer e.stop()
	select {
	case wc := <-e.done:
		return wc, nil
	case dl := <-e.dead:
		// The engine publishes a failed completion for an unreadable start
		// that names its execution; prefer it when it is there.
		select {
		case wc := <-e.done:
			return wc, nil
		case <-time.After(500 * time.Millisecond):
		}
		return nil, fmt.Errorf("%w: %s", ErrDeadLettered, dl.Reason)
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for execution %s: %w", e.ID, ctx.Err())
	}
}

// Run starts a workflow and waits for it.
func (c *Client) Run(ctx context.Context, def *novav1.WorkflowDefinition, initial any) (*novav1.WorkflowCompleted, error) {
	exec, err := c.Start(ctx, def, "", initial)
	if err != nil {
		return nil, err
	}
	return exec.Wait(ctx)
}

// Backlog names the first durable consumer of streams with messages pending
// or unacknowledged, and their counts ("" when there is none). A client's
// ordered consumers, which come and go with its waits, are not looked at.
func Backlog(ctx context.Context, js jetstream.JetStream, streams ...string) (string, error) {
	for _, name := range streams {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return "", err
		}
		// The lister's goroutine ends only once every info is taken.
		busy := ""
		infos := s.ListConsumers(ctx)
		for ci := range infos.Info() {
			if busy == "" && ci.Config.Durable != "" && (ci.NumPending > 0 || ci.NumAckPending > 0) {
				busy = fmt.Sprintf("%s on %s: %d pending, %d unacknowledged", ci.Name, name, ci.NumPending, ci.NumAckPending)
			}
		}
		if err := infos.Err(); err != nil {
			return "", err
		}
		if busy != "" {
			return busy, nil
		}
	}
	return "", nil
}

// WaitConsumerIdle waits until a durable consumer has nothing pending and
// nothing unacknowledged: for the audit consumer, the chain of work of every
// finished execution is then in the store.
func (c *Client) WaitConsumerIdle(ctx context.Context, stream, durable string) error {
	cons, err := c.bus.JetStream().Consumer(ctx, stream, durable)
	if err != nil {
		return fmt.Errorf("consumer %s: %w", durable, err)
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			return fmt.Errorf("consumer %s: %w", durable, err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s to catch up: %w", durable, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
