package chainstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// RecordAll records events as the Record methods do, each to the same
// documents, but with one write per collection for all of them: on
// FerretDB each write is a SQLite transaction, and a batch's inserts share
// one. The events are *novav1.WorkflowStarted, *novav1.WorkflowCompleted,
// *novav1.NodeCompleted and *novav1.StepCompleted, in any order, any of
// them again (a redelivery).
//
// It returns nil when it recorded them all, else one error per event, nil
// for each it recorded: what a batch write could not settle is written
// again one document at a time, so that an event fails only on its own.
func (s *Store) RecordAll(ctx context.Context, events []proto.Message) []error {
	errs := make([]error, len(events))
	var started, completed, nodes, steps items
	for i, m := range events {
		var err error
		switch ev := m.(type) {
		case *novav1.WorkflowStarted:
			var id string
			var set bson.D
			if id, set, err = startedFields(ev); err == nil {
				started.add(id, id, set, i)
			}
		case *novav1.WorkflowCompleted:
			var id string
			var set bson.D
			if id, set, err = completedFields(ev); err == nil {
				completed.add(id, id, set, i)
			}
		case *novav1.NodeCompleted:
			var doc NodeDoc
			if doc, err = nodeDoc(ev); err == nil {
				nodes.add(doc.ID, doc.ExecutionID, doc, i)
			}
		case *novav1.StepCompleted:
			var doc StepDoc
			if doc, err = stepDoc(ev); err == nil {
				steps.add(doc.ID, doc.ExecutionID, doc, i)
			}
		default:
			err = fmt.Errorf("record %T: %w: not a fact of the chain of work", m, ErrInvalidEvent)
		}
		errs[i] = err
	}

	// The started events first: a completion then finds its document. The
	// completions last: a reader who sees an execution completed finds the
	// node visits and steps of the batch too. An execution that started and
	// completed within the batch (one at a time, most do) is inserted whole
	// with the completions instead: one insert where there were an insert
	// and an update, which on FerretDB reads, rewrites and reindexes the
	// document. The executions are listed after their documents are
	// written, in one entry per minute they started in (see
	// ListingCollection).
	running, whole := splitWhole(started.list, completed.byID)
	var listed pendingListing
	s.writeStarted(ctx, running, &listed)
	s.writeDocs(ctx, s.chain, nodes.list, "record node")
	s.writeDocs(ctx, s.steps, steps.list, "record step")
	s.indexAll(ctx, slices.Concat(nodes.list, steps.list))
	s.writeStarted(ctx, whole, &listed)
	s.writeCompletedAll(ctx, slices.DeleteFunc(slices.Clone(completed.list), func(it *item) bool { return it.written }), &listed)
	s.stampCompleted(ctx, completed.list)
	s.list(ctx, &listed)

	for _, it := range slices.Concat(started.list, completed.list, nodes.list, steps.list) {
		for _, i := range it.events {
			errs[i] = it.err
		}
	}
	if !slices.ContainsFunc(errs, func(err error) bool { return err != nil }) {
		return nil
	}
	return errs
}

// item is one document a batch writes and the events that tell it: the
// same event twice in one batch (a redelivery) is written once.
type item struct {
	id, executionID string
	doc             any // what it writes: a document, or the fields a started or completed event sets
	events          []int

	coll     string // for the index: the collection it was inserted into
	inserted bool   // by the batch's insert: a document to list in the index
	err      error

	// A started event's: the completion of the same execution in the batch,
	// inserted with it; written: that completion is (by that insert).
	completion *item
	written    bool
}

// splitWhole tells the started events whose executions also completed in
// the batch (whole, each with its completion) from the others (running).
func splitWhole(started []*item, completed map[string]*item) (running, whole []*item) {
	for _, it := range started {
		if c, ok := completed[it.id]; ok {
			it.completion = c
			whole = append(whole, it)
		} else {
			running = append(running, it)
		}
	}
	return running, whole
}

// items are a batch's documents of one kind, in the order of their events.
type items struct {
	list []*item
	byID map[string]*item
}

func (is *items) add(id, executionID string, doc any, event int) {
	if it, ok := is.byID[id]; ok {
		// The same fact, told again: the latest telling is written.
		it.doc, it.events = doc, append(it.events, event)
		return
	}
	if is.byID == nil {
		is.byID = map[string]*item{}
	}
	it := &item{id: id, executionID: executionID, doc: doc, events: []int{event}}
	is.byID[id] = it
	is.list = append(is.list, it)
}

