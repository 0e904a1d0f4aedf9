// Package jsonvalue works with JSON values kept as their exact text
// (nova.v1.JSONValue): a workflow context split into its top-level members,
// merged, copied and read without passing a number through float64.
//
// The text of a value is what a producer or a node wrote, compacted: an
// integer of any size stays the same digits, 150.0 stays a float, -0.0 keeps
// its sign. Go code that needs to look inside a value decodes it with Decode,
// which gives numbers as json.Number (their literal text).
package jsonvalue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// ErrNotObject is returned when a context is a JSON value other than an object.
var ErrNotObject = errors.New("not a JSON object")

// Object is a JSON object whose member values are kept as their exact,
// compact text. Values are never modified in place, so copying the map is a
// deep copy.
type Object map[string]json.RawMessage

// ParseObject splits a JSON object into its members. Empty input and null are
// the empty object; any other non-object value is ErrNotObject. Of duplicated
// keys the last wins, as in Python's json module.
func ParseObject(raw []byte) (Object, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return Object{}, nil
	}
	if raw[0] != '{' {
		if !json.Valid(raw) {
			return nil, fmt.Errorf("invalid JSON: %w", syntaxError(raw))
		}
		return nil, fmt.Errorf("%w: got %s", ErrNotObject, KindOf(raw))
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(raw, &members); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	o := make(Object, len(members))
	for k, v := range members {
		o[k] = Compact(v)
	}
	return o, nil
}

// ObjectOf makes a context from what a Go caller has: an Object, JSON text
// ([]byte, json.RawMessage, string), or any value that Encode writes as a
// JSON object (a map[string]any, a struct). nil is the empty object.
func ObjectOf(v any) (Object, error) {
	switch t := v.(type) {
	case nil:
		return Object{}, nil
	case Object:
		return t.Clone(), nil
	case map[string]json.RawMessage:
		return Object(t).Clone(), nil
	case json.RawMessage:
		return ParseObject(t)
	case []byte:
		return ParseObject(t)
	case string:
		return ParseObject([]byte(t))
	}
	raw, err := Encode(v)
	if err != nil {
		return nil, err
	}
	return ParseObject(raw)
}

// FromProto reads a context carried in an event or in the engine's state.
func FromProto(v *novav1.JSONValue) (Object, error) {
	return ParseObject(v.GetRaw())
}

// MustObject is FromProto for values NOVA wrote itself (state, events it
// built), which are always objects; anything else becomes the empty object.
func MustObject(v *novav1.JSONValue) Object {
	o, err := FromProto(v)
	if err != nil {
		return Object{}
	}
	return o
}

// Bytes encodes the object with its keys sorted.
func (o Object) Bytes() []byte {
	if len(o) == 0 {
		return []byte("{}")
	}
	keys := slices.Sorted(maps.Keys(o))
	n := 2
	for _, k := range keys {
		n += len(k) + len(o[k]) + 4
	}
	b := make([]byte, 0, n)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		if v := o[k]; len(v) > 0 {
			b = append(b, v...)
		} else {
			b = append(b, "null"...)
		}
	}
	return append(b, '}')
}

// Proto is the object as a nova.v1.JSONValue.
func (o Object) Proto() *novav1.JSONValue { return &novav1.JSONValue{Raw: o.Bytes()} }

// Clone copies the object; the member values are shared (they are immutable).
func (o Object) Clone() Object {
	if o == nil {
		return Object{}
	}
	return maps.Clone(o)
}

// Keys are the object's keys, sorted.
func (o Object) Keys() []string { return slices.Sorted(maps.Keys(o)) }

// Merge sets every member of updates in o (a node's updates are merged into
// the context, never replace it).
func (o Object) Merge(updates Object) {
	for k, v := range updates {
		o[k] = v
	}
}

// Set encodes v (see Encode) and stores it under key.
func (o Object) Set(key string, v any) error {
	raw, err := Encode(v)
	if err != nil {
		return fmt.Errorf("context value %q: %w", key, err)
	}
	o[key] = raw
	return nil
}

