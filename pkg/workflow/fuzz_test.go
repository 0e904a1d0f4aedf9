package workflow_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// FuzzParse: no definition, YAML or JSON, makes Parse or Validate panic or
// hang; what parses validates or fails with problems, never both ways, and
// FormatYAML writes it as a file that Parse reads back the same.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"invoice-routing.yaml", "ai-orders.yaml"} {
		if data, err := os.ReadFile(filepath.Join("..", "..", "examples", name)); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"name":"w","nodes":[{"id":"a","type":"start"},{"id":"b","type":"end"}],"edges":[{"from":"a","to":"b"}]}`))
	f.Add([]byte("name: w\nnodes:\n  - &n {id: on, type: start}\n  - {<<: *n, id: off, type: end}\nedges: [{from: on, to: off}]\n"))
	f.Add([]byte("a: &a [x, x]\nb: [*a, *a, *a]\n"))
	f.Add([]byte("name: w\nbudget: {max_usd: 0.001, max_usd_per_day: -2, max_model_calls: 3}\nnodes:\n  - {id: a, type: start, budget: {}}\n" +
		"  - {id: b, type: end, budget: {max_usd: 1e-300, max_model_calls: 0}}\nedges: [{from: a, to: b}]\n"))
	f.Add([]byte(approvalYAML))
	f.Add([]byte(approvalJSON))
	f.Add([]byte(parallelYAML))
	f.Add([]byte(parallelJSON))
	f.Add([]byte("name: w\nnodes:\n  - {id: j, type: join, wait: \"007\", merge: LAST}\n  - {id: m, type: map, output: {a: b}}\n" +
		"  - {id: x, output: {\"<<\": \"1\"}, input: {\"\": k}}\n  - {id: y, type: action, output: r, wait: ANY}\n"))
	f.Add([]byte("name: w\nretry: {max_attempts: 2, initial_interval: NaN, max_interval: 1w, on: [eror]}\nschedules:\n" +
		"  - {cron: \"@daily\", timezone: Asia/Tokyo, context: {n: -0, x: 1e400}}\n  - {every: 2d, id: \"0\"}\n" +
		"nodes:\n  - {id: s, type: sleep, duration: NaN, until: k}\n  - {id: w, type: wait, signal: a, schema: '{\"type\":\"object\"}', decide_on: ok}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		def, err := workflow.Parse(data)
		if err != nil {
			return
		}
		for _, allow := range []bool{false, true} {
			_ = workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: allow})
		}
		out, err := workflow.FormatYAML(def)
		if err != nil {
			t.Fatalf("FormatYAML of a parsed definition: %v", err)
		}
		back, err := workflow.Parse(out)
		if err != nil {
			t.Fatalf("Parse(FormatYAML(def)): %v\n%s", err, out)
		}
		if !sameDefinition(back, def) {
			t.Fatalf("Parse(FormatYAML(def)) differs:\n%v\nwant\n%v\nYAML:\n%s", back, def, out)
		}
	})
}

// sameDefinition is proto.Equal, except that a NaN number equals a NaN
// number (proto.Equal holds NaN unequal to itself).
func sameDefinition(a, b *novav1.WorkflowDefinition) bool {
	return cmp.Equal(a, b, protocmp.Transform(), cmpopts.EquateNaNs())
}
