package chainstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// IndexCollection lists, per execution, the chain_of_work and
// chain_of_work_steps documents written for it, on a store that can only find
// a document by _id without reading the whole collection (FerretDB 1.24 on
// SQLite pushes no other filter down). There, Chain and Counts read an
// execution's documents by _id through this list instead of with a query on
// execution_id, whose cost grows with the history. On MongoDB it is not used.
const IndexCollection = "chain_of_work_index"

// indexEntry is an IndexCollection document: an entry of an execution's
// index, the entry log (see entryID) keyed by the execution id, listing
// documents recorded for it: those of one batch of the audit service
// (Docs), one when it recorded one event.
type indexEntry struct {
	ID   string       `bson:"_id"`
	Docs []indexedDoc `bson:"docs,omitempty"`
	// An entry of a version before Docs lists one document here.
	Collection string `bson:"collection,omitempty"`
	DocID      string `bson:"doc_id,omitempty"`
}

// indexedDoc is a document an index entry lists: its collection and _id.
type indexedDoc struct {
	Collection string `bson:"collection"`
	DocID      string `bson:"doc_id"`
}

// docs are the documents e lists.
func (e indexEntry) docs() []indexedDoc {
	if e.DocID == "" {
		return e.Docs
	}
	return append([]indexedDoc{{Collection: e.Collection, DocID: e.DocID}}, e.Docs...)
}

// maxEntryDocs is the most documents one entry lists (the backfill of an
// execution with more writes several), far below a document's 16 MB.
const maxEntryDocs = 1000

// indexBackfilled marks an IndexCollection that lists every document
// recorded before it existed (see backfillIndex). No entry has this _id: an
// entry's ends in #<n>.
const indexBackfilled = "backfilled"

// Option changes how Open sets the store up.
type Option func(*Store)

// WithExecutionIndex forces the use of IndexCollection on or off. Without it,
// Open uses it when the server is FerretDB, which reports ferretdbVersion in
// buildInfo.
func WithExecutionIndex(on bool) Option {
	return func(s *Store) { s.forceIndex = &on }
}

// WithQueryIndexes forces EnsureIndexes to create the indexes of the queries
// (on) or to drop them (off). Without it, Open creates them unless the server
// is FerretDB, which reads none of them (see EnsureIndexes).
func WithQueryIndexes(on bool) Option {
	return func(s *Store) { s.forceQueryIndexes = &on }
}

// isFerretDB tells whether the server is FerretDB.
func isFerretDB(ctx context.Context, client *mongo.Client) (bool, error) {
	raw, err := client.Database("admin").RunCommand(ctx, bson.D{{Key: "buildInfo", Value: 1}}).Raw()
	if err != nil {
		return false, fmt.Errorf("buildInfo: %w", err)
	}
	_, err = raw.LookupErr("ferretdbVersion")
	return err == nil, nil
}

// indexDoc lists the document docID of coll in its execution's index, as
// indexDocs does.
func (s *Store) indexDoc(ctx context.Context, executionID, coll, docID string, first bool) error {
	return s.indexDocs(ctx, executionID, []indexedDoc{{Collection: coll, DocID: docID}}, first)
}

// indexDocs lists docs in their execution's index, in one entry. When they
// may be listed already (first is false: a redelivered event found its
// document, or a batch's entry may be in), only those that are not yet
// are, so that the index holds each document once unless two deliveries of
// one event race; readers ignore the repeats.
func (s *Store) indexDocs(ctx context.Context, executionID string, docs []indexedDoc, first bool) error {
	if !s.indexed {
		return nil
	}
	if !first {
		listed, _, err := s.indexOf(ctx, executionID)
		if err != nil {
			return err
		}
		docs = slices.DeleteFunc(slices.Clone(docs), func(d indexedDoc) bool { return slices.Contains(listed, d) })
		if len(docs) == 0 {
			return nil
		}
	}
	_, err := appendEntry(ctx, s.index, &s.positions, executionID, func(id string) any {
		return indexEntry{ID: id, Docs: docs}
	})
	if err != nil {
		return fmt.Errorf("index %s: %w", docs[0].DocID, err)
	}
	return nil
}

