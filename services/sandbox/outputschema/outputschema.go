// Package outputschema describes the shape of a node's output, as the
// "Output Schema Detection" does: whether it is an array, an object or a
// primitive, whether it is structured (an array of objects), how many items it
// has, and for a structured array each field's name, type, coverage and examples.
// The analysis is stored in the chain of work and used by field-level feedback.
//
// Which value is analysed: for JavaScript the value the code gave (ForValue);
// for Python the node's updates (ForUpdates): the value of the only key when the
// code updated exactly one key, else the updates object.
//
// Field rules, for an array of n objects:
//   - a value is populated unless it is null, a string of only white space, an
//     empty array or an empty object. Unlike the seed's `value && ...` test, 0 and
//     false count as populated: they are values, and a boolean field that is
//     false everywhere is not missing;
//   - coverage is the percentage of items in which the field is populated,
//     rounded; required means populated in more than 70% of the items;
//   - type is the most common type among the populated values (the first seen
//     wins a tie; "string" when none is populated): string, number, boolean, url
//     (an absolute http, https or ftp URL), date (ISO 8601 and common written
//     dates), and, beyond the seed's list, object and array for nested values;
//   - examples are the first three populated values, with strings cut at 200
//     characters and nested values larger than 200 bytes of JSON given as
//     their cut JSON text, so that an analysis stays small.
package outputschema

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/protobuf/types/known/structpb"
)

// Output types.
const (
	TypeArray     = "array"
	TypeObject    = "object"
	TypePrimitive = "primitive"
)

// Field types.
const (
	FieldString  = "string"
	FieldNumber  = "number"
	FieldBoolean = "boolean"
	FieldURL     = "url"
	FieldDate    = "date"
	FieldObject  = "object"
	FieldArray   = "array"
)

const (
	maxExamples     = 3
	maxExampleChars = 200
	requiredShare   = 0.7
)

// Analysis is the shape of one output. Its JSON uses the seed's names.
type Analysis struct {
	Type         string `json:"type"`
	IsStructured bool   `json:"isStructured"`
	ItemCount    int    `json:"itemCount"`
	// Fields is set for structured arrays only, in the order first seen.
	Fields []Field `json:"fields,omitempty"`
}

// Field describes one key of the objects of a structured array.
type Field struct {
	Name     string `json:"name"`
	Type     string `json:"type"`
	Required bool   `json:"required"`
	Coverage int    `json:"coverage"` // percent of items with a populated value, 0-100
	Examples []any  `json:"examples"`
}

// ForValue analyses the value a JavaScript node gave.
func ForValue(v any) Analysis { return Analyze(v) }

// ForUpdates analyses a Python node's updates: the only value when there is
// exactly one key, else the updates object.
func ForUpdates(updates map[string]any) Analysis {
	if len(updates) == 1 {
		for _, v := range updates {
			return Analyze(v)
		}
	}
	if updates == nil {
		updates = map[string]any{}
	}
	return Analyze(updates)
}

// Analyze describes v, a JSON value (as encoding/json decodes it, with float64
// or json.Number numbers); other Go values are read through their JSON form.
func Analyze(v any) Analysis {
	v = normalize(v)
	switch t := v.(type) {
	case map[string]any:
		return Analysis{Type: TypeObject}
	case []any:
		return analyzeArray(t)
	default:
		return Analysis{Type: TypePrimitive}
	}
}

func analyzeArray(items []any) Analysis {
	a := Analysis{Type: TypeArray, ItemCount: len(items)}
	if len(items) == 0 {
		return a
	}
	objects := make([]map[string]any, len(items))
	for i, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return a
		}
		objects[i] = m
	}

	type stats struct {
		populated int
		examples  []any
		typeCount map[string]int
		typeOrder []string
	}
	var order []string
	byName := map[string]*stats{}
	for _, obj := range objects {
		for _, k := range keysInOrder(obj) {
			s, ok := byName[k]
			if !ok {
				s = &stats{typeCount: map[string]int{}}
				byName[k] = s
				order = append(order, k)
			}
			val := obj[k]
			if !populated(val) {
				continue
			}
			s.populated++
			if len(s.examples) < maxExamples {
				s.examples = append(s.examples, example(val))
			}
			ft := fieldType(val)
			if s.typeCount[ft] == 0 {
				s.typeOrder = append(s.typeOrder, ft)
			}
			s.typeCount[ft]++
		}
	}

	a.IsStructured = true
	a.Fields = make([]Field, 0, len(order))
	n := float64(len(objects))
	for _, name := range order {
		s := byName[name]
		ft := FieldString
		best := 0
		for _, t := range s.typeOrder {
			if s.typeCount[t] > best {
				ft, best = t, s.typeCount[t]
			}
		}
		examples := s.examples
		if examples == nil {
			examples = []any{}
		}
		a.Fields = append(a.Fields, Field{
			Name:     name,
			Type:     ft,
			Required: float64(s.populated) > n*requiredShare,
			Coverage: int(math.Round(float64(s.populated) / n * 100)),
			Examples: examples,
		})
	}
	return a
}

