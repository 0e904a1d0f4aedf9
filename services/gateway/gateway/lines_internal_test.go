package gateway

import (
	"fmt"
	"slices"
	"testing"
)

// brokenBlock has a problem of a node's field (line 8), of a node missing
// a field (the node, line 9), of an edge's member (line 15), and nodes
// that the graph leaves without an edge out (line 5) or unreachable (9, 11,
// a flow mapping).
const brokenBlock = `name: broken-lines
nodes:
  - id: start
    type: start
  - id: work
    type: action
    code: "context['x'] = ("
    max_visits: -2
  - id: done
    type: action
  - {id: end, type: end}
edges:
  - {from: start, to: work}
  - from: work
    to: nowhere
  - {from: done, to: end}
`

// brokenJSON is the same definition in JSON, one member a line: a node's
// own problem is at its id (line 6), not at its brace.
const brokenJSON = `{
  "name": "broken-lines",
  "nodes": [
    {"id": "start", "type": "start"},
    {
      "id": "work",
      "type": "action",
      "code": "context['x'] = (",
      "max_visits": -2
    },
    {"id": "done", "type": "action"},
    {"id": "end", "type": "end"}
  ],
  "edges": [
    {"from": "start", "to": "work"},
    {
      "from": "work",
      "to": "nowhere"
    },
    {"from": "done", "to": "end"}
  ]
}`

// TestDefinitionLines: each problem of a definition sent to register is at
// the line of the text it is about, in YAML and in JSON; a body that does
// not parse is at the line its parser names (YAML's names the line where
// what it was reading began); a field the text lacks has no line.
func TestDefinitionLines(t *testing.T) {
	tests := []struct {
		name, contentType, body string
		want                    []string // field@line, in the order of the answer
	}{
		{"YAML", "application/yaml", brokenBlock, []string{"definition.max_visits/work@8", "definition/done@9",
			"definition.edges[1].to@15", "definition/work@5", "definition/done@9", "definition/end@11"}},
		{"JSON", "application/json", brokenJSON, []string{"definition.max_visits/work@9", "definition/done@11",
			"definition.edges[1].to@18", "definition/work@6", "definition/done@11", "definition/end@12"}},
		{"YAML that does not parse", "application/yaml", "name: x\nnodes:\n  - id: a\n\ttype: start\n", []string{"body@3"}},
		{"a key given twice", "application/yaml", "name: x\nnodes:\n  - id: a\n    type: start\n    id: b\n", []string{"body@5"}},
		{"JSON that does not parse", "application/json", "{\n  \"name\": \"x\",\n  \"nodes\": [}\n", []string{"body@3"}},
		{"a field the text lacks", "application/yaml", "nodes:\n  - {id: start, type: start}\n  - {id: end, type: end}\nedges:\n  - {from: start, to: end}\n", []string{"definition.name@0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p := parseDefinition(tt.contentType, []byte(tt.body))
			if p == nil {
				t.Fatal("no problem")
			}
			var got []string
			for _, e := range p.Errors {
				got = append(got, fmt.Sprintf("%s%s@%d", e.Field, map[bool]string{true: "/" + e.Node}[e.Node != ""], e.Line))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("problems at %v, want %v: %+v", got, tt.want, p.Errors)
			}
		})
	}
}
