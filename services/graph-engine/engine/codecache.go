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

// Cache match levels (AIRun.cache_match, ai_metadata.cache_match).
const (
	matchExact    = "exact"
	matchSemantic = "semantic"
)

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

// cacheEffects are what a transition decided about the cache; the engine
// applies them once the state that decided them is stored.
type cacheEffects struct {
	puts              map[string]cachePut
	deletes           []cacheDelete
	hits              map[string]int64 // by match
	misses, evictions int64
}

// cachePut stores an entry, and indexes it in its semantic group when group
// is set and its task's embedding is kept.
type cachePut struct {
	entry *codecache.Entry
	group string
}

// cacheDelete evicts an entry, and its member of group's index.
type cacheDelete struct {
	key, group string
}

// semanticQuery is what the semantic level compares: a task, within group.
type semanticQuery struct {
	group, task string
	// allowance is what the node's budget leaves for the embeddings call.
	allowance *novav1.Allowance
}

// semanticResult is what the semantic level found after an exact miss.
type semanticResult struct {
	// entry and match are the hit, nil and zero for a miss.
	entry *codecache.Entry
	match codecache.Match
	// ranking is what the comparison found.
	ranking codecache.Ranking
	// call is the embeddings call the lookup made (nil when the embedding
	// was kept or no call was made).
	call *novav1.ModelCall
	// note says why nothing could be compared ("" when it was).
	note string
	// quiet: the level is known to be off; the lookup leaves no step.
	quiet bool
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
func (e *Engine) bindCache(ctx context.Context, t *transition, memo embedMemo) {
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
		t.recheckRuntime = func() {
			if info, err := e.codeCache.runtime.Recheck(ctx); err == nil {
				e.bindRuntime(ctx, t, memo, info)
			}
		}
		return
	}
	e.bindRuntime(ctx, t, memo, info)
}

// bindRuntime lets t use the code cache with the runtime info describes.
func (e *Engine) bindRuntime(ctx context.Context, t *transition, memo embedMemo, info *runtimeinfo.Info) {
	t.runtime = e.codeCache.fingerprintOf(info)
	t.validator = e.codeCache.validators.Current()
	t.lookup = func(key string) *codecache.Entry {
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
		t.semanticModel = s.cfg.EmbeddingModel
		t.semantic = func(q semanticQuery) semanticResult { return e.semanticLookup(ctx, memo, q, t.lookup) }
	}
}

// semanticLookup compares q's task with its group's members. It reads the
// kept embedding of the task, else asks the API for it (bounded by the
// configured timeout and the node's budget) and keeps it, an idempotent
// write; every failure is a miss that says why.
func (e *Engine) semanticLookup(ctx context.Context, memo embedMemo, q semanticQuery, lookup func(string) *codecache.Entry) semanticResult {
	s, kv := e.codeCache.semantic, e.codeCache.kv
	if s.unsupported.Load() {
		return semanticResult{quiet: true}
	}
	if len(q.task) > maxSemanticTask {
		return semanticResult{note: fmt.Sprintf("the task's %d bytes are over the %d the semantic level embeds", len(q.task), maxSemanticTask)}
	}
	model := s.cfg.EmbeddingModel
	key := codecache.EmbeddingKey(model, q.task)
	got, ok := memo[key]
	if !ok {
		vector, err := codecache.LoadEmbedding(ctx, kv, model, q.task)
		if err != nil {
			e.log.WarnContext(ctx, "code cache: kept embedding unreadable; asking the API again", "err", err)
		}
		got.vector = vector
		if vector == nil {
			cctx, cancel := context.WithTimeout(llm.WithAllowance(ctx, q.allowance), s.cfg.Timeout)
			res, err := s.client.Embed(cctx, model, []string{q.task})
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
				return semanticResult{note: "the model API offers no embeddings (" + why + "); the semantic level is off until the engine restarts"}
			case err != nil:
				if _, refused := llm.AsBudgetError(err); refused {
					return semanticResult{note: "the embeddings call does not fit the node's budget: " + why}
				}
				e.log.WarnContext(ctx, "code cache: embeddings call failed; the semantic level misses", "embedding_model", model, "err", why)
				return semanticResult{note: "the embeddings call failed: " + why}
			}
			got = embedded{vector: res.Vectors[0], call: res.Call}
			if err := codecache.StoreEmbedding(ctx, kv, model, q.task, got.vector); err != nil {
				e.log.WarnContext(ctx, "code cache: could not keep the task's embedding", "err", err)
			}
		}
		memo[key] = got
	}
	res := semanticResult{call: got.call}
	idx, err := codecache.LoadIndex(ctx, kv, q.group)
	if err != nil {
		e.log.WarnContext(ctx, "code cache: semantic index unreadable; treated as a miss", "group", q.group, "err", err)
		res.note = "the semantic index is unreadable: " + err.Error()
		return res
	}
	if idx == nil {
		return res
	}
	res.ranking = idx.Rank(got.vector, codecache.Literals(q.task), s.cfg.Similarity)
	// A member whose entry expired or was purged is passed over.
	for _, m := range res.ranking.Matches[:min(len(res.ranking.Matches), 3)] {
		if entry := lookup(m.Key); entry != nil {
			res.entry, res.match = entry, m
			return res
		}
	}
	return res
}

