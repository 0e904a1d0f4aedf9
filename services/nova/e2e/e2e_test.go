// Package e2e runs whole workflows through the real bus and store: embedded
// NATS JetStream and embedded FerretDB, the graph engine, the bubblewrap
// sandbox and the audit service, started the way `nova dev` starts them.
package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

var invoiceExample = filepath.Join("..", "..", "..", "examples", "invoice-routing.yaml")

// TestInvoiceBranches runs examples/invoice-routing.yaml along each branch:
// a large invoice waits at the wait node manager_approval until the signal
// approval approves or rejects it; a small one is approved automatically.
func TestInvoiceBranches(t *testing.T) {
	e := startEnv(t)
	def, err := workflow.Load(invoiceExample, workflow.ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		initial  map[string]any
		decision string
		// signal is the approval's payload; nil: the branch has no wait.
		signal map[string]any
		path   []string
		want   map[string]any
	}{
		{
			name: "large invoice approved by a manager", initial: map[string]any{"amount": 1500.0}, decision: "high",
			signal: map[string]any{"approved": true, "reviewed_by": "manager_1"},
			path:   []string{"start", "extract", "validate", "check_amount", "manager_approval", "record_approval", "done"},
			want: map[string]any{
				"amount": 1500.0, "vendor": "Acme Corp", "invoice_number": "INV-1001", "currency": "EUR", "valid": true,
				"branch_decision": "high", "approved": true, "reviewed_by": "manager_1",
				"approval_status": "approved", "approval_route": "manager", "approved_by": "manager_1",
				"approval_note": "EUR 1500.00 from Acme Corp is above the threshold; approved by manager_1",
			},
		},
		{
			name: "large invoice rejected by a manager", initial: map[string]any{"amount": 1500.0, "manager": "ana"}, decision: "high",
			signal: map[string]any{"approved": false, "note": "no purchase order"},
			path:   []string{"start", "extract", "validate", "check_amount", "manager_approval", "record_rejection", "done"},
			want: map[string]any{
				"amount": 1500.0, "branch_decision": "high", "approved": false, "note": "no purchase order",
				"approval_status": "rejected", "approval_route": "manager", "rejected_by": "ana", "approved_by": nil,
				"approval_note": "EUR 1500.00 from Acme Corp is above the threshold; rejected by ana: no purchase order",
			},
		},
		{
			name: "small invoice is approved automatically", initial: map[string]any{"amount": 500.0}, decision: "low",
			path: []string{"start", "extract", "validate", "check_amount", "auto_approve", "done"},
			want: map[string]any{
				"amount": 500.0, "vendor": "Acme Corp", "invoice_number": "INV-1001", "currency": "EUR", "valid": true,
				"branch_decision": "low", "approval_status": "approved", "approval_route": "automatic",
				"approved_by":   "nova",
				"approval_note": "EUR 500.00 from Acme Corp is within the threshold; approved automatically",
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exec, err := e.client.Start(e.ctx, def, "", tc.initial)
			if err != nil {
				t.Fatal(err)
			}
			if tc.signal != nil {
				// The execution waits for the manager, with what the
				// manager is asked and until when.
				w := e.waitingFor(exec.ID, "manager_approval", "signal")
				if w.Signal != "approval" || w.DecideOn != "approved" || w.Until == nil || !strings.Contains(w.Description, "Approve or reject the invoice") ||
					!strings.Contains(w.Schema, `"approved"`) {
					t.Errorf("waiting = %v; want signal approval deciding on approved, with its description, schema and deadline", w)
				} else if d := time.Until(w.Until.AsTime()); d < 71*time.Hour || d > 72*time.Hour {
					t.Errorf("manager_approval waits until %v, in %v; want 72h after it began", w.Until.AsTime(), d)
				}
				e.signalExec(exec.ID, "approval", tc.signal)
			}
			wc, err := exec.Wait(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if wc.Status != "succeeded" || wc.Error != "" {
				t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
			}
			branch, wantPath := tc.path[4], tc.path // what check_amount chose
			if !slices.Equal(wc.Path, wantPath) {
				t.Errorf("path = %v, want %v", wc.Path, wantPath)
			}
			got := ctxMap(wc.Context)
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("context[%q] = %#v, want %#v", k, got[k], v)
				}
			}

			// Node summaries: every visited node once, succeeded; only the
			// branch taken is there; code nodes ran once.
			sums := summaries(wc)
			if len(sums) != len(wantPath) {
				t.Errorf("node summaries = %v, want one per visited node %v", wc.Nodes, wantPath)
			}
			for _, id := range wantPath {
				n := sums[id]
				if n == nil {
					t.Errorf("no summary for node %q", id)
					continue
				}
				wantAttempts := int32(1)
				if codeOf(def, id) == "" {
					wantAttempts = 0
				}
				if n.Status != "succeeded" || n.Visits != 1 || n.Attempts != wantAttempts || n.Error != "" {
					t.Errorf("node %q summary = %v, want succeeded, 1 visit, %d attempts, no error", id, n, wantAttempts)
				}
			}

			// The audit store has the chain of work of this execution.
			nodes := e.chain(wc.ExecutionId)
			checkChain(t, def, wc, nodes)
			for _, n := range nodes {
				if n.Status != "success" || n.ErrorMessage != "" {
					t.Errorf("chain node %s: status %q, error %q; want success", n.NodeID, n.Status, n.ErrorMessage)
				}
			}
			decision := nodeDoc(t, nodes, "check_amount", 1)
			if decision.NodeType != "decision" || decision.DecisionResult != tc.decision || decision.PathTaken != branch {
				t.Errorf("check_amount: type %q, decision %q -> %q; want decision %q -> %q",
					decision.NodeType, decision.DecisionResult, decision.PathTaken, tc.decision, branch)
			}
			if tc.signal != nil {
				// The wait node's visit took the edge of the payload's approved.
				approval := nodeDoc(t, nodes, "manager_approval", 1)
				if want := fmt.Sprint(tc.signal["approved"]); approval.NodeType != "wait" || approval.DecisionResult != want || approval.PathTaken != tc.path[5] {
					t.Errorf("manager_approval: type %q, decision %q -> %q; want wait %q -> %q",
						approval.NodeType, approval.DecisionResult, approval.PathTaken, want, tc.path[5])
				}
			}
			if _, ok := decision.InputContext["branch_decision"]; ok {
				t.Errorf("check_amount input context has branch_decision; it must be cleared before a decision node")
			}
			if decision.OutputResult["branch_decision"] != tc.decision {
				t.Errorf("check_amount output branch_decision = %v, want %q", decision.OutputResult["branch_decision"], tc.decision)
			}
			// The amount was a Go float64: it stays a float (500.0) in the snapshots.
			amount := tc.initial["amount"].(float64)
			if v := nodeDoc(t, nodes, "validate", 1); v.InputContext["amount"] != json.Number(jsonvalue.FormatFloat(amount)) || v.OutputResult["valid"] != true {
				t.Errorf("validate snapshots: input amount %v, output valid %v; want %v and true",
					v.InputContext["amount"], v.OutputResult["valid"], amount)
			} else if got := fmt.Sprint(v.Steps[0].OutputData["updated_keys"]); got != "[valid]" {
				t.Errorf("validate step updated_keys = %s, want [valid]", got)
			}
			doc, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
			if err != nil {
				t.Fatal(err)
			}
			if doc.Status != "succeeded" || doc.WorkflowName != "invoice-routing" || !slices.Equal(doc.Path, wantPath) ||
				doc.FinalContext["approval_status"] != tc.want["approval_status"] || len(doc.Nodes) != len(wantPath) {
				t.Errorf("execution document = status %q, workflow %q, path %v, approval_status %v, %d nodes; want the completion's",
					doc.Status, doc.WorkflowName, doc.Path, doc.FinalContext["approval_status"], len(doc.Nodes))
			}
			// A document per node visit; a step per code node's run (the
			// wait node, start and end have none).
			wantCounts := map[string]int64{"executions": 1, "chain_of_work": int64(len(wantPath)), "chain_of_work_steps": 4}
			if got := e.counts(wc.ExecutionId); !maps.Equal(got, wantCounts) {
				t.Errorf("audit documents = %v, want %v", got, wantCounts)
			}
		})
	}
}

