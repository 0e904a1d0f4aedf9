package workflow

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxYAMLNodes bounds the nodes a document may expand to through aliases
// ("billion laughs": a few lines whose aliases multiply to billions).
const maxYAMLNodes = 100_000

// yamlToJSON converts a YAML 1.2 document (JSON included) to JSON under the
// core schema: only true and false are booleans (a node named y, n, on, off,
// yes or no stays a string), integers keep all their digits (0o17 and 0x1f
// become decimal), keys are strings, and a key given twice in one mapping is
// an error naming both lines. Errors name the line.
func yamlToJSON(data []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, fmt.Errorf("line %d: a second YAML document; a workflow file holds one", extra.Line)
	}
	c := &yamlConverter{}
	var buf bytes.Buffer
	if err := c.write(&buf, &doc); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

type yamlConverter struct {
	nodes int
	depth int
}

func (c *yamlConverter) write(buf *bytes.Buffer, n *yaml.Node) error {
	c.nodes++
	if c.nodes > maxYAMLNodes {
		return fmt.Errorf("line %d: the document expands to more than %d values (aliases); refusing it", n.Line, maxYAMLNodes)
	}
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > 200 {
		return fmt.Errorf("line %d: nested more than 200 levels deep", n.Line)
	}
	switch n.Kind {
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			buf.WriteString("null")
			return nil
		}
		return c.write(buf, n.Content[0])
	case yaml.AliasNode:
		if n.Alias == nil {
			return fmt.Errorf("line %d: unknown alias *%s", n.Line, n.Value)
		}
		return c.write(buf, n.Alias)
	case yaml.SequenceNode:
		buf.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				buf.WriteByte(',')
			}
			if err := c.write(buf, e); err != nil {
				return err
			}
		}
		buf.WriteByte(']')
		return nil
	case yaml.MappingNode:
		return c.mapping(buf, n)
	case yaml.ScalarNode:
		return scalarJSON(buf, n)
	}
	return fmt.Errorf("line %d: unsupported YAML node", n.Line)
}

// mapping writes a mapping; merge keys (<<: *base) bring in the members of
// the merged mappings that the mapping does not set itself.
func (c *yamlConverter) mapping(buf *bytes.Buffer, n *yaml.Node) error {
	type member struct {
		key   string
		value *yaml.Node
	}
	var members []member
	seen := map[string]int{} // key -> line
	var merged []*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merged = append(merged, v)
			continue
		}
		if k.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: a mapping key must be a plain value, not a list or mapping", k.Line)
		}
		if line, dup := seen[k.Value]; dup {
			return fmt.Errorf("line %d: key %q is already set on line %d", k.Line, k.Value, line)
		}
		seen[k.Value] = k.Line
		members = append(members, member{k.Value, v})
	}
	for _, m := range merged {
		sources := []*yaml.Node{m}
		if m.Kind == yaml.SequenceNode {
			sources = m.Content
		}
		for _, s := range sources {
			for s.Kind == yaml.AliasNode && s.Alias != nil {
				s = s.Alias
			}
			if s.Kind != yaml.MappingNode {
				return fmt.Errorf("line %d: << merges mappings only", s.Line)
			}
			for i := 0; i+1 < len(s.Content); i += 2 {
				k := s.Content[i]
				if _, set := seen[k.Value]; set || k.Kind != yaml.ScalarNode {
					continue
				}
				seen[k.Value] = k.Line
				members = append(members, member{k.Value, s.Content[i+1]})
			}
		}
	}
	buf.WriteByte('{')
	for i, m := range members {
		if i > 0 {
			buf.WriteByte(',')
		}
		key, _ := json.Marshal(m.key)
		buf.Write(key)
		buf.WriteByte(':')
		if err := c.write(buf, m.value); err != nil {
			return err
		}
	}
	buf.WriteByte('}')
	return nil
}

// scalarJSON writes a scalar as the YAML 1.2 core schema reads it.
func scalarJSON(buf *bytes.Buffer, n *yaml.Node) error {
	switch n.ShortTag() {
	case "!!null":
		buf.WriteString("null")
	case "!!bool":
		switch strings.ToLower(n.Value) {
		case "true":
			buf.WriteString("true")
		case "false":
			buf.WriteString("false")
		default: // y, yes, on...: a YAML 1.1 boolean is a string in 1.2
			return writeString(buf, n.Value)
		}
	case "!!int":
		digits, err := yamlInt(n.Value)
		if err != nil {
			return fmt.Errorf("line %d: %w", n.Line, err)
		}
		buf.WriteString(digits)
	case "!!float":
		v := strings.ReplaceAll(n.Value, "_", "")
		if json.Valid([]byte(v)) {
			buf.WriteString(v)
			return nil
		}
		f, err := strconv.ParseFloat(strings.TrimPrefix(v, "+"), 64)
		if err != nil || f != f || f > 1e308 || f < -1e308 {
			return fmt.Errorf("line %d: the number %s cannot be written as JSON", n.Line, n.Value)
		}
		buf.WriteString(strconv.FormatFloat(f, 'g', -1, 64))
	default: // !!str, !!timestamp, !!binary and other tags: the text
		return writeString(buf, n.Value)
	}
	return nil
}

func writeString(buf *bytes.Buffer, s string) error {
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	buf.Write(b)
	return nil
}

// yamlInt returns the decimal digits of a YAML integer (0o17, 0x1f, 0b101,
// +12, 1_000), however large.
func yamlInt(s string) (string, error) {
	v := strings.ReplaceAll(s, "_", "")
	neg := strings.HasPrefix(v, "-")
	v = strings.TrimLeft(v, "+-")
	base := 10
	switch {
	case strings.HasPrefix(v, "0x"), strings.HasPrefix(v, "0X"):
		base, v = 16, v[2:]
	case strings.HasPrefix(v, "0o"), strings.HasPrefix(v, "0O"):
		base, v = 8, v[2:]
	case strings.HasPrefix(v, "0b"), strings.HasPrefix(v, "0B"):
		base, v = 2, v[2:]
	}
	i, ok := new(big.Int).SetString(v, base)
	if !ok {
		return "", errors.New("invalid integer " + strconv.Quote(s))
	}
	if neg {
		i.Neg(i)
	}
	return i.String(), nil
}
