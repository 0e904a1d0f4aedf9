package flow

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The transition, kind by kind, as (state, event) -> (state, commands,
// events): each case runs a workflow in memory through a script of events
// (sandbox results, timers, signals, a child's end, a cancel) and writes,
// after each, the lines, joins and status of the state and what the
// transition published. testdata/golden/<case>.golden holds what a person
// checked; go test -run TestKindsGolden -update writes it anew (read the
// diff before committing it).

var update = flag.Bool("update", false, "write the golden files of TestKindsGolden")

// goldenRun is an execution in memory and the commands it waits on.
type goldenRun struct {
	t       *testing.T
	cfg     Config
	st      *novav1.ExecutionState
	pending []*novav1.ExecuteCode
	starts  []*novav1.StartWorkflow
	out     strings.Builder
	now     time.Time
	kept    keptResults
	signals int // signals sent, each its own event
}

func (g *goldenRun) apply(what string, fn func(tr *Transition) error) {
	g.t.Helper()
	g.now = g.now.Add(time.Second)
	tr := New(g.st, g.cfg, g.now)
	if g.kept == nil {
		g.kept = keptResults{}
	}
	g.kept.bind(tr)
	err := fn(tr)
	if err == nil {
		tr.Settle()
	}
	fmt.Fprintf(&g.out, "> %s\n", what)
	if err != nil {
		fmt.Fprintf(&g.out, "  refused: %v\n", err)
	}
	for _, o := range tr.out {
		g.record(o)
	}
	for _, r := range tr.ResultsFx {
		fmt.Fprintf(&g.out, "  keep result %s = %s\n", r.Key, r.Value)
	}
	for _, prefix := range tr.PurgeFx {
		fmt.Fprintf(&g.out, "  drop results %s.*\n", prefix)
	}
	g.kept.apply(tr)
	g.state()
}

func (g *goldenRun) record(o OutEvent) {
	switch m := o.Msg.(type) {
	case *novav1.ExecuteCode:
		g.pending = append(g.pending, m)
		fmt.Fprintf(&g.out, "  command sandbox %s\n", m.StepId)
	case *novav1.StartWorkflow:
		g.starts = append(g.starts, m)
		fmt.Fprintf(&g.out, "  command start %s (workflow %s)\n", m.ExecutionId, m.WorkflowName)
	case *novav1.CancelExecution:
		fmt.Fprintf(&g.out, "  command cancel %s: %s\n", m.ExecutionId, m.Reason)
	case *novav1.NodeStarted:
		fmt.Fprintf(&g.out, "  event node.started %s#%d%s\n", m.NodeId, m.Visit, where(m.Branch, m.Item))
	case *novav1.NodeCompleted:
		fmt.Fprintf(&g.out, "  event node.completed %s#%d%s %s", m.NodeId, m.Visit, where(m.Branch, m.Item), m.Status)
		if m.PathTaken != "" {
			fmt.Fprintf(&g.out, " -> %s", m.PathTaken)
		}
		if m.ErrorMessage != "" {
			fmt.Fprintf(&g.out, " (%s)", m.ErrorMessage)
		}
		g.out.WriteString("\n")
	case *novav1.NodeWaiting:
		fmt.Fprintf(&g.out, "  event node.waiting %s#%d %s %s\n", m.NodeId, m.Visit, m.Kind, m.Signal)
	case *novav1.TimerFired:
		fmt.Fprintf(&g.out, "  timer %s due +%s\n", m.TimerId, m.DueAt.AsTime().Sub(g.now))
	case *novav1.WorkflowCompleted:
		fmt.Fprintf(&g.out, "  event workflow.completed %s", m.Status)
		if m.Error != "" {
			fmt.Fprintf(&g.out, " (%s)", m.Error)
		}
		fmt.Fprintf(&g.out, " context %s\n", jsonvalue.MustObject(m.Context).Bytes())
	case *novav1.ExecutionCancelled:
		fmt.Fprintf(&g.out, "  event execution.cancelled by %s\n", m.RequestedBy)
	case *novav1.ExecutionStopped:
		fmt.Fprintf(&g.out, "  event execution.stopped %v\n", m.NodeIds)
	case *novav1.SignalRejected:
		fmt.Fprintf(&g.out, "  event signal.rejected %s: %s\n", m.Signal, m.Reason)
	case *novav1.ChildCompleted:
		fmt.Fprintf(&g.out, "  event child.completed %s %s\n", m.ChildExecutionId, m.Status)
	case *novav1.StepCompleted, *novav1.WorkflowStarted:
	default:
		fmt.Fprintf(&g.out, "  %s %T\n", o.Type, m)
	}
}

func where(branch string, item *int32) string {
	switch {
	case item != nil:
		return fmt.Sprintf(" [%s item %d]", branch, *item)
	case branch != "":
		return " [" + branch + "]"
	}
	return ""
}

// state writes the lines, joins and status the state holds.
func (g *goldenRun) state() {
	st := g.st
	var lines []string
	for _, l := range st.Branches {
		s := cmp.Or(l.Id, "line") + "@" + l.CurrentNode
		switch {
		case l.IsItem:
			s += fmt.Sprintf("(item %d)", l.Item)
		case l.MapRun != nil:
			s += fmt.Sprintf("(map %d/%d done)", l.MapRun.Finished, l.MapRun.Total)
		case l.WaitingFor != "":
			s += "(signal " + l.WaitingFor + ")"
		case l.Timer != nil:
			s += "(timer " + l.Timer.Kind + ")"
		}
		if len(l.AbsorbedAt) > 0 {
			s += fmt.Sprintf(" ends at %v", l.AbsorbedAt)
		}
		lines = append(lines, s)
	}
	var joins []string
	for _, id := range slices.Sorted(func(yield func(string) bool) {
		for k := range st.Joins {
			if !yield(k) {
				return
			}
		}
	}) {
		for _, a := range st.Joins[id].Activations {
			var ids []string
			for _, r := range a.Arrived {
				ids = append(ids, cmp.Or(r.Id, "line"))
			}
			joins = append(joins, fmt.Sprintf("%s[%s]: %s", id, cmp.Or(a.Scope, "-"), strings.Join(ids, ",")))
		}
	}
	fmt.Fprintf(&g.out, "  = %s | lines %s | joins %s\n", st.Status, cmp.Or(strings.Join(lines, " "), "-"), cmp.Or(strings.Join(joins, " "), "-"))
}

// take removes the pending command of node (a map item: "node#i").
func (g *goldenRun) take(node string) *novav1.ExecuteCode {
	g.t.Helper()
	id, item, isItem := strings.Cut(node, "#")
	for i, c := range g.pending {
		if c.NodeId == id && (!isItem || strings.Contains(c.StepId, "#"+item+"/")) {
			g.pending = slices.Delete(g.pending, i, i+1)
			return c
		}
	}
	g.t.Fatalf("no pending command of %s (pending %d)", node, len(g.pending))
	return nil
}

// step applies one scripted event: "ok NODE {updates}", "fail NODE msg",
// "timer NODE", "signal NAME {payload}", "child NODE status {context}",
// "cancel".
func (g *goldenRun) step(s string) {
	g.t.Helper()
	verb, rest, _ := strings.Cut(s, " ")
	arg, payload, _ := strings.Cut(rest, " ")
	switch verb {
	case "ok", "fail":
		cmd := g.take(arg)
		r := &novav1.CodeExecuted{ExecutionId: "x1", NodeId: cmd.NodeId, StepId: cmd.StepId, Sequence: cmd.Sequence, Status: nodeSuccess,
			ContextUpdates: jsonvalue.Proto([]byte(cmp.Or(payload, "{}")))}
		if verb == "fail" {
			r.Status, r.ErrorKind, r.Error, r.ContextUpdates = "error", "code_error", payload, nil
		}
		g.apply(s, func(tr *Transition) error { return tr.OnStep(r.StepId, func() error { return tr.CodeExecuted(r) }) })
	case "timer":
		var id string
		for _, l := range g.st.Branches {
			if l.Timer != nil && l.Timer.NodeId == arg {
				id = l.Timer.Id
			}
		}
		tf := &novav1.TimerFired{ExecutionId: "x1", TimerId: id}
		g.apply(s, func(tr *Transition) error {
			return tr.OnLine(func(b *novav1.Branch) bool { return b.GetTimer().GetId() == id }, func() error { return tr.TimerFired(tf) })
		})
	case "signal":
		cmd := &novav1.SignalExecution{ExecutionId: "x1", Signal: arg, Payload: jsonvalue.Proto([]byte(cmp.Or(payload, "{}")))}
		g.signals++
		eventID := fmt.Sprintf("sig-%s-%d", arg, g.signals)
		g.apply(s, func(tr *Transition) error {
			return tr.OnLine(func(b *novav1.Branch) bool { return b.WaitingFor == arg },
				func() error { return tr.Signal(cmd, eventID, g.now.Add(-time.Minute)) })
		})
	case "child":
		status, ctx, _ := strings.Cut(payload, " ")
		var start *novav1.StartWorkflow
		for i, c := range g.starts {
			if c.Parent.NodeId == arg {
				start = c
				g.starts = slices.Delete(g.starts, i, i+1)
				break
			}
		}
		if start == nil {
			g.t.Fatalf("no child started by %s", arg)
		}
		r := &novav1.ChildCompleted{Parent: start.Parent, ChildExecutionId: start.ExecutionId, WorkflowName: start.WorkflowName,
			Status: status, Context: jsonvalue.Proto([]byte(cmp.Or(ctx, "{}")))}
		g.apply(s, func(tr *Transition) error {
			return tr.OnStep(start.Parent.StepId, func() error { return tr.ChildCompleted(r) })
		})
	case "cancel":
		g.apply(s, func(tr *Transition) error {
			return tr.Cancel(&novav1.CancelExecution{ExecutionId: "x1", RequestedBy: "golden"})
		})
	default:
		g.t.Fatalf("unknown step %q", s)
	}
}

var goldenCases = []struct {
	name, yaml, ctx string
	steps           []string
}{
	{"fork-and-join", `
name: fork
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
`, `{"n": 1}`, []string{`ok b {"b": 2}`, `ok a {"a": 1}`}},
	{"nested-forks", `
name: nested
nodes:
  - {id: start, type: start}
  - {id: s1, type: action, code: "pass"}
  - {id: a, type: action, code: "pass"}
  - {id: s2, type: action, code: "pass"}
  - {id: b1, type: action, code: "pass"}
  - {id: b2, type: action, code: "pass"}
  - {id: join, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: s1}
  - {from: s1, to: a}
  - {from: s1, to: s2}
  - {from: s2, to: b1}
  - {from: s2, to: b2}
  - {from: a, to: join}
  - {from: b1, to: join}
  - {from: b2, to: join}
  - {from: join, to: end}
`, `{}`, []string{`ok s1 {"k": 1}`, `ok a`, `ok s2 {"k": 2, "m": 1}`, `ok b2`, `ok b1`}},
	{"join-any-in-a-loop", `
name: any-loop
nodes:
  - {id: start, type: start}
  - {id: fork, type: action, code: "pass"}
  - {id: fast, type: action, code: "pass"}
  - {id: slow, type: action, code: "pass"}
  - {id: join, type: join, wait: any}
  - {id: again, type: decision, code: "pass"}
  - {id: end, type: end}
edges:
  - {from: start, to: fork}
  - {from: fork, to: fast}
  - {from: fork, to: slow}
  - {from: fast, to: join}
  - {from: slow, to: join}
  - {from: join, to: again}
  - {from: again, to: fork, condition: again}
  - {from: again, to: end, condition: done}
`, `{}`, []string{`ok fork {"round": 1}`, `ok fast`, `ok again {"branch_decision": "again"}`, `ok fork {"round": 2}`,
		`ok slow`, `ok fast`, `ok again {"branch_decision": "done"}`, `ok slow`}},
	{"join-two-of-three-in-a-loop", `
name: two-loop
nodes:
  - {id: start, type: start}
  - {id: fork, type: action, code: "pass"}
  - {id: w1, type: action, code: "pass"}
  - {id: w2, type: action, code: "pass"}
  - {id: w3, type: action, code: "pass"}
  - {id: join, type: join, wait: 2}
  - {id: again, type: decision, code: "pass"}
  - {id: end, type: end}
edges:
  - {from: start, to: fork}
  - {from: fork, to: w1}
  - {from: fork, to: w2}
  - {from: fork, to: w3}
  - {from: w1, to: join}
  - {from: w2, to: join}
  - {from: w3, to: join}
  - {from: join, to: again}
  - {from: again, to: fork, condition: again}
  - {from: again, to: end, condition: done}
`, `{}`, []string{`ok fork`, `ok w1`, `ok w2`, `ok again {"branch_decision": "again"}`, `ok fork`, `ok w3`,
		`ok w2`, `ok w1`, `ok again {"branch_decision": "done"}`, `ok w3`}},
	{"map-item-fails", `
name: map-fail
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: 2, code: "pass"}
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`, `{"xs": [10, 20, 30, 40]}`, []string{`ok each#0 {"result": 1}`, `fail each#1 boom`}},
	{"map-collects-failures", `
name: map-collect
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: 2, on_item_failure: collect, output: out, code: "pass"}
  - {id: end, type: end}
edges:
  - {from: start, to: each}
  - {from: each, to: end}
`, `{"xs": [10, 20, 30]}`, []string{`fail each#1 boom`, `ok each#0 {"result": 1}`, `ok each#2 {"result": 3}`}},
	{"sub-workflow", `
name: parent
nodes:
  - {id: start, type: start}
  - {id: call, type: workflow, workflow: child, output: {total: sum}}
  - {id: end, type: end}
edges:
  - {from: start, to: call}
  - {from: call, to: end}
`, `{"x": 1}`, []string{`child call succeeded {"sum": 3}`}},
	{"cancel-in-branches", `
name: cancel
nodes:
  - {id: start, type: start}
  - {id: approve, type: wait, signal: approve}
  - {id: nap, type: sleep, duration: 1h}
  - {id: work, type: action, code: "pass"}
  - {id: join, type: join}
  - {id: end, type: end}
edges:
  - {from: start, to: approve}
  - {from: start, to: nap}
  - {from: start, to: work}
  - {from: approve, to: join}
  - {from: nap, to: join}
  - {from: work, to: join}
  - {from: join, to: end}
`, `{}`, []string{`ok work`, `cancel`}},
	{"timers", `
name: timers
nodes:
  - {id: start, type: start}
  - {id: nap, type: sleep, duration: 90s}
  - {id: approve, type: wait, signal: approve, timeout: 1h}
  - {id: late, type: action, code: "pass"}
  - {id: end, type: end}
edges:
  - {from: start, to: nap}
  - {from: nap, to: approve}
  - {from: approve, to: end}
  - {from: approve, to: late, condition: timeout}
  - {from: late, to: end}
`, `{}`, []string{`signal nope {}`, `timer nap`, `signal other {}`, `timer approve`, `ok late`}},
	{"kept-signal", `
name: kept
signals: {keep: 2, keep_for: 10m}
nodes:
  - {id: start, type: start}
  - {id: nap, type: sleep, duration: 90s}
  - id: approve
    type: wait
    signal: approve
    schema: {type: object, required: [ok], properties: {ok: {type: boolean}}}
  - {id: end, type: end}
edges:
  - {from: start, to: nap}
  - {from: nap, to: approve}
  - {from: approve, to: end}
`, `{}`, []string{`signal approve {"bad": 1}`, `signal approve {"ok": true}`, `signal approve {"ok": false}`, `timer nap`}},
	{"retries", `
name: retries
nodes:
  - {id: start, type: start}
  - {id: charge, type: action, code: "pass", retry: {max_attempts: 3, initial_interval: 10s}}
  - {id: end, type: end}
edges:
  - {from: start, to: charge}
  - {from: charge, to: end}
`, `{}`, []string{`fail charge card declined`, `timer charge`, `fail charge card declined`, `timer charge`, `ok charge {"paid": true}`}},
	{"branch-fails-while-others-run", `
name: sibling
nodes:
  - {id: start, type: start}
  - {id: broken, type: action, code: "pass"}
  - {id: slow, type: action, code: "pass"}
  - {id: nap, type: sleep, duration: 30s}
  - {id: end, type: end}
edges:
  - {from: start, to: broken}
  - {from: start, to: slow}
  - {from: start, to: nap}
  - {from: broken, to: end}
  - {from: slow, to: end}
  - {from: nap, to: end}
`, `{}`, []string{`fail broken no`}},
}

func TestKindsGolden(t *testing.T) {
	for _, c := range goldenCases {
		t.Run(c.name, func(t *testing.T) {
			def, err := workflow.Parse([]byte(c.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
				t.Fatal(err)
			}
			g := &goldenRun{t: t, cfg: testConfig(), now: time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)}
			g.st = &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: jsonvalue.Proto([]byte(c.ctx)),
				StartedAt: tsNow(g.now)}
			g.apply("start "+c.ctx, func(tr *Transition) error {
				tr.StartLine()
				tr.Enter(tr.graph.Start().Id)
				tr.KeepChanges()
				tr.ln = nil
				return nil
			})
			for _, s := range c.steps {
				g.step(s)
			}
			path := filepath.Join("testdata", "golden", c.name+".golden")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, []byte(g.out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (go test -run TestKindsGolden -update writes it)", err)
			}
			if got := g.out.String(); got != string(want) {
				t.Errorf("%s differs from %s:\n%s", c.name, path, lineDiff(string(want), got))
			}
		})
	}
}

// lineDiff shows the first lines where want and got part.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var a, b string
		if i < len(w) {
			a = w[i]
		}
		if i < len(g) {
			b = g[i]
		}
		if a != b {
			return fmt.Sprintf("line %d\nwant: %s\n got: %s", i+1, a, b)
		}
	}
	return ""
}
