package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/services/graph-engine/flow"
)

// The results of a map's items are kept in a KV bucket of their own
// (BucketMapResults), one key per item, until the map finishes and
// collects them in item order: an item's event then reads and writes a
// state as large at the 10,000th item as at the first, where results kept
// in the state made each event cost more the more items had finished (and
// a map whose results added up to more than a NATS message failed).
//
// A key is <execution>.<node>.<visit>.<index>, the node id in unpadded
// base64url (a node id may hold any character; a key may not).

// BucketMapResults holds map items' results while their map runs.
const BucketMapResults = bus.BucketMapResults

// openMapResults declares the bucket. Its keys are removed when their map
// finishes or its execution ends (dropResults); it has no age limit, as a
// map whose items are sub-workflows may run for days.
func openMapResults(ctx context.Context, js jetstream.JetStream, cfg Config) (jetstream.KeyValue, jetstream.Stream, error) {
	kv, err := openBucket(ctx, js, jetstream.KeyValueConfig{
		Bucket:      BucketMapResults,
		Description: "NOVA map items' results while their map runs, one key per item",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    max(cfg.Replicas, 1),
	})
	if err != nil {
		return nil, nil, err
	}
	stream, err := js.Stream(ctx, "KV_"+BucketMapResults)
	if err != nil {
		return nil, nil, fmt.Errorf("open KV %s: %w", BucketMapResults, err)
	}
	return kv, stream, nil
}

// bindMapResults lets t read a map run's kept results back.
func (e *Engine) bindMapResults(ctx context.Context, t *flow.Transition) {
	if e.results == nil {
		return
	}
	t.MapResults = func(prefix string) (map[int32][]byte, error) { return e.readResults(ctx, prefix) }
}

// readResults reads every kept result under prefix, by item.
func (e *Engine) readResults(ctx context.Context, prefix string) (map[int32][]byte, error) {
	w, err := e.results.Watch(ctx, prefix+".*", jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer w.Stop()
	out := map[int32][]byte{}
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case entry, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("the watch of the map results ended early")
			}
			if entry == nil {
				// Every value there is was delivered.
				return out, nil
			}
			if i, ok := flow.ItemOfKey(prefix, entry.Key()); ok {
				out[i] = entry.Value()
			}
		}
	}
}

// keepResults stores the results t's items finished with (one over the
// value store's threshold by reference), before the state that counts
// them is stored: a redelivery after a crash in between stores the same
// result under the same key again.
func (e *Engine) keepResults(ctx context.Context, t *flow.Transition) error {
	if len(t.ResultsFx) > 0 && e.results == nil {
		return errors.New("this engine has no map results bucket")
	}
	for _, r := range t.ResultsFx {
		value := r.Value
		if e.values != nil && len(value) > e.values.Threshold() {
			o := jsonvalue.Object{"v": value}
			if err := e.values.Shrink(ctx, o); err != nil {
				return err
			}
			value = o["v"]
		}
		if _, err := e.results.Put(ctx, r.Key, value); err != nil {
			return fmt.Errorf("keep the result of map item %s: %w", r.Key, err)
		}
	}
	return nil
}

// dropResults removes the results of the map runs t ended, once the state
// that no longer needs them is stored. A failure is logged: the results
// are then left in the bucket, unread.
func (e *Engine) dropResults(ctx context.Context, t *flow.Transition) {
	if e.resultsStream == nil {
		return
	}
	for _, prefix := range t.PurgeFx {
		subject := "$KV." + BucketMapResults + "." + prefix + ".>"
		if err := e.resultsStream.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
			e.log.WarnContext(ctx, "could not remove the results of a finished map", "subject", subject, "error", err)
		}
	}
}
