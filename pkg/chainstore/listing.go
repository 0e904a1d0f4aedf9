package chainstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// ListingCollection lists the executions by start time, on a store that can
// only find a document by _id without reading the whole collection
// (FerretDB 1.24 on SQLite, which also sorts in memory). There,
// ListExecutions finds the newest executions, or those before a
// ListPosition, by reading a few of its documents and then the page's
// execution documents by _id, where a query would read every execution.
// On MongoDB it is not used: ListExecutions queries, with indexes.
//
// It holds entry logs (see entryID) keyed by time, in UTC. A minute's
// ("2006-01-02T15:04") is a bucket: its entries list the executions that
// started in it, with what ListExecutions filters by (listedExecution);
// "none" lists those whose start time is not recorded. The others are
// directories, whose entries list the keys under them that have entries:
// an hour's ("2006-01-02T15") its minutes, a day's its hours, a month's its
// days, a year's its months, and "all" the years and "none". A writer lists
// a key in its directory before it writes the key's first entry, so every
// key with entries is found from "all" (a writer that dies in between
// leaves a key without entries listed, which readers skip). Entries are
// inserted, never updated (see entryID); a log of many entries is read in
// a few documents: the snapshots of its groups of entries and its seal
// (see listingGroup and sealID), which repeat what the entries list.
//
// An execution is listed when its document is written and again when that
// changes what the listing holds of it (its completion, mostly); of the
// entries of one execution in one bucket, a reader takes the latest status
// that is not running, else running. A listing can be behind its execution
// documents (a writer that died before listing what it wrote, until the
// event's redelivery lists it); ListExecutions checks every execution it
// returns against its document.
const ListingCollection = "executions_listing"

// Keys of ListingCollection's logs (see there).
const (
	listingRoot    = "all"
	listingNoStart = "none"
)

// keyLayouts are the layouts of time keys, a year's to a minute's (a
// bucket's), each a prefix of the next: keys sort as their times do.
var keyLayouts = []string{"2006", "2006-01", "2006-01-02", "2006-01-02T15", "2006-01-02T15:04"}

// listingBackfilled marks a ListingCollection that lists every execution
// recorded before it existed (see backfillListing). No entry has this _id:
// an entry's ends in #<n>.
const listingBackfilled = "backfilled"

// maxEntryItems is the most executions or keys one entry of the backfill
// lists, far below a document's 16 MB.
const maxEntryItems = 1000

// WithListing forces the use of ListingCollection on or off. Without it,
// Open uses it when the server is FerretDB.
func WithListing(on bool) Option {
	return func(s *Store) { s.forceListing = &on }
}

// listingEntry is a ListingCollection document: an entry of a bucket
// (Executions) or of a directory (Children), or the snapshot or seal of
// several.
type listingEntry struct {
	ID         string            `bson:"_id"`
	Executions []listedExecution `bson:"executions,omitempty"`
	Children   []string          `bson:"children,omitempty"`
	// A seal's (see sealID): the last position it holds the entries of.
	Upto int `bson:"upto,omitempty"`
}

// listedExecution is what the listing holds of an execution: what its
// document held when it was listed of what ListExecutions filters and
// sorts by. StartedAt is at BSON's precision (storedTime).
type listedExecution struct {
	ID        string
	StartedAt *time.Time
	Workflow  string
	Status    string
}

// MarshalBSONValue stores e as one string, the JSON array [id, start in
// Unix milliseconds or null, workflow, status]: FerretDB 1.24 reads a
// document value by value, and an entry listing 60 executions took it 3.4
// ms to read by _id with each a subdocument, 1.0 ms with each a string.
func (e listedExecution) MarshalBSONValue() (byte, []byte, error) {
	var at *int64
	if e.StartedAt != nil {
		ms := e.StartedAt.UnixMilli()
		at = &ms
	}
	text, err := json.Marshal([]any{e.ID, at, e.Workflow, e.Status})
	if err != nil {
		return 0, nil, err
	}
	t, data, err := bson.MarshalValue(string(text))
	return byte(t), data, err
}

