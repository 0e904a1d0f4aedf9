package workflow

import (
	"fmt"
	"maps"
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
	for _, n := range v.order {
		v.boundaries(n)
	}
	v.edges()
	v.reachability()
	if len(v.problems) == 0 {
		v.stuckJoins()
	}
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
	// out holds the indexes of edges whose both ends exist, per source node;
	// in holds them per target node.
	out map[string][]int
	in  map[string][]int
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
	if k := v.def.GetSignals(); k != nil {
		if k.Keep < 0 || k.Keep > MaxSignalKeep {
			v.add("", "signals.keep", "must be from 0 (the default, %d) to %d, got %d", DefaultSignalKeep, MaxSignalKeep, k.Keep)
		}
		if k.KeepForSeconds < 0 {
			v.add("", "signals.keep_for", "must not be negative, got %gs", k.KeepForSeconds)
		}
	}
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
	k := KindOf(n.GetType())
	switch {
	case n.GetType() == novav1.NodeType_NODE_TYPE_UNSPECIFIED:
		v.add(id, "type", "is required: %s", nodeTypeList())
	case k == nil:
		v.add(id, "type", "unknown node type %d", int32(n.GetType()))
	case k.Runs == RunsNothing:
		if hasCode || hasPrompt {
			v.add(id, "", "%s node runs nothing, but it has code or a prompt; put the work in an action node", withArticle(k.Type))
		}
	case k.Runs == RunsCode:
		switch {
		case hasCode && hasPrompt:
			v.add(id, "", "has both code and prompt; a node runs either code as written or a prompt (AI node), not both")
		case !hasCode && !hasPrompt:
			v.add(id, "", "has neither code nor prompt; %s node needs one of them", withArticle(k.Type))
		}
	case k.Runs == RunsWorkflow:
		if hasCode || hasPrompt {
			v.add(id, "", "a workflow node runs the workflow it names, but it has code or a prompt; put the work in an action node")
		}
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
	v.foreignFields(n)
	if l := n.GetLock(); l != "" && !ValidToken(l) {
		v.add(id, "lock", "%q is not a lock name: letters, digits, '-' and '_'", l)
	}
	if k != nil && k.Check != nil {
		k.Check(v, n)
	}
	if n.GetType() == novav1.NodeType_NODE_TYPE_MAP && n.GetWorkflow() != "" {
		v.inputKeys(n)
	}
	if r := n.GetRetry(); r != nil {
		switch t := n.GetType(); {
		case t == novav1.NodeType_NODE_TYPE_ACTION, t == novav1.NodeType_NODE_TYPE_DECISION && hasCode:
		case t == novav1.NodeType_NODE_TYPE_DECISION:
			v.add(id, "retry", "a decision node without code has nothing to retry; retry applies to action nodes and to decision nodes with code")
		case t == novav1.NodeType_NODE_TYPE_MAP:
			v.add(id, "retry", "retry applies to action nodes and to decision nodes with code, not to a map node's items; set on_item_failure: collect to run every item whatever fails")
		case t != novav1.NodeType_NODE_TYPE_UNSPECIFIED:
			v.add(id, "retry", "%s node runs no code, so it has nothing to retry; retry applies to action nodes and to decision nodes with code", withArticle(t))
		}
		v.retry(id, r)
	}
}

// waitFields checks a wait node's signal and schema, and that no other node
// has them.
func (v *validator) waitFields(n *novav1.Node) {
	id := n.GetId()
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
	id := n.GetId()
	d, until := n.GetDurationSeconds(), n.GetUntil()
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

// foreignFields reports the fields that only nodes of other types have
// (the kinds table's Fields).
func (v *validator) foreignFields(n *novav1.Node) {
	id, t := n.GetId(), n.GetType()
	if t == novav1.NodeType_NODE_TYPE_UNSPECIFIED {
		return
	}
	seen := map[string]bool{}
	for _, k := range kinds {
		for _, f := range k.Fields {
			if seen[f] || !fieldSet[f](n) {
				continue
			}
			seen[f] = true
			var owners []string
			for _, o := range kinds {
				if slices.Contains(o.Fields, f) {
					owners = append(owners, o.Name)
				}
			}
			if !slices.Contains(owners, TypeName(t)) {
				v.add(id, f, "only %s has %s; this is %s node", ownersText(f, owners), f, withArticle(t))
			}
		}
	}
	if t == novav1.NodeType_NODE_TYPE_MAP && len(n.GetInput()) > 0 && n.GetWorkflow() == "" {
		v.add(id, "input", "map node %q has input but no workflow: input maps the keys a sub-workflow gets, for a map whose body is workflow", id)
	}
	switch {
	case n.GetOutput() == "" || t == novav1.NodeType_NODE_TYPE_MAP:
	case t == novav1.NodeType_NODE_TYPE_WORKFLOW:
		v.add(id, "output", "a workflow node's output maps parent context keys to child context keys, got the single key %q; only a map node's output is one context key", n.GetOutput())
	default:
		v.add(id, "output", "only a map node has output as a context key; this is %s node", withArticle(t))
	}
	switch {
	case len(n.GetOutputKeys()) == 0 || t == novav1.NodeType_NODE_TYPE_WORKFLOW:
	case t == novav1.NodeType_NODE_TYPE_MAP:
		v.add(id, "output", "a map node's output is the context key that gets its results, not a mapping; only a workflow node's output maps keys")
	default:
		v.add(id, "output", "only a workflow node has output as a mapping; this is %s node", withArticle(t))
	}
}

// ownersText names the node types that have field f, as an error says it.
func ownersText(f string, owners []string) string {
	if f == "input" {
		return "a workflow node (or a map over a workflow)"
	}
	// The type named like the field first: "a workflow or map node".
	slices.SortStableFunc(owners, func(a, b string) int {
		switch {
		case a == f:
			return -1
		case b == f:
			return 1
		}
		return 0
	})
	return "a " + strings.Join(owners, " or ") + " node"
}

// joinFields checks a join node's wait and merge.
func (v *validator) joinFields(n *novav1.Node) {
	id := n.GetId()
	switch w := n.GetWait(); w {
	case "", JoinWaitAll, JoinWaitAny:
	default:
		if _, ok := branchCount(w); !ok {
			v.add(id, "wait", "must be %s, got %q", joinWaitList, w)
		}
	}
	if m := n.GetMerge(); m != "" && !slices.Contains(mergeModes, m) {
		v.add(id, "merge", "must be %s, got %q", mergeList, m)
	}
	if n.GetCancelRemaining() && JoinWait(n) == 0 {
		v.add(id, "cancel_remaining", "join node %q waits for all its branches, so none remains to cancel; cancel_remaining needs wait: any or a number", id)
	}
}

// mapFields checks a map node: the list it runs over, its one body, how
// many items run at once, what a failing item does and where the results
// go.
func (v *validator) mapFields(n *novav1.Node) {
	id := n.GetId()
	if strings.TrimSpace(n.GetItems()) == "" {
		v.add(id, "items", "map node %q needs items: the context key of the list it runs over", id)
	}
	var bodies []string
	for _, b := range []struct{ name, value string }{{"code", n.GetCode()}, {"prompt", n.GetPrompt()}, {"workflow", n.GetWorkflow()}} {
		if strings.TrimSpace(b.value) != "" {
			bodies = append(bodies, b.name)
		}
	}
	switch len(bodies) {
	case 0:
		v.add(id, "", "map node %q has no body; give it code, prompt or workflow: what runs for each item", id)
	case 1:
	default:
		v.add(id, "", "map node %q has %s; a map node runs one body for each item: code, prompt or workflow, not several", id, both(bodies))
	}
	if c := n.GetConcurrency(); c < 0 || c > MaxMapConcurrency {
		v.add(id, "concurrency", "%s, got %d", concurrencyRule, c)
	}
	if f := n.GetOnItemFailure(); f != "" && !slices.Contains(onItemFailures, f) {
		v.add(id, "on_item_failure", "must be %s, got %q", onItemFailureList, f)
	}
	if o := n.GetOutput(); o != "" && strings.TrimSpace(o) == "" {
		v.add(id, "output", "must name a context key (default %s), got %q", DefaultMapOutput, o)
	}
	if w := n.GetWait(); w != "" && w != MapNoWait {
		v.add(id, "wait", "a map node's wait is false (the line goes on while its items run) or left out, got %q", w)
	}
	if c := n.GetCompleteWhen(); c != nil {
		switch {
		case c.Succeeded < 0 || c.Failed < 0:
			v.add(id, "complete_when", "counts items: succeeded or failed must be at least 1, got succeeded %d, failed %d", c.Succeeded, c.Failed)
		case (c.Succeeded > 0) == (c.Failed > 0):
			v.add(id, "complete_when", "map node %q: complete_when takes one of succeeded or failed (a number of items), got %s", id,
				map[bool]string{true: "both", false: "neither"}[c.Succeeded > 0])
		case c.Failed > 0 && n.GetOnItemFailure() != OnItemFailureCollect:
			v.add(id, "complete_when", "map node %q: complete_when failed needs on_item_failure: collect (else the first failed item fails the map)", id)
		}
	}
	if wf := n.GetWorkflow(); wf != "" && strings.TrimSpace(wf) == "" {
		v.add(id, "workflow", "must name a registered workflow, got %q", wf)
	}
	v.maxDepth(n)
}

// workflowFields checks a workflow node: the workflow it runs and the keys
// its input and output map.
func (v *validator) workflowFields(n *novav1.Node) {
	id := n.GetId()
	if strings.TrimSpace(n.GetWorkflow()) == "" {
		v.add(id, "workflow", "workflow node %q needs workflow: the name of the registered workflow it runs", id)
	}
	v.maxDepth(n)
	v.inputKeys(n)
	for _, f := range []struct {
		name, to, from string
		keys           map[string]string
	}{{"output", "parent", "child", n.GetOutputKeys()}} {
		for _, k := range slices.Sorted(maps.Keys(f.keys)) {
			if strings.TrimSpace(k) == "" || strings.TrimSpace(f.keys[k]) == "" {
				v.add(id, f.name, "maps %s key %q to %s key %q; %s maps %s context keys to %s context keys, and neither may be empty",
					f.to, k, f.from, f.keys[k], f.name, f.to, f.from)
			}
		}
	}
}

// boundaries checks a node's boundary events (on): each a signal or an
// after, and a goto naming a node to go on at.
func (v *validator) boundaries(n *novav1.Node) {
	for i, b := range n.GetOn() {
		field := fmt.Sprintf("on[%d]", i)
		switch {
		case (b.GetSignal() != "") == (b.GetAfterSeconds() != 0):
			v.add(n.GetId(), field, "takes one of signal (a signal's name) or after (a duration), got %s",
				map[bool]string{true: "both", false: "neither"}[b.GetSignal() != ""])
		case b.GetSignal() != "" && !ValidToken(b.GetSignal()):
			v.add(n.GetId(), field+".signal", "%q is not a signal name: letters, digits, '-' and '_'", b.GetSignal())
		case b.GetAfterSeconds() < 0:
			v.add(n.GetId(), field+".after", "must be a positive duration, got %gs", b.GetAfterSeconds())
		}
		to := v.byID[b.GetGoto()]
		switch {
		case b.GetGoto() == "":
			v.add(n.GetId(), field+".goto", "names the node the line goes on at when the event comes; it is missing")
		case to == nil:
			msg := fmt.Sprintf("goto %q: no node has that id", b.GetGoto())
			if s := suggest(b.GetGoto(), slices.Collect(maps.Keys(v.byID))); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			v.add(n.GetId(), field+".goto", "%s", msg)
		case to.GetType() == novav1.NodeType_NODE_TYPE_START:
			v.add(n.GetId(), field+".goto", "goto %q is the start node; a line cannot go back to the start", b.GetGoto())
		}
	}
}

// maxDepth checks a node's max_depth: sub-workflow calls deep, from 0
// (the default) to MaxCallDepth; a map node's only with a workflow body.
func (v *validator) maxDepth(n *novav1.Node) {
	d := n.GetMaxDepth()
	switch {
	case d < 0 || d > MaxCallDepth:
		v.add(n.GetId(), "max_depth", "must be from 0 (the default, %d) to %d sub-workflow calls deep, got %d", DefaultCallDepth, MaxCallDepth, d)
	case d != 0 && n.GetWorkflow() == "":
		v.add(n.GetId(), "max_depth", "bounds the sub-workflow calls of a workflow body; map node %q runs code or a prompt", n.GetId())
	}
}

// inputKeys checks that no key of a node's input map is empty.
func (v *validator) inputKeys(n *novav1.Node) {
	for _, k := range slices.Sorted(maps.Keys(n.GetInput())) {
		if strings.TrimSpace(k) == "" || strings.TrimSpace(n.GetInput()[k]) == "" {
			v.add(n.GetId(), "input", "maps child key %q to parent key %q; input maps child context keys to parent context keys, and neither may be empty",
				k, n.GetInput()[k])
		}
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
	v.out, v.in = map[string][]int{}, map[string][]int{}
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
			v.in[e.GetTo()] = append(v.in[e.GetTo()], i)
		}
	}

	edges := v.def.GetEdges()
	for _, n := range v.order {
		id, out := n.GetId(), v.out[n.GetId()]
		k := KindOf(n.GetType())
		if k == nil {
			continue
		}
		switch k.Edges {
		case EdgesPlain:
			v.plainEdges(n, out)
		case EdgesWait:
			v.waitEdges(n, out)
		case EdgesDecide:
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
		case EdgesNone:
			if len(out) > 0 {
				v.add(id, "", "end node has outgoing edges (to %s); an end node finishes the execution", targets(edges, out))
			}
		}
	}
}

// plainEdges checks the edges leaving a start, action, sleep, join, map or
// workflow node: none has a condition; a join node has exactly one, the
// others one or several (their targets run at once), each to another node.
// A join node also needs several incoming edges, at least as many as it
// waits for.
func (v *validator) plainEdges(n *novav1.Node, out []int) {
	id, t, edges := n.GetId(), n.GetType(), v.def.GetEdges()
	join := t == novav1.NodeType_NODE_TYPE_JOIN
	switch {
	case len(out) == 0 && join:
		v.add(id, "", "has no outgoing edge; a join node needs exactly one")
	case len(out) == 0:
		v.add(id, "", "has no outgoing edge; %s node needs one (or several, whose targets run at once)", withArticle(t))
	case len(out) > 1 && join:
		v.add(id, "", "has %d outgoing edges (to %s); a join node has exactly one: the branches it merges go on as one", len(out), targets(edges, out))
	}
	var plain []int
	for _, i := range out {
		switch c := edges[i].GetCondition(); c {
		case "":
			plain = append(plain, i)
		case TimeoutCondition:
			v.add(id, fmt.Sprintf("edges[%d].condition", i),
				"edge %s -> %s has condition %q; only a wait node with a timeout has a timeout edge", id, edges[i].GetTo(), c)
		default:
			v.add(id, fmt.Sprintf("edges[%d].condition", i),
				"edge %s -> %s has condition %q; only edges leaving a decision or wait node have conditions", id, edges[i].GetTo(), c)
		}
	}
	if !join {
		v.distinctTargets(id, plain)
		return
	}
	in := v.in[id]
	if len(in) < 2 {
		v.add(id, "", "join node %q has %s; a join waits for several branches: give it at least two", id, count(len(in), "incoming edge", "incoming edges"))
	}
	if w := n.GetWait(); w != JoinWaitAll && w != JoinWaitAny {
		if c, ok := branchCount(w); ok && len(in) > 0 && c > len(in) {
			verb := "lead"
			if len(in) == 1 {
				verb = "leads"
			}
			v.add(id, "wait", "join node %q waits for %d branches, but %s %s to it; wait must be all, any or a number from 1 to %d",
				id, c, count(len(in), "edge", "edges"), verb, len(in))
		}
	}
}

// distinctTargets reports edges of out (indexes of edges leaving node id,
// whose targets all run) that lead to the same node.
func (v *validator) distinctTargets(id string, out []int) {
	edges := v.def.GetEdges()
	byTarget := map[string][]string{}
	var order []string
	for _, i := range out {
		to := edges[i].GetTo()
		if _, seen := byTarget[to]; !seen {
			order = append(order, to)
		}
		byTarget[to] = append(byTarget[to], fmt.Sprintf("edges[%d]", i))
	}
	for _, to := range order {
		if same := byTarget[to]; len(same) > 1 {
			v.add(id, "", "has %d edges to %s (%s); the branches leaving a node lead to different nodes: remove the repeated edge",
				len(same), to, strings.Join(same, ", "))
		}
	}
}

// waitEdges checks the edges leaving wait node n: without decide_on one or
// more edges without condition, all taken when the signal comes, each to
// another node; with decide_on one edge per value of that payload field;
// and at most one timeout edge, when the node has a timeout.
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
			v.add(id, field, "edge %s -> %s has condition %q; a wait node without decide_on has edges without condition, all taken when its signal comes (and may have a %q edge); set decide_on to choose the edge by a payload field", id, to, c, TimeoutCondition)
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
		v.add(id, "", "has no outgoing edge without condition; a wait node needs at least one, taken when its signal comes")
	default:
		v.distinctTargets(id, plain)
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
		next := []string{}
		for _, i := range v.out[id] {
			next = append(next, v.def.GetEdges()[i].GetTo())
		}
		for _, b := range v.byID[id].GetOn() {
			next = append(next, b.GetGoto()) // a boundary event leads there too
		}
		for _, to := range next {
			if !seen[to] {
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

// WorkflowRefs returns the names of the workflows def's workflow nodes and
// map nodes run (their workflow), sorted, each once: the workflows that
// must be registered for def to run, which a registry follows to find
// calls that come back round to def.
func WorkflowRefs(def *novav1.WorkflowDefinition) []string {
	var refs []string
	for _, n := range def.GetNodes() {
		switch n.GetType() {
		case novav1.NodeType_NODE_TYPE_WORKFLOW, novav1.NodeType_NODE_TYPE_MAP:
			if wf := n.GetWorkflow(); strings.TrimSpace(wf) != "" {
				refs = append(refs, wf)
			}
		}
	}
	slices.Sort(refs)
	return slices.Compact(refs)
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

// count gives "1 edge", "2 edges", "0 edges".
func count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// both gives "both a and b", "a, b and c".
func both(names []string) string {
	if len(names) == 2 {
		return "both " + names[0] + " and " + names[1]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

func orQ(id string) string {
	if id == "" {
		return "?"
	}
	return id
}
