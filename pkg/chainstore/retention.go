package chainstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// The chain of work's retention: an execution's documents (the execution,
// its node visits, its steps) go together once the execution ended longer
// ago than the retention; a running execution, and one that ended since,
// stays whole.
//
// On MongoDB the server deletes them, through TTL indexes named
// retentionIndex: on the execution's completed_at, and on
// EndedField of its chain_of_work and chain_of_work_steps documents, which
// the completion sets on every document the execution has then (see
// EnsureRetention). FerretDB 1.x has no TTL indexes; there the audit service
// calls DeleteEnded.

// EndedField is the field of a chain_of_work or chain_of_work_steps
// document that holds its execution's completion time, on a store whose
// retention is kept by TTL indexes (see EnsureRetention).
const EndedField = "execution_completed_at"

// retentionIndex is the name of the TTL indexes of the retention.
const retentionIndex = "retention"

// WithTTLRetention forces EnsureRetention to try TTL indexes (on) or not
// (off). Without it, it tries them unless the server is FerretDB.
func WithTTLRetention(on bool) Option {
	return func(s *Store) { s.forceTTL = &on }
}

// EnsureRetention sets the retention up: keep is how long after its end an
// execution's documents are kept, 0 for ever. It tells whether the server
// deletes them, through TTL indexes it created or changed to keep here (and
// dropped with keep 0); if not (FerretDB, or a server that answers that
// TTL indexes are not implemented), the caller deletes them with
// DeleteEnded. It runs at every start-up, so a changed retention applies to
// what is stored.
func (s *Store) EnsureRetention(ctx context.Context, keep time.Duration) (bool, error) {
	if keep < 0 {
		return false, fmt.Errorf("retention %v: must not be negative", keep)
	}
	if !s.ttl {
		return false, nil
	}
	for _, ix := range []struct {
		coll  *mongo.Collection
		field string
	}{{s.executions, "completed_at"}, {s.chain, EndedField}, {s.steps, EndedField}} {
		err := ensureTTL(ctx, ix.coll, ix.field, keep)
		if notImplemented(err) {
			s.ttl = false
			return false, nil
		}
		if err != nil {
			return false, err
		}
	}
	s.stampEnded.Store(keep > 0)
	return keep > 0, nil
}

// notImplemented tells a server's answer that it does not implement what
// was asked.
func notImplemented(err error) bool {
	var ce mongo.CommandError
	return errors.As(err, &ce) && (ce.Name == "NotImplemented" || ce.Code == 238)
}

// ensureTTL makes the retention index of coll expire documents keep after
// their field's time, or drops it with keep 0.
func ensureTTL(ctx context.Context, coll *mongo.Collection, field string, keep time.Duration) error {
	specs, err := coll.Indexes().ListSpecifications(ctx)
	if err != nil {
		return fmt.Errorf("list indexes of %s: %w", coll.Name(), err)
	}
	i := slices.IndexFunc(specs, func(spec mongo.IndexSpecification) bool { return spec.Name == retentionIndex })
	if keep == 0 {
		if i < 0 {
			return nil
		}
		if err := coll.Indexes().DropOne(ctx, retentionIndex); err != nil {
			return fmt.Errorf("drop index %s of %s: %w", retentionIndex, coll.Name(), err)
		}
		return nil
	}
	secs := int32(max(keep/time.Second, 1))
	if i >= 0 {
		if e := specs[i].ExpireAfterSeconds; e != nil && *e == secs {
			return nil
		}
		err := coll.Database().RunCommand(ctx, bson.D{{Key: "collMod", Value: coll.Name()},
			{Key: "index", Value: bson.D{{Key: "name", Value: retentionIndex}, {Key: "expireAfterSeconds", Value: secs}}}}).Err()
		if err != nil {
			return fmt.Errorf("set the retention of %s to %v: %w", coll.Name(), keep, err)
		}
		return nil
	}
	model := mongo.IndexModel{Keys: bson.D{{Key: field, Value: 1}},
		Options: options.Index().SetName(retentionIndex).SetExpireAfterSeconds(secs)}
	if _, err := coll.Indexes().CreateOne(ctx, model); err != nil {
		return fmt.Errorf("create the retention index of %s: %w", coll.Name(), err)
	}
	return nil
}