// UnmarshalBSONValue reads e as MarshalBSONValue stores it.
func (e *listedExecution) UnmarshalBSONValue(t byte, data []byte) error {
	var text string
	if err := bson.UnmarshalValue(bson.Type(t), data, &text); err != nil {
		return err
	}
	var at *int64
	fields := []any{&e.ID, &at, &e.Workflow, &e.Status}
	if err := json.Unmarshal([]byte(text), &fields); err != nil {
		return fmt.Errorf("listed execution %q: %w", text, err)
	}
	e.StartedAt = nil
	if at != nil {
		t := time.UnixMilli(*at).UTC()
		e.StartedAt = &t
	}
	return nil
}

// listedFields is the projection of an execution document on what the
// listing holds of it.
var listedFields = bson.D{{Key: "started_at", Value: 1}, {Key: "workflow_name", Value: 1}, {Key: "status", Value: 1}}

// listedDoc is an execution document's fields of listedFields.
type listedDoc struct {
	ID        string     `bson:"_id"`
	StartedAt *time.Time `bson:"started_at"`
	Workflow  string     `bson:"workflow_name"`
	Status    string     `bson:"status"`
}

// fields are the fields d has, as a write sets them.
func (d listedDoc) fields() bson.D {
	var out bson.D
	if d.StartedAt != nil {
		out = append(out, bson.E{Key: "started_at", Value: d.StartedAt})
	}
	if d.Workflow != "" {
		out = append(out, bson.E{Key: "workflow_name", Value: d.Workflow})
	}
	if d.Status != "" {
		out = append(out, bson.E{Key: "status", Value: d.Status})
	}
	return out
}

// listedOf is what the listing holds of the execution id whose document has
// the fields doc has (as stored, or as a write sets them).
func listedOf(id string, doc bson.D) listedExecution {
	e := listedExecution{ID: id}
	for _, f := range doc {
		switch f.Key {
		case "started_at":
			switch t := f.Value.(type) {
			case *time.Time:
				e.StartedAt = storedTime(t)
			case time.Time:
				e.StartedAt = storedTime(&t)
			}
		case "workflow_name":
			e.Workflow, _ = f.Value.(string)
		case "status":
			e.Status, _ = f.Value.(string)
		}
	}
	return e
}

// storedTime is t as BSON stores it: in milliseconds, here in UTC.
func storedTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC().Truncate(time.Millisecond)
	return &u
}

func sameTime(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}

func (e listedExecution) same(o listedExecution) bool {
	return e.ID == o.ID && sameTime(e.StartedAt, o.StartedAt) && e.Workflow == o.Workflow && e.Status == o.Status
}

// bucket is the key of the bucket that lists e.
func (e listedExecution) bucket() string {
	if e.StartedAt == nil {
		return listingNoStart
	}
	return e.StartedAt.Format(keyLayouts[len(keyLayouts)-1])
}

func isBucket(key string) bool {
	return key == listingNoStart || len(key) == len(keyLayouts[len(keyLayouts)-1])
}

// parentKey is the directory that lists key; "" for the root.
func parentKey(key string) string {
	if key == listingRoot {
		return ""
	}
	for i := len(keyLayouts) - 1; i > 0; i-- {
		if len(key) == len(keyLayouts[i]) {
			return key[:len(keyLayouts[i-1])]
		}
	}
	return listingRoot // a year, or listingNoStart
}