// indexOf reads an execution's index, in order, each document once, and
// tells its first free position.
func (s *Store) indexOf(ctx context.Context, executionID string) ([]indexedDoc, int, error) {
	entries, next, err := readEntries[indexEntry](ctx, s.index, executionID)
	if err != nil {
		return nil, 0, fmt.Errorf("read index of %q: %w", executionID, err)
	}
	var docs []indexedDoc
	seen := map[indexedDoc]bool{}
	for _, e := range entries {
		for _, d := range e.docs() {
			if !seen[d] {
				seen[d] = true
				docs = append(docs, d)
			}
		}
	}
	return docs, next, nil
}

// indexReady tells whether reads of one execution can go through the index:
// it is in use and lists the documents recorded before it (backfillIndex is
// done). Until then, on a data dir of an older version read before the
// audit service started, they use queries.
func (s *Store) indexReady(ctx context.Context) (bool, error) {
	if !s.indexed || s.backfilled.Load() {
		return s.indexed, nil
	}
	err := s.index.FindOne(ctx, bson.D{{Key: "_id", Value: indexBackfilled}}).Err()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", IndexCollection, err)
	}
	s.backfilled.Store(true)
	return true, nil
}

// indexedChain reads an execution's node visits and steps by _id through
// its index, sorted as the queries of Chain sort them.
func (s *Store) indexedChain(ctx context.Context, executionID string) ([]NodeDoc, []StepDoc, error) {
	entries, _, err := s.indexOf(ctx, executionID)
	if err != nil {
		return nil, nil, err
	}
	var nodes []NodeDoc
	var steps []StepDoc
	for _, e := range entries {
		var err error
		switch e.Collection {
		case ChainCollection:
			var n NodeDoc
			if err = s.chain.FindOne(ctx, bson.D{{Key: "_id", Value: e.DocID}}).Decode(&n); err == nil {
				nodes = append(nodes, n)
			}
		case StepsCollection:
			var st StepDoc
			if err = s.steps.FindOne(ctx, bson.D{{Key: "_id", Value: e.DocID}}).Decode(&st); err == nil {
				steps = append(steps, st)
			}
		}
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			return nil, nil, fmt.Errorf("chain of %q: %s %s: %w", executionID, e.Collection, e.DocID, err)
		}
	}
	slices.SortFunc(nodes, func(a, b NodeDoc) int {
		return cmp.Or(cmp.Compare(a.Sequence, b.Sequence), compareTimes(a.StartedAt, b.StartedAt), cmp.Compare(a.ID, b.ID))
	})
	slices.SortFunc(steps, func(a, b StepDoc) int {
		return cmp.Or(cmp.Compare(a.NodeID, b.NodeID), cmp.Compare(a.Visit, b.Visit),
			cmp.Compare(a.StepNumber, b.StepNumber), compareTimes(a.Timestamp, b.Timestamp))
	})
	return nodes, steps, nil
}

// compareTimes orders as MongoDB sorts dates ascending: null first.
func compareTimes(a, b *time.Time) int {
	switch {
	case a == nil && b == nil:
		return 0
	case a == nil:
		return -1
	case b == nil:
		return 1
	}
	return a.Compare(*b)
}

// indexedCounts counts an execution's documents, those of chain_of_work and
// chain_of_work_steps through its index.
func (s *Store) indexedCounts(ctx context.Context, executionID string) (map[string]int64, error) {
	n, err := s.executions.CountDocuments(ctx, bson.D{{Key: "_id", Value: executionID}})
	if err != nil {
		return nil, fmt.Errorf("count %s of %q: %w", ExecutionsCollection, executionID, err)
	}
	counts := map[string]int64{ExecutionsCollection: n, ChainCollection: 0, StepsCollection: 0}
	entries, _, err := s.indexOf(ctx, executionID)
	if err != nil {
		return nil, err
	}
	for _, e := range entries {
		counts[e.Collection]++
	}
	return counts, nil
}

