// Package workflow is NOVA's workflow model: it parses the YAML or JSON a user
// writes into a novav1.WorkflowDefinition, validates it, and answers the graph
// questions the engine asks while running it.
package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Field names accepted in a definition. "description" is documentation only
// (kept, shown and compared, never run); "executor" exists for definitions
// written for the original NOVA.
var (
	workflowFields = []string{"name", "description", "model", "timeout", "network", "allow_hosts", "cache", "cache_validate", "budget", "retry", "signals", "schedules", "nodes", "edges"}
	nodeFields     = []string{"id", "type", "description", "code", "prompt", "executor", "model", "timeout", "max_visits", "language", "network", "allow_hosts", "cache", "cache_validate", "budget", "retry",
		"signal", "schema", "decide_on", "duration", "until", "wait", "merge", "items", "concurrency", "output", "on_item_failure", "workflow", "input",
		"terminate", "cancel_remaining", "choose", "complete_when", "max_depth", "on", "lock"}
	boundaryFields     = []string{"signal", "after", "goto", "interrupt"}
	completeWhenFields = []string{"succeeded", "failed"}
	budgetFields       = []string{"max_usd", "max_usd_per_day", "max_model_calls"}
	retryFields        = []string{"max_attempts", "initial_interval", "backoff_coefficient", "max_interval", "on"}
	signalFields       = []string{"keep", "keep_for"}
	scheduleFields     = []string{"id", "cron", "timezone", "every", "context", "catchup", "paused"}
	edgeFields         = []string{"from", "to", "condition"}
)

// Load reads, parses and validates the definition in the file at path.
func Load(path string, opts ValidateOptions) (*novav1.WorkflowDefinition, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load workflow %q: %w", path, err)
	}
	def, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load workflow %q: %w", path, err)
	}
	if err := Validate(def, opts); err != nil {
		return nil, fmt.Errorf("load workflow %q: %w", path, err)
	}
	return def, nil
}

// Parse decodes a YAML or JSON definition. It checks the shape of the document
// (known fields, value types, node types) and reports every such problem in a
// *ValidationError; input that is not YAML or JSON wraps ErrMalformed. Parse
// does not check the graph: call Validate for that.
func Parse(data []byte) (*novav1.WorkflowDefinition, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, fmt.Errorf("%w: document is empty", ErrMalformed)
	}
	// YAML 1.2 (a node named "on" or "no" is a string); duplicate keys are
	// refused, which would otherwise let a later "code:" silently replace an
	// earlier one.
	js, err := yamlToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber() // keeps "1500" distinct from "1500.5" and avoids float rounding of ints
	var doc any
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	top, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: top level must be a mapping with name, nodes and edges, got %s", ErrMalformed, kindOf(doc))
	}

	p := &parser{}
	def := p.workflow(top)
	ScheduleIDs(def)
	if len(p.problems) > 0 {
		return nil, &ValidationError{Workflow: def.GetName(), Problems: p.problems}
	}
	return def, nil
}

// parser collects problems instead of stopping at the first one.
type parser struct {
	problems []Problem
}

// where locates a problem; nodeID wins over path when known because users
// recognise their node ids faster than list indexes. sub names the mapping
// the fields belong to ("retry"), when they are not the node's own.
type where struct {
	nodeID string
	path   string
	sub    string
}

// in locates the fields of the mapping key of w.
func (w where) in(key string) where {
	if w.sub != "" {
		key = w.sub + "." + key
	}
	w.sub = key
	return w
}

func (w where) problem(field, msg string) Problem {
	if w.sub != "" {
		field = w.sub + "." + field
	}
	if w.nodeID != "" {
		return Problem{NodeID: w.nodeID, Field: field, Message: msg}
	}
	if w.path != "" {
		field = w.path + "." + field
	}
	return Problem{Field: field, Message: msg}
}

func (p *parser) addf(w where, field, format string, args ...any) {
	p.problems = append(p.problems, w.problem(field, fmt.Sprintf(format, args...)))
}

