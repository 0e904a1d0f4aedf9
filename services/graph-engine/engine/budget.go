package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// Budgets (workflow.Limits: the workflow's, the deployment's defaults, the
// node's own). Spend is counted from each agent step's model calls as its
// result arrives: per execution and per node in the execution's state (one
// pending step at a time, stored with compare-and-set), and per workflow and
// UTC day in the KV bucket nova_budget, one key per workflow (and node) and
// day, updated with compare-and-set so that every engine replica agrees.
//
// Before it issues a command to an agent that may call a model, the engine
// puts in it what the step may spend (Allowance): what each max_usd and
// max_model_calls leaves, and for max_usd_per_day a share of the day's room
// that the step holds in the day's record until its result arrives (then
// what it spent is counted and the rest is free again). Executions running at
// once hold separate shares, so together they never spend more than the day
// allows. A share is at first 1/dayShareParts (package flow) of
// max_usd_per_day (never more than the day has left, nor than the other
// limits leave); when a call needs more, the agent says so and the step is
// issued again with a share that holds it (at least twice as large), until
// the share is all the day has left. A call that does not fit a limit's
// whole remainder stops the node with budget_exceeded. The transition
// (package flow, budget.go) decides the allowances and shares; the engine
// keeps the day counters.

// BucketBudget holds the day counters of max_usd_per_day.
const BucketBudget = "nova_budget"

// budgetTTL keeps a day's counter a day after the day ends (a KV entry
// expires this long after its last update), for the steps that started
// before midnight and end after it.
const budgetTTL = 48 * time.Hour

// dayRecord is one day's counter: what was spent, and the shares held by
// running steps (step id -> USD). A share is released exactly once, when
// its step's result is counted, which makes counting idempotent: a result
// seen again finds no share and counts nothing.
type dayRecord struct {
	SpentUSD   float64            `json:"spent_usd"`
	ModelCalls int64              `json:"model_calls"`
	Held       map[string]float64 `json:"held,omitempty"`
}

func (r *dayRecord) heldBy(others string) float64 {
	var n float64
	for step, usd := range r.Held {
		if step != others {
			n += usd
		}
	}
	return n
}

type dayCounters struct {
	kv jetstream.KeyValue
}

func openDayCounters(ctx context.Context, js jetstream.JetStream, cfg Config) (*dayCounters, error) {
	var kv jetstream.KeyValue
	err := bus.Declare(ctx, "KV "+BucketBudget, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      BucketBudget,
			Description: "NOVA spend per workflow (and node) and UTC day, for max_usd_per_day",
			History:     1,
			TTL:         budgetTTL,
			Storage:     jetstream.FileStorage,
			Replicas:    max(cfg.Replicas, 1),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", BucketBudget, err)
	}
	return &dayCounters{kv: kv}, nil
}

// DayKey is the nova_budget key of a workflow's (node empty) or a node's
// spend on a UTC day: flow.DayKey, the key the transition holds shares on.
func DayKey(workflowName, nodeID, day string) string { return flow.DayKey(workflowName, nodeID, day) }

// daySpend reads a day counter: spent USD, model calls, and USD held by
// running steps.
func (e *Engine) daySpend(ctx context.Context, key string) (spent float64, calls int64, held float64, err error) {
	entry, err := e.days.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, 0, 0, nil
	}
	if err != nil {
		return 0, 0, 0, err
	}
	var r dayRecord
	if err := json.Unmarshal(entry.Value(), &r); err != nil {
		return 0, 0, 0, err
	}
	return r.SpentUSD, r.ModelCalls, r.heldBy(""), nil
}