// keysInOrder gives an object's keys in a stable order. Go maps have none, so
// objects decoded by encoding/json lose the order of their text; sorted keys
// keep analyses of equal data equal.
func keysInOrder(m map[string]any) []string {
	return slices.Sorted(maps.Keys(m))
}

func populated(v any) bool {
	switch t := v.(type) {
	case nil:
		return false
	case string:
		return strings.TrimSpace(t) != ""
	case []any:
		return len(t) > 0
	case map[string]any:
		return len(t) > 0
	default:
		return true
	}
}

func fieldType(v any) string {
	switch t := v.(type) {
	case bool:
		return FieldBoolean
	case json.Number, float64:
		return FieldNumber
	case []any:
		return FieldArray
	case map[string]any:
		return FieldObject
	case string:
		s := strings.TrimSpace(t)
		switch {
		case isURL(s):
			return FieldURL
		case isDate(s):
			return FieldDate
		}
	}
	return FieldString
}

func isURL(s string) bool {
	if len(s) > 2048 || strings.ContainsAny(s, " \t\n") {
		return false
	}
	lower := strings.ToLower(s)
	if !strings.HasPrefix(lower, "http://") && !strings.HasPrefix(lower, "https://") && !strings.HasPrefix(lower, "ftp://") {
		return false
	}
	u, err := url.Parse(s)
	return err == nil && u.Host != ""
}

// dateLayouts are the written dates recognised: ISO 8601 and RFC 3339 forms,
// e-mail and HTTP dates, and common day-month-year forms.
var dateLayouts = []string{
	time.RFC3339Nano,
	"2006-01-02T15:04:05.999999999",
	"2006-01-02T15:04",
	"2006-01-02 15:04:05.999999999Z07:00",
	"2006-01-02 15:04:05.999999999",
	"2006-01-02 15:04",
	"2006-01-02",
	"2006/01/02",
	"01/02/2006",
	"02/01/2006",
	"02.01.2006",
	"2006-01",
	time.RFC1123,
	time.RFC1123Z,
	time.RFC850,
	time.ANSIC,
	"Mon Jan 02 2006 15:04:05 GMT-0700",
	"Jan 2, 2006",
	"January 2, 2006",
	"Jan 2 2006",
	"January 2 2006",
	"2 Jan 2006",
	"2 January 2006",
	"Mon, 2 Jan 2006",
	"Monday, January 2, 2006",
}

func isDate(s string) bool {
	if len(s) < 7 || len(s) > 64 || s[0] == '+' || s[0] == '-' {
		return false
	}
	// JavaScript's Date.prototype.toString adds the zone's name in parentheses.
	if i := strings.Index(s, " ("); i > 0 && strings.HasSuffix(s, ")") {
		s = s[:i]
	}
	for _, layout := range dateLayouts {
		if _, err := time.Parse(layout, s); err == nil {
			return true
		}
	}
	return false
}

func example(v any) any {
	switch t := v.(type) {
	case string:
		return cut(t)
	case []any, map[string]any:
		b, err := json.Marshal(t)
		if err != nil || len(b) <= maxExampleChars {
			return t
		}
		return cut(string(b))
	}
	return v
}

func cut(s string) string {
	if utf8.RuneCountInString(s) <= maxExampleChars {
		return s
	}
	r := []rune(s)
	return string(r[:maxExampleChars]) + "…"
}

// normalize turns v into the types encoding/json decodes to.
func normalize(v any) any {
	switch t := v.(type) {
	case nil, bool, string, json.Number, float64:
		return v
	case map[string]any:
		return t
	case []any:
		return t
	case float32:
		return float64(t)
	case *structpb.Value:
		return t.AsInterface()
	case *structpb.Struct:
		return t.AsMap()
	case *structpb.ListValue:
		return t.AsSlice()
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return json.Number(fmt.Sprint(v))
	case reflect.Float32, reflect.Float64:
		return rv.Float()
	}
	// Slices, maps and structs of other types: through their JSON form.
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var out any
	if dec.Decode(&out) != nil {
		return nil
	}
	return out
}

// AsMap is the analysis as JSON-like values, with the seed's names, ready for
// structpb.NewStruct.
func (a Analysis) AsMap() map[string]any {
	m := map[string]any{
		"type":         a.Type,
		"isStructured": a.IsStructured,
		"itemCount":    a.ItemCount,
	}
	if a.IsStructured {
		fields := make([]any, len(a.Fields))
		for i, f := range a.Fields {
			examples := f.Examples
			if examples == nil {
				examples = []any{}
			}
			fields[i] = map[string]any{
				"name":     f.Name,
				"type":     f.Type,
				"required": f.Required,
				"coverage": f.Coverage,
				"examples": examples,
			}
		}
		m["fields"] = fields
	}
	return m
}

// ToStruct is the analysis as a protobuf Struct (CodeExecuted.output_analysis).
func (a Analysis) ToStruct() (*structpb.Struct, error) {
	s, err := structpb.NewStruct(a.AsMap())
	if err != nil {
		return nil, fmt.Errorf("output analysis to struct: %w", err)
	}
	return s, nil
}

// MarshalJSON writes the same document as AsMap: fields present exactly when
// the output is structured.
func (a Analysis) MarshalJSON() ([]byte, error) {
	return json.Marshal(a.AsMap())
}
