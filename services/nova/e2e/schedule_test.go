package e2e

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/stack"
)

const tickerWorkflow = `
name: ticker
schedules:
  - {id: fast, every: 1s, context: {n: 7}}
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: 'context["m"] = context["n"] * 2'}
  - {id: done, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: done}
`

// ticks follows the executions schedules start: each WorkflowStarted of
// workflow wf with a schedule id, as it comes.
type ticks struct {
	e    *env
	cons *bus.EventReader
	wf   string
}

func (e *env) followTicks(wf string) *ticks {
	e.t.Helper()
	cons, err := bus.NewEventReader(e.ctx, e.bus.JetStream(), bus.StreamEvents, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{bus.EventFilter(bus.KindWorkflowStarted)}, DeliverPolicy: jetstream.DeliverNewPolicy})
	if err != nil {
		e.t.Fatal(err)
	}
	return &ticks{e: e, cons: cons, wf: wf}
}

// next waits for the next scheduled start of the workflow.
func (tk *ticks) next(within time.Duration) *novav1.WorkflowStarted {
	tk.e.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		msg, err := tk.cons.Next(jetstream.FetchMaxWait(time.Until(deadline)))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			continue
		}
		if errors.Is(err, nats.ErrNoResponders) {
			// A clustered server that stopped: the events stream elects
			// another leader, and the consumer is made again on it.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		if err != nil {
			tk.e.t.Fatal(err)
		}
		var ws novav1.WorkflowStarted
		if decodeMsg(msg, &ws) == nil && ws.WorkflowName == tk.wf && ws.ScheduleId != "" {
			return &ws
		}
	}
	tk.e.t.Fatalf("no scheduled start of %s within %s", tk.wf, within)
	return nil
}

func (e *env) putSchedule(wf string, s *novav1.Schedule) {
	e.t.Helper()
	err := e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), "schedule-"+uuid.NewString(), bus.TypeSchedulePut,
		&novav1.PutSchedule{Workflow: wf, Schedule: s}, nil)
	if err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) scheduleState(wf, id string) (*novav1.ScheduleState, jetstream.KeyValueEntry) {
	e.t.Helper()
	kv, err := e.bus.JetStream().KeyValue(e.ctx, bus.BucketSchedules)
	if err != nil {
		e.t.Fatal(err)
	}
	entry, err := kv.Get(e.ctx, wf+"."+id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		e.t.Fatal(err)
	}
	var st novav1.ScheduleState
	if err := proto.Unmarshal(entry.Value(), &st); err != nil {
		e.t.Fatal(err)
	}
	return &st, entry
}

