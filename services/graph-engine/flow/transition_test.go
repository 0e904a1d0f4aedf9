package flow

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const loopYAML = `
name: loop
nodes:
  - {id: start, type: start}
  - {id: work, type: action, code: "context['n'] = context.get('n', 0) + 1"}
  - {id: again, type: decision, code: "context['branch_decision'] = context['n'] < 3"}
  - {id: end, type: end}
edges:
  - {from: start, to: work}
  - {from: work, to: again}
  - {from: again, to: work, condition: "true"}
  - {from: again, to: end, condition: "false"}
`

// testConfig is the engine's default settings.
func testConfig() Config {
	return Config{DefaultNodeTimeout: 30 * time.Second, SandboxAttempts: 3, MaxAttempts: 3, AnalysisTimeout: 15 * time.Second}
}

// begin starts an execution of def in memory and returns its state and the
// command the start dispatched.
func begin(t testing.TB, cfg Config, yaml string, ctx any) (*novav1.ExecutionState, *novav1.ExecuteCode) {
	t.Helper()
	def, err := workflow.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}); err != nil {
		t.Fatal(err)
	}
	c, _ := jsonvalue.ObjectOf(ctx)
	st := &novav1.ExecutionState{ExecutionId: "x1", Status: statusRunning, Definition: def, Context: c.Proto(), StartedAt: tsNow(time.Now())}
	tr := New(st, cfg, time.Now())
	tr.Started()
	startIn(tr)
	return st, lastCommand(t, tr)
}

func lastCommand(t testing.TB, tr *Transition) *novav1.ExecuteCode {
	t.Helper()
	for i := len(tr.out) - 1; i >= 0; i-- {
		if cmd, ok := tr.out[i].Msg.(*novav1.ExecuteCode); ok {
			return cmd
		}
	}
	return nil
}

func resultFor(cmd *novav1.ExecuteCode, updates map[string]any) *novav1.CodeExecuted {
	u, _ := jsonvalue.ObjectOf(updates)
	return &novav1.CodeExecuted{ExecutionId: cmd.ExecutionId, NodeId: cmd.NodeId, StepId: cmd.StepId, Visit: cmd.Visit,
		Attempt: cmd.Attempt, Sequence: cmd.Sequence, Status: nodeSuccess, ContextUpdates: u.Proto()}
}

func TestLoopVisitsAndStaleResults(t *testing.T) {
	cfg := testConfig()
	st, cmd := begin(t, cfg, loopYAML, nil)
	first := cmd
	n := 0.0
	for st.Status == statusRunning {
		if cmd.NodeId == "work" {
			n++
		}
		updates := map[string]any{"n": n}
		if cmd.NodeId == "again" {
			if _, stale := jsonvalue.MustObject(cmd.Context)[branchDecision]; stale {
				t.Fatal("decision node received a branch_decision set before it")
			}
			updates = map[string]any{branchDecision: n < 3}
		}
		tr := New(st, cfg, time.Now())
		if err := applyStep(tr, func(t *Transition) error { return t.CodeExecuted(resultFor(cmd, updates)) }); err != nil {
			t.Fatal(err)
		}
		cmd = lastCommand(t, tr)
	}
	if st.Status != statusSucceeded || st.Nodes["work"].Visits != 3 || st.Nodes["again"].Visits != 3 {
		t.Fatalf("status %s, visits %+v", st.Status, st.Nodes)
	}
	if got := strings.Join(st.Path, ","); got != "start,work,again,work,again,work,again,end" {
		t.Errorf("path %s", got)
	}
	// A redelivered old result changes nothing.
	tr := New(st, cfg, time.Now())
	if err := applyStep(tr, func(t *Transition) error { return t.CodeExecuted(resultFor(first, map[string]any{"n": 99.0})) }); !errors.Is(err, ErrStale) || tr.changed {
		t.Errorf("stale result applied: err %v, changed %v", err, tr.changed)
	}
}