// applyCache carries out a stored transition's cache decisions. A failure
// costs only a later hit, so it is logged, not returned.
func (e *Engine) applyCache(ctx context.Context, t *transition) {
	c, fx := e.codeCache, &t.cacheFx
	if c == nil {
		return
	}
	for _, d := range fx.deletes {
		if err := c.kv.Delete(ctx, d.key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			e.log.WarnContext(ctx, "code cache: evict failed", "key", d.key, "err", err)
		}
		if d.group != "" {
			err := codecache.UpdateIndex(ctx, c.kv, d.group, func(x *codecache.Index) bool { return x.Remove(d.key) })
			if err != nil {
				e.log.WarnContext(ctx, "code cache: evicted entry left in its semantic index", "key", d.key, "err", err)
			}
		}
	}
	for key, p := range fx.puts {
		if p.group != "" && c.semantic != nil {
			e.index(ctx, key, p)
		}
		data, err := p.entry.Encode()
		if err == nil {
			_, err = c.kv.Put(ctx, key, data)
		}
		if err != nil {
			e.log.WarnContext(ctx, "code cache: store failed (a full bucket stores again once entries expire)", "key", key, "err", err)
		}
	}
	for match, n := range fx.hits {
		c.hits.Add(ctx, n, metric.WithAttributes(attribute.String("match", match)))
	}
	c.misses.Add(ctx, fx.misses)
	c.evictions.Add(ctx, fx.evictions)
}

// index makes p's entry a member of its semantic group with its task's
// kept embedding (kept by the lookup that missed); an entry whose task has
// none is found by its exact key only.
func (e *Engine) index(ctx context.Context, key string, p cachePut) {
	c, model := e.codeCache, e.codeCache.semantic.cfg.EmbeddingModel
	vector, err := codecache.LoadEmbedding(ctx, c.kv, model, p.entry.Task)
	if err != nil || vector == nil {
		if err != nil {
			e.log.WarnContext(ctx, "code cache: kept embedding unreadable; the entry is not indexed", "key", key, "err", err)
		}
		return
	}
	member := codecache.IndexEntry{Key: key, Literals: codecache.Literals(p.entry.Task), Vector: codecache.Quantize(vector),
		AddedAt: p.entry.CreatedAt}
	err = codecache.UpdateIndex(ctx, c.kv, p.group, func(x *codecache.Index) bool {
		x.EmbeddingModel = model
		x.Put(member)
		return true
	})
	if err != nil {
		e.log.WarnContext(ctx, "code cache: semantic index not updated; the entry is found by its exact key only", "key", key, "err", err)
		return
	}
	p.entry.Embedding = &codecache.EntryEmbedding{Model: model, Dimensions: len(vector), Group: p.group}
}
