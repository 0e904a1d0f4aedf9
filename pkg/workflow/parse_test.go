package workflow_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"google.golang.org/protobuf/proto"
)

const routingYAML = `
name: routing
model: gpt-4o-mini
timeout: 30
network: true
nodes:
  - id: start
    type: start
  - id: extract
    type: action
    code: context["amount"] = 1500
    timeout: 5
    max_visits: 3
    language: python
  - id: check_amount
    type: decision
    code: context["branch_decision"] = context["amount"] > 1000
  - id: manager_approval
    type: action
    code: context["route"] = "manager"
    network: true
  - id: auto_approve
    type: action
    code: context["route"] = "auto"
  - id: done
    type: end
edges:
  - from: start
    to: extract
  - from: extract
    to: check_amount
  - from: check_amount
    to: manager_approval
    condition: true
  - from: check_amount
    to: auto_approve
    condition: false
  - from: manager_approval
    to: done
  - from: auto_approve
    to: done
`

const routingJSON = `{
  "name": "routing", "model": "gpt-4o-mini", "timeout": 30, "network": true,
  "nodes": [
    {"id": "start", "type": "start"},
    {"id": "extract", "type": "action", "code": "context[\"amount\"] = 1500",
     "timeout": 5, "max_visits": 3, "language": "python"},
    {"id": "check_amount", "type": "decision",
     "code": "context[\"branch_decision\"] = context[\"amount\"] > 1000"},
    {"id": "manager_approval", "type": "action", "code": "context[\"route\"] = \"manager\"", "network": true},
    {"id": "auto_approve", "type": "action", "code": "context[\"route\"] = \"auto\""},
    {"id": "done", "type": "end"}
  ],
  "edges": [
    {"from": "start", "to": "extract"},
    {"from": "extract", "to": "check_amount"},
    {"from": "check_amount", "to": "manager_approval", "condition": "true"},
    {"from": "check_amount", "to": "auto_approve", "condition": "false"},
    {"from": "manager_approval", "to": "done"},
    {"from": "auto_approve", "to": "done"}
  ]
}`

func mustParse(t *testing.T, src string) *novav1.WorkflowDefinition {
	t.Helper()
	def, err := workflow.Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return def
}

