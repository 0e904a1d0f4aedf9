package workflow

import (
	"testing"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// CanReach computes what a node reaches once per Graph and answers later
// questions about that node from what it kept.
func TestCanReachMemoizes(t *testing.T) {
	g := NewGraph(&novav1.WorkflowDefinition{Edges: []*novav1.Edge{{From: "a", To: "b"}, {From: "b", To: "c"}}})
	if len(g.reach) != 0 {
		t.Fatalf("a new Graph holds reachable sets: %v", g.reach)
	}
	if !g.CanReach("a", "c") {
		t.Fatal("CanReach(a, c) = false, want true")
	}
	if len(g.reach) != 1 || len(g.reach["a"]) != 2 {
		t.Fatalf("after CanReach(a, c) the Graph holds %v, want a's set {b, c}", g.reach)
	}
	// An answer from the kept set: the edges are not walked again.
	g.out = nil
	if !g.CanReach("a", "b") || g.CanReach("a", "a") {
		t.Error("CanReach(a, ...) did not answer from the kept set")
	}
	if g.CanReach("b", "c") {
		t.Error("CanReach(b, c) with no edges left = true, want false (b's set is computed now)")
	}
	if len(g.reach) != 2 {
		t.Errorf("the Graph holds %d sets, want 2 (a's and b's)", len(g.reach))
	}
}
