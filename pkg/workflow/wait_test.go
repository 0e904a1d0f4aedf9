package workflow_test

import (
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// approvalYAML uses every field of wait and sleep nodes, retry policies and
// schedules.
const approvalYAML = `
name: approvals
retry: {max_attempts: 3, initial_interval: 1s, backoff_coefficient: 2, max_interval: 30s, on: [error, timeout, sandbox_fault]}
schedules:
  - cron: "*/5 * * * *"
    timezone: Europe/Madrid
    context: {amount: 1500.50, id: 9007199254740993, tags: [a, b], nested: {ok: true}}
    catchup: latest
    id: every-5
  - {every: 1m}
nodes:
  - {id: start, type: start}
  - id: approve
    type: wait
    signal: approval
    timeout: 72h
    description: Approve the invoice?
    decide_on: approved
    schema:
      type: object
      required: [approved]
      properties:
        approved: {type: boolean}
        amount: {type: number, minimum: 0.50}
  - {id: cool_off, type: sleep, duration: "90s"}
  - {id: until_due, type: sleep, until: due_at}
  - id: charge
    type: action
    code: pass
    retry: {max_attempts: 5, on: [sandbox_fault]}
  - {id: done, type: end}
edges:
  - {from: start, to: approve}
  - {from: approve, to: cool_off, condition: true}
  - {from: approve, to: done, condition: false}
  - {from: approve, to: done, condition: timeout}
  - {from: cool_off, to: until_due}
  - {from: until_due, to: charge}
  - {from: charge, to: done}
`

const approvalJSON = `{
  "name": "approvals",
  "retry": {"max_attempts": 3, "initial_interval": "1s", "backoff_coefficient": 2, "max_interval": "30s",
            "on": ["error", "timeout", "sandbox_fault"]},
  "schedules": [
    {"cron": "*/5 * * * *", "timezone": "Europe/Madrid", "catchup": "latest", "id": "every-5",
     "context": {"nested": {"ok": true}, "tags": ["a", "b"], "id": 9007199254740993, "amount": 1500.50}},
    {"every": "1m"}
  ],
  "nodes": [
    {"id": "start", "type": "start"},
    {"id": "approve", "type": "wait", "signal": "approval", "timeout": "72h", "description": "Approve the invoice?",
     "decide_on": "approved",
     "schema": {"properties": {"amount": {"minimum": 0.50, "type": "number"}, "approved": {"type": "boolean"}},
                "required": ["approved"], "type": "object"}},
    {"id": "cool_off", "type": "sleep", "duration": 90},
    {"id": "until_due", "type": "sleep", "until": "due_at"},
    {"id": "charge", "type": "action", "code": "pass", "retry": {"max_attempts": 5, "on": ["sandbox_fault"]}},
    {"id": "done", "type": "end"}
  ],
  "edges": [
    {"from": "start", "to": "approve"},
    {"from": "approve", "to": "cool_off", "condition": "true"},
    {"from": "approve", "to": "done", "condition": "false"},
    {"from": "approve", "to": "done", "condition": "timeout"},
    {"from": "cool_off", "to": "until_due"},
    {"from": "until_due", "to": "charge"},
    {"from": "charge", "to": "done"}
  ]
}`

func TestParseWaitSleepRetrySchedules(t *testing.T) {
	def := mustParse(t, approvalYAML)
	want := &novav1.WorkflowDefinition{
		Name: "approvals",
		Retry: &novav1.RetryPolicy{MaxAttempts: 3, InitialIntervalSeconds: 1, BackoffCoefficient: 2, MaxIntervalSeconds: 30,
			On: []string{"error", "timeout", "sandbox_fault"}},
		Schedules: []*novav1.Schedule{
			{Id: "every-5", Cron: "*/5 * * * *", Timezone: "Europe/Madrid", Catchup: "latest",
				Context: &novav1.JSONValue{Raw: []byte(`{"amount":1500.50,"id":9007199254740993,"nested":{"ok":true},"tags":["a","b"]}`)}},
			{Id: "1", EverySeconds: 60},
		},
		Nodes: []*novav1.Node{
			{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
			{Id: "approve", Type: novav1.NodeType_NODE_TYPE_WAIT, Signal: "approval", TimeoutSeconds: 72 * 3600,
				Description: "Approve the invoice?", DecideOn: "approved",
				Schema: `{"properties":{"amount":{"minimum":0.50,"type":"number"},"approved":{"type":"boolean"}},"required":["approved"],"type":"object"}`},
			{Id: "cool_off", Type: novav1.NodeType_NODE_TYPE_SLEEP, DurationSeconds: 90},
			{Id: "until_due", Type: novav1.NodeType_NODE_TYPE_SLEEP, Until: "due_at"},
			{Id: "charge", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: "pass",
				Retry: &novav1.RetryPolicy{MaxAttempts: 5, On: []string{"sandbox_fault"}}},
			{Id: "done", Type: novav1.NodeType_NODE_TYPE_END},
		},
		Edges: []*novav1.Edge{
			{From: "start", To: "approve"},
			{From: "approve", To: "cool_off", Condition: "true"},
			{From: "approve", To: "done", Condition: "false"},
			{From: "approve", To: "done", Condition: "timeout"},
			{From: "cool_off", To: "until_due"},
			{From: "until_due", To: "charge"},
			{From: "charge", To: "done"},
		},
	}
	if !proto.Equal(def, want) {
		t.Errorf("Parse(yaml) =\n%v\nwant\n%v", def, want)
	}
	if fromJSON := mustParse(t, approvalJSON); !proto.Equal(fromJSON, def) {
		t.Errorf("YAML and JSON differ:\nyaml: %v\njson: %v", def, fromJSON)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
		t.Errorf("Validate: %v", err)
	}
	roundTrip(t, def)

	t.Run("schema as JSON text", func(t *testing.T) {
		d := mustParse(t, strings.Replace(approvalYAML, "    schema:\n      type: object\n      required: [approved]\n      properties:\n"+
			"        approved: {type: boolean}\n        amount: {type: number, minimum: 0.50}\n",
			"    schema: '{\"type\": \"object\", \"required\": [\"approved\"], \"properties\": {\"approved\": {\"type\": \"boolean\"}, \"amount\": {\"type\": \"number\", \"minimum\": 0.50}}}'\n", 1))
		if !proto.Equal(d, def) {
			t.Errorf("schema text parsed as %q, want %q", d.GetNodes()[1].GetSchema(), def.GetNodes()[1].GetSchema())
		}
	})
}

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"90s":    90 * time.Second,
		"168h":   168 * time.Hour,
		"1h30m":  90 * time.Minute,
		"3d":     72 * time.Hour,
		"2w":     14 * 24 * time.Hour,
		"1d12h":  36 * time.Hour,
		"1.5d":   36 * time.Hour,
		"1w1d1s": 8*24*time.Hour + time.Second,
		" 2d ":   48 * time.Hour,
		"-1d":    -24 * time.Hour,
		"+1w":    7 * 24 * time.Hour,
		"0d":     0,
	} {
		got, err := workflow.ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "d", "3x", "1..5d", "--1d", "1d-2h", "1e3d", "soon", "3 d", "100000w"} {
		if got, err := workflow.ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, want an error", in, got)
		}
	}
	for in, want := range map[string]float64{`"72h"`: 259200, `"1w"`: 604800, `"2d"`: 172800} {
		if got := mustParse(t, "name: w\ntimeout: "+in+"\n").GetTimeoutSeconds(); got != want {
			t.Errorf("timeout %s = %v seconds, want %v", in, got, want)
		}
	}
}

