// Package feedback is people's feedback on the fields of a program's output,
// as the field-feedback refinement takes it, and the rules that tell when
// an output resolves it. The gateway reads it from requests; the graph
// engine checks each refinement attempt's output against it.
package feedback

import (
	"encoding/json"
	"math"
	"math/big"
	"strings"
	"unicode"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// When is a field's feedback resolved? Each refinement attempt's output is
// read as records and every feedback item is checked against it afresh, so
// a field an earlier attempt fixed and a later one broke is unresolved
// again. The records are the output's objects: the items of an array (an
// item that is no object has no fields), or the output itself when it is
// one object; any other output has no records and resolves nothing. A value
// is populated unless it is null, blank text, an empty array or an empty
// object (the output analysis' rule), and a field's coverage is the share
// of records in which it is populated, in whole percent as the analysis
// rounds it.
//
// The rules, by issue:
//   - missing: the field is populated in more than 70% of the records (the
//     share at which the output analysis calls a field required);
//   - wrong: the field is populated and every expected value (correctValue
//     and each example's expectedOutput) is among its values; without
//     expected values, none of the examples the original analysis showed
//     for the field is among them any more (a request must give one or the
//     other);
//   - partial: the field is populated, and its coverage rose above the
//     original analysis' coverage of it (0 when it had none) or is 100%;
//   - format: the field is populated and every populated value has the
//     format of an expected value: the same JSON type, for numbers the same
//     integer or fraction form, for objects the same keys, for text the same
//     pattern (each run of digits, of upper-case letters, of lower-case
//     letters and of white space stands for one character of its class;
//     punctuation stays as it is: "$19.99" and "$5.00" match, "19.99 USD"
//     does not).
//
// Values compare as JSON values, and text with a number or a boolean by
// its text ("19.99" equals 19.99), text trimmed of surrounding white space.

// The kinds of feedback on a field (Field.Issue).
const (
	IssueMissing = "missing"
	IssueWrong   = "wrong"
	IssuePartial = "partial"
	IssueFormat  = "format"
)

// Issues are the kinds of feedback, as a request names them.
var Issues = []string{IssueMissing, IssueWrong, IssuePartial, IssueFormat}

// requiredShare is the share of records a missing field must be populated in.
const requiredShare = 0.7

// Field is the feedback on one field of the output.
type Field struct {
	Field             string          `json:"field"`
	Issue             string          `json:"issue"`
	CorrectValue      json.RawMessage `json:"correctValue,omitempty"`
	CorrectSelector   string          `json:"correctSelector,omitempty"`
	CorrectExpression string          `json:"correctExpression,omitempty"`
	CorrectPattern    string          `json:"correctPattern,omitempty"`
	Notes             string          `json:"notes,omitempty"`
	Examples          []Example       `json:"examples,omitempty"`
}

// Example is an input and the output the field should have for it.
type Example struct {
	Input          json.RawMessage `json:"input,omitempty"`
	ExpectedOutput json.RawMessage `json:"expectedOutput,omitempty"`
}

// Expected is what the feedback says the field's values should be (or look
// like): correctValue and every example's expectedOutput.
func (f *Field) Expected() []any {
	var out []any
	add := func(raw json.RawMessage) {
		if len(raw) == 0 {
			return
		}
		if v, err := jsonvalue.Decode(raw); err == nil {
			out = append(out, v)
		}
	}
	add(f.CorrectValue)
	for _, e := range f.Examples {
		add(e.ExpectedOutput)
	}
	return out
}

// Original is what the original output analysis said of a field.
type Original struct {
	// Coverage is the share of records the field was populated in, in
	// whole percent.
	Coverage int
	// Examples are values the analysis showed for the field.
	Examples []any
}

// Originals reads an output analysis' fields by name.
func Originals(analysis map[string]any) map[string]Original {
	out := map[string]Original{}
	list, _ := analysis["fields"].([]any)
	for _, f := range list {
		m, _ := f.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			continue
		}
		of := Original{}
		switch c := m["coverage"].(type) {
		case float64:
			of.Coverage = int(math.Round(c))
		case json.Number:
			if x, err := c.Float64(); err == nil {
				of.Coverage = int(math.Round(x))
			}
		}
		of.Examples, _ = m["examples"].([]any)
		out[name] = of
	}
	return out
}

