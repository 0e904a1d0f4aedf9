package workflow_test

import (
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/workflow"
)

// The control-flow constructs as nova validate sees them: each misuse is
// refused naming the node and the field.
func TestValidateConstructs(t *testing.T) {
	base := `
name: c
%s
nodes:
  - {id: start, type: start}
%s
  - {id: a, type: action, code: pass}
  - {id: b, type: action, code: pass}
  - {id: end, type: end}
edges:
  - {from: start, to: x}
%s
`
	for _, c := range []struct {
		name, top, node, edges string
		want                   string // "" when valid
	}{
		{"boundary events", "", `  - {id: x, type: sleep, duration: 1h, on: [{signal: stop, goto: a}, {after: 5s, goto: b, interrupt: false}]}`,
			"  - {from: x, to: end}\n  - {from: a, to: end}\n  - {from: b, to: end}", ""},
		{"goto unknown", "", `  - {id: x, type: sleep, duration: 1h, on: [{after: 5s, goto: nowhere}]}`,
			"  - {from: x, to: a}\n  - {from: a, to: b}\n  - {from: b, to: end}", `node "x", field "on[0].goto": goto "nowhere": no node has that id`},
		{"signal and after", "", `  - {id: x, type: sleep, duration: 1h, on: [{after: 5s, signal: s, goto: a}]}`,
			"  - {from: x, to: end}\n  - {from: a, to: b}\n  - {from: b, to: end}", `field "on[0]": takes one of signal (a signal's name) or after (a duration), got both`},
		{"boundary on a join", "", `  - {id: x, type: join, on: [{after: 5s, goto: a}]}`,
			"  - {from: start, to: a}\n  - {from: a, to: x}\n  - {from: x, to: b}\n  - {from: b, to: end}", `node "x", field "on"`},
		{"choose many on an action", "", `  - {id: x, type: action, code: pass, choose: many}`,
			"  - {from: x, to: a}\n  - {from: a, to: b}\n  - {from: b, to: end}", `node "x", field "choose"`},
		{"choose unknown", "", `  - {id: x, type: decision, code: pass, choose: several}`,
			"  - {from: x, to: a, condition: a}\n  - {from: x, to: b, condition: b}\n  - {from: a, to: end}\n  - {from: b, to: end}", `field "choose": must be one or many`},
		{"cancel_remaining on wait all", "", `  - {id: x, type: action, code: pass}
  - {id: j, type: join, cancel_remaining: true}`,
			"  - {from: x, to: a}\n  - {from: x, to: b}\n  - {from: a, to: j}\n  - {from: b, to: j}\n  - {from: j, to: end}", `node "j", field "cancel_remaining": join node "j" waits for all its branches`},
		{"terminate on an action", "", `  - {id: x, type: action, code: pass, terminate: true}`,
			"  - {from: x, to: a}\n  - {from: a, to: b}\n  - {from: b, to: end}", `node "x", field "terminate"`},
		{"complete_when both", "", `  - {id: x, type: map, items: xs, code: pass, complete_when: {succeeded: 2, failed: 1}}`,
			"  - {from: x, to: a}\n  - {from: a, to: b}\n  - {from: b, to: end}", `complete_when takes one of succeeded or failed (a number of items), got both`},
		{"complete_when failed without collect", "", `  - {id: x, type: map, items: xs, code: pass, complete_when: {failed: 1}}`,
			"  - {from: x, to: a}\n  - {from: a, to: b}\n  - {from: b, to: end}", `complete_when failed needs on_item_failure: collect`},
		{"signals keep negative", "signals: {keep: -1}", `  - {id: x, type: action, code: pass}`,
			"  - {from: x, to: a}\n  - {from: a, to: b}\n  - {from: b, to: end}", `signals.keep: must be from 0 (the default, 100) to 10000, got -1`},
		{"max_depth too deep", "", `  - {id: x, type: workflow, workflow: c, max_depth: 500}`,
			"  - {from: x, to: a}\n  - {from: a, to: b}\n  - {from: b, to: end}", `field "max_depth": must be from 0 (the default, 10) to 100`},
	} {
		t.Run(c.name, func(t *testing.T) {
			src := strings.Replace(strings.Replace(strings.Replace(base, "%s", c.top, 1), "%s", c.node, 1), "%s", c.edges, 1)
			if c.name == "boundary on a join" {
				src = strings.Replace(src, "  - {from: start, to: x}\n", "", 1)
			}
			def, err := workflow.Parse([]byte(src))
			if err == nil {
				err = workflow.Validate(def, workflow.ValidateOptions{})
			}
			switch {
			case c.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
				t.Fatalf("error %v; want one with %q", err, c.want)
			}
		})
	}
}