// String returns the member as a Go string when it is a JSON string.
func (o Object) String(key string) (string, bool) {
	var s string
	raw, ok := o[key]
	if !ok || len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// Decoded is the object with every value decoded (numbers as json.Number).
func (o Object) Decoded() (map[string]any, error) {
	m := make(map[string]any, len(o))
	for k, raw := range o {
		v, err := Decode(raw)
		if err != nil {
			return nil, fmt.Errorf("context value %q: %w", k, err)
		}
		m[k] = v
	}
	return m, nil
}

// Map decodes a context carried in an event into Go values (numbers as
// json.Number); a value that is not an object gives an empty map.
func Map(v *novav1.JSONValue) map[string]any {
	m, err := MustObject(v).Decoded()
	if err != nil {
		return map[string]any{}
	}
	return m
}

// Proto wraps raw JSON text (nil stays nil).
func Proto(raw []byte) *novav1.JSONValue {
	if raw == nil {
		return nil
	}
	return &novav1.JSONValue{Raw: raw}
}

// Decode parses one JSON value into Go values, with numbers as json.Number so
// that no number passes through float64.
func Decode(raw []byte) (any, error) {
	if v, ok := decodeScalar(raw); ok {
		return v, nil
	}
	return decodeAny(raw)
}

// decodeAny is Decode by way of encoding/json's decoder alone, for what
// decodeScalar does not take.
func decodeAny(raw []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	if d.More() {
		return nil, errors.New("invalid JSON: data after the value")
	}
	return v, nil
}

// decodeScalar decodes, without a json.Decoder (which takes a buffer of
// at least 512 bytes for each value), the values most context members are:
// null, true, false, a number (json.Number of its text, as the decoder's
// UseNumber gives) and a string without escapes or control characters,
// valid UTF-8. ok is false for anything else, white space around it
// included, which Decode hands to the decoder.
func decodeScalar(raw []byte) (v any, ok bool) {
	switch {
	case len(raw) == 0:
		return nil, false
	case string(raw) == "null":
		return nil, true
	case string(raw) == "true":
		return true, true
	case string(raw) == "false":
		return false, true
	case raw[0] == '"':
		if len(raw) < 2 || raw[len(raw)-1] != '"' || !utf8.Valid(raw) {
			return nil, false
		}
		body := raw[1 : len(raw)-1]
		for _, c := range body {
			if c == '"' || c == '\\' || c < 0x20 {
				return nil, false
			}
		}
		return string(body), true
	case isNumber(raw):
		return json.Number(raw), true
	}
	return nil, false
}

// isNumber tells whether b is exactly one JSON number:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func isNumber(b []byte) bool {
	digits := func(i int) int { // the end of the digits from i
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
		return i
	}
	i := 0
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(i)
	default:
		return false
	}
	if i < len(b) && b[i] == '.' {
		if j := digits(i + 1); j > i+1 {
			i = j
		} else {
			return false
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if j := digits(i); j > i {
			i = j
		} else {
			return false
		}
	}
	return i == len(b)
}

