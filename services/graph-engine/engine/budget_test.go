package engine

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// TestDayCountersAcrossReplicas: two engine replicas (two connections to the
// embedded NATS) take shares of one day's max_usd_per_day for 40 steps at
// once, spend within their shares and settle: the day's spend never passes
// the limit, every share is released, and settling or taking a share again
// changes nothing.
func TestDayCountersAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	var replicas [2]*dayCounters
	for i := range replicas {
		b, err := bus.Connect(ctx, n.URL(), bus.WithName(fmt.Sprintf("engine-%d", i)), bus.WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.Close)
		d, err := openDayCounters(ctx, b.JetStream(), Config{})
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = d
	}
	const limit = 0.01
	day := []flow.DayLimit{{Key: DayKey("w", "", "2026-01-02"), Limit: &novav1.BudgetLimit{Name: "max_usd_per_day", Allowed: limit}}}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var granted, spent float64
	for i := range 40 {
		wg.Go(func() {
			d := replicas[i%2]
			step := fmt.Sprintf("x%d/n/1/s1", i)
			grant, _, err := d.hold(ctx, day, step, limit/5)
			if err != nil {
				t.Error(err)
				return
			}
			// Taking the share again (a redelivered event) gives the same.
			if again, _, err := d.hold(ctx, day, step, limit); err != nil || again != grant {
				t.Errorf("hold again: %v, %v; want %v", again, err, grant)
			}
			use := grant * rand.Float64()
			mu.Lock()
			granted, spent = granted+grant, spent+use
			mu.Unlock()
			for range 2 { // the second settle finds no share and counts nothing
				if err := d.settle(ctx, []string{day[0].Key}, step, use, 1); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	e := &Engine{days: replicas[0]}
	daySpent, calls, held, err := e.daySpend(ctx, day[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(daySpent-spent) > 1e-12 || calls != 40 || held != 0 {
		t.Errorf("day counter: spent %v (want %v), %d calls (want 40), held %v (want 0)", daySpent, spent, calls, held)
	}
	if daySpent > limit+1e-12 {
		t.Errorf("spent %v, over the limit %v", daySpent, limit)
	}
	if granted <= limit/2 {
		t.Errorf("shares granted %v in all: the steps were starved (want the limit to be shared out)", granted)
	}
}

// TestEngineTakesDayShares: the engine holds a share of max_usd_per_day for
// each model step before the command leaves, and the command carries it; a
// node's own per-day limit is its own counter.
func TestEngineTakesDayShares(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b := devstacktest.Bus(ctx, t, "budget-engine-test")
	e, err := New(ctx, Deps{Bus: b, Config: Config{AllowPrompt: true}})
	if err != nil {
		t.Fatal(err)
	}
	def, _ := workflow.Parse([]byte(`
name: ai
model: gpt-4o-mini
budget: {max_usd_per_day: 1, max_usd: 0.5}
nodes:
  - {id: start, type: start}
  - {id: discount, type: action, prompt: "Calculate discount (10% if total > 1000)", budget: {max_usd_per_day: 0.02}}
  - {id: end, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: end}
`))
	start := func(id string) (*novav1.ExecutionState, *flow.Transition) {
		c, _ := jsonvalue.ObjectOf(map[string]any{"total": 1500.0})
		st := &novav1.ExecutionState{ExecutionId: id, Status: statusRunning, Definition: def, Context: c.Proto(), StartedAt: timestamppb.New(time.Now())}
		// As the engine's start does.
		tr := e.newTransition(st)
		tr.StartLine()
		tr.Enter(tr.Graph().Start().Id)
		tr.KeepChanges()
		tr.Unbind()
		tr.Settle()
		if err := e.applyBudget(ctx, tr); err != nil {
			t.Fatal(err)
		}
		return st, tr
	}
	day := time.Now().UTC().Format(time.DateOnly)
	var held float64
	for i := range 3 {
		st, tr := start(fmt.Sprintf("x%d", i))
		a := tr.Out()[len(tr.Out())-1].Msg.(*novav1.AnalyzeInput).Ref.GetAllowance()
		// The node's day ($0.02) is the tightest: a share of $0.02/50, the
		// smallest of the shares wanted.
		if math.Abs(a.GetUsd()-0.0004) > 1e-12 || a.UsdLimit.GetName() != "max_usd_per_day" || a.UsdLimit.GetScope() != `node "discount"` ||
			a.UsdLimit.GetDay() != day || !a.UsdLimit.GetShare() || math.Abs(a.UsdLimit.GetHeld()-held) > 1e-12 {
			t.Errorf("execution %d: allowance %v", i, a)
		}
		held += a.GetUsd()
		if got := st.Branches[0].Ai.HeldDayKeys; len(got) != 2 || got[0] != "ai."+day || got[1] != "ai.discount."+day {
			t.Errorf("held keys %v", got)
		}
	}
	for _, key := range []string{"ai." + day, "ai.discount." + day} {
		if _, _, h, err := e.daySpend(ctx, key); err != nil || math.Abs(h-held) > 1e-12 {
			t.Errorf("%s: held %v, %v; want %v", key, h, err, held)
		}
	}
	st, err := e.days.kv.Status(ctx)
	if err != nil || st.TTL() != budgetTTL {
		t.Errorf("bucket %s: TTL %v, %v; want %v", BucketBudget, st.TTL(), err, budgetTTL)
	}
}