func TestSchedules(t *testing.T) {
	e := startEnv(t)
	def := parse(t, tickerWorkflow)
	tk := e.followTicks("ticker")
	if err := e.client.Register(e.ctx, def); err != nil {
		t.Fatal(err)
	}

	t.Run("every tick starts one execution", func(t *testing.T) {
		var prev time.Time
		for i := range 3 {
			ws := tk.next(5 * time.Second)
			at := ws.ScheduledAt.AsTime()
			if ws.ExecutionId != execution.TickID("ticker", "fast", at) || ws.ScheduleId != "fast" {
				t.Errorf("tick %d: execution %s of schedule %q at %s", i, ws.ExecutionId, ws.ScheduleId, at)
			}
			if ctxMap(ws.Context)["n"] != 7.0 {
				t.Errorf("tick %d: context %s, want the schedule's", i, ws.Context.GetRaw())
			}
			if i > 0 && at.Sub(prev) < 500*time.Millisecond {
				t.Errorf("ticks %s apart, want 1s", at.Sub(prev))
			}
			prev = at
		}
	})

	t.Run("paused, resumed, removed", func(t *testing.T) {
		subject := bus.ScheduleSubject("ticker", "fast")
		s := proto.Clone(def.Schedules[0]).(*novav1.Schedule)
		s.Paused = true
		e.putSchedule("ticker", s)
		// Paused: the server holds no schedule for it any more.
		e.eventually(5*time.Second, "the paused schedule's message is removed", func() bool {
			return len(e.subjects(bus.StreamTimers, subject)) == 0
		})
		if st, _ := e.scheduleState("ticker", "fast"); st == nil || !st.Schedule.Paused || !st.FromDefinition {
			t.Fatalf("schedule state %v, want paused, still the definition's", st)
		}
		// Registering the same definition again leaves the pause.
		if err := e.client.Register(e.ctx, def); err != nil {
			t.Fatal(err)
		}
		if st, _ := e.scheduleState("ticker", "fast"); st == nil || !st.Schedule.Paused {
			t.Fatalf("after registering again: %v, want still paused", st)
		}
		pausedAt := time.Now()
		s.Paused = false
		e.putSchedule("ticker", s)
		// The ticks the pause skipped are not missed: catchup counts from
		// the resume.
		e.eventually(5*time.Second, "the schedule is resumed", func() bool {
			st, _ := e.scheduleState("ticker", "fast")
			return st != nil && !st.Schedule.Paused && !st.LastTick.AsTime().Before(pausedAt)
		})
		for {
			ws := tk.next(5 * time.Second)
			if ws.ScheduledAt.AsTime().After(pausedAt) {
				break
			}
		}
		err := e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), "unschedule-"+uuid.NewString(), bus.TypeScheduleDelete,
			&novav1.DeleteSchedule{Workflow: "ticker", ScheduleId: "fast"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		e.eventually(5*time.Second, "the schedule is removed", func() bool {
			st, _ := e.scheduleState("ticker", "fast")
			return st == nil && len(e.subjects(bus.StreamTimers, subject)) == 0
		})
	})

	t.Run("catch-up after downtime", func(t *testing.T) {
		for _, catchup := range []string{"all", "latest", "none"} {
			t.Run(catchup, func(t *testing.T) {
				id := "minute-" + catchup
				e.putSchedule("ticker", &novav1.Schedule{Id: id, Cron: "* * * * *", Catchup: catchup,
					Context: jsonvalue.Object{"n": []byte("1")}.Proto()})
				e.eventually(5*time.Second, "the schedule is stored", func() bool { st, _ := e.scheduleState("ticker", id); return st != nil })
				if err := e.s.StopModule(stack.GraphEngine); err != nil {
					t.Fatal(err)
				}
				// Everything was down for four and a half minutes: the last
				// tick the engine started is that old.
				st, entry := e.scheduleState("ticker", id)
				now := time.Now()
				st.LastTick = tsOf(now.Add(-270 * time.Second))
				data, _ := proto.Marshal(st)
				kv, _ := e.bus.JetStream().KeyValue(e.ctx, bus.BucketSchedules)
				if _, err := kv.Update(e.ctx, "ticker."+id, data, entry.Revision()); err != nil {
					t.Fatal(err)
				}
				var missed []time.Time
				for m := st.LastTick.AsTime().Truncate(time.Minute).Add(time.Minute); m.Before(now); m = m.Add(time.Minute) {
					missed = append(missed, m)
				}
				if err := e.s.StartModule(e.ctx, stack.GraphEngine); err != nil {
					t.Fatal(err)
				}
				// The catch-up is done when the last tick moved to the last missed one.
				e.eventually(10*time.Second, "the engine caught up", func() bool {
					st, _ := e.scheduleState("ticker", id)
					return st != nil && !st.LastTick.AsTime().Before(missed[len(missed)-1])
				})
				want := map[string][]time.Time{"all": missed, "latest": missed[len(missed)-1:], "none": nil}[catchup]
				for _, m := range missed {
					execID := execution.TickID("ticker", id, m)
					ran := slices.ContainsFunc(want, m.Equal)
					if ran {
						e.eventually(10*time.Second, "the missed tick's execution "+execID+" ends", func() bool {
							st := e.state(execID)
							return st != nil && st.Status == "succeeded"
						})
					} else if e.state(execID) != nil {
						t.Errorf("catchup %s ran the missed tick %s", catchup, m.Format(time.TimeOnly))
					}
				}
				e.putSchedule("ticker", &novav1.Schedule{Id: id, Cron: "* * * * *", Paused: true})
			})
		}
	})

	t.Run("a bad schedule is refused naming the problem", func(t *testing.T) {
		evID := "schedule-" + uuid.NewString()
		err := e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), evID, bus.TypeSchedulePut,
			&novav1.PutSchedule{Workflow: "ticker", Schedule: &novav1.Schedule{Id: "bad", Cron: "*/5 * * *"}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		msg, err := e.waitMsg(bus.StreamDeadLetters, bus.DeadLetterSubject(bus.ConsumerEngineCommands), func(m jetstream.Msg) bool {
			var dl novav1.DeadLetter
			return decodeMsg(m, &dl) == nil && strings.Contains(dl.Headers["ce-id"], evID)
		})
		if err != nil {
			t.Fatal(err)
		}
		var dl novav1.DeadLetter
		_ = decodeMsg(msg, &dl)
		mustContain(t, "dead letter", dl.Reason, `cron "*/5 * * *" has 4 fields; want 5`)
	})
}