func TestParseNewFieldErrors(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want workflow.Problem
	}{
		{"type close to wait", "name: w\nnodes:\n  - {id: a, type: wiat}\n",
			workflow.Problem{NodeID: "a", Field: "type", Message: `unknown node type "wiat"; did you mean "wait"? (use start, action, decision, wait, sleep, join, map, workflow or end)`}},
		{"schema is a list", "name: w\nnodes:\n  - {id: a, type: wait, schema: [1]}\n",
			workflow.Problem{NodeID: "a", Field: "schema", Message: "must be a JSON Schema: a mapping such as {type: object, required: [approved]}, got a list"}},
		{"schema text is not JSON", "name: w\nnodes:\n  - {id: a, type: wait, schema: 'type: object'}\n",
			workflow.Problem{NodeID: "a", Field: "schema", Message: "must be a JSON Schema: a mapping, or its JSON text; the text is not JSON"}},
		{"retry is a number", "name: w\nretry: 3\n",
			workflow.Problem{Field: "retry", Message: "must be a mapping with max_attempts, initial_interval, backoff_coefficient, max_interval and/or on, got number 3"}},
		{"retry field misspelt", "name: w\nnodes:\n  - {id: a, type: action, code: x, retry: {max_attempt: 3}}\n",
			workflow.Problem{NodeID: "a", Field: "retry.max_attempt", Message: `unknown field; did you mean "max_attempts"? (known fields: max_attempts, initial_interval, backoff_coefficient, max_interval, on)`}},
		{"retry max_attempts not whole", "name: w\nretry: {max_attempts: 2.5}\n",
			workflow.Problem{Field: "retry.max_attempts", Message: "must be a whole number, got 2.5"}},
		{"retry interval not a duration", "name: w\nnodes:\n  - {id: a, type: action, code: x, retry: {initial_interval: soon}}\n",
			workflow.Problem{NodeID: "a", Field: "retry.initial_interval", Message: `must be a number of seconds or a duration such as "30s", "72h" or "2d", got "soon"`}},
		{"retry coefficient a string", "name: w\nretry: {backoff_coefficient: \"2\"}\n",
			workflow.Problem{Field: "retry.backoff_coefficient", Message: `must be a number, got string "2"`}},
		{"retry on entry a number", "name: w\nretry: {on: [1]}\n",
			workflow.Problem{Field: "retry.on[0]", Message: "must be error, timeout or sandbox_fault, got number 1"}},
		{"schedules a mapping", "name: w\nschedules: {every: 1m}\n",
			workflow.Problem{Field: "schedules", Message: "must be a list, got a mapping"}},
		{"schedule a string", "name: w\nschedules: [\"@daily\"]\n",
			workflow.Problem{Field: "schedules[0]", Message: `must be a mapping with cron or every, got string "@daily"`}},
		{"schedule field misspelt", "name: w\nschedules: [{every: 1m, timezon: UTC}]\n",
			workflow.Problem{Field: "schedules[0].timezon", Message: `unknown field; did you mean "timezone"? (known fields: id, cron, timezone, every, context, catchup, paused)`}},
		{"schedule context a list", "name: w\nschedules: [{every: 1m, context: [1]}]\n",
			workflow.Problem{Field: "schedules[0].context", Message: "must be a mapping (the context each run starts with), got a list"}},
		{"schedule every not a duration", "name: w\nschedules: [{every: often}]\n",
			workflow.Problem{Field: "schedules[0].every", Message: `must be a number of seconds or a duration such as "30s", "72h" or "2d", got "often"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := workflow.Parse([]byte(tt.src))
			var verr *workflow.ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Parse error = %v, want *ValidationError", err)
			}
			for _, p := range verr.Problems {
				if p == tt.want {
					return
				}
			}
			t.Errorf("no problem %+v in\n%v", tt.want, err)
		})
	}
}

func TestValidateWaitAndSleep(t *testing.T) {
	node := func(def *novav1.WorkflowDefinition, id string) *novav1.Node {
		for _, n := range def.GetNodes() {
			if n.GetId() == id {
				return n
			}
		}
		t.Fatalf("no node %q", id)
		return nil
	}
	tests := []struct {
		name string
		edit func(def *novav1.WorkflowDefinition)
		want []string // Problem.String() of each problem, in order
	}{
		{"valid", func(*novav1.WorkflowDefinition) {}, nil},
		{"wait without signal", func(def *novav1.WorkflowDefinition) { node(def, "approve").Signal = "" },
			[]string{`node "approve", field "signal": is required: the name of the signal that resumes the node, e.g. approval`}},
		{"signal of two tokens", func(def *novav1.WorkflowDefinition) { node(def, "approve").Signal = "manager approval" },
			[]string{`node "approve", field "signal": "manager approval" is not a single token; use letters, digits, '-' and '_' only (the name is part of a URL and of a subject)`}},
		{"signal with a dot", func(def *novav1.WorkflowDefinition) { node(def, "approve").Signal = "a.b" },
			[]string{`node "approve", field "signal": "a.b" is not a single token; use letters, digits, '-' and '_' only (the name is part of a URL and of a subject)`}},
		{"code on a wait node", func(def *novav1.WorkflowDefinition) { node(def, "approve").Code = "pass" },
			[]string{`node "approve": a wait node runs nothing, but it has code or a prompt; put the work in an action node`}},
		{"prompt on a sleep node", func(def *novav1.WorkflowDefinition) { node(def, "cool_off").Prompt = "sleep well" },
			[]string{`node "cool_off": a sleep node runs nothing, but it has code or a prompt; put the work in an action node`,
				`node "cool_off", field "prompt": AI (prompt) nodes need a model, and this deployment has none: give the AI agents OPENAI_API_KEY or OPENAI_BASE_URL and set NOVA_ALLOW_PROMPT=true on the graph engine`}},
		{"schema that does not compile", func(def *novav1.WorkflowDefinition) { node(def, "approve").Schema = `{"type":"numbr"}` },
			[]string{`node "approve", field "schema": is not a valid JSON Schema: at "type": must be one of "array", "boolean", "integer", "null", "number", "object", "string"`}},
		{"schema referring to a URL", func(def *novav1.WorkflowDefinition) {
			node(def, "approve").Schema = `{"$ref":"https://example.com/s.json"}`
		},
			[]string{`node "approve", field "schema": is not a valid JSON Schema: it refers to "https://example.com/s.json", outside the schema; a schema must hold all it refers to (no file or URL is fetched)`}},
		{"schema not JSON", func(def *novav1.WorkflowDefinition) { node(def, "approve").Schema = `{type: object}` },
			[]string{`node "approve", field "schema": is not JSON: invalid character 't' looking for beginning of object key string`}},
		{"decide_on edge without condition", func(def *novav1.WorkflowDefinition) { def.Edges[2].Condition = "" },
			[]string{`node "approve", field "edges[2].condition": edge approve -> done has no condition; with decide_on "approved" every edge leaving the wait node needs the value of payload field "approved" that selects it`}},
		{"decide_on condition twice", func(def *novav1.WorkflowDefinition) { def.Edges[2].Condition = "true" },
			[]string{`node "approve", field "edges[2].condition": condition "true" is used by more than one edge (to cool_off and to done)`}},
		{"decide_on with only a timeout edge", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges[:1], def.Edges[3:]...)
		}, []string{
			`node "approve": wait node deciding on "approved" has no outgoing edge for a value; add one edge per value of payload field "approved", each with that value as its condition`,
			`node "cool_off": unreachable: no path leads to it from start node "start"`,
			`node "until_due": unreachable: no path leads to it from start node "start"`,
			`node "charge": unreachable: no path leads to it from start node "start"`,
		}},
		{"without decide_on, one edge and a timeout edge", func(def *novav1.WorkflowDefinition) {
			node(def, "approve").DecideOn = ""
			def.Edges[1].Condition = ""
			def.Edges = append(def.Edges[:2], def.Edges[3:]...)
		}, nil},
		{"without decide_on, conditions", func(def *novav1.WorkflowDefinition) { node(def, "approve").DecideOn = "" },
			[]string{
				`node "approve", field "edges[1].condition": edge approve -> cool_off has condition "true"; a wait node without decide_on has edges without condition, all taken when its signal comes (and may have a "timeout" edge); set decide_on to choose the edge by a payload field`,
				`node "approve", field "edges[2].condition": edge approve -> done has condition "false"; a wait node without decide_on has edges without condition, all taken when its signal comes (and may have a "timeout" edge); set decide_on to choose the edge by a payload field`,
				`node "approve": has no outgoing edge without condition; a wait node needs at least one, taken when its signal comes`,
			}},
		{"without decide_on, two edges and a timeout edge to one of them", func(def *novav1.WorkflowDefinition) {
			node(def, "approve").DecideOn = ""
			def.Edges[1].Condition, def.Edges[2].Condition = "", ""
		}, nil},
		{"without decide_on, two edges to one node", func(def *novav1.WorkflowDefinition) {
			node(def, "approve").DecideOn = ""
			def.Edges[1].Condition, def.Edges[2].Condition = "", ""
			def.Edges[2].To = "cool_off"
		}, []string{
			`node "approve": has 2 edges to cool_off (edges[1], edges[2]); the branches leaving a node lead to different nodes: remove the repeated edge`,
		}},
		{"timeout edge without a timeout", func(def *novav1.WorkflowDefinition) { node(def, "approve").TimeoutSeconds = 0 },
			[]string{`node "approve", field "edges[3].condition": edge approve -> done has condition "timeout", but wait node approve has no timeout; set its timeout (e.g. 72h) or remove the edge`}},
		{"a wait node with a timeout needs no timeout edge", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges[:3], def.Edges[4:]...)
		}, nil},
		{"two timeout edges", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges, &novav1.Edge{From: "approve", To: "charge", Condition: "timeout"})
		}, []string{`node "approve", field "edges[7].condition": condition "timeout" is used by more than one edge (to done and to charge); a wait node has one timeout edge`}},
		{"timeout edge from an action node", func(def *novav1.WorkflowDefinition) { def.Edges[6].Condition = "timeout" },
			[]string{`node "charge", field "edges[6].condition": edge charge -> done has condition "timeout"; only a wait node with a timeout has a timeout edge`}},
		{"condition on a sleep node's edge", func(def *novav1.WorkflowDefinition) { def.Edges[4].Condition = "late" },
			[]string{`node "cool_off", field "edges[4].condition": edge cool_off -> until_due has condition "late"; only edges leaving a decision or wait node have conditions`}},
		{"sleep fanning out", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges, &novav1.Edge{From: "cool_off", To: "done"})
		}, nil},
		{"sleep with the same edge twice", func(def *novav1.WorkflowDefinition) {
			def.Edges = append(def.Edges, &novav1.Edge{From: "cool_off", To: "until_due"})
		}, []string{`node "cool_off": has 2 edges to until_due (edges[4], edges[7]); the branches leaving a node lead to different nodes: remove the repeated edge`}},
		{"sleep with duration and until", func(def *novav1.WorkflowDefinition) { node(def, "cool_off").Until = "due_at" },
			[]string{`node "cool_off": has both duration and until; a sleep node sleeps for a duration or until a time, not both`}},
		{"sleep with neither", func(def *novav1.WorkflowDefinition) { node(def, "cool_off").DurationSeconds = 0 },
			[]string{`node "cool_off": a sleep node needs duration (e.g. 90s or 2h) or until (a context key holding an RFC 3339 time)`}},
		{"sleep for a negative duration", func(def *novav1.WorkflowDefinition) { node(def, "cool_off").DurationSeconds = -5 },
			[]string{`node "cool_off", field "duration": must be more than 0 seconds, got -5`}},
		{"wait fields on an action node", func(def *novav1.WorkflowDefinition) {
			n := node(def, "charge")
			n.Signal, n.Schema, n.DecideOn = "go", `{}`, "x"
		}, []string{
			`node "charge", field "signal": only a wait node has signal; this is an action node`,
			`node "charge", field "schema": only a wait node has schema; this is an action node`,
			`node "charge", field "decide_on": only a wait node has decide_on; this is an action node`,
		}},
		{"sleep fields on a wait node", func(def *novav1.WorkflowDefinition) {
			n := node(def, "approve")
			n.DurationSeconds, n.Until = 5, "x"
		}, []string{
			`node "approve", field "duration": only a sleep node has duration; this is a wait node`,
			`node "approve", field "until": only a sleep node has until; this is a wait node`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def := mustParse(t, approvalYAML)
			tt.edit(def)
			checkProblems(t, workflow.Validate(def, workflow.ValidateOptions{}), tt.want)
		})
	}
}

// checkProblems checks that err lists exactly the problems want, in order.
func checkProblems(t *testing.T, err error, want []string) {
	t.Helper()
	if len(want) == 0 {
		if err != nil {
			t.Fatalf("Validate: %v", err)
		}
		return
	}
	var verr *workflow.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Validate error = %v, want *ValidationError", err)
	}
	var got []string
	for _, p := range verr.Problems {
		got = append(got, p.String())
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestWaitGraph(t *testing.T) {
	def := mustParse(t, approvalYAML)
	g := workflow.NewGraph(def)
	for value, want := range map[string]string{"true": "cool_off", "false": "done"} {
		if got, err := g.Decide("approve", value); err != nil || got != want {
			t.Errorf("Decide(approve, %q) = %q, %v; want %q", value, got, err, want)
		}
	}
	// The timeout edge is not a value of the payload field.
	_, err := g.Decide("approve", "timeout")
	var nm *workflow.NoMatchingEdgeError
	if !errors.As(err, &nm) {
		t.Fatalf("Decide(approve, timeout) error = %v, want *NoMatchingEdgeError", err)
	}
	if want := `wait node "approve": approved "timeout" matches no outgoing edge (allowed: "false", "true")`; err.Error() != want {
		t.Errorf("Error() = %s\nwant      %s", err, want)
	}
	if _, err := g.Decide("approve", ""); err == nil || err.Error() != `wait node "approve": the payload has no value for "approved" (allowed: "false", "true")` {
		t.Errorf("Decide(approve, \"\") error = %v", err)
	}
	if to, ok := g.TimeoutEdge("approve"); !ok || to != "done" {
		t.Errorf("TimeoutEdge(approve) = %q, %v; want done, true", to, ok)
	}
	for _, id := range []string{"cool_off", "charge", "missing"} {
		if to, ok := g.TimeoutEdge(id); ok {
			t.Errorf("TimeoutEdge(%s) = %q, true; want none", id, to)
		}
	}
	if next, err := g.Next("cool_off"); err != nil || next != "until_due" {
		t.Errorf("Next(cool_off) = %q, %v; want until_due", next, err)
	}
	if _, err := g.Decide("cool_off", "true"); err == nil {
		t.Error("Decide on a sleep node succeeded")
	}

	// Without decide_on, Next takes the edge without condition, whatever
	// the order of the edges.
	def.GetNodes()[1].DecideOn = ""
	def.Edges = []*novav1.Edge{{From: "start", To: "approve"}, {From: "approve", To: "done", Condition: "timeout"}, {From: "approve", To: "cool_off"}}
	g = workflow.NewGraph(def)
	if next, err := g.Next("approve"); err != nil || next != "cool_off" {
		t.Errorf("Next(approve) = %q, %v; want cool_off", next, err)
	}
	if to, ok := g.TimeoutEdge("approve"); !ok || to != "done" {
		t.Errorf("TimeoutEdge(approve) = %q, %v; want done, true", to, ok)
	}
}

func TestWaitTimeoutAndSleepFor(t *testing.T) {
	def := mustParse(t, approvalYAML)
	if got := workflow.WaitTimeout(def.GetNodes()[1]); got != 72*time.Hour {
		t.Errorf("WaitTimeout = %v, want 72h", got)
	}
	if got := workflow.WaitTimeout(&novav1.Node{}); got != 0 {
		t.Errorf("WaitTimeout without timeout = %v, want 0 (for ever)", got)
	}
	if got := workflow.SleepFor(def.GetNodes()[2]); got != 90*time.Second {
		t.Errorf("SleepFor = %v, want 90s", got)
	}
	if got := workflow.SleepFor(def.GetNodes()[3]); got != 0 {
		t.Errorf("SleepFor of an until node = %v, want 0", got)
	}
	if got := workflow.SleepFor(&novav1.Node{DurationSeconds: 1e300}); got <= 0 {
		t.Errorf("SleepFor of a huge duration = %v, want the longest Duration", got)
	}
}

// payload decodes JSON as the engine does: numbers as json.Number.
func payload(t *testing.T, text string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(text))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestCheckPayload(t *testing.T) {
	n := &novav1.Node{Id: "approve", Type: novav1.NodeType_NODE_TYPE_WAIT, Schema: `{
		"type": "object", "required": ["approved"], "additionalProperties": false,
		"properties": {
			"approved": {"type": "boolean"},
			"amount": {"type": "number", "minimum": 0.5, "maximum": 1e6},
			"count": {"type": "integer"},
			"note": {"type": ["string", "null"], "maxLength": 5},
			"tag": {"anyOf": [{"type": "string"}, {"type": "number"}]},
			"kind": {"enum": ["refund", "credit"]},
			"due": {"type": "string", "format": "date"},
			"lines": {"type": "array", "items": {"type": "object", "required": ["sku"], "properties": {"sku": {"type": "string", "pattern": "^[A-Z]+$"}}}}
		}
	}`}
	tests := []struct {
		payload string
		want    string // the error, "" for none
	}{
		{`{"approved": true}`, ""},
		{`{"approved": false, "amount": 1500.50, "count": 3, "note": null, "tag": 7, "kind": "refund", "due": "2026-12-01", "lines": [{"sku": "AB"}]}`, ""},
		{`{"approved": true, "count": 2.0}`, ""},
		{`{"approved": true, "amount": 123456789012345678901234567890}`, `payload field "amount": must be at most 1000000`},
		{`{}`, `payload field "approved": is required`},
		{`{"approved": "yes"}`, `payload field "approved": must be true or false`},
		{`{"approved": true, "amount": "1500"}`, `payload field "amount": must be a number`},
		{`{"approved": true, "amount": 0.25}`, `payload field "amount": must be at least 0.5`},
		{`{"approved": true, "count": 1.5}`, `payload field "count": must be a whole number`},
		{`{"approved": true, "note": 3}`, `payload field "note": must be a string or null`},
		{`{"approved": true, "note": "too long"}`, `payload field "note": must be at most 5 characters long`},
		{`{"approved": true, "tag": true}`, `payload field "tag": must be a string or a number`},
		{`{"approved": true, "kind": "cash"}`, `payload field "kind": must be one of "refund", "credit"`},
		{`{"approved": true, "due": "tomorrow"}`, `payload field "due": must be a valid date`},
		{`{"approved": true, "lines": [{"sku": "AB"}, {"sku": "ab"}]}`, `payload field "lines.1.sku": must match the pattern "^[A-Z]+$"`},
		{`{"approved": true, "lines": [{}]}`, `payload field "lines.0.sku": is required`},
		{`{"approved": true, "zeta": 1, "alpha": 2}`, `payload field "alpha": is not allowed`},
		// The first field in path order, however the validator went.
		{`{"approved": 1, "amount": "x", "count": "y"}`, `payload field "amount": must be a number`},
	}
	for _, tt := range tests {
		t.Run(tt.payload, func(t *testing.T) {
			err := workflow.CheckPayload(n, payload(t, tt.payload))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("CheckPayload: %v", err)
				}
				return
			}
			var perr *workflow.PayloadError
			if !errors.As(err, &perr) {
				t.Fatalf("CheckPayload error = %v, want *PayloadError", err)
			}
			if err.Error() != tt.want {
				t.Errorf("CheckPayload error = %s\nwant                  %s", err, tt.want)
			}
		})
	}

	t.Run("every field at fault", func(t *testing.T) {
		for _, tt := range []struct {
			payload string
			want    []string // each field's problem, in path order; the first is the error's text
		}{
			{`{"approved": 1, "amount": "x", "count": "y"}`, []string{
				`payload field "amount": must be a number`,
				`payload field "approved": must be true or false`,
				`payload field "count": must be a whole number`,
			}},
			{`{"amount": 0.25, "note": "too long", "lines": [{"sku": "ab"}, {}], "zeta": 1}`, []string{
				`payload field "amount": must be at least 0.5`,
				`payload field "approved": is required`,
				`payload field "lines.0.sku": must match the pattern "^[A-Z]+$"`,
				`payload field "lines.1.sku": is required`,
				`payload field "note": must be at most 5 characters long`,
				`payload field "zeta": is not allowed`,
			}},
			{`{"approved": "yes"}`, []string{`payload field "approved": must be true or false`}},
		} {
			t.Run(tt.payload, func(t *testing.T) {
				err := workflow.CheckPayload(n, payload(t, tt.payload))
				if err == nil || err.Error() != tt.want[0] {
					t.Fatalf("CheckPayload error = %v, want the first field's: %s", err, tt.want[0])
				}
				var first *workflow.PayloadError
				if !errors.As(err, &first) || first.Error() != tt.want[0] {
					t.Errorf("errors.As finds %v, want %s", first, tt.want[0])
				}
				each := []error{err}
				if m, ok := err.(interface{ Unwrap() []error }); ok {
					each = m.Unwrap()
				}
				var got []string
				for _, e := range each {
					var pe *workflow.PayloadError
					if !errors.As(e, &pe) {
						t.Fatalf("%v is no *PayloadError", e)
					}
					got = append(got, pe.Error())
				}
				if !slices.Equal(got, tt.want) {
					t.Errorf("fields at fault:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
				}
			})
		}
	})
	t.Run("the whole payload", func(t *testing.T) {
		n := &novav1.Node{Id: "w", Schema: `{"minProperties": 2}`}
		err := workflow.CheckPayload(n, payload(t, `{"a": 1}`))
		var perr *workflow.PayloadError
		if !errors.As(err, &perr) || perr.Field != "" || err.Error() != "payload: must have at least 2 fields" {
			t.Errorf("CheckPayload error = %#v (%v)", err, err)
		}
		if err := workflow.CheckPayload(n, nil); err == nil {
			t.Error("a nil payload passed a schema that wants 2 fields")
		}
	})
	t.Run("no schema", func(t *testing.T) {
		if err := workflow.CheckPayload(&novav1.Node{Id: "w"}, payload(t, `{"anything": [1, 2]}`)); err != nil {
			t.Errorf("CheckPayload without a schema: %v", err)
		}
	})
	t.Run("a schema that does not compile", func(t *testing.T) {
		err := workflow.CheckPayload(&novav1.Node{Id: "w", Schema: `{"type": 5}`}, payload(t, `{}`))
		var perr *workflow.PayloadError
		if err == nil || errors.As(err, &perr) || !strings.Contains(err.Error(), `wait node "w": its schema is not a valid JSON Schema`) {
			t.Errorf("CheckPayload error = %v", err)
		}
	})
	t.Run("error texts", func(t *testing.T) {
		for e, want := range map[*workflow.PayloadError]string{
			{Field: "amount", Problem: "must be a number"}: `payload field "amount": must be a number`,
			{Problem: "must be an object"}:                 `payload: must be an object`,
		} {
			if e.Error() != want {
				t.Errorf("Error() = %s, want %s", e.Error(), want)
			}
		}
	})
}

func TestCompileSchema(t *testing.T) {
	for _, ok := range []string{
		`{}`,
		`{"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"type": "string"}}}`,
		`{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object"}`,
	} {
		if _, err := workflow.CompileSchema(ok); err != nil {
			t.Errorf("CompileSchema(%s): %v", ok, err)
		}
	}
	for text, want := range map[string]string{
		`[1]`:               "is not a JSON Schema: want a mapping (an object), got an array",
		`{"required": "a"}`: `is not a valid JSON Schema: at "required": must be a list`,
		`{"properties": {"a": {"minimum": "x"}}}`: `is not a valid JSON Schema: at "properties.a.minimum": must be a number`,
		`{"pattern": "(a)\\1"}`:                   `is not a valid JSON Schema: at "pattern": must be a valid regex`,
		`{"$ref": "other.json"}`:                  `is not a valid JSON Schema: it refers to "other.json", outside the schema; a schema must hold all it refers to (no file or URL is fetched)`,
		`{"$ref": "file:///etc/passwd"}`:          `is not a valid JSON Schema: it refers to "file:///etc/passwd", outside the schema; a schema must hold all it refers to (no file or URL is fetched)`,
	} {
		_, err := workflow.CompileSchema(text)
		if err == nil || err.Error() != want {
			t.Errorf("CompileSchema(%s) error = %v\nwant %s", text, err, want)
		}
	}
}
