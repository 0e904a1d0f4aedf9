package main

import (
	"strings"
	"testing"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

// The progress lines of an execution that runs branches say which branch
// each visit ran in, and name a map's items by their position.
func TestProgressShowsBranchesAndItems(t *testing.T) {
	var out strings.Builder
	p := newProgressPrinter(&out, []string{"start", "price", "score"})
	p.print(client.Progress{NodeStarted: &novav1.NodeStarted{NodeId: "price", NodeType: "action", Visit: 1, Branch: "b2"}})
	p.print(client.Progress{NodeCompleted: &novav1.NodeCompleted{NodeId: "price", Status: "success", Visit: 1, Branch: "b2", ExecutionTimeMs: 12}})
	p.print(client.Progress{NodeStarted: &novav1.NodeStarted{NodeId: "score", NodeType: "map", Visit: 1, Branch: "b4", Item: new(int32(3))}})
	p.print(client.Progress{NodeCompleted: &novav1.NodeCompleted{NodeId: "score", Status: "failed", Visit: 1, Branch: "b4", Item: new(int32(3)),
		ErrorMessage: "no threes"}})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	want := []string{
		"▶ price    started  action  branch b2",
		"✓ price    succeeded 12.0 ms  branch b2",
		"▶ score[3] started  map",
		"✗ score[3] failed   0.0 ms  no threes",
	}
	if len(lines) != len(want) {
		t.Fatalf("lines:\n%s", out.String())
	}
	for i, w := range want {
		if strings.TrimSpace(lines[i]) != w {
			t.Errorf("line %d = %q, want %q", i, strings.TrimSpace(lines[i]), w)
		}
	}
}