// keySpan is the time a time key covers, [lo, hi).
func keySpan(key string) (lo, hi time.Time, ok bool) {
	for i, layout := range keyLayouts {
		if len(key) != len(layout) {
			continue
		}
		lo, err := time.Parse(layout, key)
		if err != nil {
			return lo, hi, false
		}
		switch i {
		case 0:
			hi = lo.AddDate(1, 0, 0)
		case 1:
			hi = lo.AddDate(0, 1, 0)
		case 2:
			hi = lo.AddDate(0, 0, 1)
		case 3:
			hi = lo.Add(time.Hour)
		default:
			hi = lo.Add(time.Minute)
		}
		return lo, hi, true
	}
	return lo, hi, false
}

// pendingListing is what a write lists: executions, each with whether it
// may be listed already (checked) and what to report its failure to.
type pendingListing struct {
	execs   []listedExecution
	checked []bool
	fail    []func(error)
}

func (l *pendingListing) add(e listedExecution, checked bool, fail func(error)) {
	l.execs, l.checked, l.fail = append(l.execs, e), append(l.checked, checked), append(l.fail, fail)
}

// listOne lists one execution, as list does.
func (s *Store) listOne(ctx context.Context, e listedExecution, checked bool) error {
	var l pendingListing
	var err error
	l.add(e, checked, func(e error) { err = e })
	s.list(ctx, &l)
	return err
}

// list adds l's executions to the listing, in one entry per bucket. Those
// checked may be listed already (a redelivery: their write changed nothing
// the listing holds) and are left out if they are, so that a redelivery
// writes nothing.
func (s *Store) list(ctx context.Context, l *pendingListing) {
	if !s.listed || len(l.execs) == 0 {
		return
	}
	byBucket := map[string][]int{}
	var buckets []string
	for i, e := range l.execs {
		b := e.bucket()
		if _, ok := byBucket[b]; !ok {
			buckets = append(buckets, b)
		}
		byBucket[b] = append(byBucket[b], i)
	}
	for _, b := range buckets {
		idx := byBucket[b]
		var have []listedExecution
		if slices.ContainsFunc(idx, func(i int) bool { return l.checked[i] }) {
			var err error
			if have, err = s.readBucket(ctx, b); err != nil {
				for _, i := range idx {
					l.fail[i](fmt.Errorf("list in %s: %w", ListingCollection, err))
				}
				continue
			}
		}
		var add []listedExecution
		for _, i := range idx {
			e := l.execs[i]
			listed := func(o listedExecution) bool { return o.same(e) }
			if !slices.ContainsFunc(add, listed) && !(l.checked[i] && slices.ContainsFunc(have, listed)) {
				add = append(add, e)
			}
		}
		if len(add) == 0 {
			continue
		}
		err := s.appendListing(ctx, b, listingEntry{Executions: add})
		if err != nil {
			for _, i := range idx {
				l.fail[i](fmt.Errorf("list in %s: %w", ListingCollection, err))
			}
		}
	}
}

// appendListing appends e to the log key, after listing key in its
// directory if it has no entry yet.
func (s *Store) appendListing(ctx context.Context, key string, e listingEntry) error {
	if parent := parentKey(key); parent != "" && s.listPositions.get(key) == 0 {
		taken, err := entryTaken(ctx, s.listing, key, 1)
		if err != nil {
			return err
		}
		if taken {
			s.listPositions.set(key, 2)
		} else if err := s.appendListing(ctx, parent, listingEntry{Children: []string{key}}); err != nil {
			return err
		}
	}
	return s.appendLog(ctx, key, e)
}

// appendLog appends e to the log key; then it writes the snapshot of the
// group of entries e completes, if it does, and seals the log of the same
// level this process appended to before, if key is newer.
func (s *Store) appendLog(ctx context.Context, key string, e listingEntry) error {
	// Writes of one process do not take each other's positions.
	s.listMu.Lock()
	n, err := appendEntry(ctx, s.listing, &s.listPositions, key, func(id string) any {
		e.ID = id
		return e
	})
	if err == nil {
		s.remember(e)
	}
	var done string
	if level := timeLevel(key); err == nil && level >= 0 {
		if done = s.listNewest[level]; done < key {
			if s.listNewest == nil {
				s.listNewest = map[int]string{}
			}
			s.listNewest[level] = key
		} else {
			done = ""
		}
	}
	s.listMu.Unlock()
	if err != nil {
		return err
	}
	// A snapshot or a seal that is missing costs readers reads, no more:
	// the entry is written, and a redelivery would not write it again.
	if n%listingGroup == 0 {
		_ = s.writeSnapshot(ctx, key, n/listingGroup)
	}
	if done != "" && s.listPositions.get(done) > minSealed {
		_ = s.seal(ctx, done)
	}
	return nil
}

