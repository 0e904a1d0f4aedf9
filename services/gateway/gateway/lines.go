package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// saidLine is the line a YAML parser's message names ("yaml: line 3: ...",
// "line 12: a second YAML document").
var saidLine = regexp.MustCompile(`\bline (\d+)\b`)

// pathToken is a member of a problem's field path: a key ("edges", "to")
// or an index ("[2]").
var pathToken = regexp.MustCompile(`[^.\[\]]+|\[\d+\]`)

// definitionLines sets the Line of each problem of a definition sent as
// body (YAML or JSON, as typed): a node's problem is at its field, or at
// the node's id where the field is missing; a problem with a path
// ("edges[2].to") at the member the path names, or the nearest member
// above it the text has. A problem whose place the text does not show
// keeps no line.
func definitionLines(body []byte, errs []FieldError) {
	root := definitionRoot(body)
	if root == nil {
		return
	}
	for i, e := range errs {
		path := strings.TrimPrefix(strings.TrimPrefix(e.Field, "definition"), ".")
		at, line := root, 0
		if e.Node != "" {
			var id *yaml.Node
			if at, id = nodeNamed(root, e.Node); at == nil {
				continue
			}
			line = id.Line
		}
		errs[i].Line = walkLine(at, path, line)
	}
}

// definitionRoot is the top-level mapping of body, nil when body is not a
// YAML (or JSON) mapping.
func definitionRoot(body []byte) *yaml.Node {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(body)).Decode(&doc); err != nil {
		return nil
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 {
		return nil
	}
	if root := resolved(doc.Content[0]); root.Kind == yaml.MappingNode {
		return root
	}
	return nil
}

// nodeNamed is the item of the definition's nodes whose id is id (the
// first, where several are) and the key of its id, which names it where
// it is written; nils when none.
func nodeNamed(root *yaml.Node, id string) (node, key *yaml.Node) {
	_, nodes := member(root, "nodes")
	if nodes == nil || nodes.Kind != yaml.SequenceNode {
		return nil, nil
	}
	for _, n := range nodes.Content {
		n = resolved(n)
		if k, v := member(n, "id"); v != nil && v.Kind == yaml.ScalarNode && v.Value == id {
			return n, k
		}
	}
	return nil, nil
}

// walkLine follows path from the YAML node at and answers the line of the
// last member of it found, line when none is.
func walkLine(at *yaml.Node, path string, line int) int {
	for _, tok := range pathToken.FindAllString(path, -1) {
		if strings.HasPrefix(tok, "[") {
			i, _ := strconv.Atoi(strings.Trim(tok, "[]"))
			if at.Kind != yaml.SequenceNode || i >= len(at.Content) {
				break
			}
			at = resolved(at.Content[i])
			line = at.Line
			continue
		}
		key, value := member(at, tok)
		if key == nil {
			break
		}
		at, line = value, key.Line
	}
	return line
}

// member is the key and value of a mapping's member named name; nils when
// n is no mapping or has none.
func member(n *yaml.Node, name string) (key, value *yaml.Node) {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil, nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == name {
			return n.Content[i], resolved(n.Content[i+1])
		}
	}
	return nil, nil
}

// resolved is n, or what n refers to when it is an alias.
func resolved(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

// syntaxLine is the line of body a parse error is at: a JSON syntax
// error's offset counted in lines, or the line a YAML error names; 0 when
// it does not tell.
func syntaxLine(body []byte, err error) int {
	if se := (*json.SyntaxError)(nil); errors.As(err, &se) && se.Offset > 0 && se.Offset <= int64(len(body)) {
		return bytes.Count(body[:se.Offset], []byte("\n")) + 1
	}
	if m := saidLine.FindStringSubmatch(err.Error()); m != nil {
		n, _ := strconv.Atoi(m[1])
		return n
	}
	return 0
}
