package jsonvalue

import (
	"bytes"
	"encoding/json"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// OwnObject is MustObject for a context NOVA stored itself, whose text was
// checked when it entered (an execution's context, a line's): it splits the
// object in one pass, without checking its members again, where ParseObject
// runs encoding/json over all of it. The engine reads its contexts at every
// event it applies, and a map's list makes them large: for a list of
// 10,000 numbers, two checked parses were most of an item's cost. Text that
// does not split as an object is read by ParseObject (so a malformed one
// still becomes the empty object). The members share v's bytes, with no
// room to grow into them.
func OwnObject(v *novav1.JSONValue) Object {
	if o, ok := splitObject(v.GetRaw()); ok {
		return o
	}
	return MustObject(v)
}

// splitObject splits raw, a JSON object, into its members; ok is false
// when it is not one. Members with white space outside strings are
// compacted, as ParseObject does; of duplicated keys the last wins.
func splitObject(raw []byte) (o Object, ok bool) {
	i := skipSpace(raw, 0)
	if i >= len(raw) || raw[i] != '{' {
		return nil, false
	}
	o = Object{}
	if i = skipSpace(raw, i+1); i < len(raw) && raw[i] == '}' {
		return o, skipSpace(raw, i+1) == len(raw)
	}
	for {
		if i >= len(raw) || raw[i] != '"' {
			return nil, false
		}
		start := i
		if i = endString(raw, i); i < 0 {
			return nil, false
		}
		var key string
		if k := raw[start+1 : i-1]; bytes.IndexByte(k, '\\') < 0 {
			key = string(k)
		} else if json.Unmarshal(raw[start:i], &key) != nil {
			return nil, false
		}
		if i = skipSpace(raw, i); i >= len(raw) || raw[i] != ':' {
			return nil, false
		}
		i = skipSpace(raw, i+1)
		start = i
		end, spaced := endValue(raw, i)
		if end < 0 {
			return nil, false
		}
		v := json.RawMessage(raw[start:end:end])
		if spaced {
			v = Compact(v)
		}
		o[key] = v
		if i = skipSpace(raw, end); i >= len(raw) {
			return nil, false
		}
		switch raw[i] {
		case ',':
			i = skipSpace(raw, i+1)
		case '}':
			return o, skipSpace(raw, i+1) == len(raw)
		default:
			return nil, false
		}
	}
}

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\t' || c == '\r' }

func skipSpace(raw []byte, i int) int {
	for i < len(raw) && isSpace(raw[i]) {
		i++
	}
	return i
}

// endString is the index after the string that starts at raw[i] ('"'),
// -1 when it does not end.
func endString(raw []byte, i int) int {
	for i++; i < len(raw); i++ {
		switch raw[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return -1
}

// endValue is the index after the value that starts at raw[i], -1 when it
// does not end, and whether it has white space outside its strings.
func endValue(raw []byte, i int) (end int, spaced bool) {
	if i >= len(raw) {
		return -1, false
	}
	switch raw[i] {
	case '"':
		return endString(raw, i), false
	case '{', '[':
		depth := 0
		for i < len(raw) {
			switch c := raw[i]; {
			case c == '"':
				if i = endString(raw, i); i < 0 {
					return -1, false
				}
				continue
			case c == '{' || c == '[':
				depth++
			case c == '}' || c == ']':
				if depth--; depth == 0 {
					return i + 1, spaced
				}
			case isSpace(c):
				spaced = true
			}
			i++
		}
		return -1, false
	}
	start := i
	for i < len(raw) && raw[i] != ',' && raw[i] != '}' && raw[i] != ']' && !isSpace(raw[i]) {
		i++
	}
	if i == start {
		return -1, false
	}
	return i, false
}
