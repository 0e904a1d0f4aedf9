package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/workflow"
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
	if one := t.oneLine(); one != nil {
		t.st.Context = one.Context
	}
	t.st.Status, t.st.Error = statusCancelled, msg
	t.completed()
	return nil
}

// oneLine is the execution's one line, nil when it runs several (or none).
func (t *transition) oneLine() *novav1.Branch {
	if len(t.st.Branches) == 1 && len(t.st.Joins) == 0 && len(t.st.Ended) == 0 {
		return t.st.Branches[0]
	}
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
	t.cancelChild(reason)
	working := t.ln.PendingStepId != "" && t.childOf() == ""
	if t.graph != nil && t.ln.CurrentNode != "" {
		if node := t.graph.Node(t.ln.CurrentNode); node != nil {
			ns := t.nodeState(node.Id)
			ns.Status, ns.Error = statusCancelled, reason
			t.nodeCompleted(node, ns.Visits, nodeCancelled, reason, "", "", nil)
		}
	}
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.Ai, t.ln.MapRun = "", "", nil, nil
	return working
}

// cancelChild cancels the child execution the line waits for, if any.
func (t *transition) cancelChild(reason string) {
	child := t.childOf()
	if child == "" {
		return
	}
	t.out = append(t.out, outEvent{
		subject:   bus.CommandSubject(bus.AgentGraphEngine),
		id:        execution.CancelEventID(child),
		typ:       bus.TypeExecutionCancel,
		execution: child,
		msg: &novav1.CancelExecution{ExecutionId: child, RequestedBy: "execution " + t.st.ExecutionId,
			Reason: fmt.Sprintf("its parent execution %s ended: %s", t.st.ExecutionId, reason)},
	})
	t.changed = true
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

// signal resumes the wait node that waits for cmd's signal: the payload's
// keys are merged into the context and the node's edge is taken (by the
// payload's decide_on value when it names one). A signal nobody waits for,
// or whose payload fails the node's schema, is rejected with a
// SignalRejected event that says why; the execution is not changed.
func (t *transition) signal(cmd *novav1.SignalExecution, eventID string, sent time.Time) error {
	reject := func(reason string) error {
		t.emit(bus.KindSignalRejected, t.st.ExecutionId+"/signal-rejected/"+eventID, bus.TypeSignalRejected, &novav1.SignalRejected{
			ExecutionId: t.st.ExecutionId, Signal: cmd.Signal, Reason: reason, WaitingFor: execution.WaitingFor(t.st), SignalEventId: eventID,
		})
		return nil
	}
	if err := execution.CheckSignalTarget(t.st, cmd.Signal); err != nil {
		// The execution may be entering the wait node: its NodeWaiting
		// event is published before its state is stored, and a sender
		// that answers that event at once can come in between.
		if t.st.Status == statusRunning && execution.WaitingFor(t.st) == "" && t.now.Sub(sent) < controlGrace {
			return fmt.Errorf("%w: %v", errSignalEarly, err)
		}
		return reject(err.Error())
	}
	node := t.graph.Node(t.ln.CurrentNode)
	payload := jsonvalue.MustObject(cmd.Payload)
	decoded, err := payload.Decoded()
	if err != nil {
		return reject(fmt.Sprintf("the payload must be a JSON object: %v", err))
	}
	if err := workflow.CheckPayload(node, decoded); err != nil {
		return reject(err.Error())
	}
	var decision string
	var targets []string
	if node.DecideOn != "" {
		v, _ := workflow.DecisionString(decoded[node.DecideOn])
		next, err := t.graph.Decide(node.Id, v)
		if err != nil {
			return reject(fmt.Sprintf("payload field %q: %v", node.DecideOn, err))
		}
		decision, targets = v, []string{next}
	} else if targets, err = t.graph.Targets(node.Id); err != nil {
		return reject(err.Error())
	}
	ns := t.nodeState(node.Id)
	t.ctx.Merge(payload)
	t.setContext()
	t.clearTimer()
	t.ln.WaitingFor = ""
	ns.Status, ns.Error = statusSucceeded, ""
	nc := t.nodeCompleted(node, ns.Visits, nodeSuccess, "", decision, strings.Join(targets, ","), nil)
	nc.Signal = &novav1.SignalReceived{Name: cmd.Signal, Payload: cmd.Payload, SentBy: cmd.SentBy, ReceivedAt: tsNow(t.now)}
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	t.follow(node, targets)
	return nil
}

// enterWait starts a wait node: it waits for its signal, and for its
// timeout when it has one.
func (t *transition) enterWait(node *novav1.Node, ns *novav1.NodeState) {
	t.ln.CurrentNode, t.ln.PendingStepId, t.ln.WaitingFor = node.Id, "", node.Signal
	w := &novav1.NodeWaiting{
		ExecutionId: t.st.ExecutionId, NodeId: node.Id, Visit: ns.Visits, Kind: waitingSignal, Signal: node.Signal,
		Description: node.Description, Schema: node.Schema, DecideOn: node.DecideOn, Sequence: t.st.Sequence,
	}
	if d := workflow.WaitTimeout(node); d > 0 {
		due := t.now.Add(d)
		t.setTimer(timerWaitTimeout, node, ns, due)
		w.Until = tsNow(due)
	}
	t.waiting(w)
}

// waitTimedOut ends a wait node whose signal did not come in time: it takes
// the node's timeout edge, or fails the node when it has none.
func (t *transition) waitTimedOut(node *novav1.Node, ns *novav1.NodeState) {
	t.ln.WaitingFor = ""
	next, ok := t.graph.TimeoutEdge(node.Id)
	if !ok {
		t.nodeFailed(node, ns, fmt.Sprintf("no signal %q came within %s", node.Signal, workflow.WaitTimeout(node)), nil)
		return
	}
	ns.Status, ns.Error = statusSucceeded, ""
	nc := t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", next, nil)
	nc.TimedOut = true
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	t.enter(next)
}

// enterSleep starts a sleep node: a timer for its end, or the next node at
// once when that time has passed.
func (t *transition) enterSleep(node *novav1.Node, ns *novav1.NodeState) {
	t.ln.CurrentNode, t.ln.PendingStepId = node.Id, ""
	due, err := t.sleepUntil(node)
	if err != nil {
		t.nodeFailed(node, ns, err.Error(), nil)
		return
	}
	if !due.After(t.now) {
		t.sleepEnded(node, ns)
		return
	}
	t.setTimer(timerSleep, node, ns, due)
	t.waiting(&novav1.NodeWaiting{ExecutionId: t.st.ExecutionId, NodeId: node.Id, Visit: ns.Visits, Kind: waitingSleep,
		Description: node.Description, Until: tsNow(due), Sequence: t.st.Sequence})
}

// sleepUntil is when a sleep node ends: after its duration, or at the time
// its until key holds in the context.
func (t *transition) sleepUntil(node *novav1.Node) (time.Time, error) {
	if node.Until == "" {
		return t.now.Add(workflow.SleepFor(node)), nil
	}
	raw, ok := t.ctx[node.Until]
	if !ok {
		return time.Time{}, fmt.Errorf("sleep until %q: the context has no key %q", node.Until, node.Until)
	}
	v, _ := jsonvalue.Decode(raw)
	s, ok := v.(string)
	if !ok {
		return time.Time{}, fmt.Errorf("sleep until %q: want an RFC 3339 time (e.g. 2026-12-01T09:00:00Z), got %s", node.Until, jsonvalue.KindOf(raw))
	}
	due, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("sleep until %q: %q is not an RFC 3339 time (e.g. 2026-12-01T09:00:00Z)", node.Until, s)
	}
	return due, nil
}