// backfillIndex lists in the index, once, every document recorded before
// it existed (a data dir of a version without it): it reads both
// collections whole, so it marks when it is done.
func (s *Store) backfillIndex(ctx context.Context) error {
	if ready, err := s.indexReady(ctx); ready || err != nil {
		return err
	}
	// An index that is empty needs no reading per execution.
	err := s.index.FindOne(ctx, bson.D{}).Err()
	empty := errors.Is(err, mongo.ErrNoDocuments)
	if err != nil && !empty {
		return fmt.Errorf("backfill %s: %w", IndexCollection, err)
	}

	docs := map[string][]indexedDoc{} // by execution, in the order read
	for _, coll := range []*mongo.Collection{s.chain, s.steps} {
		if err := recordedDocs(ctx, coll, docs); err != nil {
			return fmt.Errorf("backfill %s: read %s: %w", IndexCollection, coll.Name(), err)
		}
	}
	const batch = 100 // entries per insert
	var pending []indexEntry
	for _, id := range slices.Sorted(maps.Keys(docs)) {
		next := 1
		if !empty {
			listed, n, err := s.indexOf(ctx, id)
			if err != nil {
				return fmt.Errorf("backfill %s: %w", IndexCollection, err)
			}
			docs[id] = slices.DeleteFunc(docs[id], func(d indexedDoc) bool { return slices.Contains(listed, d) })
			next = n
		}
		for chunk := range slices.Chunk(docs[id], maxEntryDocs) {
			pending = append(pending, indexEntry{ID: entryID(id, next), Docs: chunk})
			next++
		}
		if len(pending) >= batch {
			if err := s.insertEntries(ctx, pending); err != nil {
				return err
			}
			pending = pending[:0]
		}
	}
	if err := s.insertEntries(ctx, pending); err != nil {
		return err
	}
	_, err = s.index.InsertOne(ctx, bson.D{{Key: "_id", Value: indexBackfilled}, {Key: "at", Value: time.Now()}})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("backfill %s: %w", IndexCollection, err)
	}
	s.backfilled.Store(true)
	return nil
}

// recordedDocs adds the documents of coll to docs, by execution.
func recordedDocs(ctx context.Context, coll *mongo.Collection, docs map[string][]indexedDoc) error {
	cur, err := coll.Find(ctx, bson.D{}, options.Find().SetProjection(bson.D{{Key: "_id", Value: 1}, {Key: "execution_id", Value: 1}}))
	if err != nil {
		return err
	}
	defer cur.Close(ctx)
	for cur.Next(ctx) {
		var d struct {
			ID          string `bson:"_id"`
			ExecutionID string `bson:"execution_id"`
		}
		if err := cur.Decode(&d); err != nil || d.ExecutionID == "" {
			continue // not a document this store wrote
		}
		docs[d.ExecutionID] = append(docs[d.ExecutionID], indexedDoc{Collection: coll.Name(), DocID: d.ID})
	}
	return cur.Err()
}

// insertEntries inserts entries at the positions they name. One whose
// position another writer took meanwhile is listed at the next free one.
func (s *Store) insertEntries(ctx context.Context, entries []indexEntry) error {
	if len(entries) == 0 {
		return nil
	}
	_, err := s.index.InsertMany(ctx, entries, options.InsertMany().SetOrdered(false))
	var bulk mongo.BulkWriteException
	if err == nil || !errors.As(err, &bulk) {
		if err != nil {
			return fmt.Errorf("backfill %s: %w", IndexCollection, err)
		}
		return nil
	}
	for _, we := range bulk.WriteErrors {
		if we.Code != 11000 || we.Index >= len(entries) { // 11000: duplicate key
			return fmt.Errorf("backfill %s: %w", IndexCollection, err)
		}
		e := entries[we.Index]
		id := e.ID[:strings.LastIndexByte(e.ID, '#')]
		if err := s.indexDocs(ctx, id, e.docs(), false); err != nil {
			return fmt.Errorf("backfill %s: %w", IndexCollection, err)
		}
	}
	return nil
}
