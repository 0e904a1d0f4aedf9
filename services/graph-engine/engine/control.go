package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Steering a running execution: cancel, signals for wait nodes, and the
// durable timers of wait timeouts, sleeps and retry backoff.

const (
	statusCancelled = execution.StatusCancelled
	nodeCancelled   = execution.NodeCancelled

	// Timer kinds.
	timerWaitTimeout = "wait_timeout"
	timerSleep       = "sleep"
	timerRetry       = "retry"

	// NodeWaiting kinds.
	waitingSignal = "signal"
	waitingSleep  = "sleep"
	waitingRetry  = "retry"
)

// controlGrace is how long after it was sent a cancel or signal for an
// execution whose state is not stored yet is tried again: a producer may
// send one right behind the start, which the engine stores just after it
// publishes the first commands. Past it, the execution does not exist.
const controlGrace = 5 * time.Second

// errSignalEarly is a signal for a running execution that waits for none
// yet: it is delivered again until controlGrace has passed.
var errSignalEarly = errors.New("the execution waits for no signal yet")

func (e *Engine) cancel(ctx context.Context, ev event.Event) error {
	var cmd novav1.CancelExecution
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	id := cmd.ExecutionId
	if !execution.ValidKey(id) {
		return bus.Permanent(fmt.Errorf("cancel names an invalid execution id %q", id))
	}
	err := e.steer(ctx, id, func(t *transition) error { return t.cancel(&cmd) })
	if errors.Is(err, errUnknownExecution) {
		if e.now().Sub(ev.Time()) < controlGrace {
			return err
		}
		e.log.WarnContext(ctx, "cancel of an execution that does not exist", "execution_id", id, "event_id", ev.ID())
		return nil
	}
	return err
}

// cancel ends a running execution as cancelled: the running node's visit
// ends cancelled, its timer is removed, and ExecutionCancelled tells the
// sandbox and the agents to stop what they run for it. An execution that
// ended (cancelled already, or otherwise) is left as it is.
func (t *transition) cancel(cmd *novav1.CancelExecution) error {
	if t.st.Status != statusRunning {
		return errStale
	}
	by := cmp.Or(cmd.RequestedBy, "unknown")
	msg := "cancelled by " + by
	if cmd.Reason != "" {
		msg += ": " + cmd.Reason
	}
	t.st.CancelledBy, t.st.CancelReason = by, cmd.Reason
	var node string
	for _, l := range t.st.Branches {
		if l.CurrentNode != "" {
			node = l.CurrentNode
			break
		}
	}
	t.emit(bus.KindExecutionCancelled, t.st.ExecutionId+"/cancelled", bus.TypeExecutionCancelled, &novav1.ExecutionCancelled{
		ExecutionId: t.st.ExecutionId, Reason: cmd.Reason, RequestedBy: by, NodeId: node, CancelledAt: tsNow(t.now),
	})
	if t.st.Refine != nil {
		t.bindAny()
		t.releaseHold()
		t.clearTimer()
		t.refineFail(msg) // refineFinish ends it cancelled
		return nil
	}
	if one := t.soleLine(); one != nil {
		t.st.Context = one.Context
	}
	t.st.Status, t.st.Error = statusCancelled, msg
	t.completed()
	return nil
}

// cancelLine ends the visit the transition's line is at as cancelled, with
// reason: its timer and budget holds are dropped, and the child execution
// it waits for is cancelled too. It reports whether the line had work in
// progress (a command whose result it waited for).
func (t *transition) cancelLine(reason string) bool {
	t.releaseHold()
	t.clearTimer()
	t.ln.WaitingFor = ""
	working := t.ln.PendingStepId != "" && t.childOf() == ""
	if t.graph != nil && t.ln.CurrentNode != "" {
		if node := t.graph.Node(t.ln.CurrentNode); node != nil {
			kindOf(node).cancel(t, node, reason)
			ns := t.nodeState(node.Id)
			ns.Status, ns.Error = statusCancelled, reason
			t.nodeCompleted(node, ns.Visits, nodeCancelled, reason, "", "", nil)
		}
	}
	t.dropMapRun(t.ln)
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.Ai = "", "", nil
	return working
}

