package flow

import (
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// BenchmarkMapItem is the pure part of the engine's cost per map item, as
// the engine pays it for each item's result: read the stored state, apply
// the result, settle (start the next item), and write the state again. Its
// figure, ns/item, should not grow with the map's size; state-bytes is the
// stored state's size half-way.
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
				data, err := MarshalState(st)
				if err != nil {
					b.Fatal(err)
				}
				kept := keptResults{}
				start := time.Now()
				for i := range n {
					st := &novav1.ExecutionState{}
					if err := proto.Unmarshal(data, st); err != nil {
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
					if data, err = MarshalState(st); err != nil {
						b.Fatal(err)
					}
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