// stampCompleted sets EndedField on the documents recorded so far of each
// completed execution of list, for the TTL indexes (see EnsureRetention).
func (s *Store) stampCompleted(ctx context.Context, list []*item) {
	if !s.stampEnded.Load() {
		return
	}
	for _, it := range list {
		if it.err != nil {
			continue
		}
		if err := s.stamp(ctx, it.id, it.doc.(bson.D)); err != nil {
			it.err = err
		}
	}
}

// stamp sets EndedField on the chain_of_work and chain_of_work_steps
// documents of the execution id that completed with the fields set.
func (s *Store) stamp(ctx context.Context, id string, set bson.D) error {
	var completed any
	for _, e := range set {
		if e.Key == "completed_at" {
			completed = e.Value
		}
	}
	if t, ok := completed.(*time.Time); !ok || t == nil {
		return nil
	}
	for _, coll := range []*mongo.Collection{s.chain, s.steps} {
		_, err := coll.UpdateMany(ctx, bson.D{{Key: "execution_id", Value: id}},
			bson.D{{Key: "$set", Value: bson.D{{Key: EndedField, Value: completed}}}})
		if err != nil {
			return fmt.Errorf("record workflow completed %s: set %s in %s: %w", id, EndedField, coll.Name(), err)
		}
	}
	return nil
}

// DeleteEnded deletes, whole, up to max executions that ended before
// before, and tells how many it deleted: an execution's chain_of_work and
// chain_of_work_steps documents (and their entries in IndexCollection)
// first, its execution document last, so that one whose deletion was cut
// short is found and finished by the next call. With ListingCollection in
// use (FerretDB) it finds them there, oldest first, and deletes the
// listing's minutes whose executions are all gone; elsewhere with a query.
func (s *Store) DeleteEnded(ctx context.Context, before time.Time, max int) (int, error) {
	if max <= 0 {
		return 0, nil
	}
	if s.listed {
		return s.deleteListed(ctx, before, max)
	}
	cur, err := s.executions.Find(ctx, bson.D{{Key: "completed_at", Value: bson.D{{Key: "$lt", Value: before}}}},
		options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}}).SetLimit(int64(max)))
	if err != nil {
		return 0, fmt.Errorf("find executions ended before %v: %w", before, err)
	}
	var ids []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &ids); err != nil {
		return 0, fmt.Errorf("find executions ended before %v: %w", before, err)
	}
	list := make([]string, len(ids))
	for i, e := range ids {
		list[i] = e.ID
	}
	if err := s.deleteExecutions(ctx, list); err != nil {
		return 0, err
	}
	return len(list), nil
}

// deleteListed is DeleteEnded through ListingCollection: it walks the
// minutes before before, oldest first, from the first that this store has
// not seen emptied, and deletes what it found of each minute at once.
func (s *Store) deleteListed(ctx context.Context, before time.Time, max int) (int, error) {
	s.sweepMu.Lock()
	defer s.sweepMu.Unlock()
	deleted, allGone := 0, true
	_, err := s.walkOldest(ctx, listingRoot, before, func(bucket string) (bool, error) {
		ids, err := s.bucketIDs(ctx, bucket)
		if err != nil {
			return false, err
		}
		var ended []string
		left := 0
		for _, id := range ids {
			if deleted+len(ended) == max {
				left++
				continue
			}
			var doc struct {
				CompletedAt *time.Time `bson:"completed_at"`
			}
			err := s.executions.FindOne(ctx, bson.D{{Key: "_id", Value: id}},
				options.FindOne().SetProjection(bson.D{{Key: "completed_at", Value: 1}})).Decode(&doc)
			switch {
			case errors.Is(err, mongo.ErrNoDocuments):
			case err != nil:
				return false, fmt.Errorf("read %s %q: %w", ExecutionsCollection, id, err)
			case doc.CompletedAt == nil || !doc.CompletedAt.Before(before):
				left++
			default:
				ended = append(ended, id)
			}
		}
		if err := s.deleteExecutions(ctx, ended); err != nil {
			return false, err
		}
		deleted += len(ended)
		if left > 0 {
			allGone = false
			return deleted < max, nil
		}
		if err := s.deleteLog(ctx, bucket); err != nil {
			return false, err
		}
		if allGone {
			_, s.swept, _ = keySpan(bucket)
		}
		return deleted < max, nil
	})
	if err != nil {
		return deleted, fmt.Errorf("delete executions ended before %v: %w", before, err)
	}
	return deleted, nil
}

