package loadgen

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// Around is when the process that fires a schedule's ticks (a NATS server,
// or `nova dev` with everything in it) was killed, started again, and was
// ready again (its services' consumers declared).
type Around struct {
	Killed, Restarted, Ready time.Time
}

// TickCheck is what an every schedule started around a kill, held against
// its catchup.
type TickCheck struct {
	// Ticks are the schedule's ticks looked at, Ran those of them that
	// started an execution.
	Ticks, Ran int
	// Lost are ticks the catchup runs that started none; Twice ticks that
	// started more than one; Extra ticks the catchup skips that started
	// one; OffGrid executions not on the schedule's grid (its phase lost).
	Lost, Twice, Extra, OffGrid []time.Time
}

// OK says nothing was lost, run twice, run against the catchup or off the
// grid.
func (c TickCheck) OK() bool {
	return len(c.Lost)+len(c.Twice)+len(c.Extra)+len(c.OffGrid) == 0
}

// CheckTicks holds runs (the ticks of the executions an every schedule
// started, from their ids) against what its catchup says, for the ticks on
// its grid (anchor + k·every) from the first up to until:
//   - due before the kill: each ran once (fired by the server, whenever
//     the engine took it);
//   - due while the server was down (from the kill to the restart): all,
//     each ran; latest, at most the last of them ran, and one tick from the
//     kill to an interval after ready did; none, none ran;
//   - due from the restart to an interval after ready (the server fires
//     the tick that fell due while it was down late, and the engine
//     starts): all, each ran; else any ran at most once;
//   - due after that: each ran once.
func CheckTicks(runs []time.Time, anchor time.Time, every time.Duration, catchup string, k Around, until time.Time) TickCheck {
	var c TickCheck
	count := map[time.Time]int{}
	for _, r := range runs {
		if r.Sub(anchor)%every != 0 {
			c.OffGrid = append(c.OffGrid, r)
			continue
		}
		count[r.UTC()]++
	}
	settled := k.Ready.Add(every)
	var down []time.Time
	latestRan := false
	for t := anchor.Add(every).UTC(); t.Before(until); t = t.Add(every) {
		n := count[t]
		c.Ticks++
		if n > 0 {
			c.Ran++
		}
		if n > 1 {
			c.Twice = append(c.Twice, t)
		}
		switch {
		case t.Before(k.Killed) || !t.Before(settled):
			if n == 0 {
				c.Lost = append(c.Lost, t)
			}
		case catchup == workflow.CatchupAll:
			if n == 0 {
				c.Lost = append(c.Lost, t)
			}
		case t.Before(k.Restarted):
			down = append(down, t)
			if n > 0 {
				latestRan = true
			}
		default:
			if n > 0 {
				latestRan = true
			}
		}
	}
	for i, t := range down {
		if count[t] > 0 && (catchup == workflow.CatchupNone || i < len(down)-1) {
			c.Extra = append(c.Extra, t)
		}
	}
	if catchup == workflow.CatchupLatest && len(down) > 0 && !latestRan {
		c.Lost = append(c.Lost, down[len(down)-1])
	}
	slices.SortFunc(c.OffGrid, time.Time.Compare)
	return c
}

// TickStarts follows the executions the schedules of workflow wf start:
// the tick of each, by schedule id.
type TickStarts struct {
	cons *bus.EventReader
	wf   string
	Runs map[string][]time.Time
}

// FollowTickStarts follows the scheduled starts of wf from the beginning of
// the events stream.
func FollowTickStarts(ctx context.Context, js jetstream.JetStream, wf string) (*TickStarts, error) {
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventFilter(bus.KindWorkflowStarted)}})
	if err != nil {
		return nil, err
	}
	return &TickStarts{cons: cons, wf: wf, Runs: map[string][]time.Time{}}, nil
}

// Until reads starts until done says so, or d passes.
func (ts *TickStarts) Until(d time.Duration, done func() bool) error {
	deadline := time.Now().Add(d)
	for !done() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", d)
		}
		msg, err := ts.cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			continue
		}
		if err != nil {
			return err
		}
		ev, err := bus.EventOf(msg)
		if err != nil {
			continue
		}
		var ws novav1.WorkflowStarted
		if bus.Decode(*ev, &ws) != nil || ws.WorkflowName != ts.wf || ws.ScheduleId == "" {
			continue
		}
		at, err := execution.ParseTick(strings.TrimPrefix(ws.ExecutionId, execution.TickPrefix(ts.wf, ws.ScheduleId)))
		if err != nil {
			return fmt.Errorf("execution %s: %w", ws.ExecutionId, err)
		}
		ts.Runs[ws.ScheduleId] = append(ts.Runs[ws.ScheduleId], at)
	}
	return nil
}

// After says whether schedule id started a tick after t.
func (ts *TickStarts) After(id string, t time.Time) bool {
	rs := ts.Runs[id]
	return len(rs) > 0 && rs[len(rs)-1].After(t)
}

// ScheduleAnchor waits until the engine stored schedule id of workflow wf
// (registering a definition returns before) and gives the time its ticks
// are counted from.
func ScheduleAnchor(ctx context.Context, js jetstream.JetStream, wf, id string) (time.Time, error) {
	kv, err := js.KeyValue(ctx, bus.BucketSchedules)
	if err != nil {
		return time.Time{}, err
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var st novav1.ScheduleState
		entry, err := kv.Get(ctx, bus.ScheduleKey(wf, id))
		if err == nil && proto.Unmarshal(entry.Value(), &st) == nil {
			return workflow.ScheduleAnchor(&st), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("schedule %s of %s not stored: %v", id, wf, err)
		}
	}
}

