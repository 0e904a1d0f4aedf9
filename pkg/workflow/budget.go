package workflow

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Names of a budget's limits, as written in a definition.
const (
	LimitMaxUSD        = "max_usd"
	LimitMaxUSDPerDay  = "max_usd_per_day"
	LimitMaxModelCalls = "max_model_calls"
)

// BudgetSettings are a deployment's default limits, which a workflow's
// budget field by field overrides; embed them in a service's config. An
// empty variable sets no default.
type BudgetSettings struct {
	// MaxUSD caps what one execution's model calls may cost, in USD, for
	// every workflow that sets no max_usd of its own; unset: no cap.
	MaxUSD string `env:"NOVA_BUDGET_MAX_USD"`
	// MaxUSDPerDay caps what all executions of a workflow (or an AI node)
	// may spend in a UTC day, in USD; unset: no cap.
	MaxUSDPerDay string `env:"NOVA_BUDGET_MAX_USD_PER_DAY"`
	// MaxModelCalls caps the model calls of one execution; unset: no cap.
	MaxModelCalls string `env:"NOVA_BUDGET_MAX_MODEL_CALLS"`
}

// Budget is the settings as a budget (nil when none is set); an error names
// the variable that is not a limit.
func (s BudgetSettings) Budget() (*novav1.Budget, error) {
	b := &novav1.Budget{}
	var errs []error
	for _, f := range []struct {
		env, raw string
		dst      **float64
	}{{"NOVA_BUDGET_MAX_USD", s.MaxUSD, &b.MaxUsd}, {"NOVA_BUDGET_MAX_USD_PER_DAY", s.MaxUSDPerDay, &b.MaxUsdPerDay}} {
		raw := strings.TrimSpace(f.raw)
		if raw == "" {
			continue
		}
		x, err := strconv.ParseFloat(raw, 64)
		if err != nil || !(x >= 0) || math.IsInf(x, 0) {
			errs = append(errs, fmt.Errorf("%s=%q: want an amount of US dollars, 0 or more, such as 0.25", f.env, f.raw))
			continue
		}
		*f.dst = &x
	}
	if raw := strings.TrimSpace(s.MaxModelCalls); raw != "" {
		n, err := strconv.ParseInt(raw, 10, 32)
		if err != nil || n < 0 {
			errs = append(errs, fmt.Errorf("NOVA_BUDGET_MAX_MODEL_CALLS=%q: want a whole number of calls, 0 or more", s.MaxModelCalls))
		} else {
			c := int32(n)
			b.MaxModelCalls = &c
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if b.MaxUsd == nil && b.MaxUsdPerDay == nil && b.MaxModelCalls == nil {
		return nil, nil
	}
	return b, nil
}

// Limit is one spend limit an AI node runs under.
type Limit struct {
	// Name is LimitMaxUSD, LimitMaxUSDPerDay or LimitMaxModelCalls.
	Name string
	// Value is USD, or calls for LimitMaxModelCalls.
	Value float64
	// NodeID is the node whose own limit this is; empty for the workflow's.
	NodeID string
	// Default: the workflow left it unset and the deployment's default applies.
	Default bool
}

// Scope names whose limit it is, as errors show it: `workflow "w"`,
// `node "n"`, with "(deployment default)" when it is the default.
func (l Limit) Scope(workflowName string) string {
	s := fmt.Sprintf("workflow %q", workflowName)
	if l.NodeID != "" {
		s = fmt.Sprintf("node %q", l.NodeID)
	}
	if l.Default {
		s += " (deployment default)"
	}
	return s
}

// Limits are the limits node n of def runs under: the workflow's budget,
// each limit it leaves unset taken from defaults (which may be nil), and the
// node's own budget besides.
func Limits(def *novav1.WorkflowDefinition, n *novav1.Node, defaults *novav1.Budget) []Limit {
	var out []Limit
	add := func(b *novav1.Budget, nodeID string, dflt bool, skip func(name string) bool) {
		if b == nil {
			return
		}
		for _, f := range []struct {
			name string
			set  bool
			v    float64
		}{
			{LimitMaxUSD, b.MaxUsd != nil, b.GetMaxUsd()},
			{LimitMaxUSDPerDay, b.MaxUsdPerDay != nil, b.GetMaxUsdPerDay()},
			{LimitMaxModelCalls, b.MaxModelCalls != nil, float64(b.GetMaxModelCalls())},
		} {
			if f.set && (skip == nil || !skip(f.name)) {
				out = append(out, Limit{Name: f.name, Value: f.v, NodeID: nodeID, Default: dflt})
			}
		}
	}
	own := def.GetBudget()
	add(own, "", false, nil)
	add(defaults, "", true, func(name string) bool { // the workflow's own wins
		if own == nil {
			return false
		}
		switch name {
		case LimitMaxUSD:
			return own.MaxUsd != nil
		case LimitMaxUSDPerDay:
			return own.MaxUsdPerDay != nil
		default:
			return own.MaxModelCalls != nil
		}
	})
	add(n.GetBudget(), n.GetId(), false, nil)
	return out
}
