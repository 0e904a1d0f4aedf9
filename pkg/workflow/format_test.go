package workflow_test

import (
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// roundTrip formats def and parses it back: it must be def again.
func roundTrip(t *testing.T, def *novav1.WorkflowDefinition) string {
	t.Helper()
	out, err := workflow.FormatYAML(def)
	if err != nil {
		t.Fatalf("FormatYAML: %v", err)
	}
	back, err := workflow.Parse(out)
	if err != nil {
		t.Fatalf("Parse(FormatYAML(def)): %v\n%s", err, out)
	}
	if !proto.Equal(back, def) {
		t.Fatalf("Parse(FormatYAML(def)) differs from def:\n%v\nwant\n%v\nYAML:\n%s", back, def, out)
	}
	return string(out)
}

func TestFormatYAML(t *testing.T) {
	for _, name := range []string{"invoice-routing.yaml", "ai-orders.yaml"} {
		t.Run(name, func(t *testing.T) {
			def, err := workflow.Load(filepath.Join("..", "..", "examples", name), workflow.ValidateOptions{AllowPrompt: true})
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, def)
		})
	}

	t.Run("every field", func(t *testing.T) {
		def, err := workflow.Parse([]byte(`
name: all
model: gpt-4o
timeout: 1.5
network: true
allow_hosts: [api.example.com, "files.example.com:8443"]
cache: false
cache_validate: model
nodes:
  - {id: start, type: start}
  - id: pick
    type: decision
    description: "Chooses: yes or no # not a comment"
    model: gpt-4o-mini
    timeout: 90s
    max_visits: 3
    network: true
    allow_hosts: [other.example.com]
    cache: true
    cache_validate: rules
    prompt: "Say yes\nor no"
  - id: js
    type: action
    language: javascript
    code: "module.exports = async (ctx) => ({ok: true})"
  - {id: end, type: end}
edges:
  - {from: start, to: pick}
  - {from: pick, to: js, condition: true}
  - {from: pick, to: end, condition: "no"}
  - {from: js, to: end}
`))
		if err != nil {
			t.Fatal(err)
		}
		out := roundTrip(t, def)
		// Code and prompts of several lines read as written; start and end
		// nodes and edges take a line each.
		for _, want := range []string{"prompt: |-\n      Say yes\n      or no\n", "  - {id: start, type: start}\n",
			"  - {from: pick, to: js, condition: \"true\"}\n", "timeout: 1.5\n", "timeout: 90\n", "cache: false\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
	})

	// Text a block could not keep as it is.
	for name, code := range map[string]string{
		"carriage returns":        "x = 1\r\ny = 2\r\n",
		"trailing spaces":         "x = 1   \ny = 2\n",
		"leading spaces":          "  x = 1\ny = 2",
		"no final line break":     "x = 1\ny = 2",
		"several final breaks":    "x = 1\n\n\n",
		"tabs and unicode":        "if x:\n\ty = 'é — ✓'\n",
		"a line separator":        "x = 'a\u2028b'\ny = 1\n",
		"what looks like YAML":    "--- \n# c\n- a: b\n...\n",
		"a document end in a row": "x = 1\n...\ny = 2\n",
	} {
		t.Run(name, func(t *testing.T) {
			def := &novav1.WorkflowDefinition{Name: "w", Nodes: []*novav1.Node{
				{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
				{Id: "n", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: code, Description: code},
				{Id: "end", Type: novav1.NodeType_NODE_TYPE_END},
			}, Edges: []*novav1.Edge{{From: "start", To: "n"}, {From: "n", To: "end"}}}
			roundTrip(t, def)
		})
	}

	t.Run("a pinned node", func(t *testing.T) {
		def, err := workflow.Parse([]byte(pinYAML))
		if err != nil {
			t.Fatal(err)
		}
		pinned, err := workflow.PinCode(def, "discount", "discount = context['total'] * 0.1\ncontext['discount'] = discount\n", "")
		if err != nil {
			t.Fatal(err)
		}
		out := roundTrip(t, pinned)
		if !strings.Contains(out, "    code: |\n      # Pinned from an AI node; its task (prompt) was:\n") {
			t.Errorf("the pinned code is not a block starting with the prompt:\n%s", out)
		}
		if strings.Contains(out, "prompt:") {
			t.Errorf("a pinned node has no prompt:\n%s", out)
		}
	})

	t.Run("wait, sleep, retry and schedules", func(t *testing.T) {
		def := mustParse(t, approvalYAML)
		out := roundTrip(t, def)
		for _, want := range []string{
			"retry: {max_attempts: 3, initial_interval: 1, backoff_coefficient: 2, max_interval: 30, on: [error, timeout, sandbox_fault]}\n",
			"  - id: every-5\n    cron: '*/5 * * * *'\n    timezone: Europe/Madrid\n    catchup: latest\n    context:\n      amount: 1500.50\n      id: 9007199254740993\n",
			"  - {id: \"1\", every: 60}\n",
			"    type: wait\n    signal: approval\n    decide_on: approved\n    description: Approve the invoice?\n    timeout: 259200\n    schema:\n",
			"        amount:\n          minimum: 0.50\n",
			"  - {id: cool_off, type: sleep, duration: 90}\n",
			"  - {id: until_due, type: sleep, until: due_at}\n",
			"    retry: {max_attempts: 5, on: [sandbox_fault]}\n",
			"  - {from: approve, to: done, condition: timeout}\n",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
		}
	})

	t.Run("JSON values YAML could misread", func(t *testing.T) {
		schema := `{"$defs":{"<<":{"const":"<<"}},"enum":["yes","no","on","null","true","1.0","0x1f","","- a",": b","#c","multi\nline"],` +
			`"properties":{"<<":{"$ref":"#/$defs/%3C%3C"},"big":{"maximum":123456789012345678901234567890},"e":{"minimum":1E+5},"f":{"multipleOf":0.10},"z":{"maximum":-0}},"type":["object","null"]}`
		def := &novav1.WorkflowDefinition{Name: "w", Nodes: []*novav1.Node{
			{Id: "w", Type: novav1.NodeType_NODE_TYPE_WAIT, Signal: "s", Schema: schema},
		}, Schedules: []*novav1.Schedule{{Id: "0", EverySeconds: 60, Context: &novav1.JSONValue{Raw: []byte(`{"<<":[{},[],null,true,-1.5e-7],"k":"a: b"}`)}}}}
		roundTrip(t, def)
		if _, err := workflow.CompileSchema(schema); err != nil {
			t.Errorf("CompileSchema: %v", err)
		}
	})

	if _, err := workflow.FormatYAML(nil); err == nil {
		t.Error("FormatYAML(nil) succeeded")
	}
}