func (p *parser) workflow(m map[string]any) *novav1.WorkflowDefinition {
	def := &novav1.WorkflowDefinition{}
	w := where{}
	p.unknownFields(w, m, workflowFields)
	def.Name = p.str(w, m, "name")
	def.Description = p.str(w, m, "description")
	def.Model = p.str(w, m, "model")
	def.TimeoutSeconds = p.seconds(w, m, "timeout")
	def.Network = p.boolean(w, m, "network")
	def.AllowHosts = p.hosts(w, m, "allow_hosts")
	def.Cache = p.optBoolean(w, m, "cache")
	def.CacheValidate = strings.ToLower(strings.TrimSpace(p.str(w, m, "cache_validate")))
	def.Budget = p.budget(w, m)
	def.Retry = p.retry(w, m)
	if sm, in, ok := p.mapping(w, m, "signals", "keep and/or keep_for", signalFields); ok {
		def.Signals = &novav1.SignalKeep{Keep: p.whole(in, sm, "keep"), KeepForSeconds: p.seconds(in, sm, "keep_for")}
	}
	for i, raw := range p.list(w, m, "schedules") {
		if s := p.schedule(i, raw); s != nil {
			def.Schedules = append(def.Schedules, s)
		}
	}
	for i, raw := range p.list(w, m, "nodes") {
		if n := p.node(i, raw); n != nil {
			def.Nodes = append(def.Nodes, n)
		}
	}
	for i, raw := range p.list(w, m, "edges") {
		if e := p.edge(i, raw); e != nil {
			def.Edges = append(def.Edges, e)
		}
	}
	return def
}

func (p *parser) node(i int, raw any) *novav1.Node {
	w := where{path: fmt.Sprintf("nodes[%d]", i)}
	m, ok := raw.(map[string]any)
	if !ok {
		p.problems = append(p.problems, Problem{Field: w.path, Message: "must be a mapping with id and type, got " + kindOf(raw)})
		return nil
	}
	n := &novav1.Node{}
	n.Id = p.str(w, m, "id")
	if n.Id != "" {
		w.nodeID = n.Id
	}
	p.unknownFields(w, m, nodeFields)
	if v, ok := m["type"]; ok {
		s, isStr := v.(string)
		switch t := ParseNodeType(s); {
		case !isStr:
			p.addf(w, "type", "must be a string (%s), got %s", nodeTypeList(), kindOf(v))
		case t == novav1.NodeType_NODE_TYPE_UNSPECIFIED:
			msg := fmt.Sprintf("unknown node type %q; use %s", s, nodeTypeList())
			if sug := suggest(s, nodeTypeNames()); sug != "" {
				msg = fmt.Sprintf("unknown node type %q; did you mean %q? (use %s)", s, sug, nodeTypeList())
			}
			p.addf(w, "type", "%s", msg)
		default:
			n.Type = t
		}
	}
	n.Description = p.str(w, m, "description")
	n.Code = p.str(w, m, "code")
	n.Prompt = p.str(w, m, "prompt")
	n.Model = p.str(w, m, "model")
	n.TimeoutSeconds = p.seconds(w, m, "timeout")
	n.MaxVisits = p.whole(w, m, "max_visits")
	n.Language = strings.ToLower(strings.TrimSpace(p.str(w, m, "language")))
	n.Network = p.boolean(w, m, "network")
	n.AllowHosts = p.hosts(w, m, "allow_hosts")
	n.Cache = p.optBoolean(w, m, "cache")
	n.CacheValidate = strings.ToLower(strings.TrimSpace(p.str(w, m, "cache_validate")))
	n.Budget = p.budget(w, m)
	n.Retry = p.retry(w, m)
	n.Signal = p.str(w, m, "signal")
	n.Schema = p.schema(w, m, "schema")
	n.DecideOn = p.str(w, m, "decide_on")
	n.DurationSeconds = p.seconds(w, m, "duration")
	n.Until = p.str(w, m, "until")
	if b, isBool := m["wait"].(bool); isBool && n.Type == novav1.NodeType_NODE_TYPE_MAP {
		// A map's wait: false lets the line go on while its items run.
		n.Wait = map[bool]string{true: "", false: MapNoWait}[b]
	} else {
		n.Wait = p.joinWait(w, m)
	}
	n.Merge = p.choice(w, m, "merge", mergeModes, mergeList)
	n.CancelRemaining = p.boolean(w, m, "cancel_remaining")
	n.Terminate = p.boolean(w, m, "terminate")
	n.Choose = p.choice(w, m, "choose", chooseModes, chooseList)
	n.MaxDepth = p.whole(w, m, "max_depth")
	n.Lock = strings.TrimSpace(p.str(w, m, "lock"))
	for i, raw := range p.list(w, m, "on") {
		key := fmt.Sprintf("on[%d]", i)
		bm, ok := raw.(map[string]any)
		if !ok {
			p.addf(w, key, "must be a mapping with signal or after, and goto, got %s", kindOf(raw))
			continue
		}
		in := w.in(key)
		p.unknownFields(in, bm, boundaryFields)
		n.On = append(n.On, &novav1.Boundary{Signal: p.str(in, bm, "signal"), AfterSeconds: p.seconds(in, bm, "after"),
			Goto: p.str(in, bm, "goto"), Interrupt: p.optBoolean(in, bm, "interrupt")})
	}
	if cm, in, ok := p.mapping(w, m, "complete_when", "succeeded or failed (a number of items)", completeWhenFields); ok {
		n.CompleteWhen = &novav1.MapCompletion{Succeeded: p.whole(in, cm, "succeeded"), Failed: p.whole(in, cm, "failed")}
	}
	n.Items = p.str(w, m, "items")
	n.Concurrency = p.concurrency(w, m)
	n.OnItemFailure = p.choice(w, m, "on_item_failure", onItemFailures, onItemFailureList)
	n.Workflow = p.str(w, m, "workflow")
	n.Input = p.keyMap(w, m, "input", "child context key: parent context key")
	p.output(w, m, n)

	switch exec := strings.ToLower(strings.TrimSpace(p.str(w, m, "executor"))); exec {
	case "", "e2b":
	case "cached":
		// The original NOVA kept the natural-language task of a cached (AI)
		// node in its code field.
		if n.Prompt == "" {
			n.Prompt, n.Code = n.Code, ""
		}
	default:
		p.addf(w, "executor", "unknown executor %q; use e2b (code run as written) or cached (code holds a prompt for AI generation)", exec)
	}
	return n
}

