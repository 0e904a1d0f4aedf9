package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// The workflow of the constructs case: a signal sent at its start is kept
// until its wait node comes; a node under a lock every execution shares; a
// boundary timer that takes the line off a long sleep.
const constructsWorkflow = `
name: chaos-constructs
nodes:
  - {id: start, type: start}
  - {id: prep, type: sleep, duration: 2s}
  - {id: approve, type: wait, signal: go}
  - id: guarded
    type: action
    lock: chaos-ledger
    code: |
      import time
      time.sleep(0.05)
      context["wrote"] = True
  - {id: slow, type: sleep, duration: 1h, on: [{after: 3s, goto: fallback}]}
  - {id: fallback, type: action, code: 'context["fell_back"] = True'}
  - {id: end, type: end}
edges:
  - {from: start, to: prep}
  - {from: prep, to: approve}
  - {from: approve, to: guarded}
  - {from: guarded, to: slow}
  - {from: slow, to: end}
  - {from: fallback, to: end}
`

// constructsRuns is how many executions the constructs case runs.
const constructsRuns = 40

// runConstructsCase starts constructsRuns executions of constructsWorkflow,
// each sent its signal at once (kept), kills `nova dev` once some hold or
// wait for the lock and others sleep under their boundary timer, starts it
// again, and checks every execution: succeeded with the signal's payload,
// its guarded write and its fallback (correct; wrong otherwise; lost
// without an end), and no two visits of the locked node at once
// (dupDocs counts the overlaps).
func runConstructsCase(ctx context.Context, cfg config) report {
	r := report{name: "constructs", total: constructsRuns}
	ctx, sys, done, err := startCase(ctx, cfg, r.name, cfg.caseLimit+time.Minute)
	if err != nil {
		r.err = err
		return r
	}
	defer done()
	b, err := connectWhenReady(ctx, sys)
	if err != nil {
		r.err = err
		return r
	}
	def, err := workflow.Parse([]byte(constructsWorkflow))
	if err != nil {
		r.err = err
		b.Close()
		return r
	}
	c := client.New(b, nil)
	start := time.Now()
	var ids []string
	for i := range constructsRuns {
		exec, err := c.Start(ctx, def, "", map[string]any{"n": i})
		if err != nil {
			r.err = fmt.Errorf("start: %w", err)
			b.Close()
			return r
		}
		ids = append(ids, exec.ID)
		err = execution.PublishSignal(ctx, b, "signal-"+uuid.NewString(), &novav1.SignalExecution{ExecutionId: exec.ID, Signal: "go",
			Payload: jsonvalue.Object{"approved_by": []byte(`"chaos"`)}.Proto(), SentBy: "chaos"})
		if err != nil {
			r.err = fmt.Errorf("signal: %w", err)
			b.Close()
			return r
		}
	}
	// Kill once the locked node has had a few turns: some executions hold
	// or wait for the lock, the first are under their boundary timer.
	if err := waitTurns(ctx, b.JetStream(), 5); err != nil {
		r.err = err
		b.Close()
		return r
	}
	b.Close()
	what := sys.target.describe()
	if err := sys.target.kill(); err != nil {
		r.err = fmt.Errorf("kill %s: %w", what, err)
		return r
	}
	killed := time.Now()
	if err := sys.target.restart(ctx); err != nil {
		r.err = fmt.Errorf("restart %s: %w", what, err)
		return r
	}
	r.fault = fmt.Sprintf("SIGKILL %s with kept signals, the lock and boundary timers in flight (%s after the first start), back after %s",
		what, killed.Sub(start).Round(100*time.Millisecond), time.Since(killed).Round(100*time.Millisecond))
	if b, err = connectWhenReady(ctx, sys); err != nil {
		r.err = err
		return r
	}
	defer b.Close()
	var outcomes map[string]loadgen.Outcome
	for deadline := time.Now().Add(cfg.caseLimit); ; time.Sleep(500 * time.Millisecond) {
		if outcomes, err = loadgen.Completions(ctx, b.JetStream(), start); err != nil {
			r.err = err
			return r
		}
		ended := 0
		for _, id := range ids {
			if _, ok := outcomes[id]; ok {
				ended++
			}
		}
		if ended == len(ids) || time.Now().After(deadline) {
			break
		}
	}
	r.elapsed = time.Since(start)
	for _, id := range ids {
		wc := outcomes[id].Completion
		switch {
		case wc == nil:
			r.lost++
			fmt.Printf("constructs: %s lost: %s\n", id, describeState(ctx, b.JetStream(), id))
		case wc.Status != execution.StatusSucceeded:
			r.wrong++
			fmt.Printf("constructs: %s %s: %s\n", id, wc.Status, wc.Error)
		default:
			got, _ := jsonvalue.MustObject(wc.Context).Decoded()
			if got["approved_by"] == "chaos" && got["wrote"] == true && got["fell_back"] == true {
				r.correct++
			} else {
				r.wrong++
				fmt.Printf("constructs: %s context %v\n", id, got)
			}
		}
	}
	overlaps, err := lockOverlaps(ctx, b.JetStream())
	if err != nil {
		r.err = err
		return r
	}
	r.dupDocs = int64(overlaps)
	return r
}