// Encode writes v as compact JSON without HTML escaping. json.Number and
// json.RawMessage are written as they are; a float64 keeps a fraction or an
// exponent (150.0, not 150), so that it reads back as a float. NaN and
// infinities are refused.
func Encode(v any) (json.RawMessage, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(floatsKept(v)); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// floatsKept replaces float64 values in maps and slices built from JSON-like
// Go values by their json.Number text (FormatFloat), which encoding/json would
// otherwise write as integers when they have no fraction.
func floatsKept(v any) any {
	switch t := v.(type) {
	case float64:
		if math.IsNaN(t) || math.IsInf(t, 0) {
			return t // encoding/json refuses it with a clear error
		}
		return json.Number(FormatFloat(t))
	case float32:
		return floatsKept(float64(t))
	case map[string]any:
		m := make(map[string]any, len(t))
		for k, e := range t {
			m[k] = floatsKept(e)
		}
		return m
	case []any:
		s := make([]any, len(t))
		for i, e := range t {
			s[i] = floatsKept(e)
		}
		return s
	}
	return v
}

// Compact returns raw without insignificant white space; number literals and
// strings are kept as written. Invalid input is returned as is (callers
// validate first).
func Compact(raw []byte) json.RawMessage {
	if !needsCompact(raw) {
		return raw
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// needsCompact reports whether raw has white space outside strings.
func needsCompact(raw []byte) bool {
	inString, escaped := false, false
	for _, c := range raw {
		switch {
		case escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\n' || c == '\t' || c == '\r'):
			return true
		}
	}
	return false
}

// FormatFloat writes a float64 as a JSON number that reads back as a float,
// the way Python's json module writes floats: the shortest text that
// round-trips, in plain notation with ".0" added when it has no fraction
// (150.0, 0.001) and in exponent notation below 1e-4 and from 1e16 on
// (1e-05, 1e+16, 1e+308); negative zero is -0.0.
func FormatFloat(f float64) string {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return strconv.FormatFloat(f, 'g', -1, 64) // not JSON; refused by callers
	}
	if f == 0 {
		if math.Signbit(f) {
			return "-0.0"
		}
		return "0.0"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64) // e.g. 1.5e-05, 1e+308
	exp, _ := strconv.Atoi(e[strings.IndexByte(e, 'e')+1:])
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// IsInteger reports whether a JSON number literal is an integer (no fraction,
// no exponent): 150 is, 150.0 and 1e3 are not, as in Python.
func IsInteger(n json.Number) bool { return !strings.ContainsAny(string(n), ".eE") }

// Int64 returns an integer literal's value when it fits in an int64.
func Int64(n json.Number) (int64, bool) {
	if !IsInteger(n) {
		return 0, false
	}
	i, err := strconv.ParseInt(string(n), 10, 64)
	return i, err == nil
}

// maxSafeInteger is the largest integer JavaScript's number holds exactly
// (Number.MAX_SAFE_INTEGER, 2**53 - 1).
var maxSafeInteger = big.NewInt(1<<53 - 1)

// UnsafeForJavaScript lists, as paths ("order.ids[2]"), the integers in the
// object that a JavaScript number cannot hold exactly (beyond ±(2**53 - 1)).
// A JavaScript node must not receive them: JSON.parse would round them
// silently.
func UnsafeForJavaScript(o Object) []string {
	var paths []string
	for _, k := range o.Keys() {
		v, err := Decode(o[k])
		if err != nil {
			continue
		}
		walkNumbers(v, keyPath("", k), func(path string, n json.Number) {
			if !IsInteger(n) {
				return
			}
			i, ok := new(big.Int).SetString(string(n), 10)
			if ok && new(big.Int).Abs(i).Cmp(maxSafeInteger) > 0 {
				paths = append(paths, path)
			}
		})
	}
	return paths
}

func walkNumbers(v any, path string, f func(string, json.Number)) {
	switch t := v.(type) {
	case json.Number:
		f(path, t)
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(t)) {
			walkNumbers(t[k], keyPath(path, k), f)
		}
	case []any:
		for i, e := range t {
			walkNumbers(e, fmt.Sprintf("%s[%d]", path, i), f)
		}
	}
}

func keyPath(parent, key string) string {
	simple := key != ""
	for _, r := range key {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r > 127) {
			simple = false
			break
		}
	}
	if !simple {
		q, _ := json.Marshal(key)
		return parent + "[" + string(q) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func appendString(b []byte, s string) []byte {
	q, _ := Encode(s)
	return append(b, q...)
}

// KindOf names the kind of the JSON value raw ("an object", "an array", "a
// string", "a boolean", "null" or "a number") by its first byte; raw is
// valid JSON without leading white space.
func KindOf(raw []byte) string {
	switch raw[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

func syntaxError(raw []byte) error {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err
	}
	return errors.New("invalid JSON")
}