func (p *parser) edge(i int, raw any) *novav1.Edge {
	w := where{path: fmt.Sprintf("edges[%d]", i)}
	m, ok := raw.(map[string]any)
	if !ok {
		p.problems = append(p.problems, Problem{Field: w.path, Message: "must be a mapping with from and to, got " + kindOf(raw)})
		return nil
	}
	p.unknownFields(w, m, edgeFields)
	e := &novav1.Edge{From: p.str(w, m, "from"), To: p.str(w, m, "to")}
	if v, ok := m["condition"]; ok && v != nil {
		// YAML turns `condition: true` into a boolean and `condition: 2` into a
		// number; decisions are compared as strings, so store the string.
		s, ok := DecisionString(v)
		if !ok {
			p.addf(w, "condition", "must be a string, boolean or number, got %s", kindOf(v))
		}
		e.Condition = s
	}
	return e
}

func (p *parser) unknownFields(w where, m map[string]any, known []string) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys) // map order is random; problems should not be
	for _, k := range keys {
		if slices.Contains(known, k) {
			continue
		}
		msg := "unknown field"
		if s := suggest(k, known); s != "" {
			msg += fmt.Sprintf("; did you mean %q?", s)
		}
		msg += " (known fields: " + strings.Join(known, ", ") + ")"
		p.problems = append(p.problems, w.problem(k, msg))
	}
}

func (p *parser) str(w where, m map[string]any, key string) string {
	v, ok := m[key]
	if !ok || v == nil {
		return ""
	}
	s, ok := v.(string)
	if !ok {
		p.addf(w, key, "must be a string, got %s", kindOf(v))
	}
	return s
}

func (p *parser) boolean(w where, m map[string]any, key string) bool {
	v, ok := m[key]
	if !ok || v == nil {
		return false
	}
	b, ok := v.(bool)
	if !ok {
		p.addf(w, key, "must be true or false, got %s", kindOf(v))
	}
	return b
}

// optBoolean is boolean for a setting whose absence means "inherit".
func (p *parser) optBoolean(w where, m map[string]any, key string) *bool {
	if v, ok := m[key]; !ok || v == nil {
		return nil
	}
	b := p.boolean(w, m, key)
	return &b
}

func (p *parser) list(w where, m map[string]any, key string) []any {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	l, ok := v.([]any)
	if !ok {
		p.addf(w, key, "must be a list, got %s", kindOf(v))
	}
	return l
}

// hosts reads a list of allow_hosts entries (see HostPattern), kept in their
// canonical form.
func (p *parser) hosts(w where, m map[string]any, key string) []string {
	var out []string
	for i, v := range p.list(w, m, key) {
		s, ok := v.(string)
		if !ok {
			p.addf(w, fmt.Sprintf("%s[%d]", key, i), "must be a string such as \"api.example.com\" or \"api.example.com:8443\", got %s", kindOf(v))
			continue
		}
		hp, err := ParseHostPattern(s)
		if err != nil {
			p.addf(w, fmt.Sprintf("%s[%d]", key, i), "%v", err)
			continue
		}
		out = append(out, hp.String())
	}
	return out
}