// routeWorkflow is a decision node whose code sets branch_decision from
// decisionCode, with edges for "high", "low" and "1500".
func routeWorkflow(t *testing.T, decisionCode string) *novav1.WorkflowDefinition {
	return parse(t, fmt.Sprintf(`
name: route
nodes:
  - {id: start, type: start}
  - id: route
    type: decision
    code: |
      %s
  - {id: high_path, type: action, code: 'context["took"] = "high"'}
  - {id: low_path, type: action, code: 'context["took"] = "low"'}
  - {id: exact_path, type: action, code: 'context["took"] = "exact"'}
  - {id: done, type: end}
edges:
  - {from: start, to: route}
  - {from: route, to: high_path, condition: high}
  - {from: route, to: low_path, condition: low}
  - {from: route, to: exact_path, condition: "1500"}
  - {from: high_path, to: done}
  - {from: low_path, to: done}
  - {from: exact_path, to: done}
`, decisionCode))
}

func TestDecisionValues(t *testing.T) {
	e := startEnv(t)
	tests := []struct {
		name string
		code string
		// took is the branch taken; empty when the workflow must fail with err.
		took string
		err  string
	}{
		{name: "string value routes", code: `context["branch_decision"] = "low"`, took: "low"},
		{name: "number value matches its shortest form", code: `context["branch_decision"] = 1500.0`, took: "exact"},
		{
			name: "value without an edge fails and lists the allowed values",
			code: `context["branch_decision"] = "medium"`,
			err:  `decision node "route": branch_decision "medium" matches no outgoing edge (allowed: "1500", "high", "low")`,
		},
		{
			name: "number without an edge fails",
			code: `context["branch_decision"] = 7`,
			err:  `decision node "route": branch_decision "7" matches no outgoing edge (allowed: "1500", "high", "low")`,
		},
		{
			name: "None is not a decision",
			code: `context["branch_decision"] = None`,
			err:  `decision node "route": branch_decision is empty or not set (allowed: "1500", "high", "low")`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			def := routeWorkflow(t, tc.code)
			wc := e.run(def, nil)
			nodes := e.chain(wc.ExecutionId)
			checkChain(t, def, wc, nodes)
			route := nodeDoc(t, nodes, "route", 1)
			if tc.err == "" {
				if wc.Status != "succeeded" || ctxMap(wc.Context)["took"] != tc.took {
					t.Fatalf("status %q (error %q), took %v; want succeeded through %s_path",
						wc.Status, wc.Error, ctxMap(wc.Context)["took"], tc.took)
				}
				if route.PathTaken != tc.took+"_path" {
					t.Errorf("route path_taken = %q, want %s_path", route.PathTaken, tc.took)
				}
				return
			}
			if wc.Status != "failed" {
				t.Fatalf("status %q, want failed", wc.Status)
			}
			if want := `node "route" failed: ` + tc.err; wc.Error != want {
				t.Errorf("error = %q\nwant    %q", wc.Error, want)
			}
			if want := []string{"start", "route"}; !slices.Equal(wc.Path, want) {
				t.Errorf("path = %v, want %v", wc.Path, want)
			}
			if s := summaries(wc)["route"]; s == nil || s.Status != "failed" || s.Error != tc.err {
				t.Errorf("route summary = %v, want failed with %q", s, tc.err)
			}
			if route.Status != "failed" || route.ErrorMessage != tc.err || route.PathTaken != "" {
				t.Errorf("route chain doc: status %q, error %q, path_taken %q; want failed with %q and no path",
					route.Status, route.ErrorMessage, route.PathTaken, tc.err)
			}
			// The code itself ran fine: its step succeeded, the routing failed.
			if route.Steps[0].Status != "success" {
				t.Errorf("route step status = %q, want success", route.Steps[0].Status)
			}
			exec, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
			if err != nil {
				t.Fatal(err)
			}
			if exec.Status != "failed" || exec.Error != wc.Error {
				t.Errorf("execution document: status %q, error %q; want failed, %q", exec.Status, exec.Error, wc.Error)
			}
		})
	}
}

