package workflow_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/novaflow/nova/pkg/workflow"
)

// FuzzParse: no definition, YAML or JSON, makes Parse or Validate panic or
// hang; what parses validates or fails with problems, never both ways.
func FuzzParse(f *testing.F) {
	for _, name := range []string{"invoice-routing.yaml", "ai-orders.yaml"} {
		if data, err := os.ReadFile(filepath.Join("..", "..", "examples", name)); err == nil {
			f.Add(data)
		}
	}
	f.Add([]byte(`{"name":"w","nodes":[{"id":"a","type":"start"},{"id":"b","type":"end"}],"edges":[{"from":"a","to":"b"}]}`))
	f.Add([]byte("name: w\nnodes:\n  - &n {id: on, type: start}\n  - {<<: *n, id: off, type: end}\nedges: [{from: on, to: off}]\n"))
	f.Add([]byte("a: &a [x, x]\nb: [*a, *a, *a]\n"))
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
	})
}
