package flow

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/execution/execstate"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// BenchmarkMapItem is the pure part of the engine's cost per map item, as
// the engine pays it for each item's result: read the stored state, apply
// the result, settle (start the next item), and write the state again. Its
// figure, ns/item, should not grow with the map's size; state-bytes is the
// stored state's size half-way (the list kept apart from it, as the engine
// keeps it: execstate.Compact).
//
//	go test ./flow -run '^$' -bench MapItem
func BenchmarkMapItem(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) {
			xs := make([]int, n)
			for i := range xs {
				xs[i] = i
			}
			yaml := `
name: bench-map
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: 1, output: ys, code: 'context["result"] = context["item"] * 2'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`
			cfg := testConfig()
			cfg.Items, cfg.Contexts = NewItemLists(1), NewContexts(4)
			var perItem time.Duration
			size := 0
			for b.Loop() {
				st, cmd := begin(b, cfg, yaml, map[string]any{"xs": xs})
				// The parts the engine keeps beside the state, and reads
				// back through its cache.
				stored := map[string][]byte{}
				marshal := func(st *novav1.ExecutionState, read *execstate.Parts) []byte {
					named, restore := execstate.Compact(st, read, execstate.PartMin)
					defer restore()
					for d, raw := range named {
						if raw != nil {
							stored[d] = raw
						}
					}
					data, err := MarshalState(st)
					if err != nil {
						b.Fatal(err)
					}
					return data
				}
				data := marshal(st, nil)
				kept := keptResults{}
				start := time.Now()
				for i := range n {
					st := &novav1.ExecutionState{}
					if err := proto.Unmarshal(data, st); err != nil {
						b.Fatal(err)
					}
					read, err := execstate.Expand(st, func(d string) ([]byte, error) { return stored[d], nil })
					if err != nil {
						b.Fatal(err)
					}
					tr := New(st, cfg, time.Now())
					kept.bind(tr)
					res := resultFor(cmd, map[string]any{"result": i * 2})
					if err := tr.OnStep(cmd.StepId, func() error { return tr.CodeExecuted(res) }); err != nil {
						b.Fatal(err)
					}
					tr.Settle()
					kept.apply(tr)
					data = marshal(st, read)
					if i == n/2 {
						size = len(data)
					}
					if i < n-1 {
						if cmd = lastCommand(b, tr); cmd == nil {
							b.Fatalf("item %d: no next command; status %s %s", i, st.Status, st.Error)
						}
					} else if st.Status != statusSucceeded {
						b.Fatalf("the map ended %s: %s", st.Status, st.Error)
					}
				}
				perItem += time.Since(start) / time.Duration(n)
			}
			b.ReportMetric(float64(perItem.Nanoseconds())/float64(b.N), "ns/item")
			b.ReportMetric(float64(size), "state-bytes")
		})
	}
}
