package chainstore_test

import (
	"context"
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/chainstore"
)

// agedRun is an invoice run that started at start and, unless end is
// zero, ended at end.
func agedRun(t *testing.T, id string, start, end time.Time) []proto.Message {
	t.Helper()
	e := invoiceRun(t, id)
	e.started.StartedAt = timestamppb.New(start)
	all := e.all()
	if end.IsZero() {
		return all[:len(all)-1]
	}
	e.completed.StartedAt, e.completed.CompletedAt = timestamppb.New(start), timestamppb.New(end)
	return all
}

func rawDB(t *testing.T) *mongo.Database {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Disconnect(context.Background()) })
	return client.Database(dbName(t))
}

// Executions that ended longer ago than the retention go whole, every
// document of theirs in every collection, the index and the listing
// included; one that runs, one that ended since and one that started in the
// same minute as a deleted one but ended later stay whole. On FerretDB's
// way (the listing and the index) and MongoDB's (queries).
func TestDeleteEndedTakesWholeExecutions(t *testing.T) {
	for _, mode := range []struct {
		name string
		opts []chainstore.Option
	}{
		{"listing", []chainstore.Option{chainstore.WithListing(true), chainstore.WithExecutionIndex(true)}},
		{"queries", []chainstore.Option{chainstore.WithListing(false), chainstore.WithExecutionIndex(false)}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opts...)
			now := time.Now().UTC().Truncate(time.Minute)
			retention := time.Hour
			runs := map[string][]proto.Message{
				"old-1":   agedRun(t, "old-1", now.Add(-3*time.Hour), now.Add(-170*time.Minute)),
				"old-2":   agedRun(t, "old-2", now.Add(-2*time.Hour), now.Add(-90*time.Minute)),
				"old-3":   agedRun(t, "old-3", now.Add(-2*time.Hour+20*time.Second), now.Add(-80*time.Minute)),
				"long":    agedRun(t, "long", now.Add(-3*time.Hour+time.Second), now.Add(-10*time.Minute)),
				"running": agedRun(t, "running", now.Add(-4*time.Hour), time.Time{}),
				"young":   agedRun(t, "young", now.Add(-5*time.Minute), now.Add(-4*time.Minute)),
				// Ended a minute inside the retention, counted from now
				// truncated to the minute: two minutes from the minute, so
				// that a test begun in the last seconds of one still finds
				// it inside when the next has begun.
				"at-bound": agedRun(t, "at-bound", now.Add(-100*time.Minute), now.Add(-retention+2*time.Minute)),
			}
			for _, id := range slices.Sorted(maps.Keys(runs)) {
				if errs := s.RecordAll(ctx, runs[id]); errs != nil {
					t.Fatalf("RecordAll(%s): %v", id, errs)
				}
			}
			before, err := s.AllCounts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			stay := []string{"long", "running", "young", "at-bound"}
			kept := map[string]string{}
			for _, id := range stay {
				kept[id] = stored(ctx, t, s, id)
			}

			// One at a time: each call goes on where the last stopped.
			deleted := 0
			for range 10 {
				n, err := s.DeleteEnded(ctx, time.Now().Add(-retention), 1)
				if err != nil {
					t.Fatalf("DeleteEnded: %v", err)
				}
				if n == 0 {
					break
				}
				deleted += n
			}
			if deleted != 3 {
				t.Errorf("DeleteEnded deleted %d executions, want 3 (old-1, old-2, old-3)", deleted)
			}

			after, err := s.AllCounts(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range []string{"old-1", "old-2", "old-3"} {
				if c, ok := after[id]; ok {
					t.Errorf("%s ended before the retention; documents left: %v", id, c)
				}
				if _, err := s.Execution(ctx, id); !errors.Is(err, chainstore.ErrNotFound) {
					t.Errorf("Execution(%s) after the retention: %v, want ErrNotFound", id, err)
				}
				db := rawDB(t)
				if n, err := db.Collection(chainstore.IndexCollection).CountDocuments(ctx, bson.D{{Key: "_id", Value: id + "#1"}}); err != nil || n != 0 {
					t.Errorf("%s's index entry: %d (%v), want gone", id, n, err)
				}
			}
			for _, id := range stay {
				if !maps.Equal(after[id], before[id]) {
					t.Errorf("%s is within the retention: documents %v, were %v", id, after[id], before[id])
				}
				if got := stored(ctx, t, s, id); got != kept[id] {
					t.Errorf("%s changed:\n%s\nwas\n%s", id, got, kept[id])
				}
			}

			list, err := s.ListExecutions(ctx, chainstore.ListFilter{Limit: 100})
			if err != nil {
				t.Fatal(err)
			}
			var listed []string
			for _, e := range list {
				listed = append(listed, e.ExecutionID)
			}
			slices.Sort(listed)
			if want := []string{"at-bound", "long", "running", "young"}; !slices.Equal(listed, want) {
				t.Errorf("listed after the retention: %v, want %v", listed, want)
			}
			if mode.name == "listing" {
				// old-2 and old-3 alone started in their minute: its log is
				// gone. old-1's minute lists long, which stays.
				listing := rawDB(t).Collection(chainstore.ListingCollection)
				for minute, want := range map[time.Time]int64{now.Add(-2 * time.Hour): 0, now.Add(-3 * time.Hour): 1} {
					key := minute.Format("2006-01-02T15:04") + "#1"
					if n, err := listing.CountDocuments(ctx, bson.D{{Key: "_id", Value: key}}); err != nil || n != want {
						t.Errorf("listing entry %s: %d (%v), want %d", key, n, err, want)
					}
				}
			}
		})
	}
}

