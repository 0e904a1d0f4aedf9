package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/runtimeinfo"
)

// Defaults of the code cache's limits.
const (
	DefaultCodeCacheTTL      = 30 * 24 * time.Hour
	DefaultCodeCacheMaxBytes = 256 << 20
)

// codeCache is the engine's side of the generated-code cache: the bucket,
// the runtime whose fingerprint is part of every key, and the counters.
type codeCache struct {
	kv                      jetstream.KeyValue
	runtime                 *runtimeinfo.Cache
	hits, misses, evictions metric.Int64Counter
}

func openCodeCache(ctx context.Context, js jetstream.JetStream, cfg Config, mp metric.MeterProvider) (*codeCache, error) {
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
	if mp == nil {
		mp = metricnoop.NewMeterProvider()
	}
	m := mp.Meter("github.com/novaflow/nova/services/graph-engine/engine")
	c := &codeCache{kv: kv, runtime: runtimeinfo.NewCache(js)}
	if c.hits, err = m.Int64Counter("nova.codecache.hits", metric.WithDescription("AI node visits that ran cached code instead of generating it")); err != nil {
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
	puts                    map[string]*codecache.Entry
	deletes                 []string
	hits, misses, evictions int64
}

// bindCache lets transition t look entries up (reads are safe to repeat)
// and gives it the runtime's fingerprint; without a known runtime t does not
// use the cache, so nothing can hit for a runtime it was not proven on.
func (e *Engine) bindCache(ctx context.Context, t *transition) {
	if e.codeCache == nil {
		return
	}
	info, err := e.codeCache.runtime.Get(ctx)
	if err != nil {
		if !errors.Is(err, runtimeinfo.ErrNotPublished) {
			e.log.WarnContext(ctx, "code cache: runtime description unreadable; the cache is skipped", "err", err)
		}
		return
	}
	t.runtime = codecache.RuntimeFingerprint(info)
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
}

// applyCache carries out a stored transition's cache decisions. A failure
// costs only a later hit, so it is logged, not returned.
func (e *Engine) applyCache(ctx context.Context, t *transition) {
	c, fx := e.codeCache, &t.cacheFx
	if c == nil {
		return
	}
	for _, key := range fx.deletes {
		if err := c.kv.Delete(ctx, key); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			e.log.WarnContext(ctx, "code cache: evict failed", "key", key, "err", err)
		}
	}
	for key, entry := range fx.puts {
		data, err := entry.Encode()
		if err == nil {
			_, err = c.kv.Put(ctx, key, data)
		}
		if err != nil {
			e.log.WarnContext(ctx, "code cache: store failed (a full bucket stores again once entries expire)", "key", key, "err", err)
		}
	}
	c.hits.Add(ctx, fx.hits)
	c.misses.Add(ctx, fx.misses)
	c.evictions.Add(ctx, fx.evictions)
}
