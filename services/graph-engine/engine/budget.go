package engine

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
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
// allows. A share is at first 1/dayShareParts of max_usd_per_day (never more
// than the day has left, nor than the other limits leave); when a call needs
// more, the agent says so and the step is issued again with a share that
// holds it (at least twice as large), until the share is all the day has
// left. A call that does
// not fit a limit's whole remainder stops the node with budget_exceeded.

// BucketBudget holds the day counters of max_usd_per_day.
const BucketBudget = "nova_budget"

// budgetTTL keeps a day's counter a day after the day ends (a KV entry
// expires this long after its last update), for the steps that started
// before midnight and end after it.
const budgetTTL = 48 * time.Hour

// dayShareParts: a step's first share of max_usd_per_day is this fraction of
// it, so that many steps may run at once before a share has to wait for
// another's unspent rest.
const dayShareParts = 50

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
// spend on a UTC day (2006-01-02): "<workflow>.<day>" or
// "<workflow>.<node>.<day>". A name with characters a key cannot hold is
// written "=" and its base64url.
func DayKey(workflowName, nodeID, day string) string {
	key := keyToken(workflowName)
	if nodeID != "" {
		key += "." + keyToken(nodeID)
	}
	return key + "." + day
}

var plainToken = regexp.MustCompile(`^[-_a-zA-Z0-9]{1,100}$`)

func keyToken(s string) string {
	if plainToken.MatchString(s) {
		return s
	}
	return "=" + base64.RawURLEncoding.EncodeToString([]byte(s))
}

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

// dayLimit is a max_usd_per_day a step runs under.
type dayLimit struct {
	key   string
	limit *novav1.BudgetLimit
}

// dayShare is where one day counter stood when a step's share was taken.
type dayShare struct {
	spent, held, room, grant float64
}

