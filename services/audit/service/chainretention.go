package service

import (
	"context"
	"log/slog"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
)

// On a store without TTL indexes (FerretDB 1.x), the audit service deletes
// the executions that ended longer ago than the retention itself: every
// sweepEvery (a tenth of the retention, at most a minute), in batches of
// SweepBatch executions, each followed by a pause of SweepRest times what
// the batch took (at least SweepPause), so that deleting takes at most a
// fifth of the store's time from the workflows running meanwhile, and less
// of it the busier the store is (measured in the chain of work's storage
// note).
const (
	SweepBatch = 50
	SweepRest  = 4
	SweepPause = 250 * time.Millisecond
)

// sweepEvery is how often the sweeper looks for executions past keep.
func sweepEvery(keep time.Duration) time.Duration {
	return min(time.Minute, max(keep/10, time.Second))
}

// sweeper deletes the chain of work of executions that ended longer ago
// than keep, whole (chainstore.Store.DeleteEnded).
type sweeper struct {
	st    *chainstore.Store
	keep  time.Duration
	every time.Duration
	log   *slog.Logger
}

func (w *sweeper) run(ctx context.Context) {
	for {
		w.sweep(ctx)
		if !sleep(ctx, w.every) {
			return
		}
	}
}

// sweep deletes every execution past the retention now, in batches.
func (w *sweeper) sweep(ctx context.Context) {
	start := time.Now()
	before := start.Add(-w.keep)
	total := 0
	for {
		batch := time.Now()
		n, err := w.st.DeleteEnded(ctx, before, SweepBatch)
		total += n
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("chain of work retention: delete failed; next sweep retries", "deleted", total, "err", err)
			}
			return
		}
		if n < SweepBatch || !sleep(ctx, max(SweepPause, SweepRest*time.Since(batch))) {
			break
		}
	}
	if total > 0 {
		w.log.Info("chain of work retention: deleted executions ended before the retention",
			"deleted", total, "ended_before", before.UTC().Format(time.RFC3339), "took", time.Since(start).Round(time.Millisecond))
	}
}
