package engine

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/robfig/cron/v3"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Schedules start registered workflows on a cron expression or at an
// interval. Each is kept in the KV bucket nova_schedules and is a JetStream
// message schedule on the timers stream, whose ticks the engine consumes. A
// tick's execution id is derived from the schedule and the tick, so a tick
// starts one execution however many engine replicas take it, or however
// often it is delivered.
//
// A cron schedule is a repeating message schedule: the server fires it
// when it is due and, after it was down, skips to the next time in the
// future. An every schedule is a chain of one-time schedules on its grid
// (anchor + k·every, see workflow.EveryTickAfter): each tick's handler
// sets the next before it starts the tick's execution, so the schedule
// keeps its phase whatever restarts; the server's own "@every" would start
// counting again from its restart.
//
// A tick the server fired when it was due always runs, even when the
// engine took it only after it started again and caught up past it. The
// ticks missed while the server or the engine was down (those never fired,
// and an every schedule's tick fired late because the server was down when
// it fell due) run as the schedule's catchup says: none (skipped), latest
// (the last runs) or all (each runs, at most maxCatchup). The engine looks
// for them at each tick, from the last tick it started, and when it starts.

// maxCatchup bounds the missed ticks a schedule with catchup all runs at
// once (the latest ones).
const maxCatchup = 1000

func (e *Engine) openSchedules(ctx context.Context) error {
	kv, err := openBucket(ctx, e.bus.JetStream(), jetstream.KeyValueConfig{
		Bucket:      bus.BucketSchedules,
		Description: "NOVA workflow schedules, one key per <workflow>.<schedule id>",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(e.cfg.Replicas, 1),
	})
	e.schedules = kv
	return err
}

// putSchedule handles PutSchedule: it stores the schedule and makes its
// message schedule (or removes it, paused).
func (e *Engine) putSchedule(ctx context.Context, ev event.Event) error {
	var cmd novav1.PutSchedule
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	if !execution.ValidKey(cmd.Workflow) {
		return bus.Permanent(fmt.Errorf("schedule: workflow name %q is not valid", cmd.Workflow))
	}
	if _, err := e.defs.Get(ctx, cmd.Workflow); errors.Is(err, jetstream.ErrKeyNotFound) {
		return bus.Permanent(fmt.Errorf("schedule: workflow %q is not registered", cmd.Workflow))
	} else if err != nil {
		return fmt.Errorf("read workflow %q: %w", cmd.Workflow, err)
	}
	if err := workflow.ValidateSchedule(cmd.Schedule); err != nil {
		return bus.Permanent(fmt.Errorf("schedule of %s: %w", cmd.Workflow, err))
	}
	return e.applySchedule(ctx, cmd.Workflow, cmd.Schedule, false)
}

