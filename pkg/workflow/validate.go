package workflow

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ValidateOptions are the deployment-dependent parts of validation.
type ValidateOptions struct {
	// AllowPrompt accepts AI nodes (nodes with a prompt). A deployment without
	// the code-generation pipeline leaves it false so such workflows fail
	// before they start rather than halfway through.
	AllowPrompt bool
}

// Validate checks that def is a runnable graph and returns a *ValidationError
// listing every problem found, or nil.
func Validate(def *novav1.WorkflowDefinition, opts ValidateOptions) error {
	if def == nil {
		return &ValidationError{Problems: []Problem{{Message: "workflow definition is missing"}}}
	}
	v := &validator{def: def, opts: opts, byID: map[string]*novav1.Node{}}
	v.workflow()
	v.nodes()
	v.edges()
	v.reachability()
	if len(v.problems) > 0 {
		return &ValidationError{Workflow: def.GetName(), Problems: v.problems}
	}
	return nil
}

type validator struct {
	def      *novav1.WorkflowDefinition
	opts     ValidateOptions
	problems []Problem

	byID   map[string]*novav1.Node
	order  []*novav1.Node // unique nodes with an id, in definition order
	starts []*novav1.Node
	// out holds the indexes of edges whose both ends exist, per source node.
	out map[string][]int
}

func (v *validator) add(nodeID, field, format string, args ...any) {
	v.problems = append(v.problems, Problem{NodeID: nodeID, Field: field, Message: fmt.Sprintf(format, args...)})
}

func (v *validator) workflow() {
	if strings.TrimSpace(v.def.GetName()) == "" {
		v.add("", "name", "is required")
	}
	if t := v.def.GetTimeoutSeconds(); !(t >= 0) { // also catches NaN
		v.add("", "timeout", "must not be negative, got %g", t)
	}
	if !validCacheValidate(v.def.GetCacheValidate()) {
		v.add("", "cache_validate", "must be rules or model, got %q", v.def.GetCacheValidate())
	}
	v.budget("", v.def.GetBudget())
	v.retry("", v.def.GetRetry())
	v.schedules()
	if len(v.def.GetNodes()) == 0 {
		v.add("", "nodes", "at least one node is required: a start node, the work, and an end node")
	}
}

func (v *validator) nodes() {
	ends := 0
	for i, n := range v.def.GetNodes() {
		id := n.GetId()
		if strings.TrimSpace(id) == "" {
			v.add("", fmt.Sprintf("nodes[%d].id", i), "is required")
			continue
		}
		if _, dup := v.byID[id]; dup {
			v.add(id, "id", "duplicate node id (nodes[%d]); node ids must be unique", i)
			continue
		}
		v.byID[id] = n
		v.order = append(v.order, n)
		v.node(n)
		switch n.GetType() {
		case novav1.NodeType_NODE_TYPE_START:
			v.starts = append(v.starts, n)
		case novav1.NodeType_NODE_TYPE_END:
			ends++
		}
	}
	if len(v.def.GetNodes()) == 0 {
		return // already reported; "no start node" would only repeat it
	}
	switch len(v.starts) {
	case 0:
		v.add("", "nodes", "no start node; exactly one node must have type start")
	case 1:
	default:
		v.add("", "nodes", "%d start nodes (%s); exactly one is allowed", len(v.starts), nodeList(v.starts))
	}
	if ends == 0 {
		v.add("", "nodes", "no end node; at least one node must have type end")
	}
}

