package engine

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/validatorinfo"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// Defaults of the code cache's limits.
const (
	DefaultCodeCacheTTL      = 30 * 24 * time.Hour
	DefaultCodeCacheMaxBytes = 256 << 20
)

// maxSemanticTask bounds the tasks the semantic level embeds: every byte is
// at most one token, so a task within it fits any embedding model's input
// (8191 tokens for OpenAI's), and an API's 400 then means it has no
// embeddings rather than a task too long.
const maxSemanticTask = 8000

// codeCache is the engine's side of the generated-code cache: the bucket,
// the runtime whose fingerprint is part of every key, the semantic level
// and the counters.
type codeCache struct {
	kv      jetstream.KeyValue
	runtime *runtimeinfo.Cache
	// semantic is nil when the semantic level is off.
	semantic *semanticLevel
	// validators follows the deployed code validator's fingerprint.
	validators              *validatorinfo.Follower
	hits, misses, evictions metric.Int64Counter
	// fingerprint is the runtime description's fingerprint, hashed once per
	// description rather than at every transition.
	fingerprint atomic.Pointer[runtimeFingerprint]
}

// runtimeFingerprint is codecache.RuntimeFingerprint(info).
type runtimeFingerprint struct {
	info *runtimeinfo.Info
	fp   string
}

// fingerprintOf returns codecache.RuntimeFingerprint(info). The Cache hands
// out one *Info until the description changes, so the hash (over hundreds
// of module names) is made once per description: made at every transition it
// was 2% of nova dev's CPU.
func (c *codeCache) fingerprintOf(info *runtimeinfo.Info) string {
	if m := c.fingerprint.Load(); m != nil && m.info == info {
		return m.fp
	}
	fp := codecache.RuntimeFingerprint(info)
	c.fingerprint.Store(&runtimeFingerprint{info: info, fp: fp})
	return fp
}

// semanticLevel finds cached code of similar tasks by their embeddings.
type semanticLevel struct {
	cfg    codecache.SemanticSettings
	client *llm.Client
	// unsupported is set once the API said it has no embeddings: the level
	// is then off until the engine restarts (said once in the log).
	unsupported atomic.Bool
}

func openCodeCache(ctx context.Context, js jetstream.JetStream, cfg Config, deps Deps) (*codeCache, error) {
	var kv jetstream.KeyValue
	err := bus.Declare(ctx, "KV "+codecache.Bucket, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      codecache.Bucket,
			Description: "NOVA generated-code cache: accepted code of AI nodes, by task, context shape, model and runtime",
			History:     1,
			TTL:         cfg.CodeCacheTTL,
			MaxBytes:    cfg.CodeCacheMaxBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    max(cfg.Replicas, 1),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", codecache.Bucket, err)
	}
	validators, err := validatorinfo.Declare(ctx, js, cfg.Replicas)
	if err != nil {
		return nil, err
	}
	mp := deps.MeterProvider
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/novaflow/nova/services/graph-engine/engine")
	c := &codeCache{kv: kv, runtime: runtimeinfo.NewCache(js), validators: validatorinfo.NewFollower(validators)}
	// Until the sandbox has published its runtime (the first moments of a
	// fresh deployment), each transition that needs it looks again soon: an
	// AI node that began without it keeps its accepted code once it is
	// there (cacheAccepted).
	c.runtime.RetryMissing = 200 * time.Millisecond
	if cfg.Semantic.Enabled {
		if err := cfg.Semantic.Validate(); err != nil {
			return nil, err
		}
		if deps.Embedder == nil {
			return nil, errors.New("the code cache's semantic level (NOVA_CODECACHE_SEMANTIC) needs a client of the embeddings API")
		}
		c.semantic = &semanticLevel{cfg: cfg.Semantic, client: deps.Embedder}
	}
	if c.hits, err = m.Int64Counter("nova.codecache.hits", metric.WithDescription("AI node visits that ran cached code instead of generating it, by match (exact, semantic)")); err != nil {
		return nil, err
	}
	if c.misses, err = m.Int64Counter("nova.codecache.misses", metric.WithDescription("AI node visits that found no cached code")); err != nil {
		return nil, err
	}
	if c.evictions, err = m.Int64Counter("nova.codecache.evictions", metric.WithDescription("Cached codes removed because they failed")); err != nil {
		return nil, err
	}
	return c, nil
}

