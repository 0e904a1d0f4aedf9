package chainstore_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// all is the run's events in the order the engine publishes them.
func (e events) all() []proto.Message {
	all := []proto.Message{e.started}
	for i := range e.nodes {
		all = append(all, e.nodes[len(e.nodes)-1-i]) // start, then classify
	}
	for i := range e.steps {
		all = append(all, e.steps[len(e.steps)-1-i])
	}
	return append(all, e.completed)
}

// stored is what a reader sees of an execution, with its id written as ID
// so that two executions can be compared.
func stored(ctx context.Context, t *testing.T, s *chainstore.Store, id string) string {
	t.Helper()
	exec, err := s.Execution(ctx, id)
	if err != nil {
		t.Fatalf("Execution(%s): %v", id, err)
	}
	chain, err := s.Chain(ctx, id)
	if err != nil {
		t.Fatalf("Chain(%s): %v", id, err)
	}
	counts, err := s.Counts(ctx, id)
	if err != nil {
		t.Fatalf("Counts(%s): %v", id, err)
	}
	return strings.ReplaceAll(fmt.Sprintf("%+v\n%+v\n%v", *exec, chain, counts), id, "ID")
}

// Events recorded in batches, in any order, any of them twice, in one
// batch or in two, make the same documents as recorded one by one.
func TestRecordAllMakesWhatRecordMakes(t *testing.T) {
	tests := []struct {
		name    string
		batches func(all []proto.Message) [][]proto.Message
	}{
		{"in order", func(all []proto.Message) [][]proto.Message { return [][]proto.Message{all} }},
		{"reversed", func(all []proto.Message) [][]proto.Message {
			r := slices.Clone(all)
			slices.Reverse(r)
			return [][]proto.Message{r}
		}},
		{"each twice in one batch", func(all []proto.Message) [][]proto.Message {
			return [][]proto.Message{slices.Concat(all, all)}
		}},
		{"redelivered in the next batch", func(all []proto.Message) [][]proto.Message {
			return [][]proto.Message{all[:4], all[2:], all}
		}},
		{"completed before the rest", func(all []proto.Message) [][]proto.Message {
			return [][]proto.Message{all[len(all)-1:], all[:len(all)-1]}
		}},
		{"one at a time", func(all []proto.Message) [][]proto.Message {
			var bs [][]proto.Message
			for _, m := range all {
				bs = append(bs, []proto.Message{m})
			}
			return bs
		}},
	}
	for _, mode := range readModes {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			invoiceRun(t, "exec-ref").record(ctx, t, s)
			want := stored(ctx, t, s, "exec-ref")
			for i, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					id := fmt.Sprintf("exec-batch-%d", i)
					for _, b := range tt.batches(invoiceRun(t, id).all()) {
						if errs := s.RecordAll(ctx, b); errs != nil {
							t.Fatalf("RecordAll: %v", errs)
						}
					}
					if got := stored(ctx, t, s, id); got != want {
						t.Errorf("recorded in batches:\n%s\none by one:\n%s", got, want)
					}
				})
			}
		})
	}
}

// An event that cannot be recorded fails alone: the others of its batch
// are recorded.
func TestRecordAllFailsAnEventAlone(t *testing.T) {
	ctx, s := openStore(t)
	run := invoiceRun(t, "exec-mixed")
	batch := slices.Insert(run.all(), 2,
		proto.Message(&novav1.NodeCompleted{ExecutionId: "exec-mixed"}), // no node id
		proto.Message(&novav1.ExecuteCode{ExecutionId: "exec-mixed"}),   // not a fact of the chain
	)
	errs := s.RecordAll(ctx, batch)
	if len(errs) != len(batch) {
		t.Fatalf("RecordAll returned %d errors for %d events", len(errs), len(batch))
	}
	for i, err := range errs {
		if wantErr := i == 2 || i == 3; wantErr != errors.Is(err, chainstore.ErrInvalidEvent) {
			t.Errorf("event %d (%T): err = %v", i, batch[i], err)
		}
	}
	invoiceRun(t, "exec-ref").record(ctx, t, s)
	if got, want := stored(ctx, t, s, "exec-mixed"), stored(ctx, t, s, "exec-ref"); got != want {
		t.Errorf("the valid events of the batch:\n%s\nwant:\n%s", got, want)
	}
}

