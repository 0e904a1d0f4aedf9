package chainstore_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// execRun is an execution as a listing test records it: its started event
// (none when start is nil) and, unless it is running, its completion.
type execRun struct {
	id, workflow, status string
	start                *time.Time
}

func (r execRun) started() *novav1.WorkflowStarted {
	return &novav1.WorkflowStarted{
		ExecutionId: r.id, WorkflowName: r.workflow, StartedAt: timestamppb.New(*r.start),
		Context: &novav1.JSONValue{}, Definition: &novav1.WorkflowDefinition{Name: r.workflow},
	}
}

// completed is the run's completion; without start time when late is set
// (a completion recorded before its started event, which tells it).
func (r execRun) completed(late bool) *novav1.WorkflowCompleted {
	ev := &novav1.WorkflowCompleted{ExecutionId: r.id, WorkflowName: r.workflow, Status: r.status, Context: &novav1.JSONValue{}}
	if r.start != nil && !late {
		ev.StartedAt, ev.CompletedAt = timestamppb.New(*r.start), timestamppb.New(r.start.Add(time.Second))
	}
	return ev
}

// openListed opens a store that lists through ListingCollection and one on
// the same database that queries, to compare them.
func openListed(t *testing.T, opts ...chainstore.Option) (context.Context, *chainstore.Store, *chainstore.Store) {
	t.Helper()
	ctx, s := openStore(t, append(opts, chainstore.WithListing(true))...)
	queries, err := chainstore.Open(ctx, mongoURI, dbName(t), chainstore.WithListing(false))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = queries.Close(context.Background()) })
	return ctx, s, queries
}