func (v *validator) node(n *novav1.Node) {
	id := n.GetId()
	hasCode, hasPrompt := strings.TrimSpace(n.GetCode()) != "", strings.TrimSpace(n.GetPrompt()) != ""
	switch t := n.GetType(); t {
	case novav1.NodeType_NODE_TYPE_UNSPECIFIED:
		v.add(id, "type", "is required: %s", nodeTypeList)
	case novav1.NodeType_NODE_TYPE_START, novav1.NodeType_NODE_TYPE_END, novav1.NodeType_NODE_TYPE_WAIT, novav1.NodeType_NODE_TYPE_SLEEP:
		if hasCode || hasPrompt {
			v.add(id, "", "%s node runs nothing, but it has code or a prompt; put the work in an action node", withArticle(t))
		}
	case novav1.NodeType_NODE_TYPE_ACTION, novav1.NodeType_NODE_TYPE_DECISION:
		switch {
		case hasCode && hasPrompt:
			v.add(id, "", "has both code and prompt; a node runs either code as written or a prompt (AI node), not both")
		case !hasCode && !hasPrompt:
			v.add(id, "", "has neither code nor prompt; %s node needs one of them", withArticle(t))
		}
	default:
		v.add(id, "type", "unknown node type %d", int32(t))
	}
	if hasPrompt && !v.opts.AllowPrompt {
		v.add(id, "prompt", "AI (prompt) nodes need a model, and this deployment has none: give the AI agents OPENAI_API_KEY or OPENAI_BASE_URL and set NOVA_ALLOW_PROMPT=true on the graph engine")
	}
	if t := n.GetTimeoutSeconds(); !(t >= 0) {
		v.add(id, "timeout", "must not be negative, got %g", t)
	}
	if n.GetMaxVisits() < 0 {
		v.add(id, "max_visits", "must not be negative, got %d", n.GetMaxVisits())
	}
	switch n.GetLanguage() {
	case "", "python", "javascript":
	default:
		v.add(id, "language", "must be python or javascript, got %q", n.GetLanguage())
	}
	if !validCacheValidate(n.GetCacheValidate()) {
		v.add(id, "cache_validate", "must be rules or model, got %q", n.GetCacheValidate())
	}
	v.budget(id, n.GetBudget())
	v.waitFields(n)
	v.sleepFields(n)
	if r := n.GetRetry(); r != nil {
		switch t := n.GetType(); {
		case t == novav1.NodeType_NODE_TYPE_ACTION, t == novav1.NodeType_NODE_TYPE_DECISION && hasCode:
		case t == novav1.NodeType_NODE_TYPE_DECISION:
			v.add(id, "retry", "a decision node without code has nothing to retry; retry applies to action nodes and to decision nodes with code")
		case t != novav1.NodeType_NODE_TYPE_UNSPECIFIED:
			v.add(id, "retry", "%s node runs no code, so it has nothing to retry; retry applies to action nodes and to decision nodes with code", withArticle(t))
		}
		v.retry(id, r)
	}
}

// waitFields checks a wait node's signal and schema, and that no other node
// has them.
func (v *validator) waitFields(n *novav1.Node) {
	id, t := n.GetId(), n.GetType()
	if t != novav1.NodeType_NODE_TYPE_WAIT {
		if t == novav1.NodeType_NODE_TYPE_UNSPECIFIED {
			return
		}
		for _, f := range []struct{ name, value string }{{"signal", n.GetSignal()}, {"schema", n.GetSchema()}, {"decide_on", n.GetDecideOn()}} {
			if f.value != "" {
				v.add(id, f.name, "only a wait node has %s; this is %s node", f.name, withArticle(t))
			}
		}
		return
	}
	switch sig := n.GetSignal(); {
	case sig == "":
		v.add(id, "signal", "is required: the name of the signal that resumes the node, e.g. approval")
	case !ValidToken(sig):
		v.add(id, "signal", "%q is not a single token; use letters, digits, '-' and '_' only (the name is part of a URL and of a subject)", sig)
	}
	if sc := n.GetSchema(); sc != "" {
		if _, err := CompileSchema(sc); err != nil {
			v.add(id, "schema", "%v", err)
		}
	}
}

// sleepFields checks that a sleep node sleeps for a duration or until a
// time, and that no other node has them.
func (v *validator) sleepFields(n *novav1.Node) {
	id, t := n.GetId(), n.GetType()
	d, until := n.GetDurationSeconds(), n.GetUntil()
	if t != novav1.NodeType_NODE_TYPE_SLEEP {
		if t == novav1.NodeType_NODE_TYPE_UNSPECIFIED {
			return
		}
		if d != 0 {
			v.add(id, "duration", "only a sleep node has duration; this is %s node", withArticle(t))
		}
		if until != "" {
			v.add(id, "until", "only a sleep node has until; this is %s node", withArticle(t))
		}
		return
	}
	switch {
	case d != 0 && until != "":
		v.add(id, "", "has both duration and until; a sleep node sleeps for a duration or until a time, not both")
	case until != "":
		if strings.TrimSpace(until) == "" {
			v.add(id, "until", "must name a context key, got %q", until)
		}
	case d == 0:
		v.add(id, "", "a sleep node needs duration (e.g. 90s or 2h) or until (a context key holding an RFC 3339 time)")
	case !(d > 0) || math.IsInf(d, 0):
		v.add(id, "duration", "must be more than 0 seconds, got %g", d)
	}
}

