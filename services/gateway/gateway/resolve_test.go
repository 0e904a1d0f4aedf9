package gateway

import (
	"encoding/json"
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
	original := map[string]originalField{
		"price": {coverage: 50, examples: []any{"19.99"}},
		"title": {coverage: 100, examples: []any{"lamp", "chair"}},
	}
	for _, c := range []struct {
		name     string
		feedback fieldFeedback
		output   string
		want     bool
	}{
		// missing: populated in more than 70% of the records.
		{"missing, 75% populated", fieldFeedback{Field: "price", Issue: issueMissing}, four, true},
		{"missing, 50% populated", fieldFeedback{Field: "price", Issue: issueMissing},
			`[{"price": 1}, {"price": null}, {"price": []}, {"price": 2}]`, false},
		{"missing, absent", fieldFeedback{Field: "stock", Issue: issueMissing}, four, false},
		{"missing, one object", fieldFeedback{Field: "total", Issue: issueMissing}, `{"total": 0}`, true},
		{"missing, a primitive output", fieldFeedback{Field: "total", Issue: issueMissing}, `42`, false},
		{"missing, items that are no objects count", fieldFeedback{Field: "a", Issue: issueMissing}, `[{"a": 1}, 2, 3]`, false},

		// wrong: every expected value appears; without any, the old examples are gone.
		{"wrong, correct value as text of a number", fieldFeedback{Field: "sku", Issue: issueWrong, CorrectValue: json.RawMessage(`"3"`)}, four, true},
		{"wrong, example outputs all present", fieldFeedback{Field: "title", Issue: issueWrong,
			Examples: []feedbackExample{{ExpectedOutput: json.RawMessage(`"Lamp"`)}, {ExpectedOutput: json.RawMessage(`" Rug "`)}}}, four, true},
		{"wrong, one example output absent", fieldFeedback{Field: "title", Issue: issueWrong,
			CorrectValue: json.RawMessage(`"Lamp"`), Examples: []feedbackExample{{ExpectedOutput: json.RawMessage(`"Sofa"`)}}}, four, false},
		{"wrong, old examples gone", fieldFeedback{Field: "title", Issue: issueWrong}, four, true},
		{"wrong, an old example left", fieldFeedback{Field: "title", Issue: issueWrong}, `[{"title": "lamp"}, {"title": "Chair"}]`, false},
		{"wrong, nothing to compare with", fieldFeedback{Field: "sku", Issue: issueWrong}, four, false},
		{"wrong, numbers compared exactly", fieldFeedback{Field: "n", Issue: issueWrong, CorrectValue: json.RawMessage(`9007199254740993`)},
			`[{"n": 9007199254740992}]`, false},
		{"wrong, 1.50 equals 1.5", fieldFeedback{Field: "n", Issue: issueWrong, CorrectValue: json.RawMessage(`1.50`)}, `[{"n": 1.5}]`, true},
		{"wrong, objects by value", fieldFeedback{Field: "o", Issue: issueWrong, CorrectValue: json.RawMessage(`{"b": 1, "a": [true]}`)},
			`[{"o": {"a": [true], "b": 1}}]`, true},

		// partial: coverage above the original's, or 100%.
		{"partial, 75% after 50%", fieldFeedback{Field: "price", Issue: issuePartial}, four, true},
		{"partial, 50% after 50%", fieldFeedback{Field: "price", Issue: issuePartial},
			`[{"price": 1}, {"price": ""}]`, false},
		{"partial, 100% after 100%", fieldFeedback{Field: "title", Issue: issuePartial}, four, true},
		{"partial, new field", fieldFeedback{Field: "sku", Issue: issuePartial}, `[{"sku": 1}, {}]`, true},

		// format: every populated value has an expected value's format.
		{"format, money pattern", fieldFeedback{Field: "price", Issue: issueFormat, CorrectValue: json.RawMessage(`"$1.00"`)}, four, true},
		{"format, one date written otherwise", fieldFeedback{Field: "when", Issue: issueFormat, CorrectValue: json.RawMessage(`"2020-12-31"`)}, four, false},
		{"format, either example format", fieldFeedback{Field: "when", Issue: issueFormat,
			Examples: []feedbackExample{{ExpectedOutput: json.RawMessage(`"2020-12-31"`)}, {ExpectedOutput: json.RawMessage(`"May 1, 2020"`)}}}, four, true},
		{"format, numbers not text", fieldFeedback{Field: "price", Issue: issueFormat, CorrectValue: json.RawMessage(`19.99`)}, four, false},
		{"format, fractions", fieldFeedback{Field: "price", Issue: issueFormat, CorrectValue: json.RawMessage(`19.99`)},
			`[{"price": 1.5}, {"price": 2.25}]`, true},
		{"format, an integer is no fraction", fieldFeedback{Field: "price", Issue: issueFormat, CorrectValue: json.RawMessage(`19.99`)},
			`[{"price": 1.5}, {"price": 2}]`, false},
		{"format, title case", fieldFeedback{Field: "title", Issue: issueFormat, CorrectValue: json.RawMessage(`"Lamp"`)},
			`[{"title": "Chair"}, {"title": "desk"}]`, false},
		{"format, unpopulated", fieldFeedback{Field: "stock", Issue: issueFormat, CorrectValue: json.RawMessage(`1`)}, four, false},
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
	fb := []fieldFeedback{{Field: "b", Issue: issueMissing}, {Field: "a", Issue: issueMissing}, {Field: "c", Issue: issueMissing}}
	resolved, remaining := checkFeedback(fb, decoded(t, `[{"a": 1, "b": 2}]`), nil)
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

// An analyzer's correctPattern is read and sent to the code generator.
func TestRefineFeedbackCarriesPattern(t *testing.T) {
	var errs []FieldError
	fb := parseFeedback(json.RawMessage(`[{"field": "invoice", "issue": "missing", "correctPattern": "INV- and four digits"}]`), &errs)
	if len(errs) != 0 || len(fb) != 1 {
		t.Fatalf("feedback %v, errors %v", fb, errs)
	}
	if got := feedbackProto(fb)[0].GetCorrectPattern(); got != "INV- and four digits" {
		t.Errorf("correct_pattern %q", got)
	}
	parseFeedback(json.RawMessage(`[{"field": "invoice", "issue": "missing", "correctPattern": 7}]`), &errs)
	if len(errs) != 1 || errs[0].Field != "feedback[0].correctPattern" {
		t.Errorf("a pattern that is no string: errors %v", errs)
	}
}