// Where the server keeps the retention (MongoDB's TTL indexes), a TTL
// index on each collection expires an execution's documents at its end
// plus the retention: EnsureRetention asks for them, and falls back to
// DeleteEnded on a server that answers it has none. FerretDB 1.x is such a
// server (its answer is checked here); MongoDB's TTL monitor, which then
// deletes, is not run on this machine.
func TestTTLRetentionIndexes(t *testing.T) {
	var log commandLog
	ctx, s := openStore(t, chainstore.WithTTLRetention(true), chainstore.WithCommandMonitor(log.monitor()))
	log.take()
	server, err := s.EnsureRetention(ctx, 24*time.Hour)
	if err != nil || server {
		t.Fatalf("EnsureRetention on FerretDB: %v, %v; want DeleteEnded to be called (FerretDB has no TTL indexes)", server, err)
	}
	var asked bool
	for _, cmd := range log.take() {
		if coll, ok := cmd.Lookup("createIndexes").StringValueOK(); !ok || coll != chainstore.ExecutionsCollection {
			continue
		}
		ix, _ := cmd.Lookup("indexes", "0").DocumentOK()
		name, _ := ix.Lookup("name").StringValueOK()
		secs, _ := ix.Lookup("expireAfterSeconds").AsInt64OK()
		key, _ := ix.Lookup("key").DocumentOK()
		asked = name == "retention" && secs == 86400 && slices.Equal(keysOf(t, key), []string{"completed_at"})
	}
	if !asked {
		t.Error("EnsureRetention did not ask for a TTL index of 86400 s on the executions' completed_at")
	}
	// Known to have none, it does not ask again.
	if server, err := s.EnsureRetention(ctx, time.Hour); err != nil || server {
		t.Fatalf("EnsureRetention again: %v, %v", server, err)
	}
	for _, cmd := range log.take() {
		if _, err := cmd.LookupErr("createIndexes"); err == nil {
			t.Errorf("asked for an index again: %v", cmd)
		}
	}
}

// With the TTL indexes in use, the completion sets the execution's end on
// every chain_of_work and chain_of_work_steps document the execution has,
// those of earlier batches included; a running execution's have none.
func TestCompletionMarksEveryDocumentForTTL(t *testing.T) {
	ctx, s := openStore(t, chainstore.WithExecutionIndex(false), chainstore.WithListing(false))
	s.StampEnded(true)
	end := time.Now().UTC().Truncate(time.Millisecond)
	if errs := s.RecordAll(ctx, agedRun(t, "ended", end.Add(-time.Minute), end)); errs != nil {
		t.Fatal(errs)
	}
	running := agedRun(t, "running", end.Add(-time.Minute), time.Time{})
	if errs := s.RecordAll(ctx, running); errs != nil {
		t.Fatal(errs)
	}
	e := invoiceRun(t, "split")
	if errs := s.RecordAll(ctx, []proto.Message{e.started, e.nodes[0], e.steps[0]}); errs != nil {
		t.Fatal(errs)
	}
	e.completed.CompletedAt = timestamppb.New(end)
	if errs := s.RecordAll(ctx, []proto.Message{e.nodes[1], e.steps[1], e.completed}); errs != nil {
		t.Fatal(errs)
	}
	one := invoiceRun(t, "one-by-one")
	one.completed.CompletedAt = timestamppb.New(end)
	one.record(ctx, t, s)
	seen := map[string]int{}
	for _, coll := range []string{chainstore.ChainCollection, chainstore.StepsCollection} {
		cur, err := rawDB(t).Collection(coll).Find(ctx, bson.D{})
		if err != nil {
			t.Fatal(err)
		}
		var docs []bson.M
		if err := cur.All(ctx, &docs); err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			id, _ := d["execution_id"].(string)
			seen[id]++
			got, has := d[chainstore.EndedField].(bson.DateTime)
			switch {
			case id == "running" && has:
				t.Errorf("%s %v of a running execution has %s %v", coll, d["_id"], chainstore.EndedField, got.Time())
			case id != "running" && (!has || !got.Time().Equal(end)):
				t.Errorf("%s %v: %s %v, want the execution's end %v", coll, d["_id"], chainstore.EndedField, d[chainstore.EndedField], end)
			}
		}
	}
	if want := map[string]int{"ended": 4, "running": 4, "split": 4, "one-by-one": 4}; !maps.Equal(seen, want) {
		t.Errorf("documents by execution: %v, want %v", seen, want)
	}
}

func keysOf(t *testing.T, doc bson.Raw) []string {
	t.Helper()
	elems, err := doc.Elements()
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, e := range elems {
		keys = append(keys, e.Key())
	}
	return keys
}