// A batch costs one write per collection (and one for the index and one
// for the listing), each finding documents by _id alone, however many
// executions it holds. An execution that starts and completes within one
// batch is inserted whole, after its node visits and steps; one that
// started in an earlier batch is completed by a findAndModify of its own,
// which tells whether the completion changed what the listing holds of it
// (FerretDB applies the updates of one update command one by one anyway).
func TestRecordAllWritesOncePerCollection(t *testing.T) {
	var log commandLog
	ctx, s := openStore(t, chainstore.WithCommandMonitor(log.monitor()))
	// The listing of the minute the runs start in, and of its hour, day,
	// month and year, is set up once, by the first execution.
	invoiceRun(t, "exec-first").record(ctx, t, s)
	runs := func(prefix string) (first, rest []proto.Message) {
		for i := range 3 {
			all := invoiceRun(t, fmt.Sprint(prefix, i)).all()
			first = append(first, all[:len(all)-1]...)
			rest = append(rest, all[len(all)-1])
		}
		return first, rest
	}
	record := func(batch []proto.Message) []string {
		t.Helper()
		log.take()
		if errs := s.RecordAll(ctx, batch); errs != nil {
			t.Fatalf("RecordAll: %v", errs)
		}
		var got []string
		for _, cmd := range log.take() {
			name, fs := filters(cmd)
			got = append(got, name+" "+cmd.Lookup(name).StringValue())
			for _, f := range fs {
				elems, _ := f.Elements()
				if len(elems) != 1 || elems[0].Key() != "_id" || elems[0].Value().Type != bson.TypeString {
					t.Errorf("%s filters by %s, want by _id alone", name, f)
				}
			}
		}
		return got
	}
	tests := []struct {
		name    string
		batches func(first, rest []proto.Message) [][]proto.Message
		want    []string // of the last batch
	}{
		{"started and completed in the batch", func(first, rest []proto.Message) [][]proto.Message {
			return [][]proto.Message{slices.Concat(first, rest)}
		}, []string{
			"insert " + chainstore.ChainCollection, "insert " + chainstore.StepsCollection,
			"insert " + chainstore.IndexCollection, "insert " + chainstore.ExecutionsCollection,
			"insert " + chainstore.ListingCollection,
		}},
		{"started in an earlier batch", func(first, rest []proto.Message) [][]proto.Message {
			return [][]proto.Message{first, rest}
		}, []string{
			"findAndModify " + chainstore.ExecutionsCollection, "findAndModify " + chainstore.ExecutionsCollection,
			"findAndModify " + chainstore.ExecutionsCollection, "insert " + chainstore.ListingCollection,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			prefix := "exec-" + strings.ReplaceAll(tt.name, " ", "-") + "-"
			var got []string
			for _, b := range tt.batches(runs(prefix)) {
				got = record(b)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("commands = %q, want %q", got, tt.want)
			}
			for i := range 3 {
				id := fmt.Sprint(prefix, i)
				counts, err := s.Counts(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if w := map[string]int64{chainstore.ExecutionsCollection: 1, chainstore.ChainCollection: 2, chainstore.StepsCollection: 2}; fmt.Sprint(counts) != fmt.Sprint(w) {
					t.Errorf("counts of %s = %v, want %v", id, counts, w)
				}
				exec, err := s.Execution(ctx, id)
				if err != nil {
					t.Fatal(err)
				}
				if exec.Status == chainstore.StatusRunning || exec.CompletedAt == nil {
					t.Errorf("%s: status %q, completed at %v; want it completed", id, exec.Status, exec.CompletedAt)
				}
			}
		})
	}
}
