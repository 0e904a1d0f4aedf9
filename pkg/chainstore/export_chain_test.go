package chainstore_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/jsonvalue"
)

// exportRun is invoiceRun as execution id of workflow, started start after
// t0, with numbers in its contexts that only exact reading keeps.
func exportRun(t *testing.T, id, workflow string, start time.Duration) events {
	t.Helper()
	e := invoiceRun(t, id)
	exact, err := jsonvalue.ObjectOf(`{"amount": 150.0, "invoice_id": 9007199254740993}`)
	if err != nil {
		t.Fatal(err)
	}
	e.started.WorkflowName, e.completed.WorkflowName = workflow, workflow
	e.started.Context, e.completed.Context = exact.Proto(), exact.Proto()
	e.started.StartedAt, e.completed.StartedAt, e.completed.CompletedAt = at(start), at(start), at(start+4*time.Second)
	return e
}

// exported runs Export and returns the lines it emitted.
func exported(ctx context.Context, t *testing.T, s *chainstore.Store, f chainstore.ExportFilter) [][]byte {
	t.Helper()
	var lines [][]byte
	err := s.Export(ctx, f, func(c *chainstore.ExecutionChain) error {
		var b bytes.Buffer
		if err := c.WriteLine(&b); err != nil {
			return err
		}
		lines = append(lines, b.Bytes())
		return nil
	})
	if err != nil {
		t.Fatalf("Export(%+v): %v", f, err)
	}
	return lines
}

// lineIDs are the execution ids of export lines.
func lineIDs(t *testing.T, lines [][]byte) []string {
	t.Helper()
	ids := []string{}
	for _, l := range lines {
		var c chainstore.ExecutionChain
		if err := json.Unmarshal(l, &c); err != nil {
			t.Fatalf("line %s: %v", l, err)
		}
		ids = append(ids, c.Execution.ExecutionID)
	}
	return ids
}

