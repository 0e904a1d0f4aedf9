package workflow_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const pinYAML = `
name: pricing
model: gpt-4o
nodes:
  - id: start
    type: start
  - id: discount
    type: action
    description: Works out the discount
    prompt: |
      Calculate a 10% discount when the total is over 1000.
      Store it as discount.
  - id: scrape
    type: action
    language: javascript
    code: "module.exports = async () => []"
  - id: done
    type: end
edges:
  - {from: start, to: discount}
  - {from: discount, to: scrape}
  - {from: scrape, to: done}
`

func TestPinCode(t *testing.T) {
	def, err := workflow.Parse([]byte(pinYAML))
	if err != nil {
		t.Fatal(err)
	}
	before := proto.Clone(def)
	const code = "# STAGE: TASK\ncontext['discount'] = context['total'] * 0.1\n"

	t.Run("an AI node becomes a code node that keeps its prompt", func(t *testing.T) {
		out, err := workflow.PinCode(def, "discount", code, "")
		if err != nil {
			t.Fatal(err)
		}
		n := node(t, out, "discount")
		if n.GetPrompt() != "" {
			t.Errorf("prompt %q left: the node must run its code, not a model", n.GetPrompt())
		}
		wantHead := "# Pinned from an AI node; its task (prompt) was:\n" +
			"# Calculate a 10% discount when the total is over 1000.\n" +
			"# Store it as discount.\n"
		if n.GetCode() != wantHead+code {
			t.Errorf("code:\n%s\nwant the prompt as a comment, then the code", n.GetCode())
		}
		wantDesc := "Works out the discount\n\nCalculate a 10% discount when the total is over 1000.\nStore it as discount."
		if n.GetDescription() != wantDesc {
			t.Errorf("description %q, want %q", n.GetDescription(), wantDesc)
		}
		if err := workflow.Validate(out, workflow.ValidateOptions{}); err != nil {
			t.Errorf("the pinned workflow needs a model still: %v", err)
		}
		if !proto.Equal(def, before) {
			t.Error("PinCode changed its input")
		}
	})

	t.Run("a code node gets the new code in the language given", func(t *testing.T) {
		js := "module.exports = async (ctx) => [{title: 'a'}]\n"
		out, err := workflow.PinCode(def, "scrape", js, "JavaScript")
		if err != nil {
			t.Fatal(err)
		}
		n := node(t, out, "scrape")
		if n.GetCode() != js || n.GetLanguage() != "javascript" || n.GetDescription() != "" {
			t.Errorf("node %v", n)
		}
		// Every other node is as it was.
		for _, id := range []string{"start", "discount", "done"} {
			if !proto.Equal(node(t, out, id), node(t, def, id)) {
				t.Errorf("node %s changed", id)
			}
		}
	})

	t.Run("a JavaScript comment for a prompt pinned as JavaScript", func(t *testing.T) {
		out, err := workflow.PinCode(def, "discount", "return []\n", "javascript")
		if err != nil {
			t.Fatal(err)
		}
		if got := node(t, out, "discount").GetCode(); !strings.HasPrefix(got, "// Pinned from an AI node; its task (prompt) was:\n// Calculate") {
			t.Errorf("code %q", got)
		}
	})

	t.Run("the description survives parsing", func(t *testing.T) {
		if got := node(t, def, "discount").GetDescription(); got != "Works out the discount" {
			t.Errorf("parsed description %q", got)
		}
	})

	for _, c := range []struct {
		name, node, code, language string
		is                         error
		says                       string
	}{
		{"unknown node", "nope", code, "", workflow.ErrUnknownNode, `no node "nope"`},
		{"start node", "start", code, "", workflow.ErrNotRunnable, "a start node"},
		{"end node", "done", code, "", workflow.ErrNotRunnable, "an end node"},
		{"empty code", "discount", " \n", "", nil, "the code is empty"},
		{"unknown language", "discount", code, "ruby", nil, `"ruby"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := workflow.PinCode(def, c.node, c.code, c.language)
			if err == nil {
				t.Fatal("no error")
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v, want %v", err, c.is)
			}
			if !strings.Contains(err.Error(), c.says) {
				t.Errorf("error %q does not say %q", err, c.says)
			}
		})
	}
}

func node(t *testing.T, def *novav1.WorkflowDefinition, id string) *novav1.Node {
	t.Helper()
	for _, n := range def.GetNodes() {
		if n.GetId() == id {
			return n
		}
	}
	t.Fatalf("no node %s", id)
	return nil
}