// TickRuns are the ticks of the executions schedule id of workflow wf
// started that completed, and those of them that did not succeed.
func TickRuns(ctx context.Context, js jetstream.JetStream, wf, id string) (runs []time.Time, failed []string, err error) {
	outcomes, err := Completions(ctx, js, time.Time{})
	if err != nil {
		return nil, nil, err
	}
	prefix := execution.TickPrefix(wf, id)
	for execID, o := range outcomes {
		at, ok := strings.CutPrefix(execID, prefix)
		if !ok {
			continue
		}
		tick, err := execution.ParseTick(at)
		if err != nil {
			return nil, nil, fmt.Errorf("execution %s: %w", execID, err)
		}
		if o.Completion.Status != execution.StatusSucceeded {
			failed = append(failed, fmt.Sprintf("%s: %s %q", execID, o.Completion.Status, o.Completion.Error))
		}
		runs = append(runs, tick)
	}
	return runs, failed, nil
}

// CheckTickRuns reads the runs of schedule id of workflow wf and holds them
// against its catchup (CheckTicks), reading again for up to 30 s while some
// look lost (their executions still running).
func CheckTickRuns(ctx context.Context, js jetstream.JetStream, wf, id string, anchor time.Time, every time.Duration, catchup string,
	k Around, until time.Time) (TickCheck, []string, error) {
	deadline := time.Now().Add(30 * time.Second)
	for {
		runs, failed, err := TickRuns(ctx, js, wf, id)
		if err != nil {
			return TickCheck{}, nil, err
		}
		c := CheckTicks(runs, anchor, every, catchup, k, until)
		if len(c.Lost) == 0 || time.Now().After(deadline) {
			return c, failed, nil
		}
		select {
		case <-ctx.Done():
			return c, failed, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ScheduleKill is a kill -9, 1.5 s after a tick fell due, of the process
// that fires the every schedules of a workflow (all of one interval).
type ScheduleKill struct {
	// URL is the NATS server's, the same after the restart.
	URL string
	Def *novav1.WorkflowDefinition
	// Kill kills the process, Restart starts it again after Down.
	Kill, Restart func() error
	Down          time.Duration
}

// ScheduleKillResult is what came of a ScheduleKill: when the tick before
// the kill fell due, when the process was killed and back, and per
// schedule id its check and the executions that did not succeed.
type ScheduleKillResult struct {
	Due    time.Time
	Around Around
	Checks map[string]TickCheck
	Failed []string
}

// Run registers the workflow, waits for two ticks of each schedule, kills
// the process 1.5 s after the next tick of the first fell due, starts it
// again after Down, waits for three more ticks of each once the engine
// takes ticks again, removes the schedules and holds each schedule's runs
// against its catchup.
func (s ScheduleKill) Run(ctx context.Context) (ScheduleKillResult, error) {
	var res ScheduleKillResult
	wf, scheds := s.Def.Name, s.Def.Schedules
	every := workflow.ScheduleEvery(scheds[0])
	b, err := Connect(ctx, s.URL, "schedule-kill")
	if err != nil {
		return res, err
	}
	if err := client.New(b, nil).Register(ctx, s.Def); err != nil {
		b.Close()
		return res, err
	}
	anchors := map[string]time.Time{}
	for _, sc := range scheds {
		if anchors[sc.Id], err = ScheduleAnchor(ctx, b.JetStream(), wf, sc.Id); err != nil {
			b.Close()
			return res, err
		}
	}
	starts, err := FollowTickStarts(ctx, b.JetStream(), wf)
	if err == nil {
		err = starts.Until(10*every+20*time.Second, func() bool {
			for _, sc := range scheds {
				if len(starts.Runs[sc.Id]) < 2 {
					return false
				}
			}
			return true
		})
	}
	b.Close()
	if err != nil {
		return res, fmt.Errorf("the first ticks: %w", err)
	}
	res.Due = workflow.EveryTickAfter(anchors[scheds[0].Id], every, time.Now())
	time.Sleep(time.Until(res.Due.Add(1500 * time.Millisecond)))
	if err := s.Kill(); err != nil {
		return res, fmt.Errorf("kill: %w", err)
	}
	res.Around.Killed = time.Now()
	time.Sleep(s.Down)
	res.Around.Restarted = time.Now()
	if err := s.Restart(); err != nil {
		return res, fmt.Errorf("restart: %w", err)
	}
	if b, err = Connect(ctx, s.URL, "schedule-kill-after"); err != nil {
		return res, err
	}
	defer b.Close()
	// Ready: the engine takes ticks again.
	if err := WaitPulling(ctx, b.JetStream(), bus.StreamTimers, bus.ConsumerEngineSchedules); err != nil {
		return res, err
	}
	res.Around.Ready = time.Now()
	settled := res.Around.Ready.Add(3 * every)
	if starts, err = FollowTickStarts(ctx, b.JetStream(), wf); err == nil {
		err = starts.Until(10*every+time.Minute, func() bool {
			for _, sc := range scheds {
				if !starts.After(sc.Id, settled) {
					return false
				}
			}
			return true
		})
	}
	if err != nil {
		return res, fmt.Errorf("ticks after the restart: %w", err)
	}
	until := time.Now().Add(-every) // the ticks before it were fired
	without := proto.Clone(s.Def).(*novav1.WorkflowDefinition)
	without.Schedules = nil
	if err := client.New(b, nil).Register(ctx, without); err != nil {
		return res, err
	}
	res.Checks = map[string]TickCheck{}
	for _, sc := range scheds {
		c, failed, err := CheckTickRuns(ctx, b.JetStream(), wf, sc.Id, anchors[sc.Id], every, cmp.Or(sc.Catchup, workflow.CatchupNone), res.Around, until)
		if err != nil {
			return res, err
		}
		res.Checks[sc.Id] = c
		res.Failed = append(res.Failed, failed...)
	}
	return res, nil
}