// TestExport: Export pages through the executions a filter selects (more
// than one page), each once, whole, as Execution and Chain read it, in the
// order of the listing, reading each page only when the one before was
// emitted; with the listing of the embedded store and with queries.
func TestExport(t *testing.T) {
	for _, mode := range []struct {
		name string
		opt  chainstore.Option
	}{{"listing", chainstore.WithListing(true)}, {"queries", chainstore.WithListing(false)}} {
		t.Run(mode.name, func(t *testing.T) {
			ctx, s := openStore(t, mode.opt)
			// 23 executions 20 s apart (several start minutes), of two
			// workflows, recorded in batches as the audit service does; a
			// running one; one whose start time is not recorded.
			const n = 23
			var all []proto.Message
			ids := make([]string, n)
			for i := range n {
				ids[i] = fmt.Sprintf("x%02d", i)
				all = append(all, exportRun(t, ids[i], []string{"orders", "invoices"}[i%2], time.Duration(i)*20*time.Second).all()...)
			}
			running := exportRun(t, "running", "orders", 30*time.Minute)
			all = append(all, running.started)
			noStart := exportRun(t, "no-start", "orders", 0)
			noStart.completed.StartedAt = nil
			all = append(all, noStart.completed)
			for batch := range slices.Chunk(all, 50) {
				if err := errors.Join(s.RecordAll(ctx, batch)...); err != nil {
					t.Fatal(err)
				}
			}

			newestFirst := append([]string{"running"}, ids...)
			slices.Reverse(newestFirst[1:])
			between := func(lo, hi int) []string { // ids[lo..hi-1], newest first
				out := slices.Clone(ids[lo:hi])
				slices.Reverse(out)
				return out
			}
			workflow := func(name string, from []string) []string {
				var out []string
				for _, id := range from {
					if id == "running" || id == "no-start" || (id[2]-'0')%2 == map[string]byte{"orders": 0, "invoices": 1}[name] {
						out = append(out, id)
					}
				}
				return out
			}
			tests := []struct {
				name   string
				filter chainstore.ExportFilter
				want   []string
			}{
				{"everything, pages of 4", chainstore.ExportFilter{PageSize: 4}, append(newestFirst, "no-start")},
				{"everything, pages of the default size", chainstore.ExportFilter{}, append(newestFirst, "no-start")},
				{"a page size that divides the executions", chainstore.ExportFilter{PageSize: 5}, append(newestFirst, "no-start")},
				{"workflow", chainstore.ExportFilter{Workflow: "orders", PageSize: 3}, workflow("orders", append(newestFirst, "no-start"))},
				{"since is inclusive", chainstore.ExportFilter{Since: t0.Add(20 * 20 * time.Second), PageSize: 2}, append([]string{"running"}, between(20, n)...)},
				{"until is exclusive", chainstore.ExportFilter{Until: t0.Add(5 * 20 * time.Second), PageSize: 2}, between(0, 5)},
				{"since, until and workflow", chainstore.ExportFilter{Since: t0.Add(3 * 20 * time.Second), Until: t0.Add(15 * 20 * time.Second),
					Workflow: "invoices", PageSize: 2}, workflow("invoices", between(3, 15))},
				{"nothing", chainstore.ExportFilter{Workflow: "nope"}, []string{}},
			}
			for _, tt := range tests {
				t.Run(tt.name, func(t *testing.T) {
					lines := exported(ctx, t, s, tt.filter)
					if got := lineIDs(t, lines); !slices.Equal(got, tt.want) {
						t.Errorf("exported %v\nwant     %v", got, tt.want)
					}
				})
			}

			t.Run("each line is the execution whole, one line of JSON", func(t *testing.T) {
				lines := exported(ctx, t, s, chainstore.ExportFilter{Workflow: "invoices", PageSize: 4})
				for _, l := range lines {
					if bytes.Count(l, []byte("\n")) != 1 || !bytes.HasSuffix(l, []byte("\n")) {
						t.Fatalf("not one line: %q", l)
					}
					var c chainstore.ExecutionChain
					if err := json.Unmarshal(l, &c); err != nil {
						t.Fatal(err)
					}
					id := c.Execution.ExecutionID
					exec, err := s.Execution(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					nodes, err := s.Chain(ctx, id)
					if err != nil {
						t.Fatal(err)
					}
					var want bytes.Buffer
					if err := (&chainstore.ExecutionChain{Execution: exec, Nodes: nodes}).WriteLine(&want); err != nil {
						t.Fatal(err)
					}
					if !bytes.Equal(l, want.Bytes()) {
						t.Errorf("exported\n%s\nread\n%s", l, want.Bytes())
					}
					if len(c.Nodes) != 2 || len(c.Nodes[1].Steps) != 2 {
						t.Errorf("%s: %d node visits (want 2), the AI node's steps %v", id, len(c.Nodes), c.Nodes)
					}
					// Read back, it holds what the store's readers give.
					for _, v := range []struct {
						name      string
						got, want any
					}{
						{"initial_context", c.Execution.InitialContext, exec.InitialContext},
						{"final_context", c.Execution.FinalContext, exec.FinalContext},
						{"input_context", c.Nodes[1].InputContext, nodes[1].InputContext},
						{"ai_metadata", c.Nodes[1].AIMetadata, nodes[1].AIMetadata},
						{"input_data", c.Nodes[1].Steps[0].InputData, nodes[1].Steps[0].InputData},
						{"tool_calls", c.Nodes[1].Steps[0].ToolCalls, nodes[1].Steps[0].ToolCalls},
					} {
						if !reflect.DeepEqual(v.got, v.want) {
							t.Errorf("%s: %s read back %#v, from the store %#v", id, v.name, v.got, v.want)
						}
					}
					if got := c.Execution.InitialContext["amount"]; got != json.Number("150.0") {
						t.Errorf("%s: amount read back %#v, want 150.0", id, got)
					}
				}
			})

			t.Run("pages are listed as the export goes", func(t *testing.T) {
				// Recorded while the first execution is emitted: an older
				// execution is in a later page, a newer one sorts before
				// the first page and is not.
				var got []string
				err := s.Export(ctx, chainstore.ExportFilter{PageSize: 4}, func(c *chainstore.ExecutionChain) error {
					if len(got) == 0 {
						late := slices.Concat(exportRun(t, "older", "orders", -time.Hour).all(), exportRun(t, "newer", "orders", time.Hour).all())
						if err := errors.Join(s.RecordAll(ctx, late)...); err != nil {
							return err
						}
					}
					got = append(got, c.Execution.ExecutionID)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if want := slices.Concat(newestFirst, []string{"older", "no-start"}); !slices.Equal(got, want) {
					t.Errorf("exported %v\nwant     %v", got, want)
				}
			})

			t.Run("an error of emit ends the export", func(t *testing.T) {
				stop := errors.New("stop")
				emitted := 0
				err := s.Export(ctx, chainstore.ExportFilter{PageSize: 2}, func(*chainstore.ExecutionChain) error {
					if emitted++; emitted == 3 {
						return stop
					}
					return nil
				})
				if !errors.Is(err, stop) || emitted != 3 {
					t.Errorf("Export = %v after %d executions, want stop after 3", err, emitted)
				}
			})

			for _, f := range []chainstore.ExportFilter{
				{PageSize: -1},
				{PageSize: chainstore.MaxListLimit + 1},
				{Since: t0, Until: t0},
			} {
				err := s.Export(ctx, f, func(*chainstore.ExecutionChain) error { return nil })
				if !errors.Is(err, chainstore.ErrInvalidFilter) {
					t.Errorf("Export(%+v) = %v, want ErrInvalidFilter", f, err)
				}
			}
		})
	}
}

func TestParseTime(t *testing.T) {
	tests := []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"2026-11-01T12:00:00Z", time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), true},
		{"2026-11-01T12:00:00.250Z", time.Date(2026, 11, 1, 12, 0, 0, 250e6, time.UTC), true},
		{"2026-11-01T13:00:00+01:00", time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC), true},
		{"2026-11-01", time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), true},
		{"2026-11-01T12:00", time.Time{}, false},
		{"yesterday", time.Time{}, false},
		{"", time.Time{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := chainstore.ParseTime(tt.in)
			switch {
			case tt.ok && (err != nil || !got.Equal(tt.want)):
				t.Errorf("ParseTime(%q) = %v, %v; want %v", tt.in, got, err, tt.want)
			case !tt.ok && err == nil:
				t.Errorf("ParseTime(%q) = %v, want an error", tt.in, got)
			}
		})
	}
}
