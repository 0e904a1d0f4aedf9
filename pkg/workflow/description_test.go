package workflow

import (
	"strings"
	"testing"
)

// A workflow's description is kept: parsed, written back, and so compared
// between revisions.
func TestWorkflowDescriptionKept(t *testing.T) {
	def, err := Parse([]byte(`
name: described
description: Routes invoices to the right approver
nodes:
  - {id: start, type: start}
  - {id: end, type: end}
edges: [{from: start, to: end}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if def.GetDescription() != "Routes invoices to the right approver" {
		t.Fatalf("description %q", def.GetDescription())
	}
	out, err := FormatYAML(def)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "description: Routes invoices to the right approver") {
		t.Errorf("formatted without its description:\n%s", out)
	}
	again, err := Parse(out)
	if err != nil || again.GetDescription() != def.GetDescription() {
		t.Errorf("round trip: %q, %v", again.GetDescription(), err)
	}
}