func TestParseFields(t *testing.T) {
	def := mustParse(t, routingYAML)
	want := &novav1.WorkflowDefinition{
		Name: "routing", Model: "gpt-4o-mini", TimeoutSeconds: 30, Network: true,
		Nodes: []*novav1.Node{
			{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
			{Id: "extract", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: `context["amount"] = 1500`,
				TimeoutSeconds: 5, MaxVisits: 3, Language: "python"},
			{Id: "check_amount", Type: novav1.NodeType_NODE_TYPE_DECISION,
				Code: `context["branch_decision"] = context["amount"] > 1000`},
			{Id: "manager_approval", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: `context["route"] = "manager"`, Network: true},
			{Id: "auto_approve", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: `context["route"] = "auto"`},
			{Id: "done", Type: novav1.NodeType_NODE_TYPE_END},
		},
		Edges: []*novav1.Edge{
			{From: "start", To: "extract"},
			{From: "extract", To: "check_amount"},
			{From: "check_amount", To: "manager_approval", Condition: "true"},
			{From: "check_amount", To: "auto_approve", Condition: "false"},
			{From: "manager_approval", To: "done"},
			{From: "auto_approve", To: "done"},
		},
	}
	if !proto.Equal(def, want) {
		t.Errorf("Parse(yaml) =\n%v\nwant\n%v", def, want)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestParseAllowHosts(t *testing.T) {
	def := mustParse(t, `
name: fetcher
network: true
allow_hosts: [api.example.com, "*.cdn.example.com"]
nodes:
  - id: fetch
    type: action
    code: pass
    network: true
    allow_hosts: ["API.Example.org.:8443", "10.0.0.5:9000", "[::1]:*"]
`)
	if got, want := def.GetAllowHosts(), []string{"api.example.com", "*.cdn.example.com"}; !slices.Equal(got, want) {
		t.Errorf("workflow allow_hosts = %q, want %q", got, want)
	}
	if got, want := def.GetNodes()[0].GetAllowHosts(), []string{"api.example.org:8443", "10.0.0.5:9000", "[::1]:*"}; !slices.Equal(got, want) {
		t.Errorf("node allow_hosts = %q, want %q (canonical forms)", got, want)
	}
}

func TestParseYAMLAndJSONAreEquivalent(t *testing.T) {
	fromYAML := mustParse(t, routingYAML)
	fromJSON := mustParse(t, routingJSON)
	if !proto.Equal(fromYAML, fromJSON) {
		t.Errorf("YAML and JSON differ:\nyaml: %v\njson: %v", fromYAML, fromJSON)
	}
}

func TestParseOriginalNOVASpelling(t *testing.T) {
	def := mustParse(t, `
name: original
nodes:
  - {id: begin, type: StartNode}
  - {id: fetch, type: ActionNode, executor: e2b, code: "context['x'] = 1"}
  - {id: summarise, type: actionnode, executor: cached, code: "Summarise the invoice in one sentence"}
  - {id: route, type: DECISIONNODE, code: "context['branch_decision'] = True"}
  - {id: finish, type: End}
edges:
  - {from: begin, to: fetch}
  - {from: fetch, to: summarise}
  - {from: summarise, to: route}
  - {from: route, to: finish, condition: true}
`)
	wantTypes := []novav1.NodeType{
		novav1.NodeType_NODE_TYPE_START, novav1.NodeType_NODE_TYPE_ACTION, novav1.NodeType_NODE_TYPE_ACTION,
		novav1.NodeType_NODE_TYPE_DECISION, novav1.NodeType_NODE_TYPE_END,
	}
	for i, n := range def.GetNodes() {
		if n.GetType() != wantTypes[i] {
			t.Errorf("node %q type = %v, want %v", n.GetId(), n.GetType(), wantTypes[i])
		}
	}
	fetch, summarise := def.GetNodes()[1], def.GetNodes()[2]
	if fetch.GetCode() != "context['x'] = 1" || fetch.GetPrompt() != "" {
		t.Errorf("e2b node: code %q prompt %q, want code kept", fetch.GetCode(), fetch.GetPrompt())
	}
	if summarise.GetPrompt() != "Summarise the invoice in one sentence" || summarise.GetCode() != "" {
		t.Errorf("cached node: code %q prompt %q, want the code moved to prompt", summarise.GetCode(), summarise.GetPrompt())
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestParseNormalisesConditions(t *testing.T) {
	tests := []struct {
		yaml string
		want string
	}{
		{"true", "true"},
		{"false", "false"},
		{`"true"`, "true"},
		{"high", "high"},
		{"2", "2"},
		{"1000.0", "1000"},
		{"1.5", "1.5"},
		{"-3", "-3"},
	}
	for _, tt := range tests {
		t.Run(tt.yaml, func(t *testing.T) {
			def := mustParse(t, "name: w\nedges:\n  - from: a\n    to: b\n    condition: "+tt.yaml+"\n")
			if got := def.GetEdges()[0].GetCondition(); got != tt.want {
				t.Errorf("condition %s parsed as %q, want %q", tt.yaml, got, tt.want)
			}
		})
	}
}

func TestParseTimeoutForms(t *testing.T) {
	tests := []struct {
		timeout string
		want    float64
	}{
		{"45", 45},
		{"2.5", 2.5},
		{`"90s"`, 90},
		{`"2m"`, 120},
		{`"15"`, 15},
	}
	for _, tt := range tests {
		t.Run(tt.timeout, func(t *testing.T) {
			def := mustParse(t, "name: w\ntimeout: "+tt.timeout+"\n")
			if got := def.GetTimeoutSeconds(); got != tt.want {
				t.Errorf("timeout %s = %v seconds, want %v", tt.timeout, got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name      string
		src       string
		malformed bool
		// wantText must all appear in the error message.
		wantText []string
		// wantProblem, when set, must be among the ValidationError problems.
		wantProblem *workflow.Problem
	}{
		{
			name:      "malformed YAML",
			src:       "name: w\nnodes:\n  - id: a\n   type: start\n",
			malformed: true,
			wantText:  []string{"malformed workflow definition", "line 2"},
		},
		{
			name:      "malformed JSON",
			src:       "{\"name\": \"w\",\n \"nodes\": [\n}",
			malformed: true,
			wantText:  []string{"malformed workflow definition", "line"},
		},
		{
			name:      "empty document",
			src:       "  \n",
			malformed: true,
			wantText:  []string{"empty"},
		},
		{
			name:      "top level is a list",
			src:       "- name: w\n",
			malformed: true,
			wantText:  []string{"top level must be a mapping"},
		},
		{
			name:      "duplicate key",
			src:       "name: w\nnodes:\n  - id: a\n    code: one\n    code: two\n",
			malformed: true,
			wantText:  []string{"code", "already"},
		},
		{
			name:        "unknown node field",
			src:         "name: w\nnodes:\n  - id: extract\n    type: action\n    codee: print(1)\n",
			wantText:    []string{`node "extract"`, `"codee"`, "unknown field", `did you mean "code"`},
			wantProblem: &workflow.Problem{NodeID: "extract", Field: "codee"},
		},
		{
			name:        "unknown field on a node without id",
			src:         "name: w\nnodes:\n  - type: action\n    promt: hi\n",
			wantText:    []string{"nodes[0].promt", `did you mean "prompt"`},
			wantProblem: &workflow.Problem{Field: "nodes[0].promt"},
		},
		{
			name:        "unknown top-level field",
			src:         "name: w\nnode: []\n",
			wantText:    []string{`node: unknown field; did you mean "nodes"`},
			wantProblem: &workflow.Problem{Field: "node"},
		},
		{
			name:        "unknown edge field",
			src:         "name: w\nedges:\n  - from: a\n    to: b\n    when: x\n",
			wantText:    []string{"edges[0].when", "unknown field"},
			wantProblem: &workflow.Problem{Field: "edges[0].when"},
		},
		{
			name:        "unknown node type",
			src:         "name: w\nnodes:\n  - id: a\n    type: loop\n",
			wantText:    []string{`unknown node type "loop"`},
			wantProblem: &workflow.Problem{NodeID: "a", Field: "type"},
		},
		{
			name:        "timeout is not a number",
			src:         "name: w\nnodes:\n  - id: a\n    timeout: [1]\n",
			wantText:    []string{"must be a number of seconds"},
			wantProblem: &workflow.Problem{NodeID: "a", Field: "timeout"},
		},
		{
			name:        "timeout is not a duration",
			src:         "name: w\ntimeout: soon\n",
			wantText:    []string{`"soon"`},
			wantProblem: &workflow.Problem{Field: "timeout"},
		},
		{
			name:        "max_visits not whole",
			src:         "name: w\nnodes:\n  - id: a\n    max_visits: 2.5\n",
			wantText:    []string{"whole number"},
			wantProblem: &workflow.Problem{NodeID: "a", Field: "max_visits"},
		},
		{
			name:        "network not a boolean",
			src:         "name: w\nnetwork: sometimes\n",
			wantText:    []string{"true or false"},
			wantProblem: &workflow.Problem{Field: "network"},
		},
		{
			name:        "allow_hosts not a list",
			src:         "name: w\nallow_hosts: example.com\n",
			wantText:    []string{"allow_hosts: must be a list"},
			wantProblem: &workflow.Problem{Field: "allow_hosts"},
		},
		{
			name:        "allow_hosts entry is a URL",
			src:         "name: w\nnodes:\n  - id: a\n    network: true\n    allow_hosts: [\"https://api.example.com/v1\"]\n",
			wantText:    []string{`"https://api.example.com/v1"`, "no scheme"},
			wantProblem: &workflow.Problem{NodeID: "a", Field: "allow_hosts[0]"},
		},
		{
			name:        "allow_hosts entry with a bad port",
			src:         "name: w\nallow_hosts: [\"example.com:99999\", 7]\n",
			wantText:    []string{"allow_hosts[0]", "1-65535", "allow_hosts[1]", "must be a string"},
			wantProblem: &workflow.Problem{Field: "allow_hosts[1]"},
		},
		{
			name:        "unknown executor",
			src:         "name: w\nnodes:\n  - id: a\n    type: action\n    executor: docker\n    code: x\n",
			wantText:    []string{`unknown executor "docker"`},
			wantProblem: &workflow.Problem{NodeID: "a", Field: "executor"},
		},
		{
			name:        "condition is a list",
			src:         "name: w\nedges:\n  - from: a\n    to: b\n    condition: [1, 2]\n",
			wantText:    []string{"edges[0].condition", "string, boolean or number"},
			wantProblem: &workflow.Problem{Field: "edges[0].condition"},
		},
		{
			name:        "nodes not a list",
			src:         "name: w\nnodes: {id: a}\n",
			wantText:    []string{"nodes: must be a list"},
			wantProblem: &workflow.Problem{Field: "nodes"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def, err := workflow.Parse([]byte(tt.src))
			if err == nil {
				t.Fatalf("Parse succeeded with %v, want an error", def)
			}
			if got := errors.Is(err, workflow.ErrMalformed); got != tt.malformed {
				t.Errorf("errors.Is(err, ErrMalformed) = %v, want %v (err: %v)", got, tt.malformed, err)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not contain %q", err, s)
				}
			}
			if tt.wantProblem != nil {
				var verr *workflow.ValidationError
				if !errors.As(err, &verr) {
					t.Fatalf("error %v is not a *ValidationError", err)
				}
				if !hasProblem(verr, tt.wantProblem.NodeID, tt.wantProblem.Field, "") {
					t.Errorf("problems %+v lack node %q field %q", verr.Problems, tt.wantProblem.NodeID, tt.wantProblem.Field)
				}
			}
		})
	}
}

// TestParseReportsAllShapeProblems checks that one run lists every mistake
// instead of stopping at the first.
func TestParseReportsAllShapeProblems(t *testing.T) {
	_, err := workflow.Parse([]byte(`
name: w
nodes:
  - id: a
    type: action
    codee: x
  - id: b
    type: loop
edges:
  - from: a
    too: b
`))
	var verr *workflow.ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Parse error = %v, want *ValidationError", err)
	}
	if len(verr.Problems) != 3 {
		t.Errorf("got %d problems, want 3:\n%v", len(verr.Problems), err)
	}
}

func hasProblem(verr *workflow.ValidationError, nodeID, field, msg string) bool {
	for _, p := range verr.Problems {
		if p.NodeID == nodeID && p.Field == field && strings.Contains(p.Message, msg) {
			return true
		}
	}
	return false
}

// TestParseYAML12 reads YAML as 1.2 does: only true and false are booleans,
// so nodes named as YAML 1.1 booleans keep their names; integers keep their
// digits; aliases expand within a bound; a repeated key names both lines.
func TestParseYAML12(t *testing.T) {
	for _, id := range []string{"y", "n", "on", "off", "yes", "no", "Y", "NO", "On", "null_node"} {
		t.Run(id, func(t *testing.T) {
			src := "name: w\nnodes:\n  - {id: start, type: start}\n  - id: " + id + "\n    type: decision\n    code: pass\n  - {id: end, type: end}\n" +
				"edges:\n  - {from: start, to: " + id + "}\n  - from: " + id + "\n    to: end\n    condition: " + id + "\n"
			def := mustParse(t, src)
			if got := def.GetNodes()[1].GetId(); got != id {
				t.Errorf("node id %q, want %q", got, id)
			}
			if e := def.GetEdges()[1]; e.GetFrom() != id || e.GetCondition() != id {
				t.Errorf("edge from %q condition %q, want %q", e.GetFrom(), e.GetCondition(), id)
			}
			if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
				t.Errorf("Validate: %v", err)
			}
		})
	}
	t.Run("booleans and numbers", func(t *testing.T) {
		def := mustParse(t, "name: w\nnetwork: true\nnodes:\n  - {id: a, type: start, timeout: 0x1e}\nedges:\n  - {from: a, to: b, condition: 0o17}\n")
		if !def.GetNetwork() || def.GetNodes()[0].GetTimeoutSeconds() != 30 || def.GetEdges()[0].GetCondition() != "15" {
			t.Errorf("network %v, timeout %v, condition %q", def.GetNetwork(), def.GetNodes()[0].GetTimeoutSeconds(), def.GetEdges()[0].GetCondition())
		}
	})
	t.Run("anchors and merge keys", func(t *testing.T) {
		def := mustParse(t, "name: w\nnodes:\n  - &base {id: a, type: action, code: pass, timeout: 5}\n  - {<<: *base, id: b}\nedges: []\n")
		if b := def.GetNodes()[1]; b.GetId() != "b" || b.GetCode() != "pass" || b.GetTimeoutSeconds() != 5 {
			t.Errorf("merged node %v", b)
		}
	})
	for name, tt := range map[string]struct{ src, want string }{
		"duplicate key": {"name: w\nnodes: []\nname: v\n", `line 3: key "name" is already set on line 1`},
		"billion laughs": {"a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\nc: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\n" +
			"d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\ne: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\nf: [*e, *e, *e, *e, *e, *e, *e, *e, *e, *e]\n", "more than 100000 values"},
		"two documents":   {"name: w\n---\nname: v\n", "second YAML document"},
		"infinite number": {"name: w\ntimeout: .inf\n", "cannot be written as JSON"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := workflow.Parse([]byte(tt.src))
			if err == nil || !errors.Is(err, workflow.ErrMalformed) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Parse: %v, want a malformed-definition error containing %q", err, tt.want)
			}
		})
	}
}