// seconds accepts a number of seconds or a duration string ("90s", "2m",
// "72h", "3d", "1w"; see ParseDuration), since both are natural to write.
// Negative values are kept for Validate to report.
func (p *parser) seconds(w where, m map[string]any, key string) float64 {
	v, ok := m[key]
	if !ok || v == nil {
		return 0
	}
	switch v := v.(type) {
	case json.Number:
		f, err := v.Float64()
		if err != nil {
			p.addf(w, key, "invalid number %q: %v", v.String(), err)
		}
		return f
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
			return f
		}
		d, err := ParseDuration(v)
		if err != nil {
			p.addf(w, key, "must be a number of seconds or a duration such as \"30s\", \"72h\" or \"2d\", got %q", v)
		}
		return d.Seconds()
	default:
		p.addf(w, key, "must be a number of seconds, got %s", kindOf(v))
		return 0
	}
}

// ParseDuration reads a duration as Go writes it ("90s", "1h30m", "168h")
// with two more units, d (24h) and w (7 days): "3d", "2w", "1d12h", "1.5d".
// A leading sign is allowed.
func ParseDuration(s string) (time.Duration, error) {
	text := strings.TrimSpace(s)
	if d, err := time.ParseDuration(text); err == nil {
		return d, nil
	}
	bad := fmt.Errorf("invalid duration %q; write it like 90s, 1h30m, 72h, 3d or 2w", s)
	neg := strings.HasPrefix(text, "-")
	if neg || strings.HasPrefix(text, "+") {
		text = text[1:]
	}
	if text == "" {
		return 0, bad
	}
	// Days and weeks are added here; the other parts go to time.ParseDuration.
	var days float64
	var rest strings.Builder
	for text != "" {
		num := len(text) - len(strings.TrimLeft(text, "0123456789."))
		unit := num + len(text[num:]) - len(strings.TrimLeft(text[num:], "abcdefghijklmnopqrstuvwxyzµμ"))
		if num == 0 || unit == num {
			return 0, bad
		}
		switch text[num:unit] {
		case "d", "w":
			f, err := strconv.ParseFloat(text[:num], 64)
			if err != nil {
				return 0, bad
			}
			if text[num:unit] == "w" {
				f *= 7
			}
			days += f
		default:
			rest.WriteString(text[:unit])
		}
		text = text[unit:]
	}
	var d time.Duration
	if rest.Len() > 0 {
		var err error
		if d, err = time.ParseDuration(rest.String()); err != nil {
			return 0, bad
		}
	}
	total := float64(d) + days*float64(24*time.Hour)
	if total >= math.MaxInt64 {
		return 0, fmt.Errorf("duration %q is too long (at most about 290 years)", s)
	}
	d = time.Duration(math.Round(total))
	if neg {
		d = -d
	}
	return d, nil
}

// number reads a number that has no unit.
func (p *parser) number(w where, m map[string]any, key string) float64 {
	v, ok := m[key]
	if !ok || v == nil {
		return 0
	}
	n, isNum := v.(json.Number)
	if !isNum {
		p.addf(w, key, "must be a number, got %s", kindOf(v))
		return 0
	}
	f, err := n.Float64()
	if err != nil {
		p.addf(w, key, "must be a number, got %s", n.String())
	}
	return f
}

// mapping reads the mapping at key and reports its unknown fields, which
// are located as "<key>.<field>"; it reports false when key is absent or
// null, or holds something else (described by what).
func (p *parser) mapping(w where, m map[string]any, key, what string, known []string) (map[string]any, where, bool) {
	v, ok := m[key]
	if !ok || v == nil {
		return nil, w, false
	}
	sub, ok := v.(map[string]any)
	if !ok {
		p.addf(w, key, "must be a mapping with %s, got %s", what, kindOf(v))
		return nil, w, false
	}
	in := w.in(key)
	p.unknownFields(in, sub, known)
	return sub, in, true
}