// retry checks a retry policy's numbers and failure kinds; its problems are
// reported on the retry field and name the setting.
func (v *validator) retry(nodeID string, r *novav1.RetryPolicy) {
	if r == nil {
		return
	}
	if m := r.GetMaxAttempts(); m < 1 {
		msg := "max_attempts must be at least 1 (1 means no retry)"
		if m < 0 {
			msg += fmt.Sprintf(", got %d", m)
		}
		v.add(nodeID, "retry", "%s", msg)
	}
	ii := r.GetInitialIntervalSeconds()
	if !(ii >= 0) || math.IsInf(ii, 0) {
		v.add(nodeID, "retry", "initial_interval must be 0 or more seconds, got %g", ii)
	}
	if bc := r.GetBackoffCoefficient(); !(bc == 0 || bc >= 1) || math.IsInf(bc, 0) {
		v.add(nodeID, "retry", "backoff_coefficient must be 0 (meaning %d) or at least 1, got %g", DefaultBackoffCoefficient, bc)
	}
	switch mi := r.GetMaxIntervalSeconds(); {
	case !(mi >= 0) || math.IsInf(mi, 0):
		v.add(nodeID, "retry", "max_interval must be 0 (no limit) or more seconds, got %g", mi)
	case mi > 0 && ii > mi:
		v.add(nodeID, "retry", "max_interval (%gs) must be 0 (no limit) or at least initial_interval (%gs)", mi, ii)
	}
	for i, k := range r.GetOn() {
		if slices.Contains(retryKinds, k) {
			continue
		}
		msg := fmt.Sprintf("on[%d]: unknown failure kind %q", i, k)
		if s := suggest(k, retryKinds); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		v.add(nodeID, "retry", "%s (use error, timeout or sandbox_fault)", msg)
	}
}

// schedules checks each schedule of the workflow; problems are reported on
// "schedules[i]" and name the setting.
func (v *validator) schedules() {
	ids := map[string]int{}
	for i, s := range v.def.GetSchedules() {
		field := fmt.Sprintf("schedules[%d]", i)
		if s == nil {
			v.add("", field, "is empty; a schedule needs cron or every")
			continue
		}
		switch id := s.GetId(); {
		case id == "":
			v.add("", field, "id is required")
		case !ValidToken(id):
			v.add("", field, "id %q is not a single token; use letters, digits, '-' and '_' only", id)
		default:
			if j, dup := ids[id]; dup {
				v.add("", field, "id %q is also the id of schedules[%d]; schedule ids must be unique (a schedule without id takes its position as id)", id, j)
			} else {
				ids[id] = i
			}
		}
		hasCron, every := s.GetCron() != "", s.GetEverySeconds()
		switch {
		case hasCron && every != 0:
			v.add("", field, "has both cron and every; a schedule uses one of them")
		case hasCron:
			if _, err := parseCron(s.GetCron()); err != nil {
				v.add("", field, "%v", err)
			} else if sched, _, err := CronSchedule(s); err == nil && sched.Next(time.Now()).IsZero() {
				v.add("", field, "cron %q matches no date in the next five years", s.GetCron())
			}
		case every == 0:
			v.add("", field, "needs cron (e.g. \"0 9 * * 1-5\") or every (e.g. 1h)")
		case !(every >= MinScheduleEvery.Seconds()) || math.IsInf(every, 0):
			v.add("", field, "every must be at least %s, got %gs", MinScheduleEvery, every)
		}
		if tz := s.GetTimezone(); tz != "" {
			if !hasCron {
				v.add("", field, "timezone %q applies to cron only; every runs at a fixed interval", tz)
			} else if _, err := scheduleLocation(tz); err != nil {
				v.add("", field, "%v", err)
			}
		}
		if c := s.GetCatchup(); c != "" && !slices.Contains(catchups, c) {
			msg := fmt.Sprintf("catchup must be none, latest or all, got %q", c)
			if sug := suggest(c, catchups); sug != "" {
				msg += fmt.Sprintf("; did you mean %q?", sug)
			}
			v.add("", field, "%s", msg)
		}
		if c := s.GetContext(); c != nil {
			if _, err := jsonvalue.FromProto(c); err != nil {
				v.add("", field, "context must be a JSON object: %v", err)
			}
		}
	}
}