// applySchedule stores s for workflow wf (keeping its last tick) and
// makes its message schedule, or removes it when s is paused.
func (e *Engine) applySchedule(ctx context.Context, wf string, s *novav1.Schedule, fromDef bool) error {
	key := bus.ScheduleKey(wf, s.Id)
	st := &novav1.ScheduleState{Workflow: wf, Schedule: s, CreatedAt: timestamppb.New(e.now()), LastTick: timestamppb.New(e.now()), FromDefinition: fromDef}
	var rev uint64
	if entry, err := e.schedules.Get(ctx, key); err == nil {
		var old novav1.ScheduleState
		if proto.Unmarshal(entry.Value(), &old) == nil {
			st.CreatedAt, st.LastTick = old.CreatedAt, old.LastTick
			// A schedule the definition declares stays the definition's
			// when it is paused or resumed; registering the definition
			// again leaves such a pause as it is.
			st.FromDefinition = old.FromDefinition || fromDef
			if fromDef && old.FromDefinition && old.Schedule.GetPaused() && !s.Paused {
				same := proto.Clone(s).(*novav1.Schedule)
				same.Paused = true
				if proto.Equal(old.Schedule, same) {
					s = same
				}
			}
			// The ticks a pause skipped are not missed ones: catchup
			// counts from the resume.
			if old.Schedule.GetPaused() && !s.Paused {
				st.LastTick = timestamppb.New(e.now())
			}
			st.Schedule = s
			if proto.Equal(old.Schedule, s) && old.FromDefinition == st.FromDefinition {
				return nil // the same again (a redelivery, a repeated register)
			}
		}
		rev = entry.Revision()
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("read schedule %s: %w", key, err)
	}
	data, err := proto.Marshal(st)
	if err != nil {
		return bus.Permanent(err)
	}
	if rev == 0 {
		_, err = e.schedules.Create(ctx, key, data)
	} else {
		_, err = e.schedules.Update(ctx, key, data, rev)
	}
	if err != nil {
		return fmt.Errorf("store schedule %s: %w", key, err)
	}
	subject := bus.ScheduleSubject(wf, s.Id)
	if s.Paused {
		return e.bus.CancelSchedule(ctx, subject)
	}
	if every := workflow.ScheduleEvery(s); every > 0 {
		// The first tick after now on the schedule's grid; it replaces
		// whatever the subject held.
		err = e.armEvery(ctx, wf, s, workflow.ScheduleAnchor(st), e.now(), -1)
	} else {
		var tick event.Event
		tick, err = e.bus.ProtoEvent(fmt.Sprintf("schedule/%s/%s/%d", wf, s.Id, time.Now().UnixNano()), bus.TypeScheduleTick,
			&novav1.ScheduleTick{Workflow: wf, ScheduleId: s.Id}, nil)
		if err != nil {
			return bus.Permanent(err)
		}
		// A roll-up: the schedule replaces the one before on its subject.
		err = e.bus.PublishAll(ctx, []bus.Outgoing{{Subject: subject, Event: tick,
			Headers: bus.ScheduleRepeat(workflow.NATSCron(s), s.Timezone, bus.ScheduleTickSubject(wf, s.Id))}})
	}
	if err != nil {
		return fmt.Errorf("schedule %s: %w", key, err)
	}
	e.log.InfoContext(ctx, "schedule set", "workflow", wf, "schedule", s.Id, "cron", s.Cron, "every_seconds", s.EverySeconds,
		"timezone", s.Timezone, "paused", s.Paused)
	return nil
}

func (e *Engine) deleteSchedule(ctx context.Context, ev event.Event) error {
	var cmd novav1.DeleteSchedule
	if err := bus.Decode(ev, &cmd); err != nil {
		return err
	}
	return e.removeSchedule(ctx, cmd.Workflow, cmd.ScheduleId)
}

func (e *Engine) removeSchedule(ctx context.Context, wf, id string) error {
	if err := e.bus.CancelSchedule(ctx, bus.ScheduleSubject(wf, id)); err != nil {
		return err
	}
	if err := e.schedules.Delete(ctx, bus.ScheduleKey(wf, id)); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return fmt.Errorf("delete schedule %s: %w", bus.ScheduleKey(wf, id), err)
	}
	e.log.InfoContext(ctx, "schedule removed", "workflow", wf, "schedule", id)
	return nil
}

// syncDefinitionSchedules makes the schedules of a registered definition
// the workflow's schedules from its definition: each set, and those a
// former revision declared and this one does not removed. Schedules made
// through the API are left alone.
func (e *Engine) syncDefinitionSchedules(ctx context.Context, def *novav1.WorkflowDefinition) error {
	keep := map[string]bool{}
	for _, s := range def.GetSchedules() {
		keep[s.Id] = true
		if err := e.applySchedule(ctx, def.Name, s, true); err != nil {
			return err
		}
	}
	for _, st := range e.listSchedules(ctx, def.Name) {
		if st.FromDefinition && !keep[st.Schedule.GetId()] {
			if err := e.removeSchedule(ctx, def.Name, st.Schedule.GetId()); err != nil {
				return err
			}
		}
	}
	return nil
}

// listSchedules are the schedules of workflow wf ("" for all).
func (e *Engine) listSchedules(ctx context.Context, wf string) []*novav1.ScheduleState {
	filter := ">"
	if wf != "" {
		filter = wf + ".>"
	}
	keys, err := e.schedules.ListKeysFiltered(ctx, filter)
	if err != nil {
		return nil
	}
	var out []*novav1.ScheduleState
	for k := range keys.Keys() {
		entry, err := e.schedules.Get(ctx, k)
		if err != nil {
			continue
		}
		var st novav1.ScheduleState
		if proto.Unmarshal(entry.Value(), &st) == nil {
			out = append(out, &st)
		}
	}
	return out
}