// budget reads a budget mapping; its fields are reported as "budget.<field>".
// Negative limits are kept for Validate to report.
func (p *parser) budget(w where, m map[string]any) *novav1.Budget {
	v, ok := m["budget"]
	if !ok || v == nil {
		return nil
	}
	bm, ok := v.(map[string]any)
	if !ok {
		p.addf(w, "budget", "must be a mapping with max_usd, max_usd_per_day and/or max_model_calls, got %s", kindOf(v))
		return nil
	}
	b := &novav1.Budget{}
	for _, k := range slices.Sorted(maps.Keys(bm)) {
		if !slices.Contains(budgetFields, k) {
			msg := "unknown field"
			if s := suggest(k, budgetFields); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			p.problems = append(p.problems, w.problem("budget."+k, msg+" (known fields: "+strings.Join(budgetFields, ", ")+")"))
		}
	}
	b.MaxUsd = p.usd(w, bm, "max_usd")
	b.MaxUsdPerDay = p.usd(w, bm, "max_usd_per_day")
	if v, ok := bm["max_model_calls"]; ok && v != nil {
		before := len(p.problems)
		n := p.whole(w, bm, "max_model_calls")
		if len(p.problems) > before {
			// whole names the field without its mapping; say where it is.
			p.problems[len(p.problems)-1] = w.problem("budget.max_model_calls", "must be a whole number of calls, got "+kindOf(v))
		} else {
			b.MaxModelCalls = &n
		}
	}
	return b
}

// usd reads an amount of US dollars: a number, nothing else (a string such
// as "0.50" or "$1" is refused rather than guessed at).
func (p *parser) usd(w where, m map[string]any, key string) *float64 {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	n, isNum := v.(json.Number)
	if !isNum {
		p.problems = append(p.problems, w.problem("budget."+key, "must be a number of US dollars such as 0.25, got "+kindOf(v)))
		return nil
	}
	f, err := n.Float64()
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		p.problems = append(p.problems, w.problem("budget."+key, "must be a number of US dollars such as 0.25, got "+n.String()))
		return nil
	}
	return &f
}

func (p *parser) whole(w where, m map[string]any, key string) int32 {
	v, ok := m[key]
	if !ok || v == nil {
		return 0
	}
	n, isNum := v.(json.Number)
	if !isNum {
		p.addf(w, key, "must be a whole number, got %s", kindOf(v))
		return 0
	}
	i, err := strconv.ParseInt(n.String(), 10, 32)
	if err != nil {
		// A whole number can still arrive in float form, e.g. 1e3.
		f, ferr := n.Float64()
		if ferr != nil || f != math.Trunc(f) || f > math.MaxInt32 || f < math.MinInt32 {
			p.addf(w, key, "must be a whole number, got %s", n.String())
			return 0
		}
		return int32(f)
	}
	return int32(i)
}

// joinWait reads a join node's wait: "all", "any" or how many branches it
// waits for, a whole number from 1 (written as a number or as its text).
// It is kept as "all", "any" or the number's decimal digits.
func (p *parser) joinWait(w where, m map[string]any) string {
	v, ok := m["wait"]
	if !ok || v == nil {
		return ""
	}
	var text string
	switch v := v.(type) {
	case string:
		text = strings.ToLower(strings.TrimSpace(v))
	case json.Number:
		text = v.String()
		// A whole number can arrive in float form, e.g. 2.0 or 1e1.
		if f, err := v.Float64(); err == nil && f == math.Trunc(f) && math.Abs(f) <= math.MaxInt32 {
			text = strconv.Itoa(int(f))
		}
	}
	switch text {
	case "":
		if _, isStr := v.(string); isStr {
			return "" // all, as when wait is left out
		}
	case JoinWaitAll, JoinWaitAny:
		return text
	}
	if n, ok := branchCount(text); ok {
		return strconv.Itoa(n)
	}
	p.addf(w, "wait", "must be %s, got %s", joinWaitList, kindOf(v))
	return ""
}

// branchCount reads a number of branches written in decimal digits: from 1
// to the largest int32.
func branchCount(text string) (int, bool) {
	i, err := strconv.ParseInt(text, 10, 32)
	return int(i), err == nil && i >= 1
}

// choice reads a setting that takes one of a few words (allowed), in any
// case; it is kept in lower case. list names the words for the message.
func (p *parser) choice(w where, m map[string]any, key string, allowed []string, list string) string {
	v, ok := m[key]
	if !ok || v == nil {
		return ""
	}
	s, isStr := v.(string)
	if !isStr {
		p.addf(w, key, "must be %s, got %s", list, kindOf(v))
		return ""
	}
	s = strings.ToLower(strings.TrimSpace(s))
	if s != "" && !slices.Contains(allowed, s) {
		msg := fmt.Sprintf("must be %s, got %s", list, kindOf(v))
		if sug := suggest(s, allowed); sug != "" {
			msg += fmt.Sprintf("; did you mean %q?", sug)
		}
		p.addf(w, key, "%s", msg)
		return ""
	}
	return s
}