// pages lists every execution f selects, limit at a time, each page after
// the last of the one before.
func pages(ctx context.Context, t *testing.T, s *chainstore.Store, f chainstore.ListFilter, limit int) []string {
	t.Helper()
	f.Limit = limit
	got := []string{}
	for range 1000 {
		docs, err := s.ListExecutions(ctx, f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range docs {
			got = append(got, d.ExecutionID)
		}
		if len(docs) < limit {
			return got
		}
		p := docs[len(docs)-1].Position()
		f.After = &p
	}
	t.Fatalf("%+v: more than 1000 pages", f)
	return nil
}

// sameListing checks that the listing and the queries list the same
// executions for each filter, whole and in pages, and the same documents.
func sameListing(ctx context.Context, t *testing.T, listed, queries *chainstore.Store, filters []chainstore.ListFilter) {
	t.Helper()
	for _, f := range filters {
		want := pages(ctx, t, queries, f, chainstore.MaxListLimit)
		// Pages of 23 put page boundaries all over the 240 runs (among
		// them starts in one millisecond); pages of 7 did too, with three
		// times the reads: over 6 minutes with another make test beside.
		for _, limit := range []int{23, chainstore.MaxListLimit} {
			if got := pages(ctx, t, listed, f, limit); !slices.Equal(got, want) {
				t.Errorf("%s, pages of %d:\nlisting %v\nqueries %v", describe(f), limit, got, want)
			}
		}
		f.Limit = 5
		a, errA := listed.ListExecutions(ctx, f)
		b, errB := queries.ListExecutions(ctx, f)
		if errA != nil || errB != nil || fmt.Sprintf("%+v", a) != fmt.Sprintf("%+v", b) {
			t.Errorf("%s: listing read\n%+v (%v)\nqueries read\n%+v (%v)", describe(f), a, errA, b, errB)
		}
	}
}

func describe(f chainstore.ListFilter) string {
	s := fmt.Sprintf("workflow %q status %q id %q", f.Workflow, f.Status, f.IDPrefix)
	if !f.Since.IsZero() {
		s += " since " + f.Since.Format(time.RFC3339Nano)
	}
	if !f.Until.IsZero() {
		s += " until " + f.Until.Format(time.RFC3339Nano)
	}
	if f.After != nil {
		s += fmt.Sprintf(" after %s@%s", f.After.ExecutionID, f.After.StartedAt.Format(time.RFC3339Nano))
	}
	return s
}

// A history spread over minutes, hours, days, months and years, with
// executions that start at the same millisecond, without start time,
// completed after they were listed running, completed before their start
// was recorded, recorded one event at a time and in batches: the listing
// lists what the queries list, in the same order, whole and in pages, for
// every filter.
func TestListingListsAsQueriesDo(t *testing.T) {
	ctx, listed, queries := openListed(t)
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2024, 12, 31, 23, 58, 30, 0, time.UTC)
	workflows := []string{"orders", "invoices", "reports"}
	var runs []execRun
	var prev time.Time
	for i := range 240 {
		r := execRun{id: fmt.Sprintf("x%d-%03d", rng.IntN(20), i), workflow: workflows[rng.IntN(3)]}
		r.status = []string{chainstore.StatusRunning, "succeeded", "failed"}[rng.IntN(3)]
		var start time.Time
		switch k := rng.IntN(10); {
		case k < 5:
			start = base.Add(time.Duration(rng.IntN(300_000)) * time.Millisecond)
		case k == 5 && i > 0:
			start = prev // the same instant: the id orders them
		case k == 6 && i > 0:
			start = prev.Add(300 * time.Microsecond) // the same millisecond, as stored
		case k == 7:
			start = base.Add(-time.Duration(rng.IntN(400*24)) * time.Hour)
		case k == 8:
			start = base.Add(time.Duration(rng.IntN(50*60)) * time.Minute)
		default:
			if r.status == chainstore.StatusRunning {
				r.status = "failed"
			}
		}
		if !start.IsZero() {
			r.start, prev = &start, start
		}
		runs = append(runs, r)
	}

	// Each run is written one of four ways; the batches mix runs.
	var batch, later []proto.Message
	flush := func(msgs *[]proto.Message) {
		if errs := listed.RecordAll(ctx, *msgs); errs != nil {
			t.Fatal(errors.Join(errs...))
		}
		*msgs = nil
	}
	for i, r := range runs {
		switch {
		case r.start == nil:
			if err := listed.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
				t.Fatal(err)
			}
		case i%4 == 0:
			if err := listed.RecordWorkflowStarted(ctx, r.started()); err != nil {
				t.Fatal(err)
			}
			if r.status != chainstore.StatusRunning {
				if err := listed.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
					t.Fatal(err)
				}
			}
		case i%4 == 1 || r.status == chainstore.StatusRunning:
			batch = append(batch, r.started())
			if r.status != chainstore.StatusRunning {
				batch = append(batch, r.completed(false))
			}
		case i%4 == 2:
			// Listed running, then completed in a later batch.
			batch = append(batch, r.started())
			later = append(later, r.completed(false))
		default:
			if err := listed.RecordWorkflowCompleted(ctx, r.completed(true)); err != nil {
				t.Fatal(err)
			}
			later = append(later, r.started())
		}
		if len(batch) >= 7 {
			flush(&batch)
		}
	}
	flush(&batch)
	flush(&later)

	pos := func(r execRun) *chainstore.ListPosition {
		return &chainstore.ListPosition{StartedAt: *r.start, ExecutionID: r.id}
	}
	var timed []execRun
	for _, r := range runs {
		if r.start != nil {
			timed = append(timed, r)
		}
	}
	newYear := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	sameMs := slices.IndexFunc(timed, func(r execRun) bool { return r.start.Nanosecond()%1e6 != 0 })
	if sameMs < 0 {
		t.Fatal("no start within a millisecond of another: the test checks less than it says")
	}
	filters := []chainstore.ListFilter{
		{},
		{Workflow: "orders"},
		{Status: chainstore.StatusRunning},
		{Status: "failed"},
		{Workflow: "invoices", Status: "succeeded"},
		{IDPrefix: "x1"},
		{IDPrefix: "x12-"},
		{IDPrefix: runs[17].id},
		{IDPrefix: "x1", Status: "failed"},
		{IDPrefix: "nope"},
		{Since: base},
		{Until: base},
		{Since: newYear},
		{Until: newYear, Workflow: "reports"},
		{Since: base.Add(-24 * time.Hour), Until: base.Add(2 * time.Minute)},
		{Since: *timed[10].start, Until: *timed[40].start},
		{Since: *timed[sameMs].start},
		{Until: *timed[sameMs].start},
		{After: pos(timed[len(timed)/2])},
		{After: pos(timed[sameMs])},
		{After: pos(timed[3]), Status: "succeeded"},
		{After: &chainstore.ListPosition{ExecutionID: "x5"}},
	}
	sameListing(ctx, t, listed, queries, filters)
}