// budget reports negative limits (and amounts that are not numbers, which a
// definition built in code rather than parsed may hold).
func (v *validator) budget(nodeID string, b *novav1.Budget) {
	if b == nil {
		return
	}
	for _, f := range []struct {
		name string
		usd  *float64
	}{{"max_usd", b.MaxUsd}, {"max_usd_per_day", b.MaxUsdPerDay}} {
		if f.usd == nil {
			continue
		}
		if x := *f.usd; !(x >= 0) || math.IsInf(x, 0) {
			v.add(nodeID, "budget."+f.name, "must be a number of US dollars, 0 or more, got %g", x)
		}
	}
	if b.MaxModelCalls != nil && *b.MaxModelCalls < 0 {
		v.add(nodeID, "budget.max_model_calls", "must be a whole number of calls, 0 or more, got %d", *b.MaxModelCalls)
	}
}

func (v *validator) edges() {
	v.out = map[string][]int{}
	for i, e := range v.def.GetEdges() {
		field := fmt.Sprintf("edges[%d]", i)
		ok := true
		for _, end := range []struct{ name, id, verb string }{{"from", e.GetFrom(), "starts at"}, {"to", e.GetTo(), "leads to"}} {
			switch {
			case end.id == "":
				v.add("", field+"."+end.name, "is required (edge %s -> %s)", orQ(e.GetFrom()), orQ(e.GetTo()))
				ok = false
			case v.byID[end.id] == nil:
				v.add("", field+"."+end.name, "edge %s -> %s %s unknown node %q", e.GetFrom(), e.GetTo(), end.verb, end.id)
				ok = false
			}
		}
		if ok {
			v.out[e.GetFrom()] = append(v.out[e.GetFrom()], i)
		}
	}

	edges := v.def.GetEdges()
	for _, n := range v.order {
		id, out := n.GetId(), v.out[n.GetId()]
		switch t := n.GetType(); t {
		case novav1.NodeType_NODE_TYPE_START, novav1.NodeType_NODE_TYPE_ACTION, novav1.NodeType_NODE_TYPE_SLEEP:
			switch {
			case len(out) == 0:
				v.add(id, "", "has no outgoing edge; %s node needs exactly one", withArticle(t))
			case len(out) > 1:
				v.add(id, "", "has %d outgoing edges (to %s); %s node has exactly one, use a decision node to branch",
					len(out), targets(edges, out), withArticle(t))
			}
			for _, i := range out {
				switch c := edges[i].GetCondition(); c {
				case "":
				case TimeoutCondition:
					v.add(id, fmt.Sprintf("edges[%d].condition", i),
						"edge %s -> %s has condition %q; only a wait node with a timeout has a timeout edge", id, edges[i].GetTo(), c)
				default:
					v.add(id, fmt.Sprintf("edges[%d].condition", i),
						"edge %s -> %s has condition %q; only edges leaving a decision or wait node have conditions", id, edges[i].GetTo(), c)
				}
			}
		case novav1.NodeType_NODE_TYPE_WAIT:
			v.waitEdges(n, out)
		case novav1.NodeType_NODE_TYPE_DECISION:
			if len(out) == 0 {
				v.add(id, "", "decision node has no outgoing edges; add one edge per branch_decision value, each with a condition")
			}
			seen := map[string]string{}
			for _, i := range out {
				c, to := edges[i].GetCondition(), edges[i].GetTo()
				if c == "" {
					v.add(id, fmt.Sprintf("edges[%d].condition", i),
						"edge %s -> %s has no condition; every edge leaving a decision node needs one", id, to)
					continue
				}
				if prev, dup := seen[c]; dup {
					v.add(id, fmt.Sprintf("edges[%d].condition", i),
						"condition %q is used by more than one edge (to %s and to %s)", c, prev, to)
					continue
				}
				seen[c] = to
			}
		case novav1.NodeType_NODE_TYPE_END:
			if len(out) > 0 {
				v.add(id, "", "end node has outgoing edges (to %s); an end node finishes the execution", targets(edges, out))
			}
		}
	}
}