// concurrency reads how many items a map node runs at once.
func (p *parser) concurrency(w where, m map[string]any) int32 {
	before := len(p.problems)
	c := p.whole(w, m, "concurrency")
	if v, ok := m["concurrency"]; ok && v != nil && len(p.problems) == before && (c < 1 || c > MaxMapConcurrency) {
		p.addf(w, "concurrency", "%s, got %d", concurrencyRule, c)
		return 0
	}
	return c
}

// keyMap reads a mapping of context keys to context keys (what describes
// it: "child context key: parent context key"); its entries are reported
// as "<key>.<entry>".
func (p *parser) keyMap(w where, m map[string]any, key, what string) map[string]string {
	v, ok := m[key]
	if !ok || v == nil {
		return nil
	}
	km, ok := v.(map[string]any)
	if !ok {
		p.addf(w, key, "must be a mapping of %s, got %s", what, kindOf(v))
		return nil
	}
	in := w.in(key)
	out := make(map[string]string, len(km))
	for _, k := range slices.Sorted(maps.Keys(km)) {
		s, ok := km[k].(string)
		if !ok {
			p.addf(in, k, "must be a string (a mapping of %s), got %s", what, kindOf(km[k]))
			continue
		}
		out[k] = s
	}
	return out
}

// output reads a node's output, which the node's type decides: for a map
// node the context key that gets the items' results (Node.output), for a
// workflow node a mapping of parent context key to child context key
// (Node.output_keys). On other nodes either is kept for Validate to report.
func (p *parser) output(w where, m map[string]any, n *novav1.Node) {
	v, ok := m["output"]
	if !ok || v == nil {
		return
	}
	const keys = "parent context key: child context key"
	_, isMap := v.(map[string]any)
	switch t := n.GetType(); {
	case t == novav1.NodeType_NODE_TYPE_WORKFLOW:
		n.OutputKeys = p.keyMap(w, m, "output", keys)
	case t == novav1.NodeType_NODE_TYPE_MAP:
		s, isStr := v.(string)
		if !isStr {
			p.addf(w, "output", "must be a string: the context key that gets the list of the items' results (default %s), got %s", DefaultMapOutput, kindOf(v))
			return
		}
		n.Output = s
	case isMap:
		n.OutputKeys = p.keyMap(w, m, "output", keys)
	default:
		if s, isStr := v.(string); isStr {
			n.Output = s
			return
		}
		p.addf(w, "output", "must be a string (a map node's context key for its results) or a mapping of %s (a workflow node's), got %s", keys, kindOf(v))
	}
}

// nodeTypeNames are the node types as users write them (the kinds table).
func nodeTypeNames() []string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = k.Name
	}
	return names
}

// nodeTypeList is the node types for an error: "start, action, ... or end".
func nodeTypeList() string {
	names := nodeTypeNames()
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// ParseNodeType maps a type name to a NodeType. It accepts NOVA's spelling
// (start, action, decision, wait, sleep, join, map, workflow, end) and the
// original NOVA class names (StartNode, ActionNode, ...), in any case.
// Unknown names give NODE_TYPE_UNSPECIFIED.
func ParseNodeType(s string) novav1.NodeType {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimSuffix(s, "node")
	s = strings.TrimRight(s, "_- ")
	for _, k := range kinds {
		if k.Name == s {
			return k.Type
		}
	}
	return novav1.NodeType_NODE_TYPE_UNSPECIFIED
}

// TypeName is the short name of a node type as users write it ("decision").
func TypeName(t novav1.NodeType) string {
	if k := KindOf(t); k != nil {
		return k.Name
	}
	return "unspecified"
}

func kindOf(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case string:
		return fmt.Sprintf("string %q", v)
	case bool:
		return fmt.Sprintf("boolean %t", v)
	case json.Number:
		return "number " + v.String()
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	default:
		return fmt.Sprintf("%T", v)
	}
}

// suggest returns the known name closest to a misspelt one, if it is close
// enough to be a plausible typo.
func suggest(s string, known []string) string {
	best, bestDist := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), k); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