// timeLevel is the index in keyLayouts of a time key's layout; -1 for
// listingRoot and listingNoStart.
func timeLevel(key string) int {
	if key == listingRoot || key == listingNoStart {
		return -1
	}
	return slices.IndexFunc(keyLayouts, func(l string) bool { return len(l) == len(key) })
}

// listingGroup is how many entries of a listing log one snapshot holds.
// The writer of the last entry of a group writes the group's snapshot,
// with _id "<key>@<group>": an entry that lists what the group's entries
// list, in order, so that a reader reads a log of many entries (a minute
// of an execution a second, written one at a time) in a few documents.
// Entries are never changed, so every writer of a snapshot writes the same.
const listingGroup = 16

func snapshotID(key string, group int) string { return key + "@" + strconv.Itoa(group) }

// writeSnapshot writes the snapshot of a complete group of entries of the
// log key, reading those this process did not write.
func (s *Store) writeSnapshot(ctx context.Context, key string, group int) error {
	snap := listingEntry{ID: snapshotID(key, group)}
	for n := (group-1)*listingGroup + 1; n <= group*listingGroup; n++ {
		e, ok := s.recalled(entryID(key, n))
		if !ok {
			if err := s.listing.FindOne(ctx, bson.D{{Key: "_id", Value: entryID(key, n)}}).Decode(&e); err != nil {
				return err
			}
		}
		snap.Executions = append(snap.Executions, e.Executions...)
		snap.Children = append(snap.Children, e.Children...)
	}
	return insertOnce(ctx, s.listing, snap)
}

// maxRecent bounds the entries a process remembers having written (see
// remember), a few groups of as many logs as are written to at once.
const maxRecent = 64 * listingGroup

// remember keeps an entry this process wrote until the snapshot of its
// group takes it (recalled), forgetting a random one when full. The caller
// holds listMu.
func (s *Store) remember(e listingEntry) {
	if s.listRecent == nil {
		s.listRecent = map[string]listingEntry{}
	}
	if len(s.listRecent) >= maxRecent {
		for id := range s.listRecent {
			delete(s.listRecent, id)
			break
		}
	}
	s.listRecent[e.ID] = e
}

// recalled takes back the entry with id if this process remembers it.
func (s *Store) recalled(id string) (listingEntry, bool) {
	s.listMu.Lock()
	defer s.listMu.Unlock()
	e, ok := s.listRecent[id]
	delete(s.listRecent, id)
	return e, ok
}

// minSealed is the fewest entries of a log worth sealing.
const minSealed = 4

// sealID is the _id of the seal of the log key: an entry that lists what
// its entries up to Upto list, in order, written once a writer has moved
// on to a newer minute (hour, day, ...), so that a reader reads a log of
// the past in one document and the entries written after it, mostly none
// (completions of executions that started in that minute).
func sealID(key string) string { return key + "@sealed" }

// seal writes the seal of the log key, unless it has one.
func (s *Store) seal(ctx context.Context, key string) error {
	entries, next, sealed, err := s.readLog(ctx, key)
	if err != nil || sealed {
		return err
	}
	seal := listingEntry{ID: sealID(key), Upto: next - 1}
	for _, e := range entries {
		seal.Executions = append(seal.Executions, e.Executions...)
		seal.Children = append(seal.Children, e.Children...)
	}
	return insertOnce(ctx, s.listing, seal)
}

