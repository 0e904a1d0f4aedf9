package execution

import (
	"testing"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The view reads the engine's state whatever its shape: one line in the
// lines, one line in the fields older states held it in, several lines
// (branches, items), and an ended execution.
func TestViewOf(t *testing.T) {
	def := &novav1.WorkflowDefinition{Name: "w", Nodes: []*novav1.Node{{Id: "approve", Type: novav1.NodeType_NODE_TYPE_WAIT, Signal: "approval"}}}
	nodes := map[string]*novav1.NodeState{"approve": {Visits: 2, Status: "running"}}
	tests := []struct {
		name                    string
		st                      *novav1.ExecutionState
		current, waiting, lines string
	}{
		{"one line", &novav1.ExecutionState{Status: StatusRunning, Definition: def, Nodes: nodes,
			Branches: []*novav1.Branch{{CurrentNode: "approve", WaitingFor: "approval"}}}, "approve", "approval", ""},
		{"one line in an older state's fields", &novav1.ExecutionState{Status: StatusRunning, Definition: def, Nodes: nodes,
			CurrentNode: "approve", WaitingFor: "approval"}, "approve", "approval", ""},
		{"branches and an item", &novav1.ExecutionState{Status: StatusRunning, Definition: def, Nodes: nodes,
			Branches: []*novav1.Branch{{Id: "b1", CurrentNode: "approve", WaitingFor: "approval"},
				{Id: "b2", IsItem: true, Item: 3, FromNode: "each", CurrentNode: "each"}}}, "", "approval", "b1@approve b2@each#3"},
		{"ended", &novav1.ExecutionState{Status: StatusSucceeded, Definition: def, Nodes: nodes}, "", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := ViewOf(tt.st)
			var waiting, lines string
			if v.Waiting != nil {
				waiting = v.Waiting.Line.WaitingFor
				if v.Waiting.Node.GetId() != "approve" {
					t.Errorf("wait node %v", v.Waiting.Node)
				}
			}
			for i, l := range v.Lines {
				if i > 0 {
					lines += " "
				}
				lines += l.ID + "@" + l.Node
				if l.Item != nil {
					lines += "#" + string(rune('0'+*l.Item))
				}
			}
			if v.CurrentNode != tt.current || waiting != tt.waiting || lines != tt.lines {
				t.Errorf("current %q, waiting %q, lines %q; want %q, %q, %q", v.CurrentNode, waiting, lines, tt.current, tt.waiting, tt.lines)
			}
			if v.Workflow != "w" || v.Node("approve").Visits != 2 || v.Node("other").Visits != 0 {
				t.Errorf("workflow %q, visits %d", v.Workflow, v.Node("approve").Visits)
			}
		})
	}
}