// endLines closes, as the execution ends, every line still open: the visit
// each is at (a node, a map item) ends cancelled with why, its timers and
// budget holds are dropped, its child execution is cancelled, and work it
// ran (a program, an agent's step) is told to stop (ExecutionStopped; a
// cancel's ExecutionCancelled says so already).
func (t *transition) endLines(reason string) {
	if len(t.st.Branches) == 0 && len(t.st.Joins) == 0 && len(t.st.Ended) == 0 {
		return
	}
	why := "the execution ended: " + reason
	if t.st.Status == statusCancelled {
		why = reason
	}
	// Items first, so that a map's own visit closes after its items'.
	lines := slices.Clone(t.st.Branches)
	slices.SortStableFunc(lines, func(a, b *novav1.Branch) int {
		switch {
		case a.IsItem == b.IsItem:
			return 0
		case a.IsItem:
			return -1
		}
		return 1
	})
	var stopped []string
	for _, l := range lines {
		t.on(l, func() {
			node := t.ln.CurrentNode
			if t.cancelLine(why) {
				stopped = append(stopped, node)
			}
		})
	}
	t.st.Branches, t.st.Joins, t.st.Ended = nil, nil, nil
	t.changed = true
	if len(stopped) > 0 && t.st.Status != statusCancelled {
		slices.Sort(stopped)
		t.emit(bus.KindExecutionStopped, t.st.ExecutionId+"/stopped", bus.TypeExecutionStopped, &novav1.ExecutionStopped{
			ExecutionId: t.st.ExecutionId, Reason: why, NodeIds: slices.Compact(stopped), StoppedAt: tsNow(t.now),
		})
	}
}

// waiting announces that the current node waits.
func (t *transition) waiting(w *novav1.NodeWaiting) {
	t.emit(bus.KindNodeWaiting, fmt.Sprintf("%s/waiting/%s/%d", t.visitKey(w.NodeId, w.Visit), w.Kind, w.Attempt),
		bus.TypeNodeWaiting, w)
}

// timerID names a node visit's timer of kind, unique in the execution (a
// map's items by their position).
func (t *transition) timerID(kind string, node *novav1.Node, ns *novav1.NodeState) string {
	id := fmt.Sprintf("%s-%d-%s", node.Id, ns.Visits, kind)
	if t.isItem() {
		id += fmt.Sprintf("-i%d", t.ln.Item)
	}
	return id
}

// setTimer makes a durable timer of kind for node the execution's timer:
// a message schedule on the timers stream, published with the transition's
// events, that comes back as TimerFired at due. The timer before it, if
// any, is removed once the state is stored.
func (t *transition) setTimer(kind string, node *novav1.Node, ns *novav1.NodeState, due time.Time) {
	t.clearTimer()
	id := t.timerID(kind, node, ns)
	tm := &novav1.Timer{Id: id, Kind: kind, NodeId: node.Id, DueAt: tsNow(due), Visit: ns.Visits, Attempt: ns.RetryAttempt}
	t.ln.Timer = tm
	t.out = append(t.out, outEvent{
		subject:   bus.TimerSubject(t.st.ExecutionId, id),
		id:        t.st.ExecutionId + "/timer/" + id,
		typ:       bus.TypeTimerFired,
		execution: t.st.ExecutionId,
		msg:       &novav1.TimerFired{ExecutionId: t.st.ExecutionId, TimerId: id, Kind: kind, NodeId: node.Id, DueAt: tm.DueAt},
		headers:   bus.ScheduleAt(due, bus.TimerFiredSubject(t.st.ExecutionId, id)),
	})
	t.changed = true
}

// clearTimer drops the execution's timer; its schedule is removed once the
// state is stored (if that is missed, it fires and is ignored as stale).
func (t *transition) clearTimer() {
	if tm := t.ln.Timer; tm != nil {
		t.timersFx = append(t.timersFx, bus.TimerSubject(t.st.ExecutionId, tm.Id))
		t.ln.Timer = nil
		t.changed = true
	}
}

func (e *Engine) handleTimer(ctx context.Context, ev event.Event) error {
	var tf novav1.TimerFired
	if err := bus.Decode(ev, &tf); err != nil {
		return err
	}
	err := e.update(ctx, tf.ExecutionId, tf.NodeId, func(t *transition) error {
		return t.onLine(func(b *novav1.Branch) bool { return b.GetTimer().GetId() == tf.TimerId }, func() error { return t.timerFired(&tf) })
	})
	if errors.Is(err, errUnknownExecution) {
		// The execution's state is gone (it ended past the keep).
		e.log.InfoContext(ctx, "timer of an execution that is gone", "execution_id", tf.ExecutionId, "timer", tf.TimerId)
		return nil
	}
	return err
}