// insertOnce inserts doc, unless a document with its _id exists.
func insertOnce(ctx context.Context, coll *mongo.Collection, doc any) error {
	_, err := coll.InsertOne(ctx, doc)
	if mongo.IsDuplicateKeyError(err) {
		return nil
	}
	return err
}

// readLog reads the entries of the log key, in order, from its seal if it
// has one, then from the snapshots of the groups that have one, and tells
// its first free position and whether it has a seal.
func (s *Store) readLog(ctx context.Context, key string) (entries []listingEntry, next int, sealed bool, err error) {
	read := func(id string, e *listingEntry) (bool, error) {
		err := s.listing.FindOne(ctx, bson.D{{Key: "_id", Value: id}}).Decode(e)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("read %s %s: %w", ListingCollection, id, err)
		}
		return true, nil
	}
	next = 1
	var seal listingEntry
	if sealed, err = read(sealID(key), &seal); err != nil {
		return nil, 0, false, err
	}
	if sealed {
		entries, next = append(entries, seal), seal.Upto+1
	}
	for {
		var e listingEntry
		if (next-1)%listingGroup == 0 {
			ok, err := read(snapshotID(key, (next-1)/listingGroup+1), &e)
			if err != nil {
				return nil, 0, false, err
			}
			if ok {
				entries, next = append(entries, e), next+listingGroup
				continue
			}
		}
		ok, err := read(entryID(key, next), &e)
		if err != nil || !ok {
			return entries, next, sealed, err
		}
		entries, next = append(entries, e), next+1
	}
}

// upsertExecution applies $set set, and $setOnInsert onInsert, to the
// execution document id, creating it if needed. With the listing in use it
// tells what the listing holds of the document after, and whether the
// write changed that.
func (s *Store) upsertExecution(ctx context.Context, id string, set, onInsert bson.D) (listedExecution, bool, error) {
	update := bson.D{{Key: "$set", Value: set}}
	if len(onInsert) > 0 {
		update = append(update, bson.E{Key: "$setOnInsert", Value: onInsert})
	}
	if !s.listed {
		return listedExecution{}, false, s.upsert(ctx, s.executions, id, update)
	}
	var before listedDoc
	created := false
	err := retryDuplicate(func() error {
		err := s.executions.FindOneAndUpdate(ctx, bson.D{{Key: "_id", Value: id}}, update,
			options.FindOneAndUpdate().SetUpsert(true).SetReturnDocument(options.Before)).Decode(&before)
		created = errors.Is(err, mongo.ErrNoDocuments)
		if created {
			return nil
		}
		return err
	})
	if err != nil {
		return listedExecution{}, false, err
	}
	if created {
		after := listedOf(id, withFields(set, onInsert))
		return after, true, nil
	}
	after := listedOf(id, withFields(before.fields(), set))
	return after, !after.same(listedOf(id, before.fields())), nil
}

// listingReady tells whether ListExecutions can read through the listing:
// it is in use and lists the executions recorded before it
// (backfillListing is done). Until then it queries.
func (s *Store) listingReady(ctx context.Context) (bool, error) {
	if !s.listed || s.listingBackfilled.Load() {
		return s.listed, nil
	}
	err := s.listing.FindOne(ctx, bson.D{{Key: "_id", Value: listingBackfilled}}).Err()
	switch {
	case errors.Is(err, mongo.ErrNoDocuments):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("read %s: %w", ListingCollection, err)
	}
	s.listingBackfilled.Store(true)
	return true, nil
}

// readBucket reads every execution a bucket lists, in the order listed.
func (s *Store) readBucket(ctx context.Context, key string) ([]listedExecution, error) {
	entries, _, _, err := s.readLog(ctx, key)
	if err != nil {
		return nil, err
	}
	var out []listedExecution
	for _, e := range entries {
		out = append(out, e.Executions...)
	}
	return out, nil
}

