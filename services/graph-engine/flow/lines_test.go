package flow

import (
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func arrival(id, from, ctx string, changed ...string) *novav1.Branch {
	return &novav1.Branch{Id: id, FromNode: from, Context: jsonvalue.Proto([]byte(ctx)), ChangedKeys: changed}
}

func TestMergeLines(t *testing.T) {
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
			got, _, _, err := mergeLines(tt.merge, tt.arrivals)
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

// forked is a line that descends from forks, each "fork:key,key" naming a
// fork and what its ancestor changed before it.
func forked(id, from, ctx string, changed []string, forks ...string) *novav1.Branch {
	b := arrival(id, from, ctx, changed...)
	for _, f := range forks {
		name, keys, _ := strings.Cut(f, ":")
		kl := &novav1.KeyList{Fork: name, Node: strings.Split(name, "@")[0]}
		if keys != "" {
			kl.Keys = strings.Split(keys, ",")
		}
		b.ForkChanges = append(b.ForkChanges, kl)
	}
	return b
}

// TestMergeLinesByCausality: s1 sets k=1 and forks into a and s2; s2 sets
// k=2 and m=1 and forks into b1 and b2. At a join of a, b1 and b2, what s2
// wrote is b1's and b2's change (made after they parted from a), so it
// wins in every arrival order.
func TestMergeLinesByCausality(t *testing.T) {
	a := forked("b1", "a", `{"k": 1}`, nil, "s1@1:k")
	b1 := forked("b3", "b1", `{"k": 2, "m": 1}`, nil, "s1@1:k", "s2@3:k,m")
	b2 := forked("b4", "b2", `{"k": 2, "m": 1}`, nil, "s1@1:k", "s2@3:k,m")
	b1Again := forked("b3", "b1", `{"k": 3, "m": 1}`, []string{"k"}, "s1@1:k", "s2@3:k,m")
	aWrites := forked("b1", "a", `{"k": 5}`, []string{"k"}, "s1@1:k")
	orders := [][]*novav1.Branch{{a, b1, b2}, {b1, a, b2}, {b1, b2, a}, {b2, b1, a}}
	for i, order := range orders {
		got, history, changed, err := mergeLines("", order)
		if err != nil {
			t.Fatalf("order %d: %v", i, err)
		}
		if string(got.Bytes()) != `{"k":2,"m":1}` {
			t.Errorf("order %d: merged %s, want {\"k\":2,\"m\":1}", i, got.Bytes())
		}
		if len(history) != 0 {
			t.Errorf("order %d: history %v, want none (the join closes the outer fork)", i, history)
		}
		if strings.Join(changed, ",") != "a_done,k,m" && strings.Join(changed, ",") != "k,m" {
			t.Errorf("order %d: changed %v, want k,m", i, changed)
		}
	}
	t.Run("a write after the inner fork overtakes what the inner fork inherited", func(t *testing.T) {
		for _, order := range [][]*novav1.Branch{{a, b1Again, b2}, {b2, b1Again, a}} {
			got, _, _, err := mergeLines("", order)
			if err != nil || string(got.Bytes()) != `{"k":3,"m":1}` {
				t.Errorf("merged %s (%v), want k 3", got.Bytes(), err)
			}
		}
	})
	t.Run("writes on both sides of the outer fork conflict", func(t *testing.T) {
		for _, order := range [][]*novav1.Branch{{aWrites, b1, b2}, {b2, b1, aWrites}} {
			_, _, _, err := mergeLines("", order)
			if err == nil || !strings.Contains(err.Error(), `context key "k"`) {
				t.Errorf("merged without the conflict on k: %v", err)
			}
		}
	})
}

// startIn starts the execution tr's state holds at its start node, as the
// engine's start does.
func startIn(tr *Transition) {
	tr.StartLine()
	tr.Enter(tr.graph.Start().Id)
	tr.KeepChanges()
	tr.ln = nil
	tr.Settle()
}

// applyStep applies fn to the line that waits for a result or a timer, as
// the engine's handlers do, and settles what follows.
func applyStep(tr *Transition, fn func(*Transition) error) error {
	err := tr.OnLine(func(b *novav1.Branch) bool { return b.PendingStepId != "" || b.Timer != nil }, func() error { return fn(tr) })
	if err == nil {
		tr.Settle()
	}
	return err
}

// line0 is the first line of st (one at no node when it has none).
func line0(st *novav1.ExecutionState) *novav1.Branch {
	if len(st.Branches) == 0 {
		return &novav1.Branch{}
	}
	return st.Branches[0]
}

// TestJoinsWaitingForEachOtherFailAtOnce: should a state get there that
// validation did not refuse (an older definition), two joins on one cycle
// that wait for the lines parked at each other fail the execution as soon
// as the last line parks, naming both.
func TestJoinsWaitingForEachOtherFailAtOnce(t *testing.T) {
	def, err := workflow.Parse([]byte(`
name: two-joins-one-cycle
nodes:
  - {id: start, type: start}
  - {id: p, type: action, code: "pass"}
  - {id: q, type: action, code: "pass"}
  - {id: J, type: join}
  - {id: K, type: join}
  - {id: d, type: decision, code: "pass"}
  - {id: end, type: end}
edges:
  - {from: start, to: p}
  - {from: start, to: q}
  - {from: p, to: J}
  - {from: q, to: K}
  - {from: J, to: K}
  - {from: K, to: d}
  - {from: d, to: J, condition: back}
  - {from: d, to: end, condition: out}
`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	st := &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: jsonvalue.Object{}.Proto(), StartedAt: tsNow(time.Now())}
	tr := New(st, cfg, time.Now())
	startIn(tr)
	var cmds []*novav1.ExecuteCode
	for _, o := range tr.out {
		if c, ok := o.Msg.(*novav1.ExecuteCode); ok {
			cmds = append(cmds, c)
		}
	}
	if len(cmds) != 2 {
		t.Fatalf("start dispatched %d commands, want p and q", len(cmds))
	}
	for i, c := range cmds {
		tr := New(st, cfg, time.Now())
		res := &novav1.CodeExecuted{ExecutionId: "x1", NodeId: c.NodeId, StepId: c.StepId, Sequence: c.Sequence, Status: nodeSuccess}
		if err := tr.OnStep(c.StepId, func() error { return tr.CodeExecuted(res) }); err != nil {
			t.Fatal(err)
		}
		tr.Settle()
		if i == 0 && st.Status != statusRunning {
			t.Fatalf("ended after one line parked: %s %s", st.Status, st.Error)
		}
	}
	if st.Status != statusFailed {
		t.Fatalf("status %s, want failed as the second line parks", st.Status)
	}
	for _, w := range []string{`joins "J", "K" wait for each other`, `at "J"`, `at "K"`} {
		if !strings.Contains(st.Error, w) {
			t.Errorf("error %q does not say %q", st.Error, w)
		}
	}
}