// hold takes for step a share of up to want USD on every counter (the
// smallest grant on all) and returns it with each counter's standing. Taking
// a share that step already holds gives that share again.
func (d *dayCounters) hold(ctx context.Context, days []dayLimit, step string, want float64) (float64, []dayShare, error) {
	grant := max(want, 0)
	shares := make([]dayShare, len(days))
	for i, dl := range days {
		err := d.modify(ctx, dl.key, func(r *dayRecord) bool {
			s := dayShare{spent: r.SpentUSD, held: r.heldBy(step)}
			s.room = max(dl.limit.GetAllowed()-s.spent-s.held, 0)
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
		err := d.modify(ctx, dl.key, func(r *dayRecord) bool {
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

// budgetEffects are what a transition decided about the day counters; the
// engine carries them out before it publishes the transition's events, so a
// command never leaves without its share held.
type budgetEffects struct {
	settles []daySettle
	holds   []dayHold
}

type daySettle struct {
	keys  []string
	step  string
	usd   float64
	calls int32
}

type dayHold struct {
	step string
	days []dayLimit
	want float64
	// allowance is in the command; its usd is lowered to the share granted.
	allowance *novav1.Allowance
}

// applyBudget carries out t's budget effects.
func (e *Engine) applyBudget(ctx context.Context, t *transition) error {
	fx := &t.budgetFx
	if e.days == nil || len(fx.settles)+len(fx.holds) == 0 {
		return nil
	}
	for _, s := range fx.settles {
		if err := e.days.settle(ctx, s.keys, s.step, s.usd, s.calls); err != nil {
			return err
		}
	}
	for _, h := range fx.holds {
		grant, shares, err := e.days.hold(ctx, h.days, h.step, h.want)
		if err != nil {
			return err
		}
		a := h.allowance
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
		l := proto.Clone(h.days[b].limit).(*novav1.BudgetLimit)
		l.Spent, l.Held = shares[b].spent, shares[b].held
		l.Share = grant < shares[b].room && grant >= h.want
		a.Usd, a.UsdLimit = &grant, l
	}
	return nil
}

// budgetPhases are the phases whose agent may call a model.
func budgetPhase(phase string) bool {
	switch phase {
	case phaseInputAnalysis, phaseAnalysisGenerate, phaseGenerate, phaseOutputValidate:
		return true
	}
	return false
}

// allow gives the step ref of node the allowance its budgets leave, and
// decides the day shares it must hold.
func (t *transition) allow(node *novav1.Node, ref *novav1.StepRef) {
	a, days, minDay := t.allowance(node)
	if a == nil {
		return
	}
	ref.Allowance = a
	if len(days) == 0 {
		return
	}
	want := t.ln.Ai.GetDayShareUsd()
	if want <= 0 {
		want = minDay / dayShareParts
	}
	if a.Usd != nil {
		want = min(want, a.GetUsd())
	}
	t.ln.Ai.HeldDayKeys = nil
	for _, d := range days {
		t.ln.Ai.HeldDayKeys = append(t.ln.Ai.HeldDayKeys, d.key)
	}
	t.budgetFx.holds = append(t.budgetFx.holds, dayHold{step: ref.StepId, days: days, want: want, allowance: a})
}

// allowance is what node's limits leave: the remainders of max_usd and
// max_model_calls, and the max_usd_per_day limits (days, the smallest
// minDay) whose counters a step holds a share of. nil when no limit applies.
func (t *transition) allowance(node *novav1.Node) (a *novav1.Allowance, days []dayLimit, minDay float64) {
	limits := workflow.Limits(t.st.Definition, node, t.e.cfg.Budget)
	if len(limits) == 0 {
		return nil, nil, 0
	}
	name := t.st.Definition.GetName()
	ns := t.nodeState(node.Id)
	a = &novav1.Allowance{}
	minDay = math.Inf(1)
	for _, l := range limits {
		spend := t.st.GetSpend()
		if l.NodeID != "" {
			spend = ns.GetSpend()
		}
		bl := &novav1.BudgetLimit{Name: l.Name, Scope: l.Scope(name), Allowed: l.Value}
		switch l.Name {
		case workflow.LimitMaxUSD:
			bl.Spent = spend.GetUsd()
			if left := max(l.Value-bl.Spent, 0); a.Usd == nil || left < a.GetUsd() {
				a.Usd, a.UsdLimit = &left, bl
			}
		case workflow.LimitMaxModelCalls:
			bl.Spent = float64(spend.GetModelCalls())
			if left := int32(max(l.Value-bl.Spent, 0)); a.ModelCalls == nil || left < a.GetModelCalls() {
				a.ModelCalls, a.CallsLimit = &left, bl
			}
		case workflow.LimitMaxUSDPerDay:
			bl.Day = t.now.UTC().Format(time.DateOnly)
			days = append(days, dayLimit{key: DayKey(name, l.NodeID, bl.Day), limit: bl})
			minDay = min(minDay, l.Value)
		}
	}
	return a, days, minDay
}

// account counts a step's model calls against the execution and the node,
// and releases the day shares the step held, counting them there too.
func (t *transition) account(node *novav1.Node, ref *novav1.StepRef, calls []*novav1.ModelCall) {
	var usd float64
	for _, c := range calls {
		usd += c.GetCostUsd()
	}
	n := int32(len(calls))
	if n > 0 {
		for _, s := range []**novav1.Spend{&t.st.Spend, &t.nodeState(node.Id).Spend} {
			if *s == nil {
				*s = &novav1.Spend{}
			}
			(*s).Usd += usd
			(*s).ModelCalls += n
		}
	}
	if ai := t.ln.Ai; ai != nil && len(ai.HeldDayKeys) > 0 {
		t.budgetFx.settles = append(t.budgetFx.settles, daySettle{keys: ai.HeldDayKeys, step: ref.GetStepId(), usd: usd, calls: n})
		ai.HeldDayKeys = nil
	}
}

// releaseHold frees the pending step's day shares when the execution ends
// without its result (a dead letter).
func (t *transition) releaseHold() {
	if ai := t.ln.Ai; ai != nil && len(ai.HeldDayKeys) > 0 {
		t.budgetFx.settles = append(t.budgetFx.settles, daySettle{keys: ai.HeldDayKeys, step: t.ln.PendingStepId})
		ai.HeldDayKeys = nil
	}
}

// budgetStopped handles a step whose agent refused a model call for want of
// budget: a step that only lacked a large enough share of max_usd_per_day is
// issued again with a larger one; otherwise the node fails with
// budget_exceeded. It reports whether the outcome was such a refusal.
func (t *transition) budgetStopped(node *novav1.Node, outcome *novav1.AgentOutcome) bool {
	be := outcome.GetBudgetExceeded()
	if be == nil {
		return false
	}
	ai := t.ln.Ai
	if l := be.GetLimit(); l.GetShare() && l.GetName() == workflow.LimitMaxUSDPerDay {
		// What the step spent and the refused call need, and at least
		// twice the share it had, so that a step of many calls gets there
		// in few rounds.
		ai.DayShareUsd = max(2*be.GetGiven(), be.GetStepSpent()+be.GetNeeded())
		t.aiNext(node, ai.Phase)
		return true
	}
	t.budgetExceeded = be
	t.nodeFailed(node, t.nodeState(node.Id), outcome.GetError(), nil)
	return true
}

// budgetMetadata is ai_metadata.budget_exceeded.
func budgetMetadata(be *novav1.BudgetExceeded) map[string]any {
	l := be.GetLimit()
	m := map[string]any{"limit": l.GetName(), "scope": l.GetScope(), "allowed": l.GetAllowed(),
		"spent": l.GetSpent() + be.GetStepSpent(), "agent": be.GetAgent(), "model": be.GetModel()}
	if l.GetName() != workflow.LimitMaxModelCalls {
		m["needed_usd"] = be.GetNeeded()
	}
	if l.GetDay() != "" {
		m["day"] = l.GetDay()
		m["held_by_running_steps"] = l.GetHeld()
	}
	return m
}