// handleTick starts the execution of a schedule's tick, and those of the
// ticks missed before it that its catchup asks for.
func (e *Engine) handleTick(ctx context.Context, ev event.Event) error {
	var tick novav1.ScheduleTick
	if err := bus.Decode(ev, &tick); err != nil {
		return err
	}
	if tick.At != nil {
		return e.everyTick(ctx, &tick)
	}
	next, err := time.Parse(time.RFC3339Nano, bus.Header(ctx, jetstream.ScheduleNextHeader))
	if err != nil {
		return bus.Permanent(fmt.Errorf("tick of schedule %s of %s: no time of the next tick (%s): %v", tick.ScheduleId, tick.Workflow,
			jetstream.ScheduleNextHeader, err))
	}
	return e.tick(ctx, tick.Workflow, tick.ScheduleId, func(st *novav1.ScheduleState, sched cron.Schedule) (time.Time, bool) {
		if every := workflow.ScheduleEvery(st.Schedule); every > 0 {
			// A repeating "@every" an earlier version set (the engine's
			// start replaces it with the chain): the grid's tick nearest
			// to the one it stands for.
			return workflow.EveryTickAfter(workflow.ScheduleAnchor(st), every, next.Add(-every-every/2)), true
		}
		return prevTick(sched, next), true
	})
}

// everyTick handles the tick of an every schedule: it sets the next tick
// on the schedule's grid, then starts this one's execution. A tick the
// server fired later than lateGrace after it fell due (it was down then)
// is a missed one: the ticks missed up to now run as catchup says.
func (e *Engine) everyTick(ctx context.Context, tick *novav1.ScheduleTick) error {
	wf, id, at := tick.Workflow, tick.ScheduleId, tick.At.AsTime()
	st, err := e.readSchedule(ctx, wf, id)
	if err != nil || st == nil || st.Schedule.GetPaused() {
		return err
	}
	every := workflow.ScheduleEvery(st.Schedule)
	if every == 0 {
		e.log.InfoContext(ctx, "tick of an every schedule that is now a cron one", "workflow", wf, "schedule", id, "tick", at)
		return nil
	}
	due := at
	if armed := tick.ArmedAt.AsTime(); armed.After(due) {
		due = armed // set late (an engine behind): due when it was set
	}
	late := bus.Stored(ctx).Sub(due) > lateGrace(every)
	// The next tick: the first after this one, the last started and now
	// (an engine more than an interval behind counts the ticks between as
	// missed). Only while the subject holds no other schedule: one set
	// since (a change, a resume) is newer.
	after := maxTime(at, st.GetLastTick().AsTime(), e.now())
	if err := e.armEvery(ctx, wf, st.Schedule, workflow.ScheduleAnchor(st), after, 0); err != nil {
		return err
	}
	// A pause or removal that came while the next was set removes it.
	if now, err := e.readSchedule(ctx, wf, id); err != nil {
		return err
	} else if now == nil || now.Schedule.GetPaused() {
		if err := e.bus.CancelSchedule(ctx, bus.ScheduleSubject(wf, id)); err != nil {
			return err
		}
		if now == nil {
			return nil
		}
	}
	return e.tick(ctx, wf, id, func(*novav1.ScheduleState, cron.Schedule) (time.Time, bool) {
		if late {
			return e.now(), false
		}
		return at, true
	})
}

// lateGrace is how long after it fell due an every schedule's tick may be
// fired and still count as fired when due: half its interval, at least 2 s
// (a busy server) and at most a minute.
func lateGrace(every time.Duration) time.Duration {
	return min(max(every/2, 2*time.Second), time.Minute)
}

func maxTime(t time.Time, ts ...time.Time) time.Time {
	for _, u := range ts {
		if u.After(t) {
			t = u
		}
	}
	return t
}