// TestStaleBranchDecision: a branch_decision left in the context by an
// earlier node never decides for a decision node.
func TestStaleBranchDecision(t *testing.T) {
	e := startEnv(t)
	workflowWith := func(decisionCode string) *novav1.WorkflowDefinition {
		return parse(t, fmt.Sprintf(`
name: stale-decision
nodes:
  - {id: start, type: start}
  - id: prepare
    type: action
    code: |
      context["branch_decision"] = "yes"
  - id: route
    type: decision
    code: |
      context["seen_by_route"] = context.get("branch_decision", "absent")
      %s
  - {id: yes_path, type: action, code: 'context["took"] = "yes"'}
  - {id: no_path, type: action, code: 'context["took"] = "no"'}
  - {id: done, type: end}
edges:
  - {from: start, to: prepare}
  - {from: prepare, to: route}
  - {from: route, to: yes_path, condition: "yes"}
  - {from: route, to: no_path, condition: "no"}
  - {from: yes_path, to: done}
  - {from: no_path, to: done}
`, decisionCode))
	}

	t.Run("decision code that sets nothing fails", func(t *testing.T) {
		def := workflowWith("pass")
		wc := e.run(def, nil)
		wantErr := `decision node "route": branch_decision is empty or not set (allowed: "no", "yes")`
		if wc.Status != "failed" || wc.Error != `node "route" failed: `+wantErr {
			t.Fatalf("status %q, error %q; want failed with %q", wc.Status, wc.Error, wantErr)
		}
		if want := []string{"start", "prepare", "route"}; !slices.Equal(wc.Path, want) {
			t.Errorf("path = %v, want %v (the stale yes must not be followed)", wc.Path, want)
		}
		ctx := ctxMap(wc.Context)
		if ctx["seen_by_route"] != "absent" {
			t.Errorf("route's code saw branch_decision = %v; it must be cleared before the node runs", ctx["seen_by_route"])
		}
		if _, ok := ctx["took"]; ok {
			t.Errorf("a branch ran: context took = %v", ctx["took"])
		}
		nodes := e.chain(wc.ExecutionId)
		checkChain(t, def, wc, nodes)
		if p := nodeDoc(t, nodes, "prepare", 1); p.OutputResult["branch_decision"] != "yes" {
			t.Errorf("prepare output branch_decision = %v, want yes", p.OutputResult["branch_decision"])
		}
		route := nodeDoc(t, nodes, "route", 1)
		if _, ok := route.InputContext["branch_decision"]; ok {
			t.Errorf("route input context has branch_decision %v; want it cleared", route.InputContext["branch_decision"])
		}
		if route.Status != "failed" || route.ErrorMessage != wantErr {
			t.Errorf("route chain doc: status %q, error %q; want failed with %q", route.Status, route.ErrorMessage, wantErr)
		}
	})

	t.Run("decision code's own value wins", func(t *testing.T) {
		def := workflowWith(`context["branch_decision"] = "no"`)
		wc := e.run(def, nil)
		if wc.Status != "succeeded" {
			t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
		}
		if want := []string{"start", "prepare", "route", "no_path", "done"}; !slices.Equal(wc.Path, want) {
			t.Errorf("path = %v, want %v", wc.Path, want)
		}
		ctx := ctxMap(wc.Context)
		if ctx["took"] != "no" || ctx["branch_decision"] != "no" || ctx["seen_by_route"] != "absent" {
			t.Errorf("context took=%v branch_decision=%v seen_by_route=%v; want no, no, absent",
				ctx["took"], ctx["branch_decision"], ctx["seen_by_route"])
		}
		nodes := e.chain(wc.ExecutionId)
		checkChain(t, def, wc, nodes)
		if r := nodeDoc(t, nodes, "route", 1); r.DecisionResult != "no" || r.PathTaken != "no_path" {
			t.Errorf("route decision %q -> %q, want no -> no_path", r.DecisionResult, r.PathTaken)
		}
	})
}

