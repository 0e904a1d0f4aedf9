package workflow

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// FormatYAML writes def as a definition file, the YAML a user writes: the
// fields Parse reads, in the order people read them (a node's code or prompt
// last, as a block), and only those that are set. Parse gives def back.
func FormatYAML(def *novav1.WorkflowDefinition) ([]byte, error) {
	if def == nil {
		return nil, fmt.Errorf("format workflow: no workflow definition")
	}
	top := &yaml.Node{Kind: yaml.MappingNode}
	mapField(top, "name", yamlString(def.GetName()))
	strField(top, "description", def.GetDescription())
	strField(top, "model", def.GetModel())
	secondsField(top, "timeout", def.GetTimeoutSeconds())
	trueField(top, "network", def.GetNetwork())
	hostsField(top, def.GetAllowHosts())
	boolField(top, "cache", def.Cache)
	strField(top, "cache_validate", def.GetCacheValidate())
	budgetField(top, def.GetBudget())
	retryField(top, def.GetRetry())
	if k := def.GetSignals(); k != nil {
		km := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		if k.Keep != 0 {
			mapField(km, "keep", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(k.Keep))})
		}
		secondsField(km, "keep_for", k.KeepForSeconds)
		mapField(top, "signals", km)
	}
	if len(def.GetSchedules()) > 0 {
		l := &yaml.Node{Kind: yaml.SequenceNode}
		for _, sc := range def.GetSchedules() {
			l.Content = append(l.Content, formatSchedule(sc))
		}
		mapField(top, "schedules", l)
	}
	nodes := &yaml.Node{Kind: yaml.SequenceNode}
	for _, n := range def.GetNodes() {
		nodes.Content = append(nodes.Content, formatNode(n))
	}
	mapField(top, "nodes", nodes)
	edges := &yaml.Node{Kind: yaml.SequenceNode}
	for _, e := range def.GetEdges() {
		m := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		mapField(m, "from", yamlString(e.GetFrom()))
		mapField(m, "to", yamlString(e.GetTo()))
		strField(m, "condition", e.GetCondition())
		edges.Content = append(edges.Content, m)
	}
	mapField(top, "edges", edges)

	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(top); err != nil {
		return nil, fmt.Errorf("format workflow %q: %w", def.GetName(), err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("format workflow %q: %w", def.GetName(), err)
	}
	return buf.Bytes(), nil
}

func formatNode(n *novav1.Node) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode}
	mapField(m, "id", yamlString(n.GetId()))
	if t := n.GetType(); t != novav1.NodeType_NODE_TYPE_UNSPECIFIED {
		mapField(m, "type", yamlString(TypeName(t)))
	}
	strField(m, "signal", n.GetSignal())
	strField(m, "decide_on", n.GetDecideOn())
	secondsField(m, "duration", n.GetDurationSeconds())
	strField(m, "until", n.GetUntil())
	if n.GetType() == novav1.NodeType_NODE_TYPE_MAP && n.GetWait() == MapNoWait {
		mapField(m, "wait", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "false"})
	} else {
		waitField(m, n.GetWait())
	}
	strField(m, "merge", n.GetMerge())
	trueField(m, "cancel_remaining", n.GetCancelRemaining())
	strField(m, "choose", n.GetChoose())
	trueField(m, "terminate", n.GetTerminate())
	strField(m, "lock", n.GetLock())
	if on := n.GetOn(); len(on) > 0 {
		list := &yaml.Node{Kind: yaml.SequenceNode}
		for _, b := range on {
			bm := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
			strField(bm, "signal", b.GetSignal())
			secondsField(bm, "after", b.GetAfterSeconds())
			strField(bm, "goto", b.GetGoto())
			boolField(bm, "interrupt", b.Interrupt)
			list.Content = append(list.Content, bm)
		}
		mapField(m, "on", list)
	}
	if v := n.GetMaxDepth(); v != 0 {
		mapField(m, "max_depth", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(v))})
	}
	if c := n.GetCompleteWhen(); c != nil {
		cm := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		for _, f := range []struct {
			key string
			n   int32
		}{{"succeeded", c.Succeeded}, {"failed", c.Failed}} {
			if f.n != 0 {
				mapField(cm, f.key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(f.n))})
			}
		}
		mapField(m, "complete_when", cm)
	}
	strField(m, "items", n.GetItems())
	if v := n.GetConcurrency(); v != 0 {
		mapField(m, "concurrency", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(v))})
	}
	strField(m, "on_item_failure", n.GetOnItemFailure())
	strField(m, "workflow", n.GetWorkflow())
	keysField(m, "input", n.GetInput())
	// output is a context key (a map node's) or a mapping of keys (a
	// workflow node's); a node has one or the other.
	if len(n.GetOutputKeys()) > 0 {
		keysField(m, "output", n.GetOutputKeys())
	} else {
		strField(m, "output", n.GetOutput())
	}
	strField(m, "description", n.GetDescription())
	strField(m, "model", n.GetModel())
	strField(m, "language", n.GetLanguage())
	secondsField(m, "timeout", n.GetTimeoutSeconds())
	if v := n.GetMaxVisits(); v != 0 {
		mapField(m, "max_visits", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(v))})
	}
	trueField(m, "network", n.GetNetwork())
	hostsField(m, n.GetAllowHosts())
	boolField(m, "cache", n.Cache)
	strField(m, "cache_validate", n.GetCacheValidate())
	budgetField(m, n.GetBudget())
	retryField(m, n.GetRetry())
	if sc := n.GetSchema(); sc != "" {
		mapField(m, "schema", jsonYAML(sc))
	}
	strField(m, "prompt", n.GetPrompt())
	strField(m, "code", n.GetCode())
	// Nodes without text to read (start, end) take one line each.
	if n.GetDescription() == "" && n.GetPrompt() == "" && n.GetCode() == "" && n.GetSchema() == "" {
		m.Style = yaml.FlowStyle
	}
	return m
}

