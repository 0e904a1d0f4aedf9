package e2e

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/llm/scripted"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/stack"
)

const (
	discountTask = "Calculate discount (10% if total > 1000)"
	rewordedTask = "Calculate the discount (10% when total > 1000)"
	embedModel   = "text-embedding-3-small"
)

// semanticOn turns the code cache's semantic level on, with the scripted
// server's embeddings.
func semanticOn(o *stack.Options) {
	engineOf(o).SemanticSettings = codecache.SemanticSettings{Enabled: true, Similarity: codecache.DefaultSimilarity, EmbeddingModel: embedModel,
		Timeout: 10 * time.Second}
}

// embeddingRequests are the embeddings requests the scripted server received.
func (e *env) embeddingRequests() []scripted.Recorded {
	var out []scripted.Recorded
	for _, r := range e.s.Scripted().Requests() {
		if strings.HasSuffix(r.Path, "/embeddings") {
			out = append(out, r)
		}
	}
	return out
}

// cacheRun is one run of a one-AI-node workflow: the node's ai_metadata and
// chain of work, and the chat and embeddings requests the run made.
type cacheRun struct {
	meta       map[string]any
	chats      map[string]int
	embeddings []scripted.Recorded
	wc         *novav1.WorkflowCompleted
	node       chainstore.NodeDoc
}

// runCached runs def with ctx on e and returns what its node "discount" did.
func (e *env) runCached(t *testing.T, def *novav1.WorkflowDefinition, ctx map[string]any) cacheRun {
	t.Helper()
	chats, embeds := e.requestCounts(), len(e.embeddingRequests())
	wc := e.run(def, ctx)
	succeeded(t, wc)
	after := e.requestCounts()
	for k, v := range chats {
		after[k] -= v
		if after[k] == 0 {
			delete(after, k)
		}
	}
	n := nodeDoc(t, e.chain(wc.ExecutionId), "discount", 1)
	return cacheRun{meta: n.AIMetadata, chats: after, embeddings: e.embeddingRequests()[embeds:], wc: wc, node: n}
}

func (r cacheRun) trail() string {
	var out []string
	for _, s := range r.node.Steps {
		out = append(out, s.StepName)
	}
	return strings.Join(out, ",")
}

