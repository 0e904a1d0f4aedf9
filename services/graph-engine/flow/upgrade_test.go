package flow

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// States written before every line was a record of its own (a one-line
// execution's line in the state's current-node fields, a join's arrivals
// in one list) are read and continued: a waiting execution, a sleeping one
// and a half-done map, each as that engine stored it, finish here.

func oldState(t *testing.T, yaml string, ctx string) *novav1.ExecutionState {
	t.Helper()
	def, err := workflow.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: jsonvalue.Proto([]byte(ctx)),
		StartedAt: tsNow(time.Now().Add(-time.Minute)), Nodes: map[string]*novav1.NodeState{}}
}

func TestOldStatesContinue(t *testing.T) {
	cfg := testConfig()
	t.Run("waiting", func(t *testing.T) {
		st := oldState(t, `
name: approve
nodes:
  - {id: start, type: start}
  - {id: approve, type: wait, signal: approval}
  - {id: end, type: end}
edges:
  - {from: start, to: approve}
  - {from: approve, to: end}
`, `{"x": 1}`)
		st.CurrentNode, st.WaitingFor, st.NodeInput, st.NodeStartedAt = "approve", "approval", st.Context, tsNow(time.Now())
		st.Sequence, st.Path = 2, []string{"start", "approve"}
		st.Nodes["start"] = &novav1.NodeState{Visits: 1, Status: statusSucceeded}
		st.Nodes["approve"] = &novav1.NodeState{Visits: 1, RetryAttempt: 1}
		tr := New(st, cfg, time.Now())
		cmd := &novav1.SignalExecution{ExecutionId: "x1", Signal: "approval", Payload: jsonvalue.Proto([]byte(`{"approved": true}`))}
		if err := tr.OnLine(func(b *novav1.Branch) bool { return b.WaitingFor == cmd.Signal },
			func() error { return tr.Signal(cmd, "s1", time.Now().Add(-time.Minute)) }); err != nil {
			t.Fatal(err)
		}
		tr.Settle()
		if got := string(jsonvalue.MustObject(st.Context).Bytes()); st.Status != statusSucceeded || got != `{"approved":true,"x":1}` {
			t.Fatalf("status %s (%s), context %s", st.Status, st.Error, got)
		}
	})
	t.Run("sleeping", func(t *testing.T) {
		st := oldState(t, `
name: nap
nodes:
  - {id: start, type: start}
  - {id: nap, type: sleep, duration: 1h}
  - {id: end, type: end}
edges:
  - {from: start, to: nap}
  - {from: nap, to: end}
`, `{"x": 1}`)
		st.CurrentNode, st.NodeInput, st.NodeStartedAt = "nap", st.Context, tsNow(time.Now())
		st.Timer = &novav1.Timer{Id: "nap-1-sleep", Kind: timerSleep, NodeId: "nap", Visit: 1, DueAt: tsNow(time.Now())}
		st.Sequence, st.Path = 2, []string{"start", "nap"}
		st.Nodes["start"] = &novav1.NodeState{Visits: 1, Status: statusSucceeded}
		st.Nodes["nap"] = &novav1.NodeState{Visits: 1, RetryAttempt: 1}
		if err := applyStep(New(st, cfg, time.Now()), func(t *Transition) error {
			return t.TimerFired(&novav1.TimerFired{ExecutionId: "x1", TimerId: "nap-1-sleep"})
		}); err != nil {
			t.Fatal(err)
		}
		if st.Status != statusSucceeded || len(st.Branches) != 0 {
			t.Fatalf("status %s (%s), lines %v", st.Status, st.Error, st.Branches)
		}
	})
	t.Run("half-done map", func(t *testing.T) {
		st := oldState(t, `
name: each
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, code: "context['result'] = context['item'] * 10"}
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`, `{"xs": [1, 2, 3]}`)
		// The map's line was a branch of its own (b1), its items b2..b4;
		// item 0 has finished.
		st.BranchSeq, st.Sequence, st.Dispatch, st.Path = 4, 5, 3, []string{"start", "each"}
		st.Nodes["start"] = &novav1.NodeState{Visits: 1, Status: statusSucceeded}
		st.Nodes["each"] = &novav1.NodeState{Visits: 1, RetryAttempt: 1}
		itemCtx := func(i int) *novav1.JSONValue {
			return jsonvalue.Proto(fmt.Appendf(nil, `{"item": %d, "index": %d}`, i+1, i))
		}
		st.Branches = []*novav1.Branch{
			{Id: "b1", CurrentNode: "each", Context: st.Context, ForkChanges: []*novav1.KeyList{{}},
				MapRun: &novav1.MapRun{Visit: 1, Total: 3, Started: 3, Finished: 1, Results: []byte("10"), DoneIndex: []int32{0}, DoneEnd: []int32{2}}},
			{Id: "b3", IsItem: true, MapBranch: "b1", Item: 1, FromNode: "each", CurrentNode: "each", PendingStepId: "x1/each/1#1/1",
				Context: itemCtx(1), ItemNode: &novav1.NodeState{Visits: 1, Attempts: 1, RetryAttempt: 1}},
			{Id: "b4", IsItem: true, MapBranch: "b1", Item: 2, FromNode: "each", CurrentNode: "each", PendingStepId: "x1/each/1#2/1",
				Context: itemCtx(2), ItemNode: &novav1.NodeState{Visits: 1, Attempts: 1, RetryAttempt: 1}},
		}
		kept := keptResults{}
		for i, step := range []string{"x1/each/1#2/1", "x1/each/1#1/1"} {
			res := &novav1.CodeExecuted{ExecutionId: "x1", NodeId: "each", StepId: step, Sequence: int32(2 + i), Status: nodeSuccess,
				ContextUpdates: jsonvalue.Proto(fmt.Appendf(nil, `{"result": %d}`, 30-10*i))}
			tr := New(st, cfg, time.Now())
			kept.bind(tr)
			if err := tr.OnStep(step, func() error { return tr.CodeExecuted(res) }); err != nil {
				t.Fatal(err)
			}
			tr.Settle()
			kept.apply(tr)
		}
		if len(kept) != 0 {
			t.Errorf("results left after the map finished: %v", kept)
		}
		got := jsonvalue.MustObject(st.Context)
		if st.Status != statusSucceeded || string(got["results"]) != "[10,20,30]" || string(got["xs"]) != "[1,2,3]" {
			t.Fatalf("status %s (%s), context %s", st.Status, st.Error, got.Bytes())
		}
	})
	t.Run("join with arrivals", func(t *testing.T) {
		st := oldState(t, `
name: both
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "pass"}
  - {id: b, type: action, code: "pass"}
  - {id: join, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: start, to: b}
  - {from: a, to: join}
  - {from: b, to: join}
  - {from: join, to: end}
`, `{}`)
		st.BranchSeq, st.Sequence, st.Dispatch, st.Path = 2, 3, 2, []string{"start", "a", "b"}
		st.Nodes["start"] = &novav1.NodeState{Visits: 1, Status: statusSucceeded}
		st.Nodes["a"] = &novav1.NodeState{Visits: 1, Status: statusSucceeded}
		st.Nodes["b"] = &novav1.NodeState{Visits: 1, Attempts: 1, RetryAttempt: 1}
		st.Joins = map[string]*novav1.JoinState{"join": {Arrived: []*novav1.Branch{{Id: "b1", FromNode: "a",
			Context: jsonvalue.Proto([]byte(`{"a": 1}`)), ChangedKeys: []string{"a"}, ForkChanges: []*novav1.KeyList{{}}, NodeStartedAt: tsNow(time.Now())}}}}
		st.Branches = []*novav1.Branch{{Id: "b2", CurrentNode: "b", PendingStepId: "x1/b/1/1", Context: st.Context, ForkChanges: []*novav1.KeyList{{}}}}
		res := &novav1.CodeExecuted{ExecutionId: "x1", NodeId: "b", StepId: "x1/b/1/1", Sequence: 2, Status: nodeSuccess,
			ContextUpdates: jsonvalue.Proto([]byte(`{"b": 2}`))}
		tr := New(st, cfg, time.Now())
		if err := tr.OnStep(res.StepId, func() error { return tr.CodeExecuted(res) }); err != nil {
			t.Fatal(err)
		}
		tr.Settle()
		if got := string(jsonvalue.MustObject(st.Context).Bytes()); st.Status != statusSucceeded || got != `{"a":1,"b":2}` {
			t.Fatalf("status %s (%s), context %s", st.Status, st.Error, got)
		}
	})
}

