package chainstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/event"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// commandLog keeps the commands a store's client sends.
type commandLog struct {
	mu       sync.Mutex
	commands []bson.Raw
}

func (l *commandLog) monitor() *event.CommandMonitor {
	return &event.CommandMonitor{Started: func(_ context.Context, e *event.CommandStartedEvent) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.commands = append(l.commands, slices.Clone(e.Command))
	}}
}

func (l *commandLog) take() []bson.Raw {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := l.commands
	l.commands = nil
	return c
}

// filters returns the filters of a command that selects documents, with
// what it is.
func filters(cmd bson.Raw) (name string, fs []bson.Raw) {
	elems, _ := cmd.Elements()
	if len(elems) == 0 {
		return "", nil
	}
	name = elems[0].Key()
	doc := func(v bson.RawValue) bson.Raw { d, _ := v.DocumentOK(); return d }
	each := func(field, key string) {
		arr, _ := cmd.Lookup(field).ArrayOK()
		vals, _ := arr.Values()
		for _, v := range vals {
			fs = append(fs, doc(doc(v).Lookup(key)))
		}
	}
	switch name {
	case "find":
		fs = append(fs, doc(cmd.Lookup("filter")))
	case "count":
		fs = append(fs, doc(cmd.Lookup("query")))
	case "findAndModify", "distinct":
		fs = append(fs, doc(cmd.Lookup("query")))
	case "update":
		each("updates", "q")
	case "delete":
		each("deletes", "q")
	case "aggregate":
		each("pipeline", "$match")
		fs = fs[:min(len(fs), 1)] // the first stage: what FerretDB pushes down
	}
	return name, fs
}

// On FerretDB, whose only filter pushed down to SQL is one on _id alone (a
// lookup the embedded store indexes), recording an execution, recording it
// again and reading it back send no other filter: no statement of them
// reads the whole history.
func TestOneExecutionIsFoundByIDOnly(t *testing.T) {
	var log commandLog
	ctx, s := openStore(t, chainstore.WithCommandMonitor(log.monitor())) // the index as Open picks it
	run := invoiceRun(t, "exec-by-id")
	log.take() // EnsureIndexes reads everything once, on purpose

	run.record(ctx, t, s)
	run.record(ctx, t, s) // a redelivery of every event
	if _, err := s.Execution(ctx, "exec-by-id"); err != nil {
		t.Fatal(err)
	}
	chain, err := s.Chain(ctx, "exec-by-id")
	if err != nil {
		t.Fatal(err)
	}
	counts, err := s.Counts(ctx, "exec-by-id")
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || len(chain[1].Steps) != 2 || counts[chainstore.ChainCollection] != 2 || counts[chainstore.StepsCollection] != 2 {
		t.Fatalf("chain %+v, counts %v; want 2 nodes, 2 steps", chain, counts)
	}

	checkOnlyByID(t, &log)
}

