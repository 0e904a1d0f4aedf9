package flow

import (
	"encoding/base64"
	"math"
	"regexp"
	"time"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Budgets as the transition applies them: the allowance each model step is
// given, the day shares it is to hold and release, and what it spent. The
// day counters the shares are held in are the shell's (package engine,
// budget.go, says how spend is counted across replicas).

// dayShareParts: a step's first share of max_usd_per_day is this fraction of
// it, so that many steps may run at once before a share has to wait for
// another's unspent rest.
const dayShareParts = 50

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

// DayLimit is a max_usd_per_day a step runs under.
type DayLimit struct {
	Key   string
	Limit *novav1.BudgetLimit
}

// BudgetEffects are what a transition decided about the day counters; the
// engine carries them out before it publishes the transition's events, so a
// command never leaves without its share held.
type BudgetEffects struct {
	Settles []DaySettle
	Holds   []DayHold
}

// DaySettle releases Step's share on the counters Keys and counts what it
// spent.
type DaySettle struct {
	Keys  []string
	Step  string
	USD   float64
	Calls int32
}

// DayHold takes for Step a share of up to Want USD on the counters of Days.
type DayHold struct {
	Step string
	Days []DayLimit
	Want float64
	// Allowance is in the command; its Usd is lowered to the share granted.
	Allowance *novav1.Allowance
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
func (t *Transition) allow(node *novav1.Node, ref *novav1.StepRef) {
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
		t.ln.Ai.HeldDayKeys = append(t.ln.Ai.HeldDayKeys, d.Key)
	}
	t.BudgetFx.Holds = append(t.BudgetFx.Holds, DayHold{Step: ref.StepId, Days: days, Want: want, Allowance: a})
}

// allowance is what node's limits leave: the remainders of max_usd and
// max_model_calls, and the max_usd_per_day limits (days, the smallest
// minDay) whose counters a step holds a share of. nil when no limit applies.
func (t *Transition) allowance(node *novav1.Node) (a *novav1.Allowance, days []DayLimit, minDay float64) {
	limits := workflow.Limits(t.st.Definition, node, t.cfg.Budget)
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
			days = append(days, DayLimit{Key: DayKey(name, l.NodeID, bl.Day), Limit: bl})
			minDay = min(minDay, l.Value)
		}
	}
	return a, days, minDay
}

// account counts a step's model calls against the execution and the node,
// and releases the day shares the step held, counting them there too.
func (t *Transition) account(node *novav1.Node, ref *novav1.StepRef, calls []*novav1.ModelCall) {
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
		t.BudgetFx.Settles = append(t.BudgetFx.Settles, DaySettle{Keys: ai.HeldDayKeys, Step: ref.GetStepId(), USD: usd, Calls: n})
		ai.HeldDayKeys = nil
	}
}

// ReleaseHold frees the pending step's day shares when the execution ends
// without its result (a dead letter).
func (t *Transition) ReleaseHold() {
	if ai := t.ln.Ai; ai != nil && len(ai.HeldDayKeys) > 0 {
		t.BudgetFx.Settles = append(t.BudgetFx.Settles, DaySettle{Keys: ai.HeldDayKeys, Step: t.ln.PendingStepId})
		ai.HeldDayKeys = nil
	}
}

// budgetStopped handles a step whose agent refused a model call for want of
// budget: a step that only lacked a large enough share of max_usd_per_day is
// issued again with a larger one; otherwise the node fails with
// budget_exceeded. It reports whether the outcome was such a refusal.
func (t *Transition) budgetStopped(node *novav1.Node, outcome *novav1.AgentOutcome) bool {
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
