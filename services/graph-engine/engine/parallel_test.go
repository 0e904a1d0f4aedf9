package engine

import (
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func arrival(id, from, ctx string, changed ...string) *novav1.Branch {
	return &novav1.Branch{Id: id, FromNode: from, Context: jsonvalue.Proto([]byte(ctx)), ChangedKeys: changed}
}

func TestMergeArrivals(t *testing.T) {
	left := arrival("b1", "left", `{"n": 1, "keep": "x", "a": 1, "total": 1, "branch_decision": "l"}`, "a", "total", "branch_decision")
	right := arrival("b2", "right", `{"n": 1, "keep": "x", "b": 2, "total": 2}`, "b", "total")
	deleted := arrival("b3", "drop", `{"n": 1}`, "keep")
	tests := []struct {
		name     string
		merge    string
		arrivals []*novav1.Branch
		want     string
		err      []string
	}{
		{"disjoint keys", "", []*novav1.Branch{arrival("b1", "l", `{"n": 1, "a": 1}`, "a"), arrival("b2", "r", `{"n": 1, "b": 2}`, "b")},
			`{"a":1,"b":2,"n":1}`, nil},
		{"conflict names the key and both branches", "", []*novav1.Branch{left, right}, "",
			[]string{`branches b1 (from node "left") and b2 (from node "right") both changed context key "total"`, "merge: last"}},
		{"last", "last", []*novav1.Branch{left, right}, `{"a":1,"b":2,"keep":"x","n":1,"total":2}`, nil},
		{"list in arrival order", "list", []*novav1.Branch{right, left}, `{"a":1,"b":2,"keep":"x","n":1,"total":[2,1]}`, nil},
		{"the same value twice is no conflict", "", []*novav1.Branch{arrival("b1", "l", `{"t": 5}`, "t"), arrival("b2", "r", `{"t": 5}`, "t")},
			`{"t":5}`, nil},
		{"a deletion is a change", "", []*novav1.Branch{deleted, arrival("b4", "other", `{"n": 1, "keep": "x", "c": 3}`, "c")},
			`{"c":3,"n":1}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := mergeArrivals(&novav1.Node{Id: "join", Merge: tt.merge}, tt.arrivals)
			if tt.err != nil {
				if err == nil {
					t.Fatalf("merged %s, want an error", got.Bytes())
				}
				for _, w := range tt.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got.Bytes()) != tt.want {
				t.Errorf("merged %s, want %s", got.Bytes(), tt.want)
			}
		})
	}
}