// A map waiting for its items stores the execution's context once: its
// line's context and node input are the execution's, given back as the
// state is read, and what the map completes with names that input.
func TestContextStoredOnceAtAMap(t *testing.T) {
	cfg := testConfig()
	xs := make([]int, 500)
	st, cmd := begin(t, cfg, `
name: once
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: 1, output: ys, code: 'context["result"] = context["item"]'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, map[string]any{"xs": xs})
	kept := keptResults{}
	for i := range xs {
		data, err := MarshalState(st)
		if err != nil {
			t.Fatal(err)
		}
		if i == 1 && len(data) > 2*len(st.Context.GetRaw()) {
			t.Errorf("the state is %d bytes for a context of %d: the context is stored more than once", len(data), len(st.Context.GetRaw()))
		}
		st = &novav1.ExecutionState{}
		if err := proto.Unmarshal(data, st); err != nil {
			t.Fatal(err)
		}
		tr := New(st, cfg, time.Now())
		root := st.Branches[0]
		if root.Id != "" || root.Context != st.Context || root.NodeInput != root.Context || root.InputIsContext {
			t.Fatalf("item %d: the map's line read back with context %p (the execution's %p), input %p, flag %v",
				i, root.Context, st.Context, root.NodeInput, root.InputIsContext)
		}
		kept.bind(tr)
		if err := tr.OnStep(cmd.StepId, func() error { return tr.CodeExecuted(resultFor(cmd, map[string]any{"result": i})) }); err != nil {
			t.Fatal(err)
		}
		tr.Settle()
		kept.apply(tr)
		for _, o := range tr.out {
			if nc, ok := o.Msg.(*novav1.NodeCompleted); ok && nc.NodeId == "each" && nc.Item == nil {
				if got := jsonvalue.MustObject(nc.InputContext); len(got) != 1 || len(got["xs"]) != len(jsonvalue.MustObject(st.Context)["xs"]) {
					t.Errorf("the map's input as it completed: %s", nc.InputContext.GetRaw())
				}
			}
		}
		cmd = lastCommand(t, tr)
	}
	if st.Status != statusSucceeded {
		t.Fatalf("status %s: %s", st.Status, st.Error)
	}
}

// A map whose items' results add up to more than MapResultsMaxBytes fails
// at the item that passes it, naming the bound; the execution's context is
// its own, and no item result past the bound is kept.
func TestMapResultsBounded(t *testing.T) {
	cfg := testConfig()
	cfg.MapResultsMaxBytes = 1000
	st, cmd := begin(t, cfg, `
name: bounded
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: 1, output: ys, code: 'context["result"] = "x" * 300'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, map[string]any{"xs": make([]int, 10)})
	kept := keptResults{}
	big := strings.Repeat("x", 300)
	added := 0
	for i := 0; st.Status == statusRunning; i++ {
		if i == 10 {
			t.Fatal("all ten items finished: the bound was not kept")
		}
		tr := New(st, cfg, time.Now())
		kept.bind(tr)
		if err := tr.OnStep(cmd.StepId, func() error { return tr.CodeExecuted(resultFor(cmd, map[string]any{"result": big})) }); err != nil {
			t.Fatal(err)
		}
		tr.Settle()
		kept.apply(tr)
		added += len(tr.ResultsFx)
		if st.Status == statusRunning {
			cmd = lastCommand(t, tr)
		}
	}
	// Each result is 302 bytes of JSON: the fourth passes 1000.
	if st.Status != statusFailed || !strings.Contains(st.Error, `node "each" failed: the results of its items add up to more than 1000 bytes (NOVA_MAP_RESULTS_MAX_BYTES) after 4 of 10 items`) {
		t.Fatalf("status %s: %s", st.Status, st.Error)
	}
	if got := jsonvalue.MustObject(st.Context); len(got) != 1 || got["xs"] == nil {
		t.Errorf("the failed execution's context: %s; want its own (xs)", st.Context.GetRaw())
	}
	if added != 3 || len(kept) != 0 {
		t.Errorf("%d item results kept, %d left; want the 3 within the bound, purged as the map failed", added, len(kept))
	}
}
