package chainstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// MaxListLimit bounds the executions one List call returns.
const MaxListLimit = 1000

// ListFilter selects executions for ListExecutions. Zero fields select
// everything.
type ListFilter struct {
	Workflow string
	Status   string
	// IDPrefix selects the executions whose id begins with it (a whole id
	// selects that one).
	IDPrefix string
	// Parent selects the children of that execution: those its workflow
	// (or map) nodes started, whatever their ids.
	Parent string
	// Since (inclusive) and Until (exclusive) bound the start time; an
	// execution without a recorded start time matches neither.
	Since, Until time.Time
	// After continues a listing after this execution (the last of the
	// previous page).
	After *ListPosition
	// Limit is how many executions to return (1 to MaxListLimit).
	Limit int
}

// ListPosition is an execution's place in a listing: newest start first,
// then execution id descending. A zero StartedAt is an execution whose start
// time is not recorded; those come last.
type ListPosition struct {
	StartedAt   time.Time
	ExecutionID string
}

// Position is the doc's place in a listing, for ListFilter.After.
func (d *ExecutionDoc) Position() ListPosition {
	p := ListPosition{ExecutionID: d.ExecutionID}
	if d.StartedAt != nil {
		p.StartedAt = *d.StartedAt
	}
	return p
}

// ErrInvalidFilter is returned by ListExecutions for a filter it cannot run.
var ErrInvalidFilter = errors.New("invalid filter")

// ListExecutions returns executions newest first (by start time, then by
// execution id), without their contexts, definition and node summaries: a
// listing is for finding an execution, Execution reads one whole. Where
// ListingCollection is in use and backfilled (FerretDB), it reads through
// it; elsewhere it queries, with the indexes of queryIndexList.
func (s *Store) ListExecutions(ctx context.Context, f ListFilter) ([]ExecutionDoc, error) {
	if f.Limit < 1 || f.Limit > MaxListLimit {
		return nil, fmt.Errorf("list executions: %w: limit %d is not between 1 and %d", ErrInvalidFilter, f.Limit, MaxListLimit)
	}
	if listed, err := s.listingReady(ctx); err != nil {
		return nil, fmt.Errorf("list executions: %w", err)
	} else if listed {
		return s.listedExecutions(ctx, f)
	}
	and := bson.A{}
	if f.Workflow != "" {
		and = append(and, bson.D{{Key: "workflow_name", Value: f.Workflow}})
	}
	if f.Status != "" {
		and = append(and, bson.D{{Key: "status", Value: f.Status}})
	}
	if f.IDPrefix != "" {
		// Anchored and literal: MongoDB reads it from the _id index.
		and = append(and, bson.D{{Key: "_id", Value: bson.Regex{Pattern: "^" + regexp.QuoteMeta(f.IDPrefix)}}})
	}
	if f.Parent != "" {
		and = append(and, bson.D{{Key: "parent_execution_id", Value: f.Parent}})
	}
	if !f.Since.IsZero() {
		and = append(and, bson.D{{Key: "started_at", Value: bson.D{{Key: "$gte", Value: f.Since}}}})
	}
	if !f.Until.IsZero() {
		and = append(and, bson.D{{Key: "started_at", Value: bson.D{{Key: "$lt", Value: f.Until}}}})
	}
	if a := f.After; a != nil {
		and = append(and, after(*a))
	}
	filter := bson.D{}
	if len(and) > 0 {
		filter = bson.D{{Key: "$and", Value: and}}
	}
	opts := options.Find().
		SetSort(bson.D{{Key: "started_at", Value: -1}, {Key: "_id", Value: -1}}).
		SetLimit(int64(f.Limit)).
		SetProjection(listProjection)
	cur, err := s.executions.Find(ctx, filter, opts)
	if err != nil {
		return nil, fmt.Errorf("list executions: %w", err)
	}
	docs := []ExecutionDoc{}
	if err := cur.All(ctx, &docs); err != nil {
		return nil, fmt.Errorf("list executions: %w", err)
	}
	return docs, nil
}

// listProjection leaves out of a listed execution what a listing is not for.
var listProjection = bson.D{
	{Key: "initial_context", Value: 0}, {Key: "final_context", Value: 0},
	{Key: "definition", Value: 0}, {Key: "nodes", Value: 0},
}

// after matches the executions that sort after p. BSON dates have
// millisecond precision, so p's time is compared at that precision.
func after(p ListPosition) bson.D {
	idBefore := bson.D{{Key: "_id", Value: bson.D{{Key: "$lt", Value: p.ExecutionID}}}}
	if p.StartedAt.IsZero() {
		// Only executions without a start time follow one without.
		return bson.D{{Key: "started_at", Value: nil}, idBefore[0]}
	}
	t := p.StartedAt.Truncate(time.Millisecond)
	return bson.D{{Key: "$or", Value: bson.A{
		bson.D{{Key: "started_at", Value: bson.D{{Key: "$lt", Value: t}}}},
		bson.D{{Key: "started_at", Value: t}, idBefore[0]},
		bson.D{{Key: "started_at", Value: nil}},
	}}}
}
