package feedback

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
)

func decoded(t *testing.T, text string) any {
	t.Helper()
	v, err := jsonvalue.Decode([]byte(text))
	if err != nil {
		t.Fatalf("%s: %v", text, err)
	}
	return v
}

func TestFeedbackResolution(t *testing.T) {
	const four = `[{"title": "Lamp", "price": "$19.99", "sku": 1, "when": "2024-01-05"},
		{"title": "Chair", "price": "$5.00", "sku": 2, "when": "2024-02-11"},
		{"title": "Desk", "price": "", "sku": 3, "when": "2024-03-01"},
		{"title": "Rug", "price": "$120.50", "sku": 4, "when": "March 3, 2024"}]`
	original := map[string]Original{
		"price": {Coverage: 50, Examples: []any{"19.99"}},
		"title": {Coverage: 100, Examples: []any{"lamp", "chair"}},
	}
	for _, c := range []struct {
		name     string
		feedback Field
		output   string
		want     bool
	}{
		// missing: populated in more than 70% of the records.
		{"missing, 75% populated", Field{Field: "price", Issue: IssueMissing}, four, true},
		{"missing, 50% populated", Field{Field: "price", Issue: IssueMissing},
			`[{"price": 1}, {"price": null}, {"price": []}, {"price": 2}]`, false},
		{"missing, absent", Field{Field: "stock", Issue: IssueMissing}, four, false},
		{"missing, one object", Field{Field: "total", Issue: IssueMissing}, `{"total": 0}`, true},
		{"missing, a primitive output", Field{Field: "total", Issue: IssueMissing}, `42`, false},
		{"missing, items that are no objects count", Field{Field: "a", Issue: IssueMissing}, `[{"a": 1}, 2, 3]`, false},

		// wrong: every expected value appears; without any, the old examples are gone.
		{"wrong, correct value as text of a number", Field{Field: "sku", Issue: IssueWrong, CorrectValue: json.RawMessage(`"3"`)}, four, true},
		{"wrong, example outputs all present", Field{Field: "title", Issue: IssueWrong,
			Examples: []Example{{ExpectedOutput: json.RawMessage(`"Lamp"`)}, {ExpectedOutput: json.RawMessage(`" Rug "`)}}}, four, true},
		{"wrong, one example output absent", Field{Field: "title", Issue: IssueWrong,
			CorrectValue: json.RawMessage(`"Lamp"`), Examples: []Example{{ExpectedOutput: json.RawMessage(`"Sofa"`)}}}, four, false},
		{"wrong, old examples gone", Field{Field: "title", Issue: IssueWrong}, four, true},
		{"wrong, an old example left", Field{Field: "title", Issue: IssueWrong}, `[{"title": "lamp"}, {"title": "Chair"}]`, false},
		{"wrong, nothing to compare with", Field{Field: "sku", Issue: IssueWrong}, four, false},
		{"wrong, numbers compared exactly", Field{Field: "n", Issue: IssueWrong, CorrectValue: json.RawMessage(`9007199254740993`)},
			`[{"n": 9007199254740992}]`, false},
		{"wrong, 1.50 equals 1.5", Field{Field: "n", Issue: IssueWrong, CorrectValue: json.RawMessage(`1.50`)}, `[{"n": 1.5}]`, true},
		{"wrong, objects by value", Field{Field: "o", Issue: IssueWrong, CorrectValue: json.RawMessage(`{"b": 1, "a": [true]}`)},
			`[{"o": {"a": [true], "b": 1}}]`, true},

		// partial: coverage above the original's, or 100%.
		{"partial, 75% after 50%", Field{Field: "price", Issue: IssuePartial}, four, true},
		{"partial, 50% after 50%", Field{Field: "price", Issue: IssuePartial},
			`[{"price": 1}, {"price": ""}]`, false},
		{"partial, 100% after 100%", Field{Field: "title", Issue: IssuePartial}, four, true},
		{"partial, new field", Field{Field: "sku", Issue: IssuePartial}, `[{"sku": 1}, {}]`, true},

		// format: every populated value has an expected value's format.
		{"format, money pattern", Field{Field: "price", Issue: IssueFormat, CorrectValue: json.RawMessage(`"$1.00"`)}, four, true},
		{"format, one date written otherwise", Field{Field: "when", Issue: IssueFormat, CorrectValue: json.RawMessage(`"2020-12-31"`)}, four, false},
		{"format, either example format", Field{Field: "when", Issue: IssueFormat,
			Examples: []Example{{ExpectedOutput: json.RawMessage(`"2020-12-31"`)}, {ExpectedOutput: json.RawMessage(`"May 1, 2020"`)}}}, four, true},
		{"format, numbers not text", Field{Field: "price", Issue: IssueFormat, CorrectValue: json.RawMessage(`19.99`)}, four, false},
		{"format, fractions", Field{Field: "price", Issue: IssueFormat, CorrectValue: json.RawMessage(`19.99`)},
			`[{"price": 1.5}, {"price": 2.25}]`, true},
		{"format, an integer is no fraction", Field{Field: "price", Issue: IssueFormat, CorrectValue: json.RawMessage(`19.99`)},
			`[{"price": 1.5}, {"price": 2}]`, false},
		{"format, title case", Field{Field: "title", Issue: IssueFormat, CorrectValue: json.RawMessage(`"Lamp"`)},
			`[{"title": "Chair"}, {"title": "desk"}]`, false},
		{"format, unpopulated", Field{Field: "stock", Issue: IssueFormat, CorrectValue: json.RawMessage(`1`)}, four, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := resolvedBy(&c.feedback, recordsOf(decoded(t, c.output)), original[c.feedback.Field])
			if got != c.want {
				t.Errorf("resolved = %v, want %v", got, c.want)
			}
		})
	}
}

func TestCheckFeedbackKeepsTheOrder(t *testing.T) {
	fb := []Field{{Field: "b", Issue: IssueMissing}, {Field: "a", Issue: IssueMissing}, {Field: "c", Issue: IssueMissing}}
	resolved, remaining := Check(fb, decoded(t, `[{"a": 1, "b": 2}]`), nil)
	if !slices.Equal(resolved, []string{"b", "a"}) || !slices.Equal(remaining, []string{"c"}) {
		t.Errorf("resolved %v remaining %v", resolved, remaining)
	}
}

func TestTextPattern(t *testing.T) {
	for in, want := range map[string]string{
		"$19.99":        "$9.9",
		"2024-01-05":    "9-9-9",
		"March 3, 2024": "Aa 9, 9",
		"USD  12":       "A 9",
		" Lamp ":        "Aa",
		"ÉCOLE été":     "A a",
	} {
		if got := textPattern(in); got != want {
			t.Errorf("textPattern(%q) = %q, want %q", in, got, want)
		}
	}
}

// Feedback travels in the code generator's command and back unchanged.
func TestProtoRoundTrip(t *testing.T) {
	fb := []Field{{Field: "price", Issue: IssueFormat, CorrectValue: json.RawMessage(`"$1.00"`), CorrectPattern: "money",
		Examples: []Example{{Input: json.RawMessage(`{"a": 1}`), ExpectedOutput: json.RawMessage(`"$2.00"`)}}},
		{Field: "title", Issue: IssueMissing, Notes: "in the h1"}}
	got := FromProto(ToProto(fb))
	if g, w := fmt.Sprint(got), fmt.Sprint(fb); g != w {
		t.Errorf("round trip:\n got %s\nwant %s", g, w)
	}
}
