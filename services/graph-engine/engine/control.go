package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// Steering a running execution from outside (cancel, signals) and the
// durable timers as they fire and are dropped; what each does to the
// execution is the transition's (package flow, control.go).

func (e *Engine) cancel(ctx context.Context, ev event.Event) error {
	var cmd novav1.CancelExecution
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	id := cmd.ExecutionId
	if !execution.ValidKey(id) {
		return bus.Permanent(fmt.Errorf("cancel names an invalid execution id %q", id))
	}
	err := e.steer(ctx, id, func(t *flow.Transition) error { return t.Cancel(&cmd) })
	if errors.Is(err, errUnknownExecution) {
		if e.inGrace(ev.Time()) {
			return err
		}
		e.log.WarnContext(ctx, "cancel of an execution that does not exist", "execution_id", id, "event_id", ev.ID())
		return nil
	}
	return err
}

func (e *Engine) handleTimer(ctx context.Context, ev event.Event) error {
	var tf novav1.TimerFired
	if err := bus.Decode(ev, &tf); err != nil {
		return err
	}
	err := e.update(ctx, tf.ExecutionId, tf.NodeId, func(t *flow.Transition) error {
		return t.OnLine(func(b *novav1.Branch) bool { return b.GetTimer().GetId() == tf.TimerId || armsTimer(b, tf.TimerId) },
			func() error { return t.TimerFired(&tf) })
	})
	if errors.Is(err, errUnknownExecution) {
		// The execution's state is gone (it ended past the keep).
		e.log.InfoContext(ctx, "timer of an execution that is gone", "execution_id", tf.ExecutionId, "timer", tf.TimerId)
		return nil
	}
	return err
}

// applyTimers removes the schedules of the timers the transition dropped.
// A failure only leaves a timer that fires and is ignored.
func (e *Engine) applyTimers(ctx context.Context, t *flow.Transition) {
	for _, subject := range t.TimersFx {
		if err := e.bus.CancelSchedule(ctx, subject); err != nil {
			e.log.WarnContext(ctx, "timer not removed; it will fire and be ignored", "subject", subject, "err", err)
		}
	}
}

// restoreSecrets puts back, in a rerun's context, the values the chain of
// work keeps hidden (redact.Placeholder): from the context of the execution
// rerun while its state is kept (Config.KeepEnded). Past it they stay
// hidden, and the log says so.
func (e *Engine) restoreSecrets(ctx context.Context, t *flow.Transition) error {
	var hidden []string
	for k, raw := range t.Context() {
		if v, err := jsonvalue.Decode(raw); err == nil && v == redact.Placeholder {
			hidden = append(hidden, k)
		}
	}
	if len(hidden) == 0 {
		return nil
	}
	orig, err := execution.ReadState(ctx, e.execs, t.State().Rerun.ExecutionId)
	if err != nil {
		return fmt.Errorf("read execution %s: %w", t.State().Rerun.ExecutionId, err)
	}
	from := jsonvalue.MustObject(orig.GetContext())
	var missing []string
	for _, k := range hidden {
		if raw, ok := from[k]; ok {
			t.Context()[k] = raw
		} else {
			missing = append(missing, k)
		}
	}
	t.SetContext()
	if len(missing) > 0 {
		e.log.Warn("rerun: hidden values of the context could not be restored; they stay hidden",
			"execution_id", t.State().ExecutionId, "rerun_of", t.State().Rerun.ExecutionId, "keys", missing)
	}
	return nil
}

func (e *Engine) signal(ctx context.Context, ev event.Event) error {
	var cmd novav1.SignalExecution
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	id := cmd.ExecutionId
	if !execution.ValidKey(id) {
		return bus.Permanent(fmt.Errorf("signal names an invalid execution id %q", id))
	}
	err := e.steer(ctx, id, func(t *flow.Transition) error {
		return t.OnLine(func(b *novav1.Branch) bool { return execution.ListensFor(b, cmd.Signal) }, func() error { return t.Signal(&cmd, ev.ID(), e.graceFrom(ev.Time())) })
	})
	if errors.Is(err, errUnknownExecution) {
		if e.inGrace(ev.Time()) {
			return err
		}
		// Nobody can take it, and no event is written under an id no
		// execution has: the signal goes to the dead letters, kept with
		// why, where nova dlq list shows it.
		e.log.WarnContext(ctx, "signal for an execution that does not exist", "execution_id", id, "signal", cmd.Signal)
		return bus.Permanent(fmt.Errorf("signal %q names execution %s, which does not exist (never started, or its state expired)", cmd.Signal, id))
	}
	return err
}

// armsTimer tells whether line b armed a boundary event whose timer is id.
func armsTimer(b *novav1.Branch, id string) bool {
	for _, a := range b.GetBoundaries() {
		if a.GetTimerId() == id {
			return true
		}
	}
	return false
}

// inGrace tells whether a cancel or signal sent at sent for an execution
// whose state is not stored yet may still find it (graceFrom).
func (e *Engine) inGrace(sent time.Time) bool {
	return e.now().Sub(e.graceFrom(sent)) < flow.ControlGrace
}

// graceFrom is when the ControlGrace of a cancel or signal sent at sent
// counts from: its sending, or this engine's start when that came later (a
// restart: the start command before it is delivered again, and may be
// taken after it; so may the node its signal is for).
func (e *Engine) graceFrom(sent time.Time) time.Time {
	if e.began.After(sent) {
		return e.began
	}
	return sent
}
