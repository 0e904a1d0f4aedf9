package e2e

import (
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/validatorinfo"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestCodeCache runs one AI workflow repeatedly on one stack with the
// scripted model: the first run stores the accepted code, a run with other
// values of the same shape calls no model, and a changed prompt, a changed
// context shape or `cache: false` generate again. A cached code that fails
// is evicted and the node still succeeds through the pipeline.
func TestCodeCache(t *testing.T) {
	e := startAIEnvFile(t, demoRules)
	e.waitRuntimeDocs() // the runtime's fingerprint is part of the key
	// The stack's code validator looks for the runtime every 100 ms until it
	// has it; its verdicts are kept in the cache only once it checks imports.
	time.Sleep(200 * time.Millisecond)
	def := parseAI(t, discountWorkflow)

	// runDiscount runs def and returns the discount node's ai_metadata and
	// the model requests the run made, by agent.
	runDiscount := func(t *testing.T, def *novav1.WorkflowDefinition, ctx map[string]any) (map[string]any, map[string]int, *novav1.WorkflowCompleted) {
		t.Helper()
		before := e.requestCounts()
		wc := e.run(def, ctx)
		succeeded(t, wc)
		after := e.requestCounts()
		for k, v := range before {
			after[k] -= v
			if after[k] == 0 {
				delete(after, k)
			}
		}
		n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
		return n.AIMetadata, after, wc
	}

	first, calls, wc1 := runDiscount(t, def, map[string]any{"total": 1500})
	if first["cache_hit"] != false || !maps.Equal(calls, map[string]int{codeGenerator: 1, outputValidator: 1}) {
		t.Fatalf("first run: cache_hit %v, model requests %v", first["cache_hit"], calls)
	}
	key, _ := first["cache_key"].(string)
	if len(key) != 64 {
		t.Fatalf("first run: cache_key %q", key)
	}

	t.Run("same shape, other values: no model call", func(t *testing.T) {
		meta, calls, wc := runDiscount(t, def, map[string]any{"total": 2000})
		if len(calls) != 0 {
			t.Errorf("model requests %v, want none", calls)
		}
		if out := ctxMap(wc.Context); out["final_total"] != 1800.0 {
			t.Errorf("final_total %v, want 1800 (the cached code ran on the new values)", out["final_total"])
		}
		if meta["cache_hit"] != true || meta["cache_key"] != key || meta["cached_from_execution"] != wc1.ExecutionId ||
			num(meta["tokens_saved"]) != num(obj(t, first, "tokens")["total"]) || num(meta["cost_usd_saved"]) == 0 || num(meta["model_calls"]) != 0 {
			t.Errorf("ai_metadata %v", meta)
		}
		n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
		checkSteps(t, n, "cache_lookup@0", "code_validation@0", "code_execution@0", "output_validation@0")
		if v := stepsNamed(n, "output_validation"); len(v) != 1 || v[0].OutputData["model_consulted"] != false ||
			v[0].AgentName != "graph-engine" || v[0].OutputData["checked_in"] != "graph-engine" || v[0].Status != "success" {
			t.Errorf("output validation of cached code: %+v, want the rules only, run in the engine", v)
		}
		// The entry keeps the validator's verdict from the first run: the
		// hit reuses it rather than sending the code to the validator.
		if v := stepsNamed(n, "code_validation"); len(v) != 1 || v[0].AgentName != "graph-engine" || v[0].OutputData["valid"] != true ||
			v[0].OutputData["verdict_reused"] != true || v[0].OutputData["validator_fingerprint"] != e.validatorFingerprint() ||
			v[0].OutputData["verdict_from_execution"] != wc1.ExecutionId {
			t.Errorf("code validation of cached code: %+v, want the verdict of the deployed validator, reused", v)
		}
	})

	t.Run("a verdict of another validator is not reused", func(t *testing.T) {
		// As after the validator changed: the entry's verdict names a
		// fingerprint that is no longer published.
		e.editCacheEntry(t, key, func(c *codecache.Entry) { c.Verdict.Validator = "cv-an-older-validator" })
		_, calls, wc := runDiscount(t, def, map[string]any{"total": 1200})
		if len(calls) != 0 {
			t.Errorf("model requests %v, want none", calls)
		}
		n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
		checkSteps(t, n, "cache_lookup@0", "code_validation@0", "code_execution@0", "output_validation@0")
		if v := stepsNamed(n, "code_validation"); len(v) != 1 || v[0].AgentName != "code-validator" || v[0].OutputData["valid"] != true ||
			v[0].OutputData["verdict_reused"] != nil {
			t.Errorf("code validation: %+v, want the code validator's", v)
		}
		// Its new verdict is kept, so the next hit reuses it.
		if c := e.cacheEntry(t, key); c.Verdict == nil || c.Verdict.Validator != e.validatorFingerprint() || c.Verdict.Execution != wc.ExecutionId {
			t.Errorf("entry's verdict after the validator passed the code again: %+v", c.Verdict)
		}
		_, _, wc = runDiscount(t, def, map[string]any{"total": 1300})
		n = nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
		if v := stepsNamed(n, "code_validation"); len(v) != 1 || v[0].OutputData["verdict_reused"] != true {
			t.Errorf("code validation of the next hit: %+v, want the kept verdict reused", v)
		}
	})

	t.Run("cached code that fails the output rules is evicted", func(t *testing.T) {
		// Code that passes the validator (its verdict is current) and runs,
		// but stores None: the engine's deterministic checks refuse it.
		bad := "# STAGE: TASK\ncontext['final_total'] = None\n"
		e.editCacheEntry(t, key, func(c *codecache.Entry) {
			c.Code = bad
			c.Verdict.Code = codecache.CodeDigest(bad)
		})
		meta, calls, wc := runDiscount(t, def, map[string]any{"total": 1500})
		if meta["cache_hit"] != false || meta["cache_evicted"] != true || calls[codeGenerator] != 1 {
			t.Errorf("cache_hit %v, cache_evicted %v, model requests %v", meta["cache_hit"], meta["cache_evicted"], calls)
		}
		if out := ctxMap(wc.Context); out["final_total"] != 1350.0 {
			t.Errorf("final_total %v", out["final_total"])
		}
		n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
		checkSteps(t, n, "cache_lookup@0", "code_validation@0", "code_execution@0", "output_validation@0", "cache_eviction@0",
			"input_analysis@0", "code_generation@1", "code_validation@1", "code_execution@1", "output_validation@1")
		v := stepsNamed(n, "output_validation")
		if len(v) != 2 || v[0].OutputData["valid"] != false || v[0].AgentName != "graph-engine" || fmt.Sprint(v[0].OutputData["failed_checks"]) != "[none_result]" ||
			v[1].AgentName != "output-validator" || v[1].Status != "success" {
			t.Errorf("output_validation steps %+v", v)
		}
		if ev := stepsNamed(n, "cache_eviction"); len(ev) != 1 || !strings.Contains(ev[0].ErrorMessage, "cached code failed output_validation") {
			t.Errorf("cache_eviction step %+v", ev)
		}
		if len(withText(e.modelRequests(codeGenerator), "set to None")) != 1 {
			t.Error("the code generator was not told how the cached code failed")
		}
		if c := e.cacheEntry(t, key); c.Code == bad || c.Execution != wc.ExecutionId || c.Verdict == nil || c.Verdict.Code != codecache.CodeDigest(c.Code) {
			t.Errorf("entry after eviction %+v", c)
		}
	})

	misses := []struct {
		name string
		def  func() *novav1.WorkflowDefinition
		ctx  map[string]any
	}{
		{"changed prompt", func() *novav1.WorkflowDefinition {
			return parseAI(t, strings.Replace(discountWorkflow, "(10% if total > 1000)", "(10% when total > 1000)", 1))
		}, map[string]any{"total": 1500}},
		{"changed context shape", func() *novav1.WorkflowDefinition { return def }, map[string]any{"total": 1500, "currency": "EUR"}},
		{"cache: false", func() *novav1.WorkflowDefinition {
			return parseAI(t, strings.Replace(discountWorkflow, "name: discount", "name: discount\ncache: false", 1))
		}, map[string]any{"total": 1500}},
	}
	for _, m := range misses {
		t.Run(m.name+" misses", func(t *testing.T) {
			meta, calls, _ := runDiscount(t, m.def(), m.ctx)
			if meta["cache_hit"] != false || calls[codeGenerator] != 1 {
				t.Errorf("cache_hit %v, model requests %v; want a miss and one generation", meta["cache_hit"], calls)
			}
			if meta["cache_key"] == key {
				t.Errorf("cache_key %v is the first run's", meta["cache_key"])
			}
		})
	}

	// The semantic level is off unless configured: the reworded prompt
	// ("changed prompt") missed, and nothing asked for embeddings.
	if n := len(e.embeddingRequests()); n != 0 {
		t.Errorf("%d embeddings requests with the semantic level off, want none", n)
	}

	t.Run("failing cached code is evicted, the pipeline takes over", func(t *testing.T) {
		kv, err := e.bus.JetStream().KeyValue(e.ctx, codecache.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		// Code the validator passes and the sandbox fails: the eviction comes
		// from the run. The entry's verdict was of the code replaced, so
		// the validator checks this one.
		e.editCacheEntry(t, key, func(c *codecache.Entry) { c.Code = "# STAGE: TASK\nraise ValueError('stale cached code')\n" })
		meta, calls, wc := runDiscount(t, def, map[string]any{"total": 1500})
		if meta["cache_hit"] != false || meta["cache_evicted"] != true || calls[codeGenerator] != 1 {
			t.Errorf("cache_hit %v, cache_evicted %v, model requests %v", meta["cache_hit"], meta["cache_evicted"], calls)
		}
		if out := ctxMap(wc.Context); out["final_total"] != 1350.0 {
			t.Errorf("final_total %v", out["final_total"])
		}
		n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
		checkSteps(t, n, "cache_lookup@0", "code_validation@0", "code_execution@0", "cache_eviction@0",
			"input_analysis@0", "code_generation@1", "code_validation@1", "code_execution@1", "output_validation@1")
		if ev := stepsNamed(n, "cache_eviction"); len(ev) != 1 || !strings.Contains(ev[0].ErrorMessage, "stale cached code") {
			t.Errorf("cache_eviction step %+v", ev)
		}
		if len(withText(e.modelRequests(codeGenerator), "stale cached code")) != 1 {
			t.Error("the code generator was not told how the cached code failed")
		}
		// The pipeline's accepted code replaced the evicted entry.
		entry, err := kv.Get(e.ctx, key)
		if err != nil {
			t.Fatalf("no entry after the pipeline accepted code: %v", err)
		}
		if again, _ := codecache.Decode(entry.Value()); again == nil || strings.Contains(again.Code, "stale") || again.Execution != wc.ExecutionId ||
			again.NodeType != "action" || again.Node != "discount" || again.Task != "Calculate discount (10% if total > 1000)" {
			t.Errorf("entry after eviction %+v", again)
		}
	})
}

// cacheEntry reads the code cache's entry of key.
func (e *env) cacheEntry(t *testing.T, key string) *codecache.Entry {
	t.Helper()
	kv, err := e.bus.JetStream().KeyValue(e.ctx, codecache.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	entry, err := kv.Get(e.ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := codecache.Decode(entry.Value())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// editCacheEntry changes the code cache's entry of key.
func (e *env) editCacheEntry(t *testing.T, key string, edit func(*codecache.Entry)) {
	t.Helper()
	c := e.cacheEntry(t, key)
	if c.Verdict == nil {
		t.Fatalf("entry %s keeps no validator verdict", key)
	}
	edit(c)
	data, _ := c.Encode()
	kv, _ := e.bus.JetStream().KeyValue(e.ctx, codecache.Bucket)
	if _, err := kv.Put(e.ctx, key, data); err != nil {
		t.Fatal(err)
	}
}

// validatorFingerprint is the code validator's published fingerprint.
func (e *env) validatorFingerprint() string {
	kv, err := e.bus.JetStream().KeyValue(e.ctx, validatorinfo.Bucket)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	entry, err := kv.Get(e.ctx, validatorinfo.Key)
	if err != nil {
		return "unreadable: " + err.Error()
	}
	return string(entry.Value())
}