// embedMemo keeps the embeddings computed while one event is handled, so
// that a transition tried again (another replica updated the execution
// first) finds the same embedding and the same call to account.
type embedMemo map[string]embedded

type embedded struct {
	vector []float32
	call   *novav1.ModelCall
}

// bindCache lets transition t look entries up (reads are safe to repeat)
// and gives it the runtime's fingerprint; without a known runtime t does not
// use the cache, so nothing can hit for a runtime it was not proven on.
func (e *Engine) bindCache(ctx context.Context, t *flow.Transition, memo embedMemo) {
	if e.codeCache == nil {
		return
	}
	info, err := e.codeCache.runtime.Get(ctx)
	if err != nil {
		if !errors.Is(err, runtimeinfo.ErrNotPublished) {
			e.log.WarnContext(ctx, "code cache: runtime description unreadable; the cache is skipped", "err", err)
		}
		// A node accepting code asks again, whatever the last miss: the
		// runtime may have come while the node ran.
		t.RecheckRuntime = func() {
			if info, err := e.codeCache.runtime.Recheck(ctx); err == nil {
				e.bindRuntime(ctx, t, memo, info)
			}
		}
		return
	}
	e.bindRuntime(ctx, t, memo, info)
}

// bindRuntime lets t use the code cache with the runtime info describes.
func (e *Engine) bindRuntime(ctx context.Context, t *flow.Transition, memo embedMemo, info *runtimeinfo.Info) {
	t.Runtime = e.codeCache.fingerprintOf(info)
	t.Validator = e.codeCache.validators.Current()
	t.Lookup = func(key string) *codecache.Entry {
		entry, err := e.codeCache.kv.Get(ctx, key)
		if err != nil {
			if !errors.Is(err, jetstream.ErrKeyNotFound) {
				e.log.WarnContext(ctx, "code cache: lookup failed; treated as a miss", "key", key, "err", err)
			}
			return nil
		}
		ce, err := codecache.Decode(entry.Value())
		if err != nil {
			e.log.WarnContext(ctx, "code cache: unreadable entry; treated as a miss", "key", key, "err", err)
			return nil
		}
		return ce
	}
	if s := e.codeCache.semantic; s != nil {
		t.SemanticModel = s.cfg.EmbeddingModel
		t.Semantic = func(q flow.SemanticQuery) flow.SemanticResult { return e.semanticLookup(ctx, memo, q, t.Lookup) }
	}
}

// semanticLookup compares q's task with its group's members. It reads the
// kept embedding of the task, else asks the API for it (bounded by the
// configured timeout and the node's budget) and keeps it, an idempotent
// write; every failure is a miss that says why.
func (e *Engine) semanticLookup(ctx context.Context, memo embedMemo, q flow.SemanticQuery, lookup func(string) *codecache.Entry) flow.SemanticResult {
	s, kv := e.codeCache.semantic, e.codeCache.kv
	if s.unsupported.Load() {
		return flow.SemanticResult{Quiet: true}
	}
	if len(q.Task) > maxSemanticTask {
		return flow.SemanticResult{Note: fmt.Sprintf("the task's %d bytes are over the %d the semantic level embeds", len(q.Task), maxSemanticTask)}
	}
	model := s.cfg.EmbeddingModel
	key := codecache.EmbeddingKey(model, q.Task)
	got, ok := memo[key]
	if !ok {
		vector, err := codecache.LoadEmbedding(ctx, kv, model, q.Task)
		if err != nil {
			e.log.WarnContext(ctx, "code cache: kept embedding unreadable; asking the API again", "err", err)
		}
		got.vector = vector
		if vector == nil {
			cctx, cancel := context.WithTimeout(llm.WithAllowance(ctx, q.Allowance), s.cfg.Timeout)
			res, err := s.client.Embed(cctx, model, []string{q.Task})
			cancel()
			// An API's error text is not ours: scrubbed before it is shown.
			var why string
			if err != nil {
				why = redact.Scrub(err.Error(), nil)
			}
			switch {
			case errors.Is(err, llm.ErrEmbeddingsUnsupported):
				if s.unsupported.CompareAndSwap(false, true) {
					e.log.WarnContext(ctx, "code cache: the model API offers no embeddings; the semantic level is off until the engine restarts",
						"embedding_model", model, "err", why)
				}
				return flow.SemanticResult{Note: "the model API offers no embeddings (" + why + "); the semantic level is off until the engine restarts"}
			case err != nil:
				if _, refused := llm.AsBudgetError(err); refused {
					return flow.SemanticResult{Note: "the embeddings call does not fit the node's budget: " + why}
				}
				e.log.WarnContext(ctx, "code cache: embeddings call failed; the semantic level misses", "embedding_model", model, "err", why)
				return flow.SemanticResult{Note: "the embeddings call failed: " + why}
			}
			got = embedded{vector: res.Vectors[0], call: res.Call}
			if err := codecache.StoreEmbedding(ctx, kv, model, q.Task, got.vector); err != nil {
				e.log.WarnContext(ctx, "code cache: could not keep the task's embedding", "err", err)
			}
		}
		memo[key] = got
	}
	res := flow.SemanticResult{Call: got.call}
	idx, err := codecache.LoadIndex(ctx, kv, q.Group)
	if err != nil {
		e.log.WarnContext(ctx, "code cache: semantic index unreadable; treated as a miss", "group", q.Group, "err", err)
		res.Note = "the semantic index is unreadable: " + err.Error()
		return res
	}
	if idx == nil {
		return res
	}
	res.Ranking = idx.Rank(got.vector, codecache.Literals(q.Task), s.cfg.Similarity)
	// A member whose entry expired or was purged is passed over.
	for _, m := range res.Ranking.Matches[:min(len(res.Ranking.Matches), 3)] {
		if entry := lookup(m.Key); entry != nil {
			res.Entry, res.Match = entry, m
			return res
		}
	}
	return res
}

