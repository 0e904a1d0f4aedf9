package e2e

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const rerunWorkflow = `
name: rerun-discount
nodes:
  - {id: start, type: start}
  - {id: discount, type: action, prompt: "Calculate discount (10% if total > 1000)"}
  - id: check
    type: action
    code: |
      if context["final_total"] > context["limit"]:
          raise ValueError(f"final_total {context['final_total']} is over the limit {context['limit']}")
      context["approved"] = True
  - {id: done, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: check}
  - {from: check, to: done}
`

// rerun starts the rerun of execution id that req asks for and waits for
// its completion.
func (e *env) rerun(id string, req chainstore.RerunRequest) *novav1.WorkflowCompleted {
	e.t.Helper()
	e.auditIdle()
	start, err := e.s.Store.RerunStart(e.ctx, id, req)
	if err != nil {
		e.t.Fatalf("rerun %s: %v", id, err)
	}
	err = e.bus.PublishProto(e.ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+start.ExecutionId, bus.TypeWorkflowStart,
		start, map[string]string{bus.ExtensionExecutionID: start.ExecutionId})
	if err != nil {
		e.t.Fatal(err)
	}
	var wc novav1.WorkflowCompleted
	if err := firstEvent(e.ctx, e.bus.JetStream(), bus.EventSubject(start.ExecutionId, bus.KindWorkflowCompleted), &wc); err != nil {
		e.t.Fatal(err)
	}
	return &wc
}

func TestRerunFromNode(t *testing.T) {
	e := startAIEnvFile(t, demoRules)
	e.waitRuntimeDocs()
	time.Sleep(200 * time.Millisecond) // the validator checks imports once it has the runtime
	def := parseAI(t, rerunWorkflow)

	calls := func() int {
		n := 0
		for _, c := range e.requestCounts() {
			n += c
		}
		return n
	}
	orig := e.run(def, map[string]any{"total": 1500, "limit": 1000})
	if orig.Status != "failed" || !strings.Contains(orig.Error, "over the limit 1000") {
		t.Fatalf("original: %s %q; want check failing over the limit", orig.Status, orig.Error)
	}
	paid := calls()
	if paid == 0 {
		t.Fatal("the original made no model call")
	}

	t.Run("from the failed node, with a context change", func(t *testing.T) {
		wc := e.rerun(orig.ExecutionId, chainstore.RerunRequest{Set: jsonvalue.Object{"limit": []byte("2000")}})
		succeeded(t, wc)
		if got := calls() - paid; got != 0 {
			t.Errorf("the rerun made %d model calls, want 0", got)
		}
		if want := []string{"start", "discount", "check", "done"}; !slices.Equal(wc.Path, want) {
			t.Errorf("path %v, want %v", wc.Path, want)
		}
		out := ctxMap(wc.Context)
		if out["approved"] != true || out["final_total"] != 1350.0 || out["limit"] != 2000.0 {
			t.Errorf("context %v; want the snapshot before check with limit 2000, approved", out)
		}
		if wc.RerunOf != orig.ExecutionId {
			t.Errorf("rerun_of %q, want %s", wc.RerunOf, orig.ExecutionId)
		}
		chain := e.chain(wc.ExecutionId)
		for _, id := range []string{"start", "discount"} {
			if n := nodeDoc(t, chain, id, 1); n.Status != "carried_over" || n.CarriedOverFrom != orig.ExecutionId || n.ModelCalls != 0 {
				t.Errorf("%s: status %s from %q, %d model calls; want carried over from the original", id, n.Status, n.CarriedOverFrom, n.ModelCalls)
			}
		}
		if n := nodeDoc(t, chain, "check", 1); n.Status != "success" {
			t.Errorf("check: %s, want success", n.Status)
		}
		od, err := e.s.Store.Execution(e.ctx, orig.ExecutionId)
		if err != nil {
			t.Fatal(err)
		}
		nd, err := e.s.Store.Execution(e.ctx, wc.ExecutionId)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(od.Reruns, wc.ExecutionId) || nd.RerunOf != orig.ExecutionId || nd.RerunFrom != "check" {
			t.Errorf("links: original's reruns %v, rerun's rerun_of %q from %q", od.Reruns, nd.RerunOf, nd.RerunFrom)
		}
	})

	t.Run("from the AI node: its cached code runs, no model call", func(t *testing.T) {
		before := calls()
		wc := e.rerun(orig.ExecutionId, chainstore.RerunRequest{From: "discount", Set: jsonvalue.Object{"limit": []byte("5000")}})
		succeeded(t, wc)
		if got := calls() - before; got != 0 {
			t.Errorf("the rerun made %d model calls, want 0 (the code is cached)", got)
		}
		n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
		if n.Status != "success" || n.AIMetadata["cache_hit"] != true {
			t.Errorf("discount: %s, cache_hit %v; want a cache hit", n.Status, n.AIMetadata["cache_hit"])
		}
	})

	t.Run("bad requests name the problem", func(t *testing.T) {
		e.auditIdle()
		_, err := e.s.Store.RerunStart(e.ctx, orig.ExecutionId, chainstore.RerunRequest{From: "nowhere"})
		if !errors.Is(err, chainstore.ErrRerun) || !strings.Contains(err.Error(), `never reached node "nowhere"`) {
			t.Errorf("from a node never reached: %v", err)
		}
		_, err = e.s.Store.RerunStart(e.ctx, "no-such-execution", chainstore.RerunRequest{})
		if !errors.Is(err, chainstore.ErrNotFound) {
			t.Errorf("unknown execution: %v", err)
		}
	})
}