// readChildren reads the keys a directory lists, each once, newest first
// and listingNoStart last.
func (s *Store) readChildren(ctx context.Context, key string) ([]string, error) {
	entries, _, _, err := s.readLog(ctx, key)
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range entries {
		for _, c := range e.Children {
			seen[c] = true
		}
	}
	return slices.SortedFunc(maps.Keys(seen), func(a, b string) int {
		switch {
		case a == b:
			return 0
		case a == listingNoStart:
			return 1
		case b == listingNoStart:
			return -1
		}
		return strings.Compare(b, a)
	}), nil
}

// listQuery is a ListFilter as the listing answers it: times at BSON's
// precision.
type listQuery struct {
	f            ListFilter
	since, until *time.Time
	after        *listedExecution // f.After
}

func newListQuery(f ListFilter) listQuery {
	q := listQuery{f: f}
	if !f.Since.IsZero() {
		q.since = storedTime(&f.Since)
	}
	if !f.Until.IsZero() {
		q.until = storedTime(&f.Until)
	}
	if a := f.After; a != nil {
		q.after = &listedExecution{ID: a.ExecutionID}
		if !a.StartedAt.IsZero() {
			q.after.StartedAt = storedTime(&a.StartedAt)
		}
	}
	return q
}

// selects tells whether q selects e.
func (q listQuery) selects(e listedExecution) bool {
	f := q.f
	switch {
	case f.Workflow != "" && e.Workflow != f.Workflow,
		f.Status != "" && e.Status != f.Status,
		!strings.HasPrefix(e.ID, f.IDPrefix),
		q.since != nil && (e.StartedAt == nil || e.StartedAt.Before(*q.since)),
		q.until != nil && (e.StartedAt == nil || !e.StartedAt.Before(*q.until)):
		return false
	}
	return q.after == nil || compareListed(e, *q.after) > 0
}

// compareListed orders executions as ListExecutions lists them: newest
// start first, then execution id descending, those without a start time
// last.
func compareListed(a, b listedExecution) int {
	switch {
	case a.StartedAt == nil && b.StartedAt != nil:
		return 1
	case a.StartedAt != nil && b.StartedAt == nil:
		return -1
	case a.StartedAt != nil && !a.StartedAt.Equal(*b.StartedAt):
		return b.StartedAt.Compare(*a.StartedAt)
	}
	return strings.Compare(b.ID, a.ID)
}

// spans tells whether q may select executions the key lists.
func (q listQuery) spans(key string) bool {
	if key == listingNoStart {
		return q.since == nil && q.until == nil
	}
	lo, hi, ok := keySpan(key)
	switch {
	case !ok,
		q.after != nil && (q.after.StartedAt == nil || lo.After(*q.after.StartedAt)),
		q.until != nil && !lo.Before(*q.until),
		q.since != nil && !hi.After(*q.since):
		return false
	}
	return true
}

// candidates are the executions of a bucket that q selects by what the
// listing holds of them, each (id and start time) once, in listing order.
func (q listQuery) candidates(listed []listedExecution) []listedExecution {
	type key struct {
		id string
		at int64
	}
	merged := map[key]int{}
	var out []listedExecution
	for _, e := range listed {
		k := key{id: e.ID}
		if e.StartedAt != nil {
			k.at = e.StartedAt.UnixMilli()
		}
		i, ok := merged[k]
		if !ok {
			merged[k] = len(out)
			out = append(out, e)
			continue
		}
		// A later entry tells a later status, but a completed execution
		// does not run again: its started event came late.
		if e.Status != StatusRunning || out[i].Status == "" {
			out[i].Status = cmp.Or(e.Status, out[i].Status)
		}
		out[i].Workflow = cmp.Or(e.Workflow, out[i].Workflow)
	}
	out = slices.DeleteFunc(out, func(e listedExecution) bool { return !q.selects(e) })
	slices.SortFunc(out, compareListed)
	return out
}