// Replicas record the steps of one execution at once, each event twice,
// one by one or in batches (two batches at once per replica, as the audit
// service's workers write them): the index lists every document, its
// positions leave no gap, and reads show each document once.
func TestExecutionIndexUnderConcurrentWriters(t *testing.T) {
	const replicas, steps = 4, 12
	tests := []struct {
		name  string
		write func(ctx context.Context, s *chainstore.Store, evs []*novav1.StepCompleted) error
	}{
		{"one by one", func(ctx context.Context, s *chainstore.Store, evs []*novav1.StepCompleted) error {
			for _, ev := range evs {
				if err := s.RecordStep(ctx, ev); err != nil {
					return err
				}
			}
			return nil
		}},
		{"in batches", func(ctx context.Context, s *chainstore.Store, evs []*novav1.StepCompleted) error {
			var wg sync.WaitGroup
			errs := make(chan error, len(evs))
			for w := range 2 {
				wg.Go(func() {
					for i := w * 5; i < len(evs); i += 10 {
						batch := make([]proto.Message, 0, 5)
						for _, ev := range evs[i:min(i+5, len(evs))] {
							batch = append(batch, ev)
						}
						errs <- errors.Join(s.RecordAll(ctx, batch)...)
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, first := openStore(t, chainstore.WithExecutionIndex(true))
			stores := []*chainstore.Store{first}
			for range replicas - 1 {
				s, err := chainstore.Open(ctx, mongoURI, dbName(t), chainstore.WithExecutionIndex(true))
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close(context.Background()) })
				stores = append(stores, s)
			}

			var wg sync.WaitGroup
			errs := make(chan error, replicas)
			for r, s := range stores {
				var evs []*novav1.StepCompleted
				for i := range steps * 2 { // every step twice, in a different order per replica
					n := (i/2 + r*3) % steps
					evs = append(evs, &novav1.StepCompleted{
						ExecutionId: "exec-busy", NodeId: "n" + strconv.Itoa(n%3), Visit: 1, StepNumber: int32(n + 1),
						StepName: "execute", AgentName: "sandbox", Status: "success",
					})
				}
				wg.Go(func() { errs <- tt.write(ctx, s, evs) })
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			checkIndex(ctx, t, first, "exec-busy", steps)
		})
	}
}

// checkIndex checks that an execution's index lists its steps steps, each
// read once, at positions without gaps.
func checkIndex(ctx context.Context, t *testing.T, s *chainstore.Store, id string, steps int) {
	t.Helper()
	counts, err := s.Counts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if counts[chainstore.StepsCollection] != int64(steps) {
		t.Errorf("counts = %v, want %d steps", counts, steps)
	}
	chain, err := s.Chain(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for _, n := range chain {
		for _, st := range n.Steps {
			seen = append(seen, st.ID)
		}
	}
	if len(seen) != steps || len(slices.Compact(slices.Sorted(slices.Values(seen)))) != steps {
		t.Errorf("chain steps = %v, want %d different", seen, steps)
	}

	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	cur, err := client.Database(dbName(t)).Collection(chainstore.IndexCollection).Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var entries []struct {
		ID         string         `bson:"_id"`
		Docs       []testEntryDoc `bson:"docs"`
		Collection string         `bson:"collection"` // an entry of an earlier version
		DocID      string         `bson:"doc_id"`
	}
	if err := cur.All(ctx, &entries); err != nil {
		t.Fatal(err)
	}
	var positions []int
	listed := map[string]bool{}
	for _, e := range entries {
		if p, ok := strings.CutPrefix(e.ID, id+"#"); ok {
			n, _ := strconv.Atoi(p)
			positions = append(positions, n)
			if e.Collection == chainstore.StepsCollection {
				listed[e.DocID] = true
			}
			for _, d := range e.Docs {
				if d.Collection == chainstore.StepsCollection {
					listed[d.DocID] = true
				}
			}
		}
	}
	slices.Sort(positions)
	for i, p := range positions {
		if p != i+1 {
			t.Fatalf("index positions %v: want 1 to %d without gaps", positions, len(positions))
		}
	}
	if len(listed) != steps {
		t.Errorf("index lists %d steps in %d entries, want %d", len(listed), len(positions), steps)
	}
}

// Documents recorded before the store kept the index (a data dir of an
// older version) are listed when the index is first set up, once.
func TestExecutionIndexBackfill(t *testing.T) {
	ctx, old := openStore(t, chainstore.WithExecutionIndex(false))
	invoiceRun(t, "exec-old").record(ctx, t, old)
	want, err := old.Chain(ctx, "exec-old")
	if err != nil {
		t.Fatal(err)
	}

	s, err := chainstore.Open(ctx, mongoURI, dbName(t), chainstore.WithExecutionIndex(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	// Read before the audit service has set the index up: by queries.
	if chain, err := s.Chain(ctx, "exec-old"); err != nil || fmt.Sprint(chain) != fmt.Sprint(want) {
		t.Errorf("chain before backfill = %+v, %v; want\n%+v", chain, err, want)
	}
	for range 2 { // start-up runs it at every boot
		if err := s.EnsureIndexes(ctx); err != nil {
			t.Fatalf("EnsureIndexes: %v", err)
		}
	}
	invoiceRun(t, "exec-new").record(ctx, t, s)

	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	listed, err := client.Database(dbName(t)).Collection(chainstore.IndexCollection).CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	// The old execution's four documents in one entry, the new one's four
	// recorded one at a time, and the mark of the backfill.
	if listed != 1+4+1 {
		t.Errorf("%s holds %d documents, want 6", chainstore.IndexCollection, listed)
	}
	chain, err := s.Chain(ctx, "exec-old")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(chain) != fmt.Sprint(want) {
		t.Errorf("chain after backfill:\n%+v\nwant\n%+v", chain, want)
	}
	for _, id := range []string{"exec-old", "exec-new"} {
		counts, err := s.Counts(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if w := map[string]int64{chainstore.ExecutionsCollection: 1, chainstore.ChainCollection: 2, chainstore.StepsCollection: 2}; fmt.Sprint(counts) != fmt.Sprint(w) {
			t.Errorf("counts of %s = %v, want %v", id, counts, w)
		}
	}
}

// openWithUnlisting opens a store that keeps the execution index and,
// on the same database, one that writes documents without listing them
// (a writer that died before it listed them, or a version without the index).
func openWithUnlisting(t *testing.T) (context.Context, *chainstore.Store, *chainstore.Store) {
	t.Helper()
	ctx, s := openStore(t, chainstore.WithExecutionIndex(true))
	unlisting, err := chainstore.Open(ctx, mongoURI, dbName(t), chainstore.WithExecutionIndex(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unlisting.Close(context.Background()) })
	return ctx, s, unlisting
}

// A writer that died between recording a document and listing it leaves a
// document the index lacks; the event's redelivery lists it.
func TestRedeliveryListsWhatADeadWriterDidNot(t *testing.T) {
	ctx, s, unlisting := openWithUnlisting(t)
	run := invoiceRun(t, "exec-died")
	if err := unlisting.RecordStep(ctx, run.steps[0]); err != nil {
		t.Fatal(err)
	}
	if counts, err := s.Counts(ctx, "exec-died"); err != nil || counts[chainstore.StepsCollection] != 0 {
		t.Fatalf("counts = %v, %v; the test needs an unlisted step", counts, err)
	}

	if err := s.RecordStep(ctx, run.steps[0]); err != nil {
		t.Fatal(err)
	}
	counts, err := s.Counts(ctx, "exec-died")
	if err != nil {
		t.Fatal(err)
	}
	chain, err := s.Chain(ctx, "exec-died")
	if err != nil {
		t.Fatal(err)
	}
	if counts[chainstore.StepsCollection] != 1 || len(chain) != 1 || len(chain[0].Steps) != 1 {
		t.Errorf("after redelivery: counts %v, chain %+v; want the step once", counts, chain)
	}
}

// A batch lists each execution's documents in one entry of its index: a
// whole workflow recorded at once is one entry, read back whole.
func TestBatchListsAnExecutionInOneEntry(t *testing.T) {
	ctx, s := openStore(t, chainstore.WithExecutionIndex(true))
	run := invoiceRun(t, "exec-batch")
	if errs := s.RecordAll(ctx, run.all()); errs != nil {
		t.Fatal(errors.Join(errs...))
	}
	entries := indexEntries(ctx, t, "exec-batch")
	if len(entries) != 1 || len(entries[0].Docs) != 4 {
		t.Errorf("index entries %+v, want one listing 2 node visits and 2 steps", entries)
	}
	checkIndex(ctx, t, s, "exec-batch", 2)
	counts, err := s.Counts(ctx, "exec-batch")
	if err != nil || counts[chainstore.ChainCollection] != 2 {
		t.Errorf("counts = %v, %v; want 2 node visits", counts, err)
	}
}

// An index written by a version that listed one document per entry
// (collection and doc_id at the top) is read as before, and documents
// recorded after it are listed at the positions that follow.
func TestIndexEntriesOfAnEarlierVersion(t *testing.T) {
	ctx, s, unlisting := openWithUnlisting(t)
	run := invoiceRun(t, "exec-v1")
	if err := unlisting.RecordWorkflowStarted(ctx, run.started); err != nil {
		t.Fatal(err)
	}
	var old []any
	for _, n := range run.nodes {
		if err := unlisting.RecordNode(ctx, n); err != nil {
			t.Fatal(err)
		}
		old = append(old, bson.D{
			{Key: "_id", Value: "exec-v1#" + strconv.Itoa(len(old)+1)},
			{Key: "collection", Value: chainstore.ChainCollection}, {Key: "doc_id", Value: chainstore.NodeDocOf(n).ID},
		})
	}
	if err := unlisting.RecordStep(ctx, run.steps[0]); err != nil {
		t.Fatal(err)
	}
	old = append(old, bson.D{
		{Key: "_id", Value: "exec-v1#3"},
		{Key: "collection", Value: chainstore.StepsCollection}, {Key: "doc_id", Value: chainstore.StepDocOf(run.steps[0]).ID},
	})
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	if _, err := client.Database(dbName(t)).Collection(chainstore.IndexCollection).InsertMany(ctx, old); err != nil {
		t.Fatal(err)
	}

	if errs := s.RecordAll(ctx, []proto.Message{run.steps[1], run.steps[0]}); errs != nil { // the first again: a redelivery
		t.Fatal(errors.Join(errs...))
	}
	checkIndex(ctx, t, s, "exec-v1", 2)
	chain, err := s.Chain(ctx, "exec-v1")
	if err != nil {
		t.Fatal(err)
	}
	if len(chain) != 2 || len(chain[1].Steps) != 2 {
		t.Errorf("chain %+v; want 2 node visits, the second with 2 steps", chain)
	}
	entries := indexEntries(ctx, t, "exec-v1")
	if len(entries) != 4 || len(entries[3].Docs) != 1 || entries[3].Docs[0].DocID != chainstore.StepDocOf(run.steps[1]).ID {
		t.Errorf("index entries %+v; want the three old ones and one listing the new step", entries)
	}
}

type testEntry struct {
	ID   string         `bson:"_id"`
	Docs []testEntryDoc `bson:"docs"`
}

type testEntryDoc struct {
	Collection string `bson:"collection"`
	DocID      string `bson:"doc_id"`
}

// indexEntries reads the index entries of one execution, by position.
func indexEntries(ctx context.Context, t *testing.T, id string) []testEntry {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	var entries []testEntry
	for n := 1; ; n++ {
		var e testEntry
		err := client.Database(dbName(t)).Collection(chainstore.IndexCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id + "#" + strconv.Itoa(n)}}).Decode(&e)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return entries
		}
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
}

// checkOnlyByID fails t unless every command log saw that selected
// documents did so by a string _id alone (the one filter FerretDB pushes
// down), and some did.
func checkOnlyByID(t *testing.T, log *commandLog) {
	t.Helper()
	selecting := 0
	for _, cmd := range log.take() {
		name, fs := filters(cmd)
		for _, f := range fs {
			selecting++
			elems, _ := f.Elements()
			if len(elems) != 1 || elems[0].Key() != "_id" || elems[0].Value().Type != bson.TypeString {
				t.Errorf("%s filters by %s, want by _id alone", name, f)
			}
		}
	}
	if selecting == 0 {
		t.Fatal("no command selected documents; the test watches nothing")
	}
}