// records are an output's records (see the rules above), and how many
// items there are.
type records struct {
	items   int
	objects []map[string]any
}

func recordsOf(output any) records {
	switch t := output.(type) {
	case []any:
		r := records{items: len(t)}
		for _, it := range t {
			if m, ok := it.(map[string]any); ok {
				r.objects = append(r.objects, m)
			}
		}
		return r
	case map[string]any:
		return records{items: 1, objects: []map[string]any{t}}
	}
	return records{}
}

// fieldValues are a field's populated values in the records.
type fieldValues struct {
	items  int
	values []any
}

func (r records) field(name string) fieldValues {
	fv := fieldValues{items: r.items}
	for _, o := range r.objects {
		if v, ok := o[name]; ok && populated(v) {
			fv.values = append(fv.values, v)
		}
	}
	return fv
}

// coverage is the share of records in which the field is populated, in
// whole percent.
func (fv fieldValues) coverage() int {
	if fv.items == 0 {
		return 0
	}
	return int(math.Round(100 * float64(len(fv.values)) / float64(fv.items)))
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
	}
	return true
}

// resolvedBy reports whether out resolves the feedback f, given what the
// original analysis said of the field.
func resolvedBy(f *Field, out records, orig Original) bool {
	fv := out.field(f.Field)
	if len(fv.values) == 0 {
		return false
	}
	switch f.Issue {
	case IssueMissing:
		return float64(len(fv.values)) > requiredShare*float64(fv.items)
	case IssueWrong:
		if want := f.Expected(); len(want) > 0 {
			for _, w := range want {
				if !containsValue(fv.values, w) {
					return false
				}
			}
			return true
		}
		if len(orig.Examples) == 0 {
			return false // nothing tells right from wrong; requests are refused this way
		}
		for _, old := range orig.Examples {
			if containsValue(fv.values, old) {
				return false
			}
		}
		return true
	case IssuePartial:
		c := fv.coverage()
		return c > orig.Coverage || c == 100
	case IssueFormat:
		refs := f.Expected()
		if len(refs) == 0 {
			return false
		}
		for _, v := range fv.values {
			ok := false
			for _, ref := range refs {
				if sameFormat(v, ref) {
					ok = true
					break
				}
			}
			if !ok {
				return false
			}
		}
		return true
	}
	return false
}

func containsValue(values []any, want any) bool {
	for _, v := range values {
		if sameValue(v, want) {
			return true
		}
	}
	return false
}

// sameValue compares JSON values; text equals a number or a boolean with
// the same text.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case string:
		switch y := b.(type) {
		case string:
			return strings.TrimSpace(x) == strings.TrimSpace(y)
		case json.Number:
			return sameNumber(strings.TrimSpace(x), string(y))
		case bool:
			return strings.EqualFold(strings.TrimSpace(x), map[bool]string{true: "true", false: "false"}[y])
		}
		return false
	case json.Number:
		switch y := b.(type) {
		case json.Number:
			return sameNumber(string(x), string(y))
		case string:
			return sameNumber(string(x), strings.TrimSpace(y))
		}
		return false
	case bool:
		switch y := b.(type) {
		case bool:
			return x == y
		case string:
			return sameValue(y, x)
		}
		return false
	case nil:
		return b == nil
	}
	ja, errA := json.Marshal(a) // objects' keys come out sorted
	jb, errB := json.Marshal(b)
	return errA == nil && errB == nil && string(ja) == string(jb)
}

func sameNumber(a, b string) bool {
	x, ok1 := new(big.Rat).SetString(a)
	y, ok2 := new(big.Rat).SetString(b)
	return ok1 && ok2 && x.Cmp(y) == 0
}