func TestNodeThatRaisesFailsTheWorkflow(t *testing.T) {
	e := startEnv(t)
	tests := []struct {
		name      string
		code      string
		err       string
		traceback []string
	}{
		{
			name: "ValueError",
			code: "amount = context.get(\"amount\", 0)\nif amount < 1000:\n    raise ValueError(\"bad invoice\")\ncontext[\"checked\"] = True\n",
			err:  "ValueError: bad invoice",
			traceback: []string{"Traceback (most recent call last)", `File "<node>", line 3`,
				`raise ValueError("bad invoice")`, "ValueError: bad invoice"},
		},
		{
			name: "ZeroDivisionError in a function",
			code: "def ratio(a, b):\n    return a / b\n\ncontext[\"ratio\"] = ratio(1, 0)\n",
			err:  "ZeroDivisionError: division by zero",
			traceback: []string{"Traceback (most recent call last)", `File "<node>", line 4`, `File "<node>", line 2, in ratio`,
				"return a / b", "ZeroDivisionError: division by zero"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			def := &novav1.WorkflowDefinition{
				Name: "raises",
				Nodes: []*novav1.Node{
					{Id: "start", Type: novav1.NodeType_NODE_TYPE_START},
					{Id: "check", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: tc.code},
					{Id: "after", Type: novav1.NodeType_NODE_TYPE_ACTION, Code: `context["after"] = True`},
					{Id: "done", Type: novav1.NodeType_NODE_TYPE_END},
				},
				Edges: []*novav1.Edge{{From: "start", To: "check"}, {From: "check", To: "after"}, {From: "after", To: "done"}},
			}
			wc := e.run(def, map[string]any{"amount": 5})
			if wc.Status != "failed" {
				t.Fatalf("status %q, want failed", wc.Status)
			}
			mustContain(t, "workflow error", wc.Error, `node "check" failed`, tc.err)
			if want := []string{"start", "check"}; !slices.Equal(wc.Path, want) {
				t.Errorf("path = %v, want %v", wc.Path, want)
			}
			if s := summaries(wc)["check"]; s == nil || s.Status != "failed" || s.Attempts != 1 || !strings.Contains(s.Error, tc.err) {
				t.Errorf("check summary = %v, want failed after 1 attempt with %q (a code error is not retried)", s, tc.err)
			}
			if _, ok := summaries(wc)["after"]; ok {
				t.Errorf("node after the failure ran")
			}

			nodes := e.chain(wc.ExecutionId)
			checkChain(t, def, wc, nodes)
			check := nodeDoc(t, nodes, "check", 1)
			if check.Status != "failed" {
				t.Errorf("check chain doc status = %q, want failed", check.Status)
			}
			mustContain(t, "check error_message", check.ErrorMessage, tc.err)
			mustContain(t, "check traceback", check.Traceback, tc.traceback...)
			if strings.Contains(check.Traceback, "runner.py") {
				t.Errorf("traceback shows the sandbox runner's own frames:\n%s", check.Traceback)
			}
			step := check.Steps[0]
			if step.Status != "failed" || !strings.Contains(step.ErrorMessage, tc.err) || step.OutputData["error_kind"] != "code_error" {
				t.Errorf("check step: status %q, error %q, error_kind %v; want failed, %q, code_error",
					step.Status, step.ErrorMessage, step.OutputData["error_kind"], tc.err)
			}
			if tb, _ := step.OutputData["traceback"].(string); !strings.Contains(tb, tc.err) {
				t.Errorf("check step output traceback = %q, want the traceback", tb)
			}
		})
	}
}