// insertResult tells, of a batch of n inserts, which are known to be in
// the store (inserted) and which failed for a duplicate _id (dup); known is
// false when the command failed as a whole, and then any may be in.
func insertResult(n int, err error, ordered bool) (inserted, dup []bool, known bool) {
	inserted, dup = make([]bool, n), make([]bool, n)
	var bulk mongo.BulkWriteException
	switch {
	case err == nil:
		for i := range inserted {
			inserted[i] = true
		}
		return inserted, dup, true
	case !errors.As(err, &bulk) || bulk.WriteConcernError != nil || len(bulk.WriteErrors) == 0:
		return inserted, dup, false
	}
	failed := make([]bool, n)
	first := n
	for _, we := range bulk.WriteErrors {
		if we.Index < 0 || we.Index >= n {
			return make([]bool, n), make([]bool, n), false
		}
		failed[we.Index] = true
		dup[we.Index] = we.Code == 11000 // duplicate key
		first = min(first, we.Index)
	}
	for i := range inserted {
		// An ordered insert stops at its first failure.
		inserted[i] = !failed[i] && (!ordered || i < first)
	}
	return inserted, dup, true
}

// failed reports a failure to list the execution of it (and of the
// completion inserted with it) as its error.
func (it *item) failed(what string) func(error) {
	return func(err error) {
		for _, it := range []*item{it, it.completion} {
			if it != nil && it.err == nil {
				it.err = fmt.Errorf("%s %s: %w", what, it.id, err)
			}
		}
	}
}

// writeStarted inserts the execution documents of started events at once;
// those that exist already are completed one at a time. It adds what to
// list to listed.
func (s *Store) writeStarted(ctx context.Context, list []*item, listed *pendingListing) {
	if len(list) == 0 {
		return
	}
	docs := make([]any, len(list))
	for i, it := range list {
		doc := startedDoc(it.id, it.doc.(bson.D))
		if it.completion != nil {
			doc = withFields(doc, it.completion.doc.(bson.D))
		}
		docs[i] = doc
	}
	_, err := s.executions.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if unreachable(ctx, err) {
		failAll(list, "record workflow started", err)
		return
	}
	inserted, dup, _ := insertResult(len(list), err, false)
	for i, it := range list {
		// Where the whole document could not be inserted, the completion
		// is set by its update as usual.
		var e listedExecution
		var checked bool
		switch set := it.doc.(bson.D); {
		case inserted[i]:
			if it.completion != nil {
				it.completion.written = true
			}
			e = listedOf(it.id, docs[i].(bson.D))
		case dup[i]:
			e, checked, it.err = s.startedExisting(ctx, it.id, set)
		default:
			e, checked, it.err = s.startedAlone(ctx, it.id, set)
		}
		if it.err == nil {
			listed.add(e, checked, it.failed("record workflow started"))
		}
	}
}

// withFields is doc with set applied as $set applies it to top-level fields:
// a field doc has takes set's value where it is, the others are appended.
func withFields(doc, set bson.D) bson.D {
	out := slices.Clone(doc)
	for _, f := range set {
		if i := slices.IndexFunc(out, func(e bson.E) bool { return e.Key == f.Key }); i >= 0 {
			out[i].Value = f.Value
		} else {
			out = append(out, f)
		}
	}
	return out
}

// writeCompletedAll sets the outcomes of completed events with one update
// command; when it fails, each is set on its own. With the listing in use,
// each is set on its own, with what it changed of what the listing holds
// (see upsertExecution), which the update command does not tell. It adds
// what to list to listed.
func (s *Store) writeCompletedAll(ctx context.Context, list []*item, listed *pendingListing) {
	if len(list) == 0 {
		return
	}
	if s.listed {
		s.writeEachCompleted(ctx, list, listed)
		return
	}
	models := make([]mongo.WriteModel, len(list))
	for i, it := range list {
		models[i] = mongo.NewUpdateOneModel().
			SetFilter(bson.D{{Key: "_id", Value: it.id}}).
			SetUpdate(bson.D{{Key: "$set", Value: it.doc}}).
			SetUpsert(true)
	}
	_, err := s.executions.BulkWrite(ctx, models, options.BulkWrite().SetOrdered(false))
	switch {
	case err == nil:
		return
	case unreachable(ctx, err):
		failAll(list, "record workflow completed", err)
		return
	}
	// Which updates were applied is not known (FerretDB stops at the first
	// that fails); they are idempotent, so each is applied again.
	s.writeEachCompleted(ctx, list, listed)
}

