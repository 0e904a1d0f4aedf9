package chainstore

import (
	"slices"
	"testing"
	"time"
)

// Of the entries of one execution in one bucket, the latest status that is
// not running wins: a started event listed after the completion (two
// writers at once) does not list it running again.
func TestCandidatesMergeAnExecutionsEntries(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	later := at.Add(time.Millisecond)
	e := func(id string, at *time.Time, workflow, status string) listedExecution {
		return listedExecution{ID: id, StartedAt: at, Workflow: workflow, Status: status}
	}
	tests := []struct {
		name   string
		listed []listedExecution
		filter ListFilter
		want   []listedExecution
	}{
		{"completed after running", []listedExecution{e("a", &at, "w", StatusRunning), e("a", &at, "w", "failed")}, ListFilter{},
			[]listedExecution{e("a", &at, "w", "failed")}},
		{"running after completed", []listedExecution{e("a", &at, "w", "failed"), e("a", &at, "w", StatusRunning)}, ListFilter{},
			[]listedExecution{e("a", &at, "w", "failed")}},
		{"running after completed, by status", []listedExecution{e("a", &at, "w", "failed"), e("a", &at, "w", StatusRunning)},
			ListFilter{Status: StatusRunning}, nil},
		{"a workflow named later", []listedExecution{e("a", &at, "", "failed"), e("a", &at, "w", StatusRunning)}, ListFilter{Workflow: "w"},
			[]listedExecution{e("a", &at, "w", "failed")}},
		{"each start time apart, newest first", []listedExecution{e("a", &at, "w", StatusRunning), e("a", &later, "w", "failed")}, ListFilter{},
			[]listedExecution{e("a", &later, "w", "failed"), e("a", &at, "w", StatusRunning)}},
		{"ties by id, descending", []listedExecution{e("a", &at, "w", "failed"), e("b", &at, "w", "failed"), e("c", nil, "w", "failed")}, ListFilter{},
			[]listedExecution{e("b", &at, "w", "failed"), e("a", &at, "w", "failed"), e("c", nil, "w", "failed")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := newListQuery(tt.filter).candidates(tt.listed)
			if !slices.EqualFunc(got, tt.want, listedExecution.same) {
				t.Errorf("candidates = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// A listed execution reads back as it was written.
func TestListedExecutionEncoding(t *testing.T) {
	at := time.Date(2025, 3, 1, 12, 0, 0, 123_000_000, time.UTC)
	for _, e := range []listedExecution{
		{ID: `odd "id"` + "\n\x01", StartedAt: &at, Workflow: "wf,[]", Status: "failed"},
		{ID: "no-start", Status: "succeeded"},
	} {
		typ, data, err := e.MarshalBSONValue()
		if err != nil {
			t.Fatal(err)
		}
		var got listedExecution
		if err := got.UnmarshalBSONValue(typ, data); err != nil || !got.same(e) {
			t.Errorf("read back %+v, %v; want %+v", got, err, e)
		}
	}
}

// A time key covers its minute, hour, day, month or year; its directory is
// the key of the span around it.
func TestListingKeys(t *testing.T) {
	tests := []struct {
		key, parent string
		lo, hi      time.Time
	}{
		{"2024-12-31T23:59", "2024-12-31T23", time.Date(2024, 12, 31, 23, 59, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2024-12-31T23", "2024-12-31", time.Date(2024, 12, 31, 23, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2024-02-29", "2024-02", time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)},
		{"2024-12", "2024", time.Date(2024, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"2024", listingRoot, time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		lo, hi, ok := keySpan(tt.key)
		if !ok || !lo.Equal(tt.lo) || !hi.Equal(tt.hi) || parentKey(tt.key) != tt.parent {
			t.Errorf("%s: span [%v, %v) %v, parent %q; want [%v, %v), %q", tt.key, lo, hi, ok, parentKey(tt.key), tt.lo, tt.hi, tt.parent)
		}
	}
	if parentKey(listingNoStart) != listingRoot || parentKey(listingRoot) != "" || !isBucket(listingNoStart) || isBucket(listingRoot) {
		t.Error("the root and the bucket of executions without start time are misplaced")
	}
	if at := time.Date(2025, 3, 1, 12, 4, 59, 999_000_000, time.UTC); (listedExecution{StartedAt: &at}).bucket() != "2025-03-01T12:04" {
		t.Errorf("bucket of %v = %s", at, (listedExecution{StartedAt: &at}).bucket())
	}
}