func TestLoops(t *testing.T) {
	e := startEnv(t)
	loop := func(until int, maxVisits string) *novav1.WorkflowDefinition {
		return parse(t, fmt.Sprintf(`
name: counter-loop
nodes:
  - {id: start, type: start}
  - id: init
    type: action
    code: |
      context["counter"] = 0
      context["seen"] = []
  - id: inc
    type: action
    %s
    code: |
      context["counter"] += 1
      context["seen"] = context["seen"] + [context["counter"]]
  - id: check
    type: decision
    code: |
      context["branch_decision"] = "done" if context["counter"] >= %d else "again"
  - {id: done, type: end}
edges:
  - {from: start, to: init}
  - {from: init, to: inc}
  - {from: inc, to: check}
  - {from: check, to: inc, condition: again}
  - {from: check, to: done, condition: done}
`, maxVisits, until))
	}

	t.Run("loop until counter is 3", func(t *testing.T) {
		def := loop(3, "")
		wc := e.run(def, nil)
		if wc.Status != "succeeded" {
			t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
		}
		want := []string{"start", "init", "inc", "check", "inc", "check", "inc", "check", "done"}
		if !slices.Equal(wc.Path, want) {
			t.Errorf("path = %v, want %v", wc.Path, want)
		}
		ctx := ctxMap(wc.Context)
		if ctx["counter"] != 3.0 || !slices.Equal(ctx["seen"].([]any), []any{1.0, 2.0, 3.0}) {
			t.Errorf("counter = %v, seen = %v; want 3 and [1 2 3]", ctx["counter"], ctx["seen"])
		}
		sums := summaries(wc)
		for id, visits := range map[string]int32{"start": 1, "init": 1, "inc": 3, "check": 3, "done": 1} {
			if s := sums[id]; s == nil || s.Visits != visits || s.Status != "succeeded" {
				t.Errorf("node %q summary = %v, want succeeded with %d visits", id, s, visits)
			}
		}
		nodes := e.chain(wc.ExecutionId)
		checkChain(t, def, wc, nodes)
		for v := 1; v <= 3; v++ {
			n := nodeDoc(t, nodes, "inc", v)
			if n.OutputResult["counter"] != json.Number(strconv.Itoa(v)) {
				t.Errorf("inc visit %d output counter = %v, want %d", v, n.OutputResult["counter"], v)
			}
			wantPath := map[bool]string{true: "done", false: "inc"}[v == 3]
			if c := nodeDoc(t, nodes, "check", v); c.PathTaken != wantPath {
				t.Errorf("check visit %d path_taken = %q, want %q", v, c.PathTaken, wantPath)
			}
		}
		if got, want := e.counts(wc.ExecutionId), (map[string]int64{"executions": 1, "chain_of_work": 9, "chain_of_work_steps": 7}); !maps.Equal(got, want) {
			t.Errorf("audit documents = %v, want %v", got, want)
		}
	})

	for _, tc := range []struct {
		name      string
		maxVisits string
		limit     int
	}{
		{name: "endless loop stops at the node's max_visits", maxVisits: "max_visits: 3", limit: 3},
		{name: "endless loop stops at the default maximum", limit: workflow.DefaultMaxVisits},
	} {
		t.Run(tc.name, func(t *testing.T) {
			def := loop(1000, tc.maxVisits)
			wc := e.run(def, nil)
			wantErr := fmt.Sprintf(`node "inc" exceeded its maximum of %d visits`, tc.limit)
			if wc.Status != "failed" || wc.Error != wantErr {
				t.Fatalf("status %q, error %q; want failed with %q", wc.Status, wc.Error, wantErr)
			}
			if got := ctxMap(wc.Context)["counter"]; got != float64(tc.limit) {
				t.Errorf("counter = %v, want %d: inc must run exactly its maximum number of times", got, tc.limit)
			}
			sums := summaries(wc)
			if s := sums["inc"]; s == nil || s.Status != "failed" || s.Visits != int32(tc.limit) || s.Error != wantErr {
				t.Errorf("inc summary = %v, want failed after %d visits with %q", s, tc.limit, wantErr)
			}
			if s := sums["check"]; s == nil || s.Visits != int32(tc.limit) {
				t.Errorf("check summary = %v, want %d visits", s, tc.limit)
			}
			if _, ok := sums["done"]; ok {
				t.Errorf("end node reached")
			}
			nodes := e.chain(wc.ExecutionId)
			checkChain(t, def, wc, nodes)
			if got, want := len(nodes), 2+2*tc.limit; got != want {
				t.Errorf("chain of work has %d node visits, want %d", got, want)
			}
			exec, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
			if err != nil {
				t.Fatal(err)
			}
			if exec.Status != "failed" || exec.Error != wantErr {
				t.Errorf("execution document: status %q, error %q; want failed with %q", exec.Status, exec.Error, wantErr)
			}
		})
	}
}