// armEvery sets the one-time message schedule of every schedule s's next
// tick: the first on its grid from anchor after `after`. With expect -1 it
// replaces whatever the schedule's subject holds; else only if the
// subject's last message is that sequence (0: none), and a schedule set
// there since is left as it is.
func (e *Engine) armEvery(ctx context.Context, wf string, s *novav1.Schedule, anchor, after time.Time, expect int64) error {
	at := workflow.EveryTickAfter(anchor, workflow.ScheduleEvery(s), after)
	tick, err := e.bus.ProtoEvent(fmt.Sprintf("schedule/%s/%s/%d", wf, s.Id, time.Now().UnixNano()), bus.TypeScheduleTick,
		&novav1.ScheduleTick{Workflow: wf, ScheduleId: s.Id, At: timestamppb.New(at), ArmedAt: timestamppb.New(e.now())}, nil)
	if err != nil {
		return bus.Permanent(err)
	}
	h := bus.ScheduleAt(at, bus.ScheduleTickSubject(wf, s.Id))
	if expect < 0 {
		h[jetstream.MsgRollup] = jetstream.MsgRollupSubject
	} else {
		h[jetstream.ExpectedLastSubjSeqHeader] = strconv.FormatInt(expect, 10)
	}
	err = e.bus.PublishAll(ctx, []bus.Outgoing{{Subject: bus.ScheduleSubject(wf, s.Id), Event: tick, Headers: h}})
	if expect >= 0 && bus.LostRace(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set the next tick of schedule %s of %s: %w", s.Id, wf, err)
	}
	return nil
}

// keepArmed makes sure the every schedule st has its next tick set: a
// subject that holds nothing (the chain broke: a tick dead-lettered) or the
// repeating "@every" of an earlier version gets the chain's next tick.
func (e *Engine) keepArmed(ctx context.Context, st *novav1.ScheduleState) error {
	s := st.Schedule
	if s.GetPaused() || workflow.ScheduleEvery(s) == 0 {
		return nil
	}
	timers, err := e.bus.JetStream().Stream(ctx, bus.StreamTimers)
	if err != nil {
		return err
	}
	var expect int64
	msg, err := timers.GetLastMsgForSubject(ctx, bus.ScheduleSubject(st.Workflow, s.Id))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
	case err != nil:
		return err
	case strings.HasPrefix(msg.Header.Get(jetstream.ScheduleHeader), "@every "):
		expect = int64(msg.Sequence)
	default:
		return nil // armed
	}
	after := maxTime(st.GetLastTick().AsTime(), e.now())
	return e.armEvery(ctx, st.Workflow, s, workflow.ScheduleAnchor(st), after, expect)
}

// readSchedule is the state of schedule wf.id; nil when it is gone.
func (e *Engine) readSchedule(ctx context.Context, wf, id string) (*novav1.ScheduleState, error) {
	key := bus.ScheduleKey(wf, id)
	entry, err := e.schedules.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		e.log.InfoContext(ctx, "tick of a schedule that is gone", "workflow", wf, "schedule", id)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read schedule %s: %w", key, err)
	}
	var st novav1.ScheduleState
	if err := proto.Unmarshal(entry.Value(), &st); err != nil {
		return nil, bus.Permanent(fmt.Errorf("schedule %s unreadable: %w", key, err))
	}
	return &st, nil
}

// catchUpSchedules runs, once the engine starts, the ticks missed while
// NOVA was down that each schedule's catchup asks for, and sets the next
// tick of an every schedule whose chain is not set.
func (e *Engine) catchUpSchedules(ctx context.Context) {
	for _, st := range e.listSchedules(ctx, "") {
		err := e.tick(ctx, st.Workflow, st.Schedule.GetId(), func(st *novav1.ScheduleState, sched cron.Schedule) (time.Time, bool) {
			return e.now(), false
		})
		if err == nil {
			err = e.keepArmed(ctx, st)
		}
		if err != nil && ctx.Err() == nil {
			e.log.WarnContext(ctx, "schedule catch-up failed", "workflow", st.Workflow, "schedule", st.Schedule.GetId(), "err", err)
		}
	}
}