// cacheEntry reads the entry of key, waiting for it: the engine stores an
// entry (after indexing it) once the state that accepted its code is
// stored, just after the completion is published.
func cacheEntry(t *testing.T, e *env, key string) *codecache.Entry {
	t.Helper()
	kv, err := e.bus.JetStream().KeyValue(e.ctx, codecache.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	var entry jetstream.KeyValueEntry
	e.eventually(10*time.Second, "the code cache holds "+key, func() bool {
		entry, err = kv.Get(e.ctx, key)
		return err == nil
	})
	ce, err := codecache.Decode(entry.Value())
	if err != nil {
		t.Fatal(err)
	}
	return ce
}

// TestCodeCacheSemantic: with the semantic level on, a reworded prompt with
// the same context shape reuses the first prompt's code (no generation, one
// embeddings call) and is stored under its own key, so that its next run
// hits exactly; a reworded prompt with another context shape and an
// unrelated prompt miss; a semantic hit whose code fails is evicted like an
// exact one, and the pipeline takes over.
func TestCodeCacheSemantic(t *testing.T) {
	e := startAIEnvFile(t, demoRules, semanticOn)
	e.waitRuntimeDocs()
	def := parseAI(t, discountWorkflow)
	reworded := parseAI(t, strings.Replace(discountWorkflow, discountTask, rewordedTask, 1))

	first := e.runCached(t, def, map[string]any{"total": 1500})
	if first.meta["cache_hit"] != false || !maps.Equal(first.chats, map[string]int{codeGenerator: 1, outputValidator: 1}) ||
		len(first.embeddings) != 1 || first.embeddings[0].Input[0] != discountTask || first.embeddings[0].Agent != stack.GraphEngine {
		t.Fatalf("first run: cache_hit %v, chat requests %v, embeddings requests %+v", first.meta["cache_hit"], first.chats, first.embeddings)
	}
	key := first.meta["cache_key"].(string)
	if lookup := first.node.Steps[0]; lookup.StepName != "cache_lookup" || lookup.OutputData["cache_hit"] != false ||
		lookup.OutputData["compared"] != 0.0 || lookup.ModelUsed != embedModel || lookup.OutputData["scripted"] != true {
		t.Errorf("first run's lookup step: %+v", lookup)
	}
	// What the code cost to produce leaves out the lookup's embeddings call.
	if entry := cacheEntry(t, e, key); entry.Embedding == nil || entry.Embedding.Model != embedModel ||
		entry.Embedding.Dimensions != scripted.DefaultEmbeddingDimensions || entry.ModelCalls != 2 {
		t.Errorf("first entry: embedding %+v, model calls %d; want indexed with %s, 2 calls", entry.Embedding, entry.ModelCalls, embedModel)
	}

	var rewordedKey string
	t.Run("reworded, same shape: semantic hit without generation", func(t *testing.T) {
		r := e.runCached(t, reworded, map[string]any{"total": 2000})
		rewordedKey, _ = r.meta["cache_key"].(string)
		sim := num(r.meta["cache_similarity"])
		t.Logf("similarity of %q to %q: %.4f", rewordedTask, discountTask, sim)
		if len(r.chats) != 0 || len(r.embeddings) != 1 || r.embeddings[0].Input[0] != rewordedTask {
			t.Errorf("chat requests %v, embeddings requests %d; want no chat and one embedding", r.chats, len(r.embeddings))
		}
		if r.meta["cache_hit"] != true || r.meta["cache_match"] != "semantic" || sim < codecache.DefaultSimilarity || sim > 1 ||
			r.meta["cached_key"] != key || r.meta["cache_key"] == key || r.meta["cached_from_execution"] != first.wc.ExecutionId ||
			num(r.meta["model_calls"]) != 1 || r.meta["scripted"] != true || num(r.meta["model_calls_saved"]) != 2 {
			t.Errorf("ai_metadata %v", r.meta)
		}
		if out := ctxMap(r.wc.Context); out["final_total"] != 1800.0 {
			t.Errorf("final_total %v, want 1800 (the cached code on the new values)", out["final_total"])
		}
		if got := r.trail(); got != "cache_lookup,code_validation,code_execution,output_validation" {
			t.Errorf("steps %v", got)
		}
		lookup := r.node.Steps[0].OutputData
		if lookup["matched_task"] != discountTask || lookup["matched_key"] != key || lookup["cache_match"] != "semantic" ||
			num(lookup["similarity"]) != sim || num(lookup["threshold"]) != codecache.DefaultSimilarity {
			t.Errorf("lookup step output %v", lookup)
		}
		if v := r.node.Steps[3].OutputData; v["model_consulted"] != false {
			t.Errorf("output validation of a semantic hit: %v, want the rules only (as an exact hit)", v)
		}
		// The code passed again: it is stored under the reworded task's key.
		entry := cacheEntry(t, e, r.meta["cache_key"].(string))
		if o := entry.SemanticOrigin; o == nil || o.Key != key || o.Task != discountTask || o.Execution != r.wc.ExecutionId ||
			entry.Task != rewordedTask || entry.Execution != first.wc.ExecutionId || entry.Embedding == nil {
			t.Errorf("the reworded task's entry: %+v, origin %+v", entry, entry.SemanticOrigin)
		}

		again := e.runCached(t, reworded, map[string]any{"total": 500})
		if again.meta["cache_match"] != "exact" || len(again.chats)+len(again.embeddings) != 0 || num(again.meta["model_calls"]) != 0 {
			t.Errorf("the reworded task again: cache_match %v, chat %v, embeddings %d; want an exact hit calling nothing",
				again.meta["cache_match"], again.chats, len(again.embeddings))
		}
	})

	t.Run("reworded, other context shape: miss", func(t *testing.T) {
		r := e.runCached(t, reworded, map[string]any{"total": 1500, "currency": "EUR"})
		if r.meta["cache_hit"] != false || r.chats[codeGenerator] != 1 || len(r.embeddings) != 0 {
			t.Errorf("cache_hit %v, chat %v, embeddings %d; want a miss, one generation, the embedding kept from before",
				r.meta["cache_hit"], r.chats, len(r.embeddings))
		}
		if lookup := r.node.Steps[0]; lookup.StepName != "cache_lookup" || lookup.OutputData["compared"] != 0.0 {
			t.Errorf("lookup step %+v: nothing to compare in another shape's group", lookup)
		}
	})

	t.Run("unrelated prompt, same shape: miss", func(t *testing.T) {
		other := parseAI(t, strings.Replace(discountWorkflow, discountTask, "Format the total as currency", 1))
		r := e.runCached(t, other, map[string]any{"total": 1500})
		lookup := r.node.Steps[0].OutputData
		t.Logf("best similarity of an unrelated task: %.4f of %v compared", num(lookup["best_similarity"]), lookup["compared"])
		if r.meta["cache_hit"] != false || r.chats[codeGenerator] == 0 || len(r.embeddings) != 1 {
			t.Errorf("cache_hit %v, chat %v, embeddings %d", r.meta["cache_hit"], r.chats, len(r.embeddings))
		}
		if num(lookup["compared"]) != 2 || num(lookup["best_similarity"]) >= codecache.DefaultSimilarity {
			t.Errorf("lookup step output %v; want the two discount entries compared, none similar enough", lookup)
		}
		if entry := cacheEntry(t, e, r.meta["cache_key"].(string)); entry.Embedding == nil {
			t.Error("the unrelated task's entry is not indexed")
		}
		if out := ctxMap(r.wc.Context); out["formatted_total"] != "1,500.00 EUR" {
			t.Errorf("formatted_total %v", out["formatted_total"])
		}
	})

	t.Run("a semantic hit whose code fails is evicted", func(t *testing.T) {
		kv, err := e.bus.JetStream().KeyValue(e.ctx, codecache.Bucket)
		if err != nil {
			t.Fatal(err)
		}
		// Both discount wordings hold code the validator passes and the
		// sandbox fails.
		for _, k := range []string{key, rewordedKey} {
			entry := cacheEntry(t, e, k)
			entry.Code = "# STAGE: TASK\nraise ValueError('stale cached code')\n"
			data, _ := entry.Encode()
			if _, err := kv.Put(e.ctx, k, data); err != nil {
				t.Fatal(err)
			}
		}
		third := parseAI(t, strings.Replace(discountWorkflow, discountTask, "Calculate the discount: 10% if total > 1000", 1))
		r := e.runCached(t, third, map[string]any{"total": 1500})
		thirdEntry := cacheEntry(t, e, r.meta["cache_key"].(string)) // stored, and so indexed
		if r.meta["cache_hit"] != false || r.meta["cache_evicted"] != true || r.chats[codeGenerator] != 1 {
			t.Errorf("cache_hit %v, cache_evicted %v, chat %v", r.meta["cache_hit"], r.meta["cache_evicted"], r.chats)
		}
		if out := ctxMap(r.wc.Context); out["final_total"] != 1350.0 {
			t.Errorf("final_total %v", out["final_total"])
		}
		want := "cache_lookup,code_validation,code_execution,cache_eviction,input_analysis,code_generation,code_validation,code_execution,output_validation"
		if got := r.trail(); got != want {
			t.Errorf("steps %s\nwant  %s", got, want)
		}
		evicted := r.node.Steps[0].OutputData["matched_key"].(string)
		if ev := r.node.Steps[3]; ev.OutputData["cache_match"] != "semantic" || !strings.Contains(ev.ErrorMessage, "stale cached code") {
			t.Errorf("eviction step %+v", ev)
		}
		if _, err := kv.Get(e.ctx, evicted); err != jetstream.ErrKeyNotFound {
			t.Errorf("the entry the failing code came from: %v, want it evicted", err)
		}
		x, err := codecache.LoadIndex(e.ctx, kv, thirdEntry.Embedding.Group)
		if err != nil || x == nil {
			t.Fatalf("index: %v, %v", x, err)
		}
		var members []string
		for _, m := range x.Entries {
			members = append(members, m.Key)
		}
		// The two discount wordings, the currency task and the third
		// wording, less the evicted one.
		if slices.Contains(members, evicted) || !slices.Contains(members, r.meta["cache_key"].(string)) || len(members) != 3 {
			t.Errorf("index members %v; want 3, the third wording's in, the evicted %s out", members, evicted)
		}
	})
}

// TestCodeCacheSemanticWithoutEmbeddings: an API without embeddings (404)
// turns the semantic level off, said once, and never fails a node: a
// reworded prompt then misses and is generated.
func TestCodeCacheSemanticWithoutEmbeddings(t *testing.T) {
	rules, err := scripted.LoadRules(demoRules)
	if err != nil {
		t.Fatal(err)
	}
	rules.Embeddings = &scripted.EmbeddingsSpec{Disabled: true}
	e := startAIEnvRules(t, rules, semanticOn)
	e.waitRuntimeDocs()
	first := e.runCached(t, parseAI(t, discountWorkflow), map[string]any{"total": 1500})
	lookup := first.node.Steps[0]
	if first.meta["cache_hit"] != false || lookup.StepName != "cache_lookup" || !strings.Contains(lookup.OutputData["note"].(string), "offers no embeddings") {
		t.Errorf("first run: cache_hit %v, lookup step %+v", first.meta["cache_hit"], lookup)
	}
	r := e.runCached(t, parseAI(t, strings.Replace(discountWorkflow, discountTask, rewordedTask, 1)), map[string]any{"total": 1500})
	if r.meta["cache_hit"] != false || r.chats[codeGenerator] != 1 || len(r.embeddings) != 0 || !strings.HasPrefix(r.trail(), "input_analysis,") {
		t.Errorf("reworded: cache_hit %v, chat %v, embeddings %d, steps %v; want a plain miss, no embeddings call",
			r.meta["cache_hit"], r.chats, len(r.embeddings), r.trail())
	}
	if reqs := e.embeddingRequests(); len(reqs) != 1 || reqs[0].Status != 404 {
		t.Errorf("embeddings requests %+v, want the one that found none", reqs)
	}
	if n := strings.Count(e.logs.String(), "the model API offers no embeddings"); n != 1 {
		t.Errorf("the log says %d times that the API has no embeddings, want once", n)
	}
	if entry := cacheEntry(t, e, first.meta["cache_key"].(string)); entry.Embedding != nil {
		t.Errorf("an entry stored without embeddings says it is indexed: %+v", entry.Embedding)
	}
}
