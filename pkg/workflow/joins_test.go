package workflow

import (
	"strings"
	"testing"
)

func TestJoinsThatWaitForEachOther(t *testing.T) {
	tests := []struct {
		name, yaml string
		stuck      bool
	}{
		{"two joins on one cycle fed by one fork", `
name: stuck
nodes:
  - {id: start, type: start}
  - {id: p, type: action, code: "pass"}
  - {id: q, type: action, code: "pass"}
  - {id: J, type: join}
  - {id: K, type: join}
  - {id: d, type: decision, code: "context['branch_decision'] = 'out'"}
  - {id: end, type: end}
edges:
  - {from: start, to: p}
  - {from: start, to: q}
  - {from: p, to: J}
  - {from: q, to: K}
  - {from: J, to: K}
  - {from: K, to: d}
  - {from: d, to: J, condition: back}
  - {from: d, to: end, condition: out}
`, true},
		{"two joins in a loop through the fork", `
name: loop
nodes:
  - {id: start, type: start}
  - {id: fork, type: action, code: "pass"}
  - {id: a, type: action, code: "pass"}
  - {id: b, type: action, code: "pass"}
  - {id: c, type: action, code: "pass"}
  - {id: J, type: join}
  - {id: K, type: join}
  - {id: d, type: decision, code: "context['branch_decision'] = 'out'"}
  - {id: end, type: end}
edges:
  - {from: start, to: fork}
  - {from: fork, to: a}
  - {from: fork, to: b}
  - {from: fork, to: c}
  - {from: a, to: J}
  - {from: b, to: J}
  - {from: J, to: K}
  - {from: c, to: K}
  - {from: K, to: d}
  - {from: d, to: fork, condition: again}
  - {from: d, to: end, condition: out}
`, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			def, err := Parse([]byte(tt.yaml))
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(def, ValidateOptions{})
			if !tt.stuck {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("passed, want the joins refused")
			}
			for _, w := range []string{`joins "J" and "K" wait for each other`, `node "start"`} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}
