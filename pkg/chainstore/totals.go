package chainstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ListTotals are what a ListFilter selects, summed over every page.
type ListTotals struct {
	Executions int64
	CostUSD    float64
	ModelCalls int64
}

// TotalsOf counts the executions f selects (its After and Limit aside) and
// sums what their model calls cost, in one aggregation over the executions
// collection: a listing's total and cost do not depend on the page read.
func (s *Store) TotalsOf(ctx context.Context, f ListFilter) (ListTotals, error) {
	pipeline := bson.A{
		bson.D{{Key: "$match", Value: matchOf(f)}},
		bson.D{{Key: "$group", Value: bson.D{
			{Key: "_id", Value: nil},
			{Key: "n", Value: bson.D{{Key: "$sum", Value: 1}}},
			{Key: "cost", Value: bson.D{{Key: "$sum", Value: "$cost_usd"}}},
			{Key: "calls", Value: bson.D{{Key: "$sum", Value: "$model_calls"}}},
		}}},
	}
	cur, err := s.executions.Aggregate(ctx, pipeline)
	if err != nil {
		return ListTotals{}, fmt.Errorf("total executions: %w", err)
	}
	defer cur.Close(ctx)
	var t ListTotals
	if cur.Next(ctx) {
		var row struct {
			N     any `bson:"n"`
			Cost  any `bson:"cost"`
			Calls any `bson:"calls"`
		}
		if err := cur.Decode(&row); err != nil {
			return ListTotals{}, fmt.Errorf("total executions: %w", err)
		}
		t = ListTotals{Executions: int64(number(row.N)), CostUSD: number(row.Cost), ModelCalls: int64(number(row.Calls))}
	}
	if err := cur.Err(); err != nil {
		return ListTotals{}, fmt.Errorf("total executions: %w", err)
	}
	return t, nil
}

// number is a $sum as the server typed it (int32, int64 or double).
func number(v any) float64 {
	switch n := v.(type) {
	case int32:
		return float64(n)
	case int64:
		return float64(n)
	case float64:
		return n
	}
	return 0
}

// matchOf is the query of the executions f selects, as ListExecutions
// queries them, without its position.
func matchOf(f ListFilter) bson.D {
	and := bson.A{}
	if f.Workflow != "" {
		and = append(and, bson.D{{Key: "workflow_name", Value: f.Workflow}})
	}
	if f.Status != "" {
		and = append(and, bson.D{{Key: "status", Value: f.Status}})
	}
	if f.IDPrefix != "" {
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
	if len(and) == 0 {
		return bson.D{}
	}
	return bson.D{{Key: "$and", Value: and}}
}

// FailedItems counts, for each of the executions ids, the failed items of
// its map nodes (visits with an item whose status is failed): under
// on_item_failure collect an execution succeeds with them. Executions
// without any are left out. Where IndexCollection is in use it reads each
// execution's index and its item visits by _id; elsewhere one query.
func (s *Store) FailedItems(ctx context.Context, ids []string) (map[string]int, error) {
	out := map[string]int{}
	if len(ids) == 0 {
		return out, nil
	}
	indexed, err := s.indexReady(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed items: %w", err)
	}
	if !indexed {
		filter := bson.D{{Key: "execution_id", Value: bson.D{{Key: "$in", Value: ids}}},
			{Key: "item", Value: bson.D{{Key: "$exists", Value: true}}}, {Key: "status", Value: NodeFailed}}
		cur, err := s.chain.Find(ctx, filter, options.Find().SetProjection(bson.D{{Key: "execution_id", Value: 1}}))
		if err != nil {
			return nil, fmt.Errorf("failed items: %w", err)
		}
		for cur.Next(ctx) {
			if id, ok := cur.Current.Lookup("execution_id").StringValueOK(); ok {
				out[id]++
			}
		}
		if err := cur.Err(); err != nil {
			return nil, fmt.Errorf("failed items: %w", err)
		}
		return out, cur.Close(ctx)
	}
	for _, id := range ids {
		docs, _, err := s.indexOf(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("failed items: %w", err)
		}
		for _, d := range docs {
			// An item's visit is <execution>/<node>/<visit>#<item>.
			if d.Collection != ChainCollection || !strings.Contains(d.DocID, "#") {
				continue
			}
			var n struct {
				Status string `bson:"status"`
			}
			err := s.chain.FindOne(ctx, bson.D{{Key: "_id", Value: d.DocID}}, options.FindOne().SetProjection(bson.D{{Key: "status", Value: 1}})).Decode(&n)
			if errors.Is(err, mongo.ErrNoDocuments) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("failed items of %q: %w", id, err)
			}
			if n.Status == NodeFailed {
				out[id]++
			}
		}
	}
	return out, nil
}