// waitField writes a join node's wait: a number of branches as a number,
// all and any as words.
func waitField(m *yaml.Node, w string) {
	if w == "" {
		return
	}
	if c, ok := branchCount(w); ok && strconv.Itoa(c) == w {
		mapField(m, "wait", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: w})
		return
	}
	mapField(m, "wait", yamlString(w))
}

// keysField writes a mapping of context keys (a workflow node's input or
// output), its keys sorted, on one line.
func keysField(m *yaml.Node, key string, keys map[string]string) {
	if len(keys) == 0 {
		return
	}
	km := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		kn := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}
		if k == "<<" {
			kn.Style = yaml.DoubleQuotedStyle // a plain << merges mappings
		}
		km.Content = append(km.Content, kn, yamlString(keys[k]))
	}
	mapField(m, key, km)
}

func mapField(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key}, v)
}

func strField(m *yaml.Node, key, v string) {
	if v != "" {
		mapField(m, key, yamlString(v))
	}
}

func trueField(m *yaml.Node, key string, v bool) {
	if v {
		mapField(m, key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
}

func boolField(m *yaml.Node, key string, v *bool) {
	if v != nil {
		mapField(m, key, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(*v)})
	}
}

func hostsField(m *yaml.Node, hosts []string) {
	if len(hosts) == 0 {
		return
	}
	l := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
	for _, h := range hosts {
		l.Content = append(l.Content, yamlString(h))
	}
	mapField(m, "allow_hosts", l)
}

// budgetField writes a budget on one line, each limit that is set (an empty
// budget too: Parse keeps it).
func budgetField(m *yaml.Node, b *novav1.Budget) {
	if b == nil {
		return
	}
	bm := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	for _, f := range []struct {
		key string
		usd *float64
	}{{"max_usd", b.MaxUsd}, {"max_usd_per_day", b.MaxUsdPerDay}} {
		if f.usd != nil {
			mapField(bm, f.key, &yaml.Node{Kind: yaml.ScalarNode, Value: strconv.FormatFloat(*f.usd, 'f', -1, 64)})
		}
	}
	if b.MaxModelCalls != nil {
		mapField(bm, "max_model_calls", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(*b.MaxModelCalls))})
	}
	mapField(m, "budget", bm)
}