// An execution is listed running when it starts and with its outcome when
// it completes, whichever way the events come.
func TestListingFollowsTheStatus(t *testing.T) {
	start := t0.Add(time.Hour)
	tests := []struct {
		name  string
		write func(ctx context.Context, s *chainstore.Store, r execRun, running func()) error
	}{
		{"one event at a time", func(ctx context.Context, s *chainstore.Store, r execRun, running func()) error {
			if err := s.RecordWorkflowStarted(ctx, r.started()); err != nil {
				return err
			}
			running()
			return s.RecordWorkflowCompleted(ctx, r.completed(false))
		}},
		{"in batches", func(ctx context.Context, s *chainstore.Store, r execRun, running func()) error {
			if errs := s.RecordAll(ctx, []proto.Message{r.started()}); errs != nil {
				return errors.Join(errs...)
			}
			running()
			return errors.Join(s.RecordAll(ctx, []proto.Message{r.completed(false)})...)
		}},
		{"start recorded late", func(ctx context.Context, s *chainstore.Store, r execRun, _ func()) error {
			if err := s.RecordWorkflowCompleted(ctx, r.completed(true)); err != nil {
				return err
			}
			return s.RecordWorkflowStarted(ctx, r.started())
		}},
		{"in one batch", func(ctx context.Context, s *chainstore.Store, r execRun, _ func()) error {
			return errors.Join(s.RecordAll(ctx, []proto.Message{r.started(), r.completed(false)})...)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, s, queries := openListed(t)
			r := execRun{id: "exec-status", workflow: "orders", status: "failed", start: &start}
			ids := func(f chainstore.ListFilter) []string {
				t.Helper()
				got := pages(ctx, t, s, f, 10)
				if want := pages(ctx, t, queries, f, 10); !slices.Equal(got, want) {
					t.Errorf("%s: listing %v, queries %v", describe(f), got, want)
				}
				return got
			}
			err := tt.write(ctx, s, r, func() {
				if got := ids(chainstore.ListFilter{Status: chainstore.StatusRunning}); !slices.Equal(got, []string{r.id}) {
					t.Errorf("running, listed running: %v", got)
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			for status, want := range map[string][]string{chainstore.StatusRunning: {}, "failed": {r.id}, "": {r.id}} {
				if got := ids(chainstore.ListFilter{Status: status, Since: start}); !slices.Equal(got, want) {
					t.Errorf("failed, listed with status %q: %v, want %v", status, got, want)
				}
			}
			docs, err := s.ListExecutions(ctx, chainstore.ListFilter{Limit: 10})
			if err != nil || len(docs) != 1 || docs[0].Status != "failed" || docs[0].StartedAt == nil || !docs[0].StartedAt.Equal(start) {
				t.Errorf("listed %+v, %v; want the failed execution with its start time", docs, err)
			}
		})
	}
}

// listingDocs counts the documents of ListingCollection.
func listingDocs(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	n, err := client.Database(dbName(t)).Collection(chainstore.ListingCollection).CountDocuments(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// Redelivered events, one at a time or in batches, in any order, write
// nothing more to the listing.
func TestListingRedeliveryWritesNothing(t *testing.T) {
	ctx, s, queries := openListed(t)
	var runs []execRun
	for i := range 6 {
		start := t0.Add(time.Duration(i) * 40 * time.Second)
		runs = append(runs, execRun{id: fmt.Sprintf("exec-again-%d", i), workflow: "orders", status: []string{"succeeded", "failed"}[i%2], start: &start})
	}
	var all []proto.Message
	for i, r := range runs {
		if i%2 == 0 {
			if err := s.RecordWorkflowStarted(ctx, r.started()); err != nil {
				t.Fatal(err)
			}
			if err := s.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
				t.Fatal(err)
			}
		} else if errs := s.RecordAll(ctx, []proto.Message{r.started(), r.completed(false)}); errs != nil {
			t.Fatal(errors.Join(errs...))
		}
		all = append(all, r.started(), r.completed(false))
	}
	before := listingDocs(ctx, t)
	want := pages(ctx, t, queries, chainstore.ListFilter{}, 100)

	for _, r := range runs {
		if err := s.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordWorkflowStarted(ctx, r.started()); err != nil {
			t.Fatal(err)
		}
	}
	if errs := s.RecordAll(ctx, all); errs != nil {
		t.Fatal(errors.Join(errs...))
	}
	for _, m := range all {
		if errs := s.RecordAll(ctx, []proto.Message{m}); errs != nil {
			t.Fatal(errors.Join(errs...))
		}
	}
	if after := listingDocs(ctx, t); after != before {
		t.Errorf("%s holds %d documents after the redeliveries, %d before", chainstore.ListingCollection, after, before)
	}
	if got := pages(ctx, t, s, chainstore.ListFilter{}, 4); !slices.Equal(got, want) || len(got) != len(runs) {
		t.Errorf("listed %v, want %v", got, want)
	}
	for _, status := range []string{"succeeded", "failed", chainstore.StatusRunning} {
		f := chainstore.ListFilter{Status: status}
		if got, want := pages(ctx, t, s, f, 100), pages(ctx, t, queries, f, 100); !slices.Equal(got, want) {
			t.Errorf("status %s: listed %v, want %v", status, got, want)
		}
	}
}

// Executions recorded before the store kept the listing (a data dir of an
// older version) are listed when it is first set up, once; until then
// ListExecutions queries.
func TestListingBackfill(t *testing.T) {
	ctx, old := openStore(t, chainstore.WithListing(false))
	var runs []execRun
	for i := range 30 {
		start := t0.Add(time.Duration(i*i) * 7 * time.Minute) // over minutes, hours and days
		runs = append(runs, execRun{id: fmt.Sprintf("exec-old-%02d", i), workflow: "orders", status: []string{chainstore.StatusRunning, "succeeded", "failed"}[i%3], start: &start})
	}
	runs = append(runs, execRun{id: "exec-old-unstarted", workflow: "orders", status: "failed"})
	for _, r := range runs {
		if r.start != nil {
			if err := old.RecordWorkflowStarted(ctx, r.started()); err != nil {
				t.Fatal(err)
			}
		}
		if r.status != chainstore.StatusRunning {
			if err := old.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := listingDocs(ctx, t); n != 0 {
		t.Fatalf("a store without the listing wrote %d listing documents", n)
	}
	filters := []chainstore.ListFilter{{}, {Status: "failed"}, {Status: chainstore.StatusRunning}, {Since: t0.Add(time.Hour)}}

	s, err := chainstore.Open(ctx, mongoURI, dbName(t), chainstore.WithListing(true))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	// Read before the audit service has set the listing up: by queries.
	sameListing(ctx, t, s, old, filters)
	for range 2 { // start-up runs it at every boot
		if err := s.EnsureIndexes(ctx); err != nil {
			t.Fatalf("EnsureIndexes: %v", err)
		}
	}
	backfilled := listingDocs(ctx, t)
	// One entry per minute started in, one per directory, and the mark.
	minutes, dirs := map[string]bool{}, map[string]bool{"all": true}
	for _, r := range runs {
		if r.start == nil {
			minutes["none"] = true
			continue
		}
		m := r.start.UTC().Format("2006-01-02T15:04")
		minutes[m] = true
		for _, n := range []int{4, 7, 10, 13} {
			dirs[m[:n]] = true
		}
	}
	if want := int64(len(minutes) + len(dirs) + 1); backfilled != want {
		t.Errorf("%s holds %d documents after the backfill, want %d", chainstore.ListingCollection, backfilled, want)
	}
	sameListing(ctx, t, s, old, filters)

	// A store opened later finds it set up; new executions are listed
	// beside the old.
	later, err := chainstore.Open(ctx, mongoURI, dbName(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = later.Close(context.Background()) })
	start := t0.Add(3 * time.Minute)
	late := execRun{id: "exec-new", workflow: "orders", status: "failed", start: &start}
	if err := later.RecordWorkflowStarted(ctx, late.started()); err != nil {
		t.Fatal(err)
	}
	if err := later.RecordWorkflowCompleted(ctx, late.completed(false)); err != nil {
		t.Fatal(err)
	}
	sameListing(ctx, t, later, old, filters)
	if got := pages(ctx, t, later, chainstore.ListFilter{IDPrefix: "exec-new"}, 10); !slices.Equal(got, []string{"exec-new"}) {
		t.Errorf("the new execution lists as %v", got)
	}
}

// Replicas record the same executions at once, each event twice, one at a
// time or in batches (two at once per replica), all starting in the same
// few minutes: the listing lists each with its outcome, and every log of it
// has its positions without gaps.
func TestListingUnderConcurrentWriters(t *testing.T) {
	const replicas, executions = 4, 40
	ctx, first, queries := openListed(t)
	stores := []*chainstore.Store{first}
	for range replicas - 1 {
		s, err := chainstore.Open(ctx, mongoURI, dbName(t), chainstore.WithListing(true))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close(context.Background()) })
		stores = append(stores, s)
	}
	var runs []execRun
	for i := range executions {
		start := t0.Add(time.Duration(i) * 7 * time.Second)
		runs = append(runs, execRun{id: fmt.Sprintf("exec-busy-%02d", i), workflow: "orders", status: []string{"succeeded", "failed"}[i%2], start: &start})
	}
	var wg sync.WaitGroup
	errs := make(chan error, replicas*2)
	for r, s := range stores {
		var evs []proto.Message
		for i := range executions * 2 { // every execution twice, in a different order per replica
			e := runs[(i/2+r*7)%executions]
			evs = append(evs, e.started(), e.completed(false))
		}
		if r%2 == 0 {
			wg.Go(func() {
				for i, m := range evs {
					var err error
					if i%2 == 0 {
						err = s.RecordWorkflowStarted(ctx, m.(*novav1.WorkflowStarted))
					} else {
						err = s.RecordWorkflowCompleted(ctx, m.(*novav1.WorkflowCompleted))
					}
					if err != nil {
						errs <- err
						return
					}
				}
			})
			continue
		}
		for w := range 2 {
			wg.Go(func() {
				for i := w * 6; i < len(evs); i += 12 {
					if err := errors.Join(s.RecordAll(ctx, evs[i:min(i+6, len(evs))])...); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	sameListing(ctx, t, first, queries, []chainstore.ListFilter{{}, {Status: "failed"}, {Status: chainstore.StatusRunning}})
	if got := pages(ctx, t, first, chainstore.ListFilter{}, 7); len(got) != executions {
		t.Errorf("listed %d executions, want %d", len(got), executions)
	}

	client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	cur, err := client.Database(dbName(t)).Collection(chainstore.ListingCollection).Find(ctx, bson.D{})
	if err != nil {
		t.Fatal(err)
	}
	var docs []struct {
		ID string `bson:"_id"`
	}
	if err := cur.All(ctx, &docs); err != nil {
		t.Fatal(err)
	}
	logs := map[string][]int{}
	for _, d := range docs {
		key, n, ok := strings.Cut(d.ID, "#")
		if !ok {
			continue // a snapshot, or the mark of the backfill
		}
		p, err := strconv.Atoi(n)
		if err != nil {
			t.Fatalf("listing document %q", d.ID)
		}
		logs[key] = append(logs[key], p)
	}
	for key, ps := range logs {
		slices.Sort(ps)
		for i, p := range ps {
			if p != i+1 {
				t.Errorf("log %s has positions %v: want 1 to %d without gaps", key, ps, len(ps))
				break
			}
		}
	}
}

// On FerretDB, listing a page reads documents by _id alone: no statement
// reads the whole history.
func TestListingFindsByIDOnly(t *testing.T) {
	var log commandLog
	ctx, s := openStore(t, chainstore.WithCommandMonitor(log.monitor())) // the listing as Open picks it
	for i := range 12 {
		start := t0.Add(time.Duration(i) * 13 * time.Minute)
		r := execRun{id: fmt.Sprintf("exec-%02d", i), workflow: "orders", status: []string{"succeeded", "failed"}[i%2], start: &start}
		if errs := s.RecordAll(ctx, []proto.Message{r.started(), r.completed(false)}); errs != nil {
			t.Fatal(errors.Join(errs...))
		}
	}
	log.take()
	for _, f := range []chainstore.ListFilter{
		{Limit: 5}, {Limit: 5, Status: "failed"}, {Limit: 5, IDPrefix: "exec-1"},
		{Limit: 5, Since: t0.Add(time.Hour)}, {Limit: 5, After: &chainstore.ListPosition{StartedAt: t0.Add(time.Hour), ExecutionID: "exec-05"}},
	} {
		docs, err := s.ListExecutions(ctx, f)
		if err != nil || len(docs) == 0 {
			t.Fatalf("%s: %d executions, %v", describe(f), len(docs), err)
		}
	}
	checkOnlyByID(t, &log)
}

// A minute of many executions written one at a time is read in a few
// documents: the snapshots of its groups of entries.
func TestListingReadsSnapshots(t *testing.T) {
	var log commandLog
	ctx, s, queries := openListed(t, chainstore.WithCommandMonitor(log.monitor()))
	for i := range 40 {
		start := t0.Add(time.Duration(i) * time.Second)
		r := execRun{id: fmt.Sprintf("exec-%02d", i), workflow: "orders", status: []string{"succeeded", "failed"}[i%2], start: &start}
		if err := s.RecordWorkflowStarted(ctx, r.started()); err != nil {
			t.Fatal(err)
		}
		if err := s.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
			t.Fatal(err)
		}
	}
	sameListing(ctx, t, s, queries, []chainstore.ListFilter{{}, {Status: "failed"}, {After: &chainstore.ListPosition{StartedAt: t0.Add(20 * time.Second), ExecutionID: "exec-20"}}})

	log.take()
	if docs, err := s.ListExecutions(ctx, chainstore.ListFilter{Limit: 5}); err != nil || len(docs) != 5 {
		t.Fatalf("listed %d, %v", len(docs), err)
	}
	reads := 0
	for _, cmd := range log.take() {
		if name, _ := filters(cmd); name == "find" && cmd.Lookup("find").StringValue() == chainstore.ListingCollection {
			reads++
		}
	}
	// The directories down to the minute (each: no seal, no snapshot, an
	// entry and the first missing one), and the minute's 80 entries (no
	// seal, 5 snapshots, no sixth, and the first missing entry).
	if reads > 5*4+8 {
		t.Errorf("listing 5 executions read %d listing documents", reads)
	}
}

// A minute a writer has moved on from is sealed: read in one document, and
// the entries written to it after, completions of executions that started
// in it, are read too.
func TestListingSealsThePast(t *testing.T) {
	var log commandLog
	ctx, s, queries := openListed(t, chainstore.WithCommandMonitor(log.monitor()))
	var running []execRun
	for i := range 36 {
		start := t0.Add(time.Duration(i) * 5 * time.Second) // 12 a minute, 3 minutes
		r := execRun{id: fmt.Sprintf("exec-%02d", i), workflow: "orders", status: "succeeded", start: &start}
		if err := s.RecordWorkflowStarted(ctx, r.started()); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			running = append(running, r)
			continue
		}
		if err := s.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
			t.Fatal(err)
		}
	}
	sealed := func(minute time.Time) bool {
		t.Helper()
		client, err := mongo.Connect(options.Client().ApplyURI(mongoURI))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = client.Disconnect(context.Background()) }()
		id := minute.Format("2006-01-02T15:04") + "@sealed"
		err = client.Database(dbName(t)).Collection(chainstore.ListingCollection).FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Err()
		if err != nil && !errors.Is(err, mongo.ErrNoDocuments) {
			t.Fatal(err)
		}
		return err == nil
	}
	if !sealed(t0) || !sealed(t0.Add(time.Minute)) || sealed(t0.Add(2*time.Minute)) {
		t.Errorf("sealed: first minute %v, second %v, third %v; want the first two", sealed(t0), sealed(t0.Add(time.Minute)), sealed(t0.Add(2*time.Minute)))
	}
	// The executions still running complete, each listed after the seal
	// of its minute.
	for _, r := range running {
		r.status = "failed"
		if err := s.RecordWorkflowCompleted(ctx, r.completed(false)); err != nil {
			t.Fatal(err)
		}
	}
	sameListing(ctx, t, s, queries, []chainstore.ListFilter{{}, {Status: "failed"}, {Status: chainstore.StatusRunning}, {Until: t0.Add(time.Minute)}})
	if got := pages(ctx, t, s, chainstore.ListFilter{Status: "failed"}, 100); len(got) != len(running) {
		t.Errorf("listed failed: %v, want the %d completed last", got, len(running))
	}

	log.take()
	if docs, err := s.ListExecutions(ctx, chainstore.ListFilter{Until: t0.Add(time.Minute), Limit: 100}); err != nil || len(docs) != 12 {
		t.Fatalf("listed %d, %v; want the first minute's 12", len(docs), err)
	}
	reads := 0
	for _, cmd := range log.take() {
		if name, _ := filters(cmd); name == "find" && cmd.Lookup("find").StringValue() == chainstore.ListingCollection {
			reads++
		}
	}
	// The directories down to the minute (each: no seal, no snapshot, its
	// entries, one but the hour's three, and the first missing one), and
	// the first minute: its seal, the 4 completions written after it, and
	// the first missing one.
	if reads > 4*4+6+1+4+1 {
		t.Errorf("listing a sealed minute read %d listing documents", reads)
	}
}