func TestEarlyResultIsRetriedNotDropped(t *testing.T) {
	cfg := testConfig()
	st, cmd := begin(t, cfg, loopYAML, nil)
	// The result of the command the next transition will dispatch, arriving
	// before that transition's state is stored.
	early := &novav1.CodeExecuted{ExecutionId: "x1", NodeId: "again", StepId: "x1/again/1/1",
		Visit: 1, Attempt: 1, Sequence: cmd.Sequence + 1, Status: nodeSuccess}
	if err := applyStep(New(st, cfg, time.Now()), func(t *Transition) error { return t.CodeExecuted(early) }); !errors.Is(err, errEarlyResult) {
		t.Errorf("early result: %v, want errEarlyResult", err)
	}
}

func TestMaxVisitsEndsALoop(t *testing.T) {
	cfg := testConfig()
	st, cmd := begin(t, cfg, strings.Replace(loopYAML, "type: action,", "type: action, max_visits: 2,", 1), nil)
	for st.Status == statusRunning {
		updates := map[string]any{}
		if cmd.NodeId == "again" {
			updates[branchDecision] = true
		}
		tr := New(st, cfg, time.Now())
		if err := applyStep(tr, func(t *Transition) error { return t.CodeExecuted(resultFor(cmd, updates)) }); err != nil {
			t.Fatal(err)
		}
		cmd = lastCommand(t, tr)
	}
	if st.Status != statusFailed || !strings.Contains(st.Error, `node "work" exceeded its maximum of 2 visits`) {
		t.Errorf("status %s, error %q", st.Status, st.Error)
	}
}

func TestSandboxFaultIsRetriedThenFails(t *testing.T) {
	cfg := testConfig()
	st, cmd := begin(t, cfg, loopYAML, nil)
	for attempt := int32(1); attempt <= 3; attempt++ {
		if cmd.Attempt != attempt {
			t.Fatalf("attempt %d dispatched, want %d", cmd.Attempt, attempt)
		}
		r := resultFor(cmd, nil)
		r.Status, r.ErrorKind, r.Error = "error", errorKindSandboxFault, "bwrap failed"
		tr := New(st, cfg, time.Now())
		if err := applyStep(tr, func(t *Transition) error { return t.CodeExecuted(r) }); err != nil {
			t.Fatal(err)
		}
		cmd = lastCommand(t, tr)
	}
	if st.Status != statusFailed || st.Nodes["work"].Attempts != 3 || !strings.Contains(st.Error, "bwrap failed") {
		t.Errorf("status %s, node %+v, error %q", st.Status, st.Nodes["work"], st.Error)
	}
}

func TestEventIDsAreDeterministic(t *testing.T) {
	cfg := testConfig()
	_, a := begin(t, cfg, loopYAML, map[string]any{"k": "v"})
	_, b := begin(t, cfg, loopYAML, map[string]any{"k": "v"})
	if a.StepId != b.StepId || a.StepId != "x1/work/1/1" {
		t.Errorf("step ids %q and %q", a.StepId, b.StepId)
	}
}

// Context values reach the next node, the node's chain-of-work snapshots and
// the completion as the exact text the producer and the code wrote.
func TestContextValuesStayExact(t *testing.T) {
	cfg := testConfig()
	initial := `{"id":9007199254740993,"f":150.0,"z":-0.0,"big":18446744073709551616,"ключ":{"deep":[1e+308]}}`
	st, cmd := begin(t, cfg, loopYAML, []byte(initial))
	if got := string(cmd.GetContext().GetRaw()); got != `{"big":18446744073709551616,"f":150.0,"id":9007199254740993,"z":-0.0,"ключ":{"deep":[1e+308]}}` {
		t.Fatalf("first node's context: %s", got)
	}
	tr := New(st, cfg, time.Now())
	r := resultFor(cmd, nil)
	r.ContextUpdates = jsonvalue.Proto([]byte(`{"n":1,"id2":9007199254740995,"f":151.0}`))
	if err := applyStep(tr, func(t *Transition) error { return t.CodeExecuted(r) }); err != nil {
		t.Fatal(err)
	}
	next := lastCommand(t, tr)
	want := `{"big":18446744073709551616,"f":151.0,"id":9007199254740993,"id2":9007199254740995,"n":1,"z":-0.0,"ключ":{"deep":[1e+308]}}`
	if got := string(next.GetContext().GetRaw()); got != want {
		t.Errorf("next node's context:\n got %s\nwant %s", got, want)
	}
	for _, o := range tr.out {
		if nc, ok := o.Msg.(*novav1.NodeCompleted); ok {
			if got := string(nc.GetOutputResult().GetRaw()); got != want {
				t.Errorf("node output snapshot %s", got)
			}
			if got := string(nc.GetInputContext().GetRaw()); !strings.Contains(got, `"f":150.0`) {
				t.Errorf("node input snapshot changed with the context: %s", got)
			}
		}
	}
}