func (t *transition) sleepEnded(node *novav1.Node, ns *novav1.NodeState) {
	if t.isItem() {
		t.route(node, ns, nil)
		return
	}
	targets, err := t.graph.Targets(node.Id)
	if err != nil {
		t.nodeFailed(node, ns, err.Error(), nil)
		return
	}
	ns.Status, ns.Error = statusSucceeded, ""
	t.nodeCompleted(node, ns.Visits, nodeSuccess, "", "", strings.Join(targets, ","), nil)
	t.ln.CurrentNode, t.ln.PendingStepId = "", ""
	t.follow(node, targets)
}

// retryLater records a failed run of a code node as a failed attempt and
// sets the timer of the next one, when the node's retry policy tries this
// failure again; it reports whether it did.
func (t *transition) retryLater(node *novav1.Node, ns *novav1.NodeState, r *novav1.CodeExecuted) bool {
	p := workflow.RetryPolicyOf(t.st.Definition, node)
	attempt := max(ns.RetryAttempt, 1)
	if p == nil || !workflow.Retries(p, r.ErrorKind, attempt) {
		return false
	}
	due := t.now.Add(workflow.RetryBackoff(p, attempt))
	msg := cmp.Or(r.Error, "the code failed without a message")
	t.releaseHold()
	ns.Status, ns.Error = "retrying", msg
	nc := t.nodeCompleted(node, ns.Visits, nodeFailed, msg, "", "", r)
	nc.NextAttemptAt = tsNow(due)
	t.ln.PendingStepId, t.ln.Ai = "", nil
	t.setTimer(timerRetry, node, ns, due)
	t.waiting(&novav1.NodeWaiting{ExecutionId: t.st.ExecutionId, NodeId: node.Id, Visit: ns.Visits, Kind: waitingRetry,
		Attempt: attempt + 1, Until: tsNow(due), Sequence: t.st.Sequence})
	return true
}

// retryNow runs a node's next attempt as a new visit (one that does not
// count against max_visits).
func (t *transition) retryNow(node *novav1.Node, ns *novav1.NodeState) {
	ns.Visits++
	ns.Retried++
	ns.RetryAttempt = max(ns.RetryAttempt, 1) + 1
	ns.Attempts = 1
	ns.Status, ns.Error = "", ""
	t.st.Sequence++
	t.ln.NodeStartedAt = tsNow(t.now)
	t.ln.NodeInput = t.ln.Context
	t.nodeStarted(node, ns)
	if node.Prompt != "" {
		t.startAI(node)
		return
	}
	t.dispatch(node, ns)
}

// aiInfraFailed fails an AI node whose pipeline met an infrastructure
// fault (a command no agent could handle, a program the sandbox could not
// run), or, when the node's retry policy retries sandbox faults, runs the
// whole node again later. Its generation loop is its own: failed code
// goes back to generation, not here.
func (t *transition) aiInfraFailed(node *novav1.Node, msg string, r *novav1.CodeExecuted) {
	fault := r
	if fault == nil {
		fault = &novav1.CodeExecuted{Status: "error", Error: msg}
	}
	fault = proto.Clone(fault).(*novav1.CodeExecuted)
	fault.ErrorKind, fault.Error = workflow.RetryOnSandboxFault, msg
	if t.retryLater(node, t.nodeState(node.Id), fault) {
		return
	}
	t.nodeFailed(node, t.nodeState(node.Id), msg, r)
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
	switch tm.Kind {
	case timerWaitTimeout:
		t.waitTimedOut(node, ns)
	case timerSleep:
		t.sleepEnded(node, ns)
	case timerRetry:
		t.retryNow(node, ns)
	default:
		t.nodeFailed(node, ns, fmt.Sprintf("timer %s of an unknown kind %q", tm.Id, tm.Kind), nil)
	}
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