// listedExecutions is ListExecutions through ListingCollection: it walks
// the buckets newest first and reads, by _id, the execution documents of
// those it lists that the filter selects, until it has f.Limit.
func (s *Store) listedExecutions(ctx context.Context, f ListFilter) ([]ExecutionDoc, error) {
	if f.Parent != "" {
		since, err := s.childrenSince(ctx, f.Parent)
		if err != nil {
			return nil, fmt.Errorf("list executions: %w", err)
		}
		if since.After(f.Since) {
			f.Since = since
		}
	}
	q := newListQuery(f)
	docs := []ExecutionDoc{}
	_, err := s.walkListing(ctx, listingRoot, q, func(bucket string) (bool, error) {
		listed, err := s.readBucket(ctx, bucket)
		if err != nil {
			return false, err
		}
		for _, e := range q.candidates(listed) {
			var doc ExecutionDoc
			err := s.executions.FindOne(ctx, bson.D{{Key: "_id", Value: e.ID}}, options.FindOne().SetProjection(listProjection)).Decode(&doc)
			if errors.Is(err, mongo.ErrNoDocuments) {
				continue
			}
			if err != nil {
				return false, fmt.Errorf("read %s %q: %w", ExecutionsCollection, e.ID, err)
			}
			// The document decides; a listing behind it lists the
			// execution where it is now too.
			now := listedExecution{ID: e.ID, StartedAt: storedTime(doc.StartedAt), Workflow: doc.WorkflowName, Status: doc.Status}
			if !sameTime(now.StartedAt, e.StartedAt) || !q.selects(now) || f.Parent != "" && doc.ParentExecutionID != f.Parent {
				continue
			}
			docs = append(docs, doc)
			if len(docs) == f.Limit {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return nil, fmt.Errorf("list executions: %w", err)
	}
	return docs, nil
}

// childSkew is how much earlier than its parent's start a child's start
// may be recorded: the engine replicas that start them read their own clocks.
const childSkew = time.Minute

// childrenSince is the earliest start the children of execution parent may
// have: a child starts while its parent runs, so a listing of them need
// not read the documents of executions that started long before. Zero
// when the parent's start is not recorded.
func (s *Store) childrenSince(ctx context.Context, parent string) (time.Time, error) {
	var doc listedDoc
	err := s.executions.FindOne(ctx, bson.D{{Key: "_id", Value: parent}}, options.FindOne().SetProjection(listedFields)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) || err == nil && doc.StartedAt == nil {
		return time.Time{}, nil
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("read %s %q: %w", ExecutionsCollection, parent, err)
	}
	return doc.StartedAt.Add(-childSkew), nil
}

// walkListing calls visit with the buckets under the directory key that q
// may select from, newest first, until it returns false.
func (s *Store) walkListing(ctx context.Context, key string, q listQuery, visit func(bucket string) (bool, error)) (bool, error) {
	children, err := s.readChildren(ctx, key)
	if err != nil {
		return false, err
	}
	for _, c := range children {
		if !q.spans(c) {
			continue
		}
		more := true
		if isBucket(c) {
			more, err = visit(c)
		} else {
			more, err = s.walkListing(ctx, c, q, visit)
		}
		if err != nil || !more {
			return false, err
		}
	}
	return true, nil
}

// backfillListing lists, once, every execution recorded before the
// listing existed (a data dir of a version without it): it reads the
// executions whole, so it marks when it is done. It writes directories
// before the keys they list, top down, as writers do.
func (s *Store) backfillListing(ctx context.Context) error {
	if ready, err := s.listingReady(ctx); ready || err != nil {
		return err
	}
	// A listing that is empty needs no reading of what it lists.
	err := s.listing.FindOne(ctx, bson.D{}).Err()
	empty := errors.Is(err, mongo.ErrNoDocuments)
	if err != nil && !empty {
		return fmt.Errorf("backfill %s: %w", ListingCollection, err)
	}

	buckets, err := s.executionsByBucket(ctx)
	if err != nil {
		return fmt.Errorf("backfill %s: %w", ListingCollection, err)
	}
	if err := s.backfillDirectories(ctx, buckets, empty); err != nil {
		return fmt.Errorf("backfill %s: %w", ListingCollection, err)
	}
	if err := s.backfillBuckets(ctx, buckets, empty); err != nil {
		return fmt.Errorf("backfill %s: %w", ListingCollection, err)
	}
	_, err = s.listing.InsertOne(ctx, bson.D{{Key: "_id", Value: listingBackfilled}, {Key: "at", Value: time.Now()}})
	if err != nil && !mongo.IsDuplicateKeyError(err) {
		return fmt.Errorf("backfill %s: %w", ListingCollection, err)
	}
	s.listingBackfilled.Store(true)
	return nil
}

// executionsByBucket reads every execution and groups it by the listing
// key (its start minute) it belongs under.
func (s *Store) executionsByBucket(ctx context.Context) (map[string][]listedExecution, error) {
	buckets := map[string][]listedExecution{}
	cur, err := s.executions.Find(ctx, bson.D{}, options.Find().SetProjection(listedFields))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", ExecutionsCollection, err)
	}
	defer func() { _ = cur.Close(ctx) }()
	for cur.Next(ctx) {
		var d listedDoc
		if err := cur.Decode(&d); err != nil || d.ID == "" {
			continue // not a document this store wrote
		}
		e := listedOf(d.ID, d.fields())
		buckets[e.bucket()] = append(buckets[e.bucket()], e)
	}
	if err := cur.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", ExecutionsCollection, err)
	}
	return buckets, nil
}

// backfillDirectories lists each bucket in its directories, top down ("all"
// is shorter than a year's key, each key than its children's), leaving out
// the children a directory lists already unless the listing was empty.
func (s *Store) backfillDirectories(ctx context.Context, buckets map[string][]listedExecution, empty bool) error {
	children := map[string]map[string]bool{}
	for b := range buckets {
		for k := b; k != listingRoot; k = parentKey(k) {
			p := parentKey(k)
			if children[p] == nil {
				children[p] = map[string]bool{}
			}
			children[p][k] = true
		}
	}
	dirs := slices.SortedFunc(maps.Keys(children), func(a, b string) int {
		return cmp.Or(cmp.Compare(len(a), len(b)), strings.Compare(a, b))
	})
	for _, dir := range dirs {
		add := slices.Sorted(maps.Keys(children[dir]))
		if !empty {
			have, err := s.readChildren(ctx, dir)
			if err != nil {
				return err
			}
			add = slices.DeleteFunc(add, func(c string) bool { return slices.Contains(have, c) })
		}
		for chunk := range slices.Chunk(add, maxEntryItems) {
			if err := s.appendLog(ctx, dir, listingEntry{Children: chunk}); err != nil {
				return err
			}
		}
	}
	return nil
}

// backfillBuckets lists each bucket's executions, leaving out those it
// lists already unless the listing was empty.
func (s *Store) backfillBuckets(ctx context.Context, buckets map[string][]listedExecution, empty bool) error {
	for _, b := range slices.Sorted(maps.Keys(buckets)) {
		add := buckets[b]
		if !empty {
			have, err := s.readBucket(ctx, b)
			if err != nil {
				return err
			}
			add = slices.DeleteFunc(add, func(e listedExecution) bool {
				return slices.ContainsFunc(have, e.same)
			})
		}
		for chunk := range slices.Chunk(add, maxEntryItems) {
			if err := s.appendLog(ctx, b, listingEntry{Executions: chunk}); err != nil {
				return err
			}
		}
	}
	return nil
}