// tick brings schedule wf.id up to a tick: at(st) gives the tick's time
// and whether it is a tick the server fired (which runs) or the time up to
// which missed ticks are looked for (the engine's start). The ticks after
// the schedule's last tick and before that time are missed: its catchup
// says which of them run.
func (e *Engine) tick(ctx context.Context, wf, id string, at func(*novav1.ScheduleState, cron.Schedule) (time.Time, bool)) error {
	key := bus.ScheduleKey(wf, id)
	for range 10 {
		entry, err := e.schedules.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			e.log.InfoContext(ctx, "tick of a schedule that is gone", "workflow", wf, "schedule", id)
			return nil
		}
		if err != nil {
			return fmt.Errorf("read schedule %s: %w", key, err)
		}
		var st novav1.ScheduleState
		if err := proto.Unmarshal(entry.Value(), &st); err != nil {
			return bus.Permanent(fmt.Errorf("schedule %s unreadable: %w", key, err))
		}
		if st.Schedule.GetPaused() {
			return nil
		}
		sched, _, err := workflow.CronSchedule(st.Schedule)
		if err != nil {
			return bus.Permanent(fmt.Errorf("schedule %s: %w", key, err))
		}
		t, fired := at(&st, sched)
		last := st.LastTick.AsTime()
		if !t.After(last) {
			if fired {
				// Fired when due and taken after the catch-up moved past
				// it (the engine stopped before it took it): it runs, once
				// by its execution id.
				return e.startTick(ctx, wf, st.Schedule, t)
			}
			return nil // decided already
		}
		missed := ticksBetween(&st, sched, last, t)
		var run []time.Time
		switch st.Schedule.GetCatchup() {
		case workflow.CatchupAll:
			run = missed
		case workflow.CatchupLatest:
			if len(missed) > 0 {
				run = missed[len(missed)-1:]
			}
		}
		newLast := t
		if fired {
			run = append(run, t)
		} else if len(missed) > 0 {
			newLast = missed[len(missed)-1]
		} else {
			return nil
		}
		if len(missed) > 0 {
			e.log.InfoContext(ctx, "schedule missed ticks", "workflow", wf, "schedule", id, "missed", len(missed),
				"catchup", st.Schedule.GetCatchup(), "running", len(run)-boolInt(fired))
		}
		for _, r := range run {
			if err := e.startTick(ctx, wf, st.Schedule, r); err != nil {
				return err
			}
		}
		st.LastTick = timestamppb.New(newLast)
		data, err := proto.Marshal(&st)
		if err != nil {
			return bus.Permanent(err)
		}
		if _, err := e.schedules.Update(ctx, key, data, entry.Revision()); err == nil {
			return nil
		} else if !bus.LostRace(err) {
			return fmt.Errorf("store schedule %s: %w", key, err)
		}
	}
	return fmt.Errorf("schedule %s: too many concurrent updates", key)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// startTick starts the execution of one tick, whose execution id is the
// tick's, so a tick started twice runs once.
func (e *Engine) startTick(ctx context.Context, wf string, s *novav1.Schedule, t time.Time) error {
	id := execution.TickID(wf, s.Id, t)
	// Each scheduled execution is a trace of its own (the tick's message
	// carries the trace of the request that made the schedule), linked to
	// it.
	ctx, span := e.tracer.Start(ctx, "graph-engine schedule tick", trace.WithNewRoot(),
		trace.WithLinks(trace.Link{SpanContext: trace.SpanContextFromContext(ctx)}),
		trace.WithAttributes(attribute.String("execution.id", id), attribute.String("schedule.id", s.Id), attribute.String("workflow", wf)))
	defer span.End()
	return e.startCommand(ctx, &novav1.StartWorkflow{ExecutionId: id, WorkflowName: wf, Context: s.Context, ScheduleId: s.Id,
		ScheduledAt: timestamppb.New(t)}, "start-"+id)
}

// ticksBetween are the ticks of the schedule st keeps after from and
// before to (at most maxCatchup, the latest): a cron schedule's, or an
// every schedule's on its grid.
func ticksBetween(st *novav1.ScheduleState, sched cron.Schedule, from, to time.Time) []time.Time {
	var out []time.Time
	next := sched.Next
	if every := workflow.ScheduleEvery(st.Schedule); every > 0 {
		anchor := workflow.ScheduleAnchor(st)
		if n := to.Sub(from) / every; n > maxCatchup+1 {
			from = to.Add(-(maxCatchup + 1) * every) // the latest only
		}
		next = func(t time.Time) time.Time { return workflow.EveryTickAfter(anchor, every, t) }
	}
	for t := next(from); !t.IsZero() && t.Before(to); t = next(t) {
		out = append(out, t)
		if len(out) > maxCatchup {
			out = out[1:]
		}
	}
	return out
}

// prevTick is the tick of a cron schedule before next: what a tick the
// server fired with Nats-Schedule-Next = next stands for.
func prevTick(sched cron.Schedule, next time.Time) time.Time {
	for window := time.Minute; window < 5*366*24*time.Hour; window *= 2 {
		t := sched.Next(next.Add(-window))
		if t.IsZero() || !t.Before(next) {
			continue
		}
		for {
			n := sched.Next(t)
			if n.IsZero() || !n.Before(next) {
				return t
			}
			t = n
		}
	}
	return next
}