func TestRegisteredWorkflows(t *testing.T) {
	e := startEnv(t)
	def, err := workflow.Load(invoiceExample, workflow.ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	// runByName registers def and runs it by its name.
	runByName := func(t *testing.T) (*client.Execution, *novav1.WorkflowCompleted) {
		t.Helper()
		if err := e.client.Register(e.ctx, def); err != nil {
			t.Fatalf("register: %v", err)
		}
		// Register returns once the engine stored the definition: a start
		// right after it must find it.
		exec, err := e.client.Start(e.ctx, nil, def.Name, map[string]any{"amount": 200})
		if err != nil {
			t.Fatal(err)
		}
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return exec, wc
	}

	t.Run("start by name", func(t *testing.T) {
		exec, wc := runByName(t)
		if wc.Status != "succeeded" || wc.WorkflowName != def.Name || wc.ExecutionId != exec.ID {
			t.Fatalf("status %q (error %q), workflow %q, execution %q; want succeeded %s %s",
				wc.Status, wc.Error, wc.WorkflowName, wc.ExecutionId, def.Name, exec.ID)
		}
		if want := []string{"start", "extract", "validate", "check_amount", "auto_approve", "done"}; !slices.Equal(wc.Path, want) {
			t.Errorf("path = %v, want %v", wc.Path, want)
		}
		nodes := e.chain(wc.ExecutionId)
		checkChain(t, def, wc, nodes)
	})

	// Past the duplicate window a repeated start or registration is stored
	// again, and so is what the engine publishes for it: the engine must not
	// run or store anything twice.
	t.Run("a start repeated after the duplicate window runs nothing again", func(t *testing.T) {
		exec, wc := runByName(t)
		id := wc.ExecutionId
		e.busIdle()
		before, docs := e.subjects(bus.StreamEvents, bus.ExecutionFilter(id)), e.counts(id)
		if before[bus.EventSubject(id, bus.KindWorkflowCompleted)] != 1 {
			t.Fatalf("events of the execution %v, want one completion", before)
		}
		e.pastDuplicateWindows()
		again, err := jsonvalue.ObjectOf(map[string]any{"amount": 5})
		if err != nil {
			t.Fatal(err)
		}
		err = e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), exec.EventID, bus.TypeWorkflowStart,
			&novav1.StartWorkflow{ExecutionId: id, WorkflowName: def.Name, Context: again.Proto()},
			map[string]string{"executionid": id})
		if err != nil {
			t.Fatal(err)
		}
		e.busIdle()
		if after := e.subjects(bus.StreamEvents, bus.ExecutionFilter(id)); !maps.Equal(after, before) {
			t.Errorf("events of the execution after the repeated start %v, before %v", after, before)
		}
		if after := e.counts(id); !maps.Equal(after, docs) {
			t.Errorf("audit documents %v after the repeated start, %v before", after, docs)
		}
	})

	// Past the events' duplicate window (shorter than the commands') an event
	// that a handler run again on a redelivery publishes again is stored
	// again: the engine, whose state has passed it, must not run or publish
	// anything for it, nor the audit service record anything twice.
	t.Run("events repeated after the events' duplicate window change nothing", func(t *testing.T) {
		_, wc := runByName(t)
		id := wc.ExecutionId
		e.busIdle()
		before, docs := e.subjects(bus.StreamEvents, bus.ExecutionFilter(id)), e.counts(id)
		if before[bus.EventSubject(id, bus.KindSandboxResult)] == 0 || before[bus.EventSubject(id, bus.KindEventsRun)] == 0 {
			t.Fatalf("events of the execution %v, want sandbox results and the envelopes of its steps", before)
		}
		e.pastDuplicateWindows()
		stream, err := e.bus.JetStream().Stream(e.ctx, bus.StreamEvents)
		if err != nil {
			t.Fatal(err)
		}
		want := maps.Clone(before)
		for subject := range before {
			stored, err := stream.GetLastMsgForSubject(e.ctx, subject)
			if err != nil {
				t.Fatal(err)
			}
			if stored.Header.Get(nats.MsgIdHdr) == "" {
				t.Fatalf("%s has no %s", subject, nats.MsgIdHdr)
			}
			// As a handler run again publishes it: the same event, not the
			// stored message's atomic batch.
			header := nats.Header{}
			for k, v := range stored.Header {
				if !bus.PublishControl(k) {
					header[k] = v
				}
			}
			if _, err := e.bus.JetStream().PublishMsg(e.ctx, &nats.Msg{Subject: subject, Header: header, Data: stored.Data}); err != nil {
				t.Fatal(err)
			}
			want[subject]++
		}
		e.busIdle()
		if after := e.subjects(bus.StreamEvents, bus.ExecutionFilter(id)); !maps.Equal(after, want) {
			t.Errorf("events of the execution after the repeated ones %v, want %v", after, want)
		}
		if after := e.counts(id); !maps.Equal(after, docs) {
			t.Errorf("audit documents %v after the repeated events, %v before", after, docs)
		}
	})

	t.Run("the same definition registered again keeps its revision", func(t *testing.T) {
		kv, err := e.bus.JetStream().KeyValue(e.ctx, bus.BucketWorkflows)
		if err != nil {
			t.Fatal(err)
		}
		revision := func() uint64 {
			t.Helper()
			entry, err := kv.Get(e.ctx, def.Name)
			if err != nil {
				t.Fatal(err)
			}
			return entry.Revision()
		}
		first := revision()
		if err := e.client.Register(e.ctx, def); err != nil {
			t.Fatal(err)
		}
		if err := e.client.WaitConsumerIdle(e.ctx, bus.StreamCommands, bus.ConsumerEngineCommands); err != nil {
			t.Fatal(err)
		}
		if got := revision(); got != first {
			t.Errorf("revision %d after registering the same definition, want %d", got, first)
		}
		changed := proto.Clone(def).(*novav1.WorkflowDefinition)
		changed.TimeoutSeconds = 45
		if err := e.client.Register(e.ctx, changed); err != nil {
			t.Fatal(err)
		}
		if got := revision(); got == first {
			t.Errorf("a changed definition kept revision %d", got)
		}
		if err := e.client.Register(e.ctx, def); err != nil { // back, for the subtests that follow
			t.Fatal(err)
		}
	})

	t.Run("an invalid definition is refused with the reason", func(t *testing.T) {
		bad := proto.Clone(def).(*novav1.WorkflowDefinition)
		bad.Name = "broken"
		bad.Edges = bad.Edges[1:]
		err := e.client.Register(e.ctx, bad)
		mustContain(t, "register error", fmt.Sprint(err), `workflow "broken" refused`)
	})

	for _, name := range []string{"no-such-workflow", "not a valid key!"} {
		t.Run("unknown name "+name, func(t *testing.T) {
			exec, err := e.client.Start(e.ctx, nil, name, nil)
			if err != nil {
				t.Fatal(err)
			}
			wc, err := exec.Wait(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if wc.Status != "failed" {
				t.Fatalf("status %q, want failed", wc.Status)
			}
			mustContain(t, "error", wc.Error, fmt.Sprintf("%q is not registered", name))
			if len(wc.Path) != 0 {
				t.Errorf("path = %v, want nothing run", wc.Path)
			}
			e.auditIdle()
			doc, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
			if err != nil || doc.Status != "failed" || doc.Error != wc.Error {
				t.Errorf("execution document = %+v (%v), want failed with the error", doc, err)
			}
		})
	}
}