// waitEdges checks the edges leaving wait node n: without decide_on one
// edge without condition, taken when the signal comes; with decide_on one
// edge per value of that payload field; and at most one timeout edge, when
// the node has a timeout.
func (v *validator) waitEdges(n *novav1.Node, out []int) {
	id, decideOn, edges := n.GetId(), n.GetDecideOn(), v.def.GetEdges()
	hasTimeout := n.GetTimeoutSeconds() > 0
	var plain []int
	timeoutTo := ""
	seen := map[string]string{}
	for _, i := range out {
		c, to := edges[i].GetCondition(), edges[i].GetTo()
		field := fmt.Sprintf("edges[%d].condition", i)
		switch {
		case c == TimeoutCondition && !hasTimeout:
			v.add(id, field, "edge %s -> %s has condition %q, but wait node %s has no timeout; set its timeout (e.g. 72h) or remove the edge", id, to, c, id)
		case c == TimeoutCondition && timeoutTo != "":
			v.add(id, field, "condition %q is used by more than one edge (to %s and to %s); a wait node has one timeout edge", c, timeoutTo, to)
		case c == TimeoutCondition:
			timeoutTo = to
		case decideOn == "" && c != "":
			v.add(id, field, "edge %s -> %s has condition %q; a wait node without decide_on has one edge without condition (and may have a %q edge); set decide_on to choose the edge by a payload field", id, to, c, TimeoutCondition)
		case decideOn == "":
			plain = append(plain, i)
		case c == "":
			v.add(id, field, "edge %s -> %s has no condition; with decide_on %q every edge leaving the wait node needs the value of payload field %q that selects it", id, to, decideOn, decideOn)
		default:
			if prev, dup := seen[c]; dup {
				v.add(id, field, "condition %q is used by more than one edge (to %s and to %s)", c, prev, to)
				continue
			}
			seen[c] = to
			plain = append(plain, i)
		}
	}
	switch {
	case decideOn != "" && len(plain) == 0:
		v.add(id, "", "wait node deciding on %q has no outgoing edge for a value; add one edge per value of payload field %q, each with that value as its condition", decideOn, decideOn)
	case decideOn != "":
	case len(plain) == 0:
		v.add(id, "", "has no outgoing edge without condition; a wait node needs exactly one, taken when its signal comes")
	case len(plain) > 1:
		v.add(id, "", "has %d outgoing edges without condition (to %s); a wait node without decide_on has exactly one, set decide_on to branch on the signal's payload", len(plain), targets(edges, plain))
	}
}

// reachability reports nodes no path from the start node leads to: they would
// never run, which is almost always a missing or misspelt edge.
func (v *validator) reachability() {
	if len(v.starts) != 1 {
		return // no single place to start from; already reported
	}
	start := v.starts[0].GetId()
	seen := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		for _, i := range v.out[id] {
			if to := v.def.GetEdges()[i].GetTo(); !seen[to] {
				seen[to] = true
				queue = append(queue, to)
			}
		}
	}
	for _, n := range v.order {
		if !seen[n.GetId()] {
			v.add(n.GetId(), "", "unreachable: no path leads to it from start node %q", start)
		}
	}
}

func nodeList(nodes []*novav1.Node) string {
	ids := make([]string, len(nodes))
	for i, n := range nodes {
		ids[i] = n.GetId()
	}
	return strings.Join(ids, ", ")
}

func targets(edges []*novav1.Edge, idx []int) string {
	to := make([]string, len(idx))
	for i, j := range idx {
		to[i] = edges[j].GetTo()
	}
	return strings.Join(to, ", ")
}

// withArticle gives "a start", "an action", ...
func withArticle(t novav1.NodeType) string {
	name := TypeName(t)
	if strings.ContainsRune("aeiou", rune(name[0])) {
		return "an " + name
	}
	return "a " + name
}

func orQ(id string) string {
	if id == "" {
		return "?"
	}
	return id
}