// applyCache carries out a stored transition's cache decisions. A failure
// costs only a later hit, so it is logged, not returned.
func (e *Engine) applyCache(ctx context.Context, t *flow.Transition) {
	c, fx := e.codeCache, &t.CacheFx
	if c == nil {
		return
	}
	for _, d := range fx.Deletes {
		if err := c.kv.Delete(ctx, d.Key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			e.log.WarnContext(ctx, "code cache: evict failed", "key", d.Key, "err", err)
		}
		if d.Group != "" {
			err := codecache.UpdateIndex(ctx, c.kv, d.Group, func(x *codecache.Index) bool { return x.Remove(d.Key) })
			if err != nil {
				e.log.WarnContext(ctx, "code cache: evicted entry left in its semantic index", "key", d.Key, "err", err)
			}
		}
	}
	for key, p := range fx.Puts {
		if p.Group != "" && c.semantic != nil {
			e.index(ctx, key, p)
		}
		data, err := p.Entry.Encode()
		if err == nil {
			_, err = c.kv.Put(ctx, key, data)
		}
		if err != nil {
			e.log.WarnContext(ctx, "code cache: store failed (a full bucket stores again once entries expire)", "key", key, "err", err)
		}
	}
	for match, n := range fx.Hits {
		c.hits.Add(ctx, n, metric.WithAttributes(attribute.String("match", match)))
	}
	c.misses.Add(ctx, fx.Misses)
	c.evictions.Add(ctx, fx.Evictions)
}

// index makes p's entry a member of its semantic group with its task's
// kept embedding (kept by the lookup that missed); an entry whose task has
// none is found by its exact key only.
func (e *Engine) index(ctx context.Context, key string, p flow.CachePut) {
	c, model := e.codeCache, e.codeCache.semantic.cfg.EmbeddingModel
	vector, err := codecache.LoadEmbedding(ctx, c.kv, model, p.Entry.Task)
	if err != nil || vector == nil {
		if err != nil {
			e.log.WarnContext(ctx, "code cache: kept embedding unreadable; the entry is not indexed", "key", key, "err", err)
		}
		return
	}
	member := codecache.IndexEntry{Key: key, Literals: codecache.Literals(p.Entry.Task), Vector: codecache.Quantize(vector),
		AddedAt: p.Entry.CreatedAt}
	err = codecache.UpdateIndex(ctx, c.kv, p.Group, func(x *codecache.Index) bool {
		x.EmbeddingModel = model
		x.Put(member)
		return true
	})
	if err != nil {
		e.log.WarnContext(ctx, "code cache: semantic index not updated; the entry is found by its exact key only", "key", key, "err", err)
		return
	}
	p.Entry.Embedding = &codecache.EntryEmbedding{Model: model, Dimensions: len(vector), Group: p.Group}
}
