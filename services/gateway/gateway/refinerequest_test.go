package gateway

import (
	"encoding/json"
	"testing"

	"github.com/novaflow/nova/pkg/feedback"
)

// An analyzer's correctPattern is read and sent to the code generator.
func TestRefineFeedbackCarriesPattern(t *testing.T) {
	var errs []FieldError
	fb := parseFeedback(json.RawMessage(`[{"field": "invoice", "issue": "missing", "correctPattern": "INV- and four digits"}]`), &errs)
	if len(errs) != 0 || len(fb) != 1 {
		t.Fatalf("feedback %v, errors %v", fb, errs)
	}
	if got := feedback.ToProto(fb)[0].GetCorrectPattern(); got != "INV- and four digits" {
		t.Errorf("correct_pattern %q", got)
	}
	parseFeedback(json.RawMessage(`[{"field": "invoice", "issue": "missing", "correctPattern": 7}]`), &errs)
	if len(errs) != 1 || errs[0].Field != "feedback[0].correctPattern" {
		t.Errorf("a pattern that is no string: errors %v", errs)
	}
}