func tsOf(t time.Time) *timestamppb.Timestamp { return timestamppb.New(t) }

// TestScheduleOnClusterLosingAServer runs a schedule on three clustered
// NATS servers and stops the server leading the timers stream: ticks go
// on, each starting exactly one execution.
func TestScheduleOnClusterLosingAServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("three NATS servers")
	}
	e := startEnv(t, func(o *stack.Options) { o.NATSCluster = 3 })
	cluster := e.s.Infra().Cluster
	def := parse(t, strings.Replace(tickerWorkflow, "{id: fast, every: 1s, context: {n: 7}}", "{id: fast, every: 1s, catchup: all, context: {n: 7}}", 1))
	tk := e.followTicks("ticker")
	if err := e.client.Register(e.ctx, def); err != nil {
		t.Fatal(err)
	}
	var starts []*novav1.WorkflowStarted
	for range 4 {
		starts = append(starts, tk.next(10*time.Second))
	}
	leader := cluster.StreamLeader(bus.StreamTimers)
	t.Logf("stopping %s, the timers stream's leader", cluster.Name(leader))
	stopped := time.Now()
	cluster.StopNode(leader)
	for {
		ws := tk.next(30 * time.Second)
		starts = append(starts, ws)
		if ws.ScheduledAt.AsTime().After(stopped.Add(5 * time.Second)) {
			break
		}
	}
	seen := map[string]bool{}
	var prev time.Time
	for _, ws := range starts {
		at := ws.ScheduledAt.AsTime()
		if seen[ws.ExecutionId] {
			t.Errorf("tick %s started twice", at.Format(time.StampMilli))
		}
		seen[ws.ExecutionId] = true
		if !prev.IsZero() && at.Sub(prev) < 500*time.Millisecond {
			t.Errorf("ticks at %s and %s: one tick started two executions", prev.Format(time.StampMilli), at.Format(time.StampMilli))
		}
		prev = at
	}
	t.Logf("%d ticks, %d of them after the leader stopped", len(starts), countAfter(starts, stopped))
	for _, ws := range starts {
		ws := ws
		e.eventually(30*time.Second, fmt.Sprintf("the tick's execution %s ends", ws.ExecutionId), func() bool {
			st := e.state(ws.ExecutionId)
			return st != nil && st.Status == "succeeded"
		})
	}
}

func countAfter(starts []*novav1.WorkflowStarted, t time.Time) int {
	n := 0
	for _, ws := range starts {
		if ws.ScheduledAt.AsTime().After(t) {
			n++
		}
	}
	return n
}