// writeEachCompleted sets the outcomes of completed events one at a time.
func (s *Store) writeEachCompleted(ctx context.Context, list []*item, listed *pendingListing) {
	for i, it := range list {
		e, checked, err := s.writeCompleted(ctx, it.id, it.doc.(bson.D))
		if unreachable(ctx, err) {
			failAll(list[i:], "record workflow completed", err)
			return
		}
		if it.err = err; err == nil {
			listed.add(e, checked, it.failed("record workflow completed"))
		}
	}
}

// writeDocs inserts chain_of_work or chain_of_work_steps documents at once.
// One that exists already (a redelivery) replaces it, and one whose insert
// failed otherwise is written again on its own; both are listed in the
// index then, as RecordNode and RecordStep list them.
func (s *Store) writeDocs(ctx context.Context, coll *mongo.Collection, list []*item, what string) {
	if len(list) == 0 {
		return
	}
	docs := make([]any, len(list))
	for i, it := range list {
		docs[i], it.coll = it.doc, coll.Name()
	}
	_, err := coll.InsertMany(ctx, docs, options.InsertMany().SetOrdered(false))
	if unreachable(ctx, err) {
		failAll(list, what, err)
		return
	}
	inserted, dup, _ := insertResult(len(list), err, false)
	for i, it := range list {
		it.inserted = inserted[i]
		var err error
		switch {
		case inserted[i]:
			continue // listed by indexAll
		case dup[i]:
			if err = replaceExisting(ctx, coll, it.id, it.doc); err == nil {
				err = s.indexDoc(ctx, it.executionID, coll.Name(), it.id, false)
			}
		default:
			err = s.record(ctx, coll, it.id, it.executionID, it.doc)
		}
		if err != nil {
			it.err = fmt.Errorf("%s %s: %w", what, it.id, err)
		}
	}
}

// indexAll lists the documents the batch inserted in their executions'
// indexes, one entry per execution, with one ordered insert at the
// positions this process expects next. An ordered insert keeps each
// execution's positions without gaps: it stops at the first that fails
// (taken by another writer), and the entries from there on are listed one
// at a time, as indexDocs lists them.
func (s *Store) indexAll(ctx context.Context, list []*item) {
	if !s.indexed {
		return
	}
	type group struct {
		executionID string
		docs        []indexedDoc
		items       []*item
	}
	var groups []*group
	byExecution := map[string]*group{}
	for _, it := range list {
		if !it.inserted {
			continue
		}
		g := byExecution[it.executionID]
		if g == nil || len(g.docs) == maxEntryDocs {
			g = &group{executionID: it.executionID}
			byExecution[it.executionID] = g
			groups = append(groups, g)
		}
		g.docs = append(g.docs, indexedDoc{Collection: it.coll, DocID: it.id})
		g.items = append(g.items, it)
	}
	if len(groups) == 0 {
		return
	}
	// Batches of one process do not take each other's positions.
	s.indexMu.Lock()
	entries := make([]any, len(groups))
	positions := make([]int, len(groups))
	next := map[string]int{}
	for i, g := range groups {
		n, ok := next[g.executionID]
		if !ok {
			n = max(s.positions.get(g.executionID), 1)
		}
		entries[i] = indexEntry{ID: entryID(g.executionID, n), Docs: g.docs}
		positions[i], next[g.executionID] = n, n+1
	}
	_, err := s.index.InsertMany(ctx, entries, options.InsertMany().SetOrdered(true))
	inserted, _, known := insertResult(len(groups), err, true)
	for i, g := range groups {
		if inserted[i] {
			s.positions.set(g.executionID, positions[i]+1)
		}
	}
	s.indexMu.Unlock()
	if unreachable(ctx, err) {
		for _, g := range groups {
			failAll(g.items, "index", err)
		}
		return
	}
	for i, g := range groups {
		if inserted[i] {
			continue
		}
		// When the insert failed as a whole, its entry may be in: its
		// documents are then listed only if they are not yet.
		if err := s.indexDocs(ctx, g.executionID, g.docs, known); err != nil {
			for _, it := range g.items {
				it.err = fmt.Errorf("index %s: %w", it.id, err)
			}
		}
	}
}

// unreachable tells whether err says that the store could not be reached,
// rather than that it refused a document: writing each document again on
// its own would wait as long again for each.
func unreachable(ctx context.Context, err error) bool {
	return err != nil && (ctx.Err() != nil || mongo.IsNetworkError(err) || mongo.IsTimeout(err))
}

// failAll fails every item of a batch write with its error.
func failAll(list []*item, what string, err error) {
	for _, it := range list {
		it.err = fmt.Errorf("%s %s: %w", what, it.id, err)
	}
}