// sameFormat reports whether v has the format of ref.
func sameFormat(v, ref any) bool {
	switch r := ref.(type) {
	case string:
		s, ok := v.(string)
		return ok && textPattern(s) == textPattern(r)
	case json.Number:
		n, ok := v.(json.Number)
		return ok && jsonvalue.IsInteger(n) == jsonvalue.IsInteger(r)
	case bool:
		_, ok := v.(bool)
		return ok
	case map[string]any:
		m, ok := v.(map[string]any)
		if !ok || len(m) != len(r) {
			return false
		}
		for k := range r {
			if _, ok := m[k]; !ok {
				return false
			}
		}
		return true
	case []any:
		_, ok := v.([]any)
		return ok
	}
	return false
}

// textPattern is the shape of a text: runs of digits become 9, of
// upper-case letters A, of lower-case letters a, of white space one space;
// everything else stays.
func textPattern(s string) string {
	var b strings.Builder
	var last rune
	for _, c := range strings.TrimSpace(s) {
		class := c
		switch {
		case unicode.IsDigit(c):
			class = '9'
		case unicode.IsUpper(c):
			class = 'A'
		case unicode.IsLetter(c):
			class = 'a'
		case unicode.IsSpace(c):
			class = ' '
		}
		if class == last && (class == '9' || class == 'A' || class == 'a' || class == ' ') {
			continue
		}
		b.WriteRune(class)
		last = class
	}
	return b.String()
}

// Check resolves every item of feedback against an output, in the
// order given.
func Check(feedback []Field, output any, original map[string]Original) (resolved, remaining []string) {
	out := recordsOf(output)
	resolved, remaining = []string{}, []string{}
	for i := range feedback {
		f := &feedback[i]
		if resolvedBy(f, out, original[f.Field]) {
			resolved = append(resolved, f.Field)
		} else {
			remaining = append(remaining, f.Field)
		}
	}
	return resolved, remaining
}

// Names are the fields the feedback is on, in its order.
func Names(fb []Field) []string {
	out := make([]string, len(fb))
	for i, f := range fb {
		out[i] = f.Field
	}
	return out
}

// ToProto is the feedback as the code generator's command carries it.
func ToProto(fb []Field) []*novav1.FieldFeedback {
	out := make([]*novav1.FieldFeedback, len(fb))
	for i, f := range fb {
		p := &novav1.FieldFeedback{Field: f.Field, Issue: f.Issue, CorrectSelector: f.CorrectSelector,
			CorrectExpression: f.CorrectExpression, CorrectPattern: f.CorrectPattern, Notes: f.Notes, CorrectValue: jsonvalue.Proto(f.CorrectValue)}
		for _, e := range f.Examples {
			p.Examples = append(p.Examples, &novav1.FeedbackExample{Input: jsonvalue.Proto(e.Input), ExpectedOutput: jsonvalue.Proto(e.ExpectedOutput)})
		}
		out[i] = p
	}
	return out
}

// FromProto reads the feedback a command carries.
func FromProto(pb []*novav1.FieldFeedback) []Field {
	out := make([]Field, len(pb))
	for i, p := range pb {
		f := Field{Field: p.GetField(), Issue: p.GetIssue(), CorrectSelector: p.GetCorrectSelector(),
			CorrectExpression: p.GetCorrectExpression(), CorrectPattern: p.GetCorrectPattern(), Notes: p.GetNotes(),
			CorrectValue: rawOf(p.GetCorrectValue())}
		for _, e := range p.GetExamples() {
			f.Examples = append(f.Examples, Example{Input: rawOf(e.GetInput()), ExpectedOutput: rawOf(e.GetExpectedOutput())})
		}
		out[i] = f
	}
	return out
}

func rawOf(v *novav1.JSONValue) json.RawMessage {
	if v == nil || len(v.GetRaw()) == 0 {
		return nil
	}
	return json.RawMessage(v.GetRaw())
}