// walkOldest calls visit with the buckets under the directory key that
// began before before and end after s.swept, oldest first, until it
// returns false. It tells whether visit asked for more.
func (s *Store) walkOldest(ctx context.Context, key string, before time.Time, visit func(bucket string) (bool, error)) (bool, error) {
	children, err := s.readChildren(ctx, key)
	if err != nil {
		return false, err
	}
	for _, c := range slices.Backward(children) {
		lo, hi, ok := keySpan(c)
		if !ok { // listingNoStart: no start, so not found by its end
			continue
		}
		if !lo.Before(before) {
			return false, nil
		}
		if !hi.After(s.swept) {
			continue
		}
		more := true
		if isBucket(c) {
			more, err = visit(c)
		} else {
			more, err = s.walkOldest(ctx, c, before, visit)
		}
		if err != nil || !more {
			return false, err
		}
	}
	return true, nil
}

// bucketIDs are the executions a listing bucket lists, each once.
func (s *Store) bucketIDs(ctx context.Context, bucket string) ([]string, error) {
	listed, err := s.readBucket(ctx, bucket)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, e := range listed {
		if !slices.Contains(ids, e.ID) {
			ids = append(ids, e.ID)
		}
	}
	return ids, nil
}

// deleteExecutions deletes the executions ids whole: their node visits and
// steps (and index entries) first, with one write per collection, their
// execution documents last.
func (s *Store) deleteExecutions(ctx context.Context, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	byID := func(id string) mongo.WriteModel {
		return mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: id}})
	}
	if s.indexed {
		docs := map[string][]mongo.WriteModel{}
		var entries []mongo.WriteModel
		for _, id := range ids {
			listed, next, err := s.indexOf(ctx, id)
			if err != nil {
				return err
			}
			for _, d := range listed {
				docs[d.Collection] = append(docs[d.Collection], byID(d.DocID))
			}
			for n := 1; n < next; n++ {
				entries = append(entries, byID(entryID(id, n)))
			}
		}
		for _, coll := range []*mongo.Collection{s.chain, s.steps} {
			if err := deleteAll(ctx, coll, docs[coll.Name()]); err != nil {
				return fmt.Errorf("delete executions' %s: %w", coll.Name(), err)
			}
		}
		if err := deleteAll(ctx, s.index, entries); err != nil {
			return fmt.Errorf("delete executions' %s: %w", s.index.Name(), err)
		}
		for _, id := range ids {
			s.positions.forget(id)
		}
	} else {
		for _, coll := range []*mongo.Collection{s.chain, s.steps} {
			if _, err := coll.DeleteMany(ctx, bson.D{{Key: "execution_id", Value: bson.D{{Key: "$in", Value: ids}}}}); err != nil {
				return fmt.Errorf("delete executions' %s: %w", coll.Name(), err)
			}
		}
	}
	models := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		models[i] = byID(id)
	}
	if err := deleteAll(ctx, s.executions, models); err != nil {
		return fmt.Errorf("delete executions: %w", err)
	}
	return nil
}

// deleteLog deletes the ListingCollection log key: its entries, snapshots
// and seal.
func (s *Store) deleteLog(ctx context.Context, key string) error {
	_, next, _, err := s.readLog(ctx, key)
	if err != nil {
		return err
	}
	ids := []string{sealID(key)}
	for n := 1; n < next; n++ {
		ids = append(ids, entryID(key, n))
		if n%listingGroup == 0 {
			ids = append(ids, snapshotID(key, n/listingGroup))
		}
	}
	models := make([]mongo.WriteModel, len(ids))
	for i, id := range ids {
		models[i] = mongo.NewDeleteOneModel().SetFilter(bson.D{{Key: "_id", Value: id}})
	}
	if err := deleteAll(ctx, s.listing, models); err != nil {
		return fmt.Errorf("delete %s of %s: %w", key, ListingCollection, err)
	}
	s.listPositions.forget(key)
	return nil
}

// deleteAll runs deletes by _id in one unordered bulk write.
func deleteAll(ctx context.Context, coll *mongo.Collection, models []mongo.WriteModel) error {
	if len(models) == 0 {
		return nil
	}
	_, err := coll.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	return err
}