// waitTurns waits until the locked node of the constructs workflow has
// completed n visits.
func waitTurns(ctx context.Context, js jetstream.JetStream, n int) error {
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.EventFilter(bus.KindNodeCompleted)}})
	if err != nil {
		return err
	}
	seen := 0
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			continue
		}
		if err != nil {
			return err
		}
		ev, err := bus.EventOf(msg)
		var nc novav1.NodeCompleted
		if err == nil && bus.Decode(*ev, &nc) == nil && nc.NodeId == "guarded" {
			if seen++; seen >= n {
				return nil
			}
		}
	}
	return errors.New("the locked node did not take its turns")
}

// lockOverlaps counts the visits of the locked node that began before the
// one before them ended (two lines holding the lock at once), from the
// engine's times in their node.completed events (the events of one
// transition go to several streams, so the streams' times do not order
// them).
func lockOverlaps(ctx context.Context, js jetstream.JetStream) (int, error) {
	type visit struct{ began, ended time.Time }
	visits := map[string]visit{}
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.EventFilter(bus.KindNodeCompleted)}})
	if err != nil {
		return 0, err
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			break
		}
		if err != nil {
			return 0, err
		}
		ev, err := bus.EventOf(msg)
		var nc novav1.NodeCompleted
		if err == nil && bus.Decode(*ev, &nc) == nil && nc.NodeId == "guarded" {
			visits[fmt.Sprintf("%s/%d", nc.ExecutionId, nc.Visit)] = visit{began: nc.StartedAt.AsTime(), ended: nc.CompletedAt.AsTime()}
		}
	}
	var all []visit
	for _, v := range visits {
		all = append(all, v)
	}
	slices.SortFunc(all, func(a, b visit) int { return a.began.Compare(b.began) })
	overlaps := 0
	for i := 1; i < len(all); i++ {
		if all[i].began.Before(all[i-1].ended) {
			overlaps++
		}
	}
	return overlaps, nil
}

// describeState says where execution id's lines are, and the lock's state.
func describeState(ctx context.Context, js jetstream.JetStream, id string) string {
	kv, err := js.KeyValue(ctx, bus.BucketExecutions)
	if err != nil {
		return err.Error()
	}
	entry, err := kv.Get(ctx, id)
	if err != nil {
		return err.Error()
	}
	var st novav1.ExecutionState
	if err := proto.Unmarshal(entry.Value(), &st); err != nil {
		return err.Error()
	}
	out := fmt.Sprintf("status %s, kept %d", st.Status, len(st.KeptSignals))
	for _, l := range st.Branches {
		out += fmt.Sprintf("; line %q at %s waiting_for %q lock_wait %q lock_held %q timer %v boundaries %d pending %q",
			l.Id, l.CurrentNode, l.WaitingFor, l.LockWait, l.LockHeld, l.GetTimer().GetId(), len(l.Boundaries), l.PendingStepId)
	}
	if lk, err := js.KeyValue(ctx, bus.BucketLocks); err == nil {
		if e, err := lk.Get(ctx, "chaos-ledger"); err == nil {
			var ls novav1.LockState
			if proto.Unmarshal(e.Value(), &ls) == nil {
				out += fmt.Sprintf("; lock holder %v, %d waiting", ls.Holder, len(ls.Waiting))
			}
		}
	}
	return out
}