// modify applies fn to key's record with compare-and-set, until it holds; fn
// returns false to leave the record as it is.
func (d *dayCounters) modify(ctx context.Context, key string, fn func(*dayRecord) bool) error {
	for range 1000 {
		var r dayRecord
		var rev uint64
		entry, err := d.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return fmt.Errorf("read day counter %s: %w", key, err)
		default:
			if err := json.Unmarshal(entry.Value(), &r); err != nil {
				return bus.Permanent(fmt.Errorf("day counter %s unreadable: %w", key, err))
			}
			rev = entry.Revision()
		}
		if r.Held == nil {
			r.Held = map[string]float64{}
		}
		if !fn(&r) {
			return nil
		}
		data, err := json.Marshal(&r)
		if err != nil {
			return bus.Permanent(err)
		}
		if rev == 0 {
			_, err = d.kv.Create(ctx, key, data)
		} else {
			_, err = d.kv.Update(ctx, key, data, rev)
		}
		if err == nil {
			return nil
		}
		if !bus.LostRace(err) {
			return fmt.Errorf("update day counter %s: %w", key, err)
		}
		// Another step (of this or another replica) updated it; read again.
	}
	return fmt.Errorf("day counter %s: too many concurrent updates", key)
}

// dayShare is where one day counter stood when a step's share was taken.
type dayShare struct {
	spent, held, room, grant float64
}

// hold takes for step a share of up to want USD on every counter (the
// smallest grant on all) and returns it with each counter's standing. Taking
// a share that step already holds gives that share again.
func (d *dayCounters) hold(ctx context.Context, days []flow.DayLimit, step string, want float64) (float64, []dayShare, error) {
	grant := max(want, 0)
	shares := make([]dayShare, len(days))
	for i, dl := range days {
		err := d.modify(ctx, dl.Key, func(r *dayRecord) bool {
			s := dayShare{spent: r.SpentUSD, held: r.heldBy(step)}
			s.room = max(dl.Limit.GetAllowed()-s.spent-s.held, 0)
			g, ok := r.Held[step]
			if !ok {
				g = min(grant, s.room)
			}
			s.grant = g
			shares[i] = s
			if ok {
				return false
			}
			r.Held[step] = g
			return true
		})
		if err != nil {
			return 0, nil, err
		}
		grant = min(grant, shares[i].grant)
	}
	for i, dl := range days {
		if shares[i].grant <= grant {
			continue
		}
		err := d.modify(ctx, dl.Key, func(r *dayRecord) bool {
			if g, ok := r.Held[step]; ok && g > grant {
				r.Held[step] = grant
				return true
			}
			return false
		})
		if err != nil {
			return 0, nil, err
		}
	}
	return grant, shares, nil
}

// settle releases step's share on every counter and counts what it spent;
// a counter where step holds no share (counted already) is left alone.
func (d *dayCounters) settle(ctx context.Context, keys []string, step string, usd float64, calls int32) error {
	for _, key := range keys {
		err := d.modify(ctx, key, func(r *dayRecord) bool {
			if _, ok := r.Held[step]; !ok {
				return false
			}
			delete(r.Held, step)
			r.SpentUSD += usd
			r.ModelCalls += int64(calls)
			return true
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// applyBudget carries out t's budget effects.
func (e *Engine) applyBudget(ctx context.Context, t *flow.Transition) error {
	fx := &t.BudgetFx
	if e.days == nil || len(fx.Settles)+len(fx.Holds) == 0 {
		return nil
	}
	for _, s := range fx.Settles {
		if err := e.days.settle(ctx, s.Keys, s.Step, s.USD, s.Calls); err != nil {
			return err
		}
	}
	for _, h := range fx.Holds {
		grant, shares, err := e.days.hold(ctx, h.Days, h.Step, h.Want)
		if err != nil {
			return err
		}
		a := h.Allowance
		if a.Usd != nil && *a.Usd <= grant {
			continue // another limit leaves less
		}
		// The day binds: name the counter with the least room.
		b := 0
		for i := range shares {
			if shares[i].room < shares[b].room {
				b = i
			}
		}
		l := proto.Clone(h.Days[b].Limit).(*novav1.BudgetLimit)
		l.Spent, l.Held = shares[b].spent, shares[b].held
		l.Share = grant < shares[b].room && grant >= h.Want
		a.Usd, a.UsdLimit = &grant, l
	}
	return nil
}