// TestPrintedSecretsAreScrubbed: what the code printed or raised reaches the
// chain of work without the values of the input's secret keys, without a
// secret a context value held under an innocuous key (even printed without
// the look that gave it away) and without any secret recognised by its look.
func TestPrintedSecretsAreScrubbed(t *testing.T) {
	const (
		bearer = "c2VydmljZS0xOjQ4MjkxNzM2NTU" // printed alone, it has no look
		stripe = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
		github = "ghp_" + "R2d2C3poBb8xWq7Lm4Nz0Kv6Ty1Ju5Hs9Fg3"
	)
	cfg := testConfig()
	st, cmd := begin(t, cfg, loopYAML, map[string]any{
		"db_password": "hunter2-abc",
		"notes":       []any{"Authorization: Bearer " + bearer},
	})
	r := resultFor(cmd, nil)
	r.Status, r.ErrorKind = "error", "code_error"
	r.Error = "PermissionError: " + github + " cannot push"
	r.Traceback = "Traceback ...\nlogin(hunter2-abc)\nPermissionError: " + github + " cannot push"
	r.Stdout = "token " + bearer + ", stripe " + stripe + "\n"
	r.Logs = []string{"using hunter2-abc"}
	tr := New(st, cfg, time.Now())
	if err := applyStep(tr, func(t *Transition) error { return t.CodeExecuted(r) }); err != nil {
		t.Fatal(err)
	}
	var nc *novav1.NodeCompleted
	for _, o := range tr.out {
		if m, ok := o.Msg.(*novav1.NodeCompleted); ok {
			nc = m
		}
	}
	if nc == nil {
		t.Fatal("no NodeCompleted")
	}
	tests := []struct{ name, got, want string }{
		{"error", nc.ErrorMessage, "PermissionError: [REDACTED] cannot push"},
		{"traceback", nc.Traceback, "Traceback ...\nlogin([REDACTED])\nPermissionError: [REDACTED] cannot push"},
		{"stdout", nc.Stdout, "token [REDACTED], stripe [REDACTED]\n"},
		{"logs", strings.Join(r.Logs, "\n"), "using [REDACTED]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.got != tt.want {
				t.Errorf("%s = %q, want %q", tt.name, tt.got, tt.want)
			}
		})
	}
}

// keptResults stands for the map results bucket in transitions run in
// memory: what one transition keeps, the next reads back.
type keptResults map[string][]byte

// bind lets tr read the results kept so far.
func (k keptResults) bind(tr *Transition) {
	tr.MapResults = func(prefix string) (map[int32][]byte, error) {
		out := map[int32][]byte{}
		for key, v := range k {
			if i, ok := ItemOfKey(prefix, key); ok {
				out[i] = v
			}
		}
		return out, nil
	}
}

// apply keeps and drops what tr decided, as the engine does around storing
// the state.
func (k keptResults) apply(tr *Transition) {
	for _, r := range tr.ResultsFx {
		k[r.Key] = r.Value
	}
	for _, prefix := range tr.PurgeFx {
		for key := range k {
			if strings.HasPrefix(key, prefix+".") {
				delete(k, key)
			}
		}
	}
}