// timerFired applies the execution's pending timer; any other is stale (a
// wait that was signalled, a cancelled execution).
func (t *transition) timerFired(tf *novav1.TimerFired) error {
	tm := t.ln.Timer
	if t.st.Status != statusRunning || tm == nil || tm.Id != tf.TimerId || t.graph == nil {
		return errStale
	}
	node := t.graph.Node(tm.NodeId)
	if node == nil {
		return errStale
	}
	ns := t.nodeState(node.Id)
	t.ln.Timer = nil
	t.changed = true
	kindOf(node).timer(t, node, ns, tm)
	return nil
}

// applyTimers removes the schedules of the timers the transition dropped.
// A failure only leaves a timer that fires and is ignored.
func (e *Engine) applyTimers(ctx context.Context, t *transition) {
	for _, subject := range t.timersFx {
		if err := e.bus.CancelSchedule(ctx, subject); err != nil {
			e.log.WarnContext(ctx, "timer not removed; it will fire and be ignored", "subject", subject, "err", err)
		}
	}
}

// carryOver records the nodes a rerun takes from the execution it reruns:
// each a visit of status carried_over, run in that execution, not here.
func (t *transition) carryOver(r *novav1.RerunFrom) {
	for _, id := range r.CarriedOver {
		node := t.graph.Node(id)
		if node == nil {
			continue // a node of the revision the original ran, not of this one
		}
		ns := t.nodeState(id)
		ns.Visits++
		ns.Status = execution.NodeCarriedOver
		t.st.Sequence++
		t.st.Path = append(t.st.Path, id)
		t.ln.NodeStartedAt = tsNow(t.now)
		t.ln.NodeInput = nil
		nc := t.nodeCompleted(node, ns.Visits, execution.NodeCarriedOver, "", "", "", nil)
		nc.InputContext, nc.OutputResult, nc.CodeExecuted, nc.ExecutionTimeMs = nil, nil, "", 0
		nc.CarriedOverFrom = r.ExecutionId
	}
}

// restoreSecrets puts back, in a rerun's context, the values the chain of
// work keeps hidden (redact.Placeholder): from the context of the execution
// rerun while its state is kept (Config.KeepEnded). Past it they stay
// hidden, and the log says so.
func (e *Engine) restoreSecrets(ctx context.Context, t *transition) error {
	var hidden []string
	for k, raw := range t.ctx {
		if v, err := jsonvalue.Decode(raw); err == nil && v == redact.Placeholder {
			hidden = append(hidden, k)
		}
	}
	if len(hidden) == 0 {
		return nil
	}
	orig, err := execution.ReadState(ctx, e.execs, t.st.Rerun.ExecutionId)
	if err != nil {
		return fmt.Errorf("read execution %s: %w", t.st.Rerun.ExecutionId, err)
	}
	from := jsonvalue.MustObject(orig.GetContext())
	var missing []string
	for _, k := range hidden {
		if raw, ok := from[k]; ok {
			t.ctx[k] = raw
		} else {
			missing = append(missing, k)
		}
	}
	t.setContext()
	if len(missing) > 0 {
		e.log.Warn("rerun: hidden values of the context could not be restored; they stay hidden",
			"execution_id", t.st.ExecutionId, "rerun_of", t.st.Rerun.ExecutionId, "keys", missing)
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
	err := e.steer(ctx, id, func(t *transition) error {
		return t.onLine(func(b *novav1.Branch) bool { return b.WaitingFor == cmd.Signal }, func() error { return t.signal(&cmd, ev.ID(), ev.Time()) })
	})
	if errors.Is(err, errUnknownExecution) {
		if e.now().Sub(ev.Time()) < controlGrace {
			return err
		}
		// Nobody waits for it: said where the sender looks.
		e.log.WarnContext(ctx, "signal for an execution that does not exist", "execution_id", id, "signal", cmd.Signal)
		return e.bus.PublishProto(ctx, bus.EventSubject(id, bus.KindSignalRejected), id+"/signal-rejected/"+ev.ID(),
			bus.TypeSignalRejected, &novav1.SignalRejected{
				ExecutionId: id, Signal: cmd.Signal, SignalEventId: ev.ID(),
				Reason: fmt.Sprintf("execution %s does not exist", id),
			}, map[string]string{bus.ExtensionExecutionID: id})
	}
	return err
}
