package chainstore_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestListExecutions(t *testing.T) {
	ctx, s := openStore(t)
	// id, workflow, status, start offset (-1: no start time recorded).
	runs := []struct {
		id, workflow, status string
		start                time.Duration
	}{
		{"e1", "orders", "succeeded", 1 * time.Minute},
		{"e2", "orders", "failed", 2 * time.Minute},
		{"e3", "invoices", "succeeded", 3 * time.Minute},
		// Same start instant: the execution id breaks the tie.
		{"e4a", "orders", "succeeded", 4 * time.Minute},
		{"e4b", "invoices", "succeeded", 4 * time.Minute},
		{"e5", "orders", "running", 5 * time.Minute},
		// A completion whose start was never recorded (an unreadable start event).
		{"e0", "orders", "failed", -1},
	}
	for _, r := range runs {
		ctxv := mustJSON(t, map[string]any{"n": 1})
		if r.start < 0 {
			if err := s.RecordWorkflowCompleted(ctx, &novav1.WorkflowCompleted{
				ExecutionId: r.id, WorkflowName: r.workflow, Status: r.status, Context: ctxv,
			}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := s.RecordWorkflowStarted(ctx, &novav1.WorkflowStarted{
			ExecutionId: r.id, WorkflowName: r.workflow, Context: ctxv, StartedAt: at(r.start),
			Definition: &novav1.WorkflowDefinition{Name: r.workflow},
		}); err != nil {
			t.Fatal(err)
		}
		if r.status != chainstore.StatusRunning {
			if err := s.RecordWorkflowCompleted(ctx, &novav1.WorkflowCompleted{
				ExecutionId: r.id, WorkflowName: r.workflow, Status: r.status, Context: ctxv,
				StartedAt: at(r.start), CompletedAt: at(r.start + time.Second),
			}); err != nil {
				t.Fatal(err)
			}
		}
	}

	ids := func(docs []chainstore.ExecutionDoc) []string {
		out := []string{}
		for _, d := range docs {
			out = append(out, d.ExecutionID)
		}
		return out
	}
	tests := []struct {
		name   string
		filter chainstore.ListFilter
		want   []string
	}{
		{"all, newest first, no start time last", chainstore.ListFilter{}, []string{"e5", "e4b", "e4a", "e3", "e2", "e1", "e0"}},
		{"workflow", chainstore.ListFilter{Workflow: "invoices"}, []string{"e4b", "e3"}},
		{"status", chainstore.ListFilter{Status: "failed"}, []string{"e2", "e0"}},
		{"workflow and status", chainstore.ListFilter{Workflow: "orders", Status: "succeeded"}, []string{"e4a", "e1"}},
		{"since is inclusive", chainstore.ListFilter{Since: t0.Add(4 * time.Minute)}, []string{"e5", "e4b", "e4a"}},
		{"until is exclusive", chainstore.ListFilter{Until: t0.Add(3 * time.Minute)}, []string{"e2", "e1"}},
		{"since and until", chainstore.ListFilter{Since: t0.Add(2 * time.Minute), Until: t0.Add(5 * time.Minute)}, []string{"e4b", "e4a", "e3", "e2"}},
		{"after a tie", chainstore.ListFilter{After: &chainstore.ListPosition{StartedAt: t0.Add(4 * time.Minute), ExecutionID: "e4b"}}, []string{"e4a", "e3", "e2", "e1", "e0"}},
		{"after the last started", chainstore.ListFilter{After: &chainstore.ListPosition{StartedAt: t0.Add(time.Minute), ExecutionID: "e1"}}, []string{"e0"}},
		{"after one without start time", chainstore.ListFilter{After: &chainstore.ListPosition{ExecutionID: "e0"}}, []string{}},
		{"id prefix", chainstore.ListFilter{IDPrefix: "e4"}, []string{"e4b", "e4a"}},
		{"a whole id", chainstore.ListFilter{IDPrefix: "e4a"}, []string{"e4a"}},
		{"id prefix is literal", chainstore.ListFilter{IDPrefix: "e."}, []string{}},
		{"id prefix and status", chainstore.ListFilter{IDPrefix: "e", Status: "failed"}, []string{"e2", "e0"}},
		{"nothing", chainstore.ListFilter{Workflow: "nope"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.filter.Limit = 100
			docs, err := s.ListExecutions(ctx, tt.filter)
			if err != nil {
				t.Fatal(err)
			}
			if got := ids(docs); !slices.Equal(got, tt.want) {
				t.Errorf("ListExecutions = %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("pages of two cover every execution once, in order", func(t *testing.T) {
		var got []string
		f := chainstore.ListFilter{Limit: 2}
		for range 10 {
			docs, err := s.ListExecutions(ctx, f)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, ids(docs)...)
			if len(docs) < f.Limit {
				break
			}
			p := docs[len(docs)-1].Position()
			f.After = &p
		}
		if want := []string{"e5", "e4b", "e4a", "e3", "e2", "e1", "e0"}; !slices.Equal(got, want) {
			t.Errorf("pages = %v, want %v", got, want)
		}
	})

	t.Run("a listing leaves out contexts, definition and nodes", func(t *testing.T) {
		docs, err := s.ListExecutions(ctx, chainstore.ListFilter{Workflow: "orders", Status: "succeeded", Limit: 1})
		if err != nil {
			t.Fatal(err)
		}
		if len(docs) != 1 {
			t.Fatalf("got %d executions, want 1", len(docs))
		}
		d := docs[0]
		if d.ExecutionID != "e4a" || d.WorkflowName != "orders" || d.Status != "succeeded" || d.StartedAt == nil || d.CompletedAt == nil || d.DurationMs != 1000 {
			t.Errorf("summary = %+v", d)
		}
		if d.InitialContext != nil || d.FinalContext != nil || d.Definition != nil || d.Nodes != nil {
			t.Errorf("listing carries contexts, definition or nodes: %+v", d)
		}
	})

	for _, limit := range []int{0, -1, chainstore.MaxListLimit + 1} {
		if _, err := s.ListExecutions(ctx, chainstore.ListFilter{Limit: limit}); !errors.Is(err, chainstore.ErrInvalidFilter) {
			t.Errorf("limit %d: err = %v, want ErrInvalidFilter", limit, err)
		}
	}
}

// A parent's children are listed by Parent, whatever their ids (the engine
// names a child by its parent's id, or by a UUID where the node's id
// cannot be part of a key), without the parent's grandchildren or an
// execution whose id merely begins with the parent's; the same through
// the listing and through queries, in pages, and in the totals.
func TestListChildren(t *testing.T) {
	ctx, listed, queries := openListed(t)
	// id, parent, start offset.
	runs := []struct {
		id, parent string
		start      time.Duration
	}{
		{"older", "", 0},
		{"p", "", time.Hour},
		{"p_check_1", "p", time.Hour + time.Second},
		{"p_other", "", time.Hour + 2*time.Second},
		{"6b1f3c1e-0d7a-5f0e-9d1c-2f4e8a9b7c10", "p", time.Hour + 3*time.Second},
		{"p_check_1_score_1", "p_check_1", time.Hour + 4*time.Second},
		{"p_check_2", "p", time.Hour + 5*time.Second},
		{"q_check_1", "q", time.Hour + 6*time.Second},
	}
	for _, r := range runs {
		ev := &novav1.WorkflowStarted{ExecutionId: r.id, WorkflowName: "w", Context: mustJSON(t, map[string]any{}), StartedAt: at(r.start),
			Definition: &novav1.WorkflowDefinition{Name: "w"}}
		if r.parent != "" {
			ev.Parent = &novav1.ParentRef{ExecutionId: r.parent, NodeId: "check"}
		}
		if err := listed.RecordWorkflowStarted(ctx, ev); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		filter chainstore.ListFilter
		want   []string
	}{
		{chainstore.ListFilter{Parent: "p"}, []string{"p_check_2", "6b1f3c1e-0d7a-5f0e-9d1c-2f4e8a9b7c10", "p_check_1"}},
		{chainstore.ListFilter{Parent: "p_check_1"}, []string{"p_check_1_score_1"}},
		{chainstore.ListFilter{Parent: "p", IDPrefix: "p_"}, []string{"p_check_2", "p_check_1"}},
		// A parent the store has not recorded: its children are found all the same.
		{chainstore.ListFilter{Parent: "q"}, []string{"q_check_1"}},
		{chainstore.ListFilter{Parent: "older"}, []string{}},
		{chainstore.ListFilter{Parent: "nobody"}, []string{}},
	}
	for _, tt := range tests {
		for _, s := range []struct {
			name  string
			store *chainstore.Store
		}{{"listing", listed}, {"queries", queries}} {
			t.Run(fmt.Sprintf("%s parent %s id %q", s.name, tt.filter.Parent, tt.filter.IDPrefix), func(t *testing.T) {
				for _, limit := range []int{1, 100} {
					if got := pages(ctx, t, s.store, tt.filter, limit); !slices.Equal(got, tt.want) {
						t.Errorf("pages of %d: %v, want %v", limit, got, tt.want)
					}
				}
				total, err := s.store.TotalsOf(ctx, tt.filter)
				if err != nil {
					t.Fatal(err)
				}
				if total.Executions != int64(len(tt.want)) {
					t.Errorf("TotalsOf counts %d, want %d", total.Executions, len(tt.want))
				}
			})
		}
	}
}