// retryField writes a retry policy on one line, each field that is set (an
// empty policy too: Parse keeps it).
func retryField(m *yaml.Node, r *novav1.RetryPolicy) {
	if r == nil {
		return
	}
	rm := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	if v := r.GetMaxAttempts(); v != 0 {
		mapField(rm, "max_attempts", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(int(v))})
	}
	secondsField(rm, "initial_interval", r.GetInitialIntervalSeconds())
	secondsField(rm, "backoff_coefficient", r.GetBackoffCoefficient())
	secondsField(rm, "max_interval", r.GetMaxIntervalSeconds())
	if len(r.GetOn()) > 0 {
		l := &yaml.Node{Kind: yaml.SequenceNode, Style: yaml.FlowStyle}
		for _, k := range r.GetOn() {
			l.Content = append(l.Content, yamlString(k))
		}
		mapField(rm, "on", l)
	}
	mapField(m, "retry", rm)
}

// formatSchedule writes a schedule on one line unless it has a context.
func formatSchedule(s *novav1.Schedule) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
	strField(m, "id", s.GetId())
	strField(m, "cron", s.GetCron())
	strField(m, "timezone", s.GetTimezone())
	secondsField(m, "every", s.GetEverySeconds())
	strField(m, "catchup", s.GetCatchup())
	trueField(m, "paused", s.GetPaused())
	if c := s.GetContext(); c != nil {
		m.Style = 0
		raw := c.GetRaw()
		if len(raw) == 0 {
			raw = []byte("{}")
		}
		mapField(m, "context", jsonYAML(string(raw)))
	}
	return m
}

// jsonYAML writes JSON text as the YAML that Parse reads back as the same
// JSON (mappings with their keys sorted, numbers as written). Text that is
// not JSON is written as a string.
func jsonYAML(text string) *yaml.Node {
	v, err := jsonvalue.Decode([]byte(text))
	if err != nil {
		return yamlString(text)
	}
	return valueYAML(v)
}

func valueYAML(v any) *yaml.Node {
	switch v := v.(type) {
	case nil:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
	case bool:
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(v)}
	case json.Number:
		// Untagged, the number is written plain (a tag would be written
		// out for an integer too large for YAML's int) and read back
		// with its digits; only -0 would be read back as the integer 0.
		n := &yaml.Node{Kind: yaml.ScalarNode, Value: v.String()}
		if v == "-0" {
			n.Tag = "!!float"
		}
		return n
	case string:
		return yamlString(v)
	case []any:
		l := &yaml.Node{Kind: yaml.SequenceNode}
		flow := true
		for _, e := range v {
			n := valueYAML(e)
			if n.Kind != yaml.ScalarNode || strings.Contains(n.Value, "\n") {
				flow = false
			}
			l.Content = append(l.Content, n)
		}
		if flow {
			l.Style = yaml.FlowStyle
		}
		return l
	case map[string]any:
		m := &yaml.Node{Kind: yaml.MappingNode}
		if len(v) == 0 {
			m.Style = yaml.FlowStyle
		}
		for _, k := range slices.Sorted(maps.Keys(v)) {
			key := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: k}
			if k == "<<" {
				key.Style = yaml.DoubleQuotedStyle // a plain << merges mappings
			}
			m.Content = append(m.Content, key, valueYAML(v[k]))
		}
		return m
	default:
		return yamlString(fmt.Sprint(v))
	}
}

// secondsField writes a timeout as a number of seconds; what is not a finite
// number is written as the text Parse reads back ("NaN", "+Inf").
func secondsField(m *yaml.Node, key string, s float64) {
	switch {
	case s == 0:
	case math.IsNaN(s) || math.IsInf(s, 0):
		mapField(m, key, yamlString(strconv.FormatFloat(s, 'g', -1, 64)))
	default:
		mapField(m, key, &yaml.Node{Kind: yaml.ScalarNode, Value: strconv.FormatFloat(s, 'f', -1, 64)})
	}
}

// yamlString is a string scalar; text of several lines is a literal block (code
// reads as written) when the block keeps it exactly.
func yamlString(s string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
	if strings.Contains(s, "\n") && literalSafe(s) {
		n.Style = yaml.LiteralStyle
	}
	return n
}

// literalSafe: a literal block keeps every character of s. Carriage
// returns and the other YAML line breaks would be read back as "\n", and
// the encoder itself quotes what a block cannot hold (leading spaces on the
// first line, trailing spaces).
func literalSafe(s string) bool {
	for _, r := range s {
		switch {
		case r == '\n' || r == '\t':
		case r < 0x20 || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 || r == 0xfeff:
			return false
		}
	}
	return true
}
