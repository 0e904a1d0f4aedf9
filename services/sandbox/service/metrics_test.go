package service

import (
	"errors"
	"testing"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

func TestOutcomeOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		res  *novav1.CodeExecuted
		err  error
		want string
	}{
		{"success", &novav1.CodeExecuted{Status: "success"}, nil, "success"},
		{"code error", &novav1.CodeExecuted{Status: "error", ErrorKind: "code_error"}, nil, "code_error"},
		{"timeout", &novav1.CodeExecuted{Status: "error", ErrorKind: "timeout"}, nil, "timeout"},
		{"limit", &novav1.CodeExecuted{Status: "error", ErrorKind: "limit"}, nil, "limit"},
		{"runtime unavailable", &novav1.CodeExecuted{Status: "error", ErrorKind: "runtime_unavailable"}, nil, "runtime_unavailable"},
		{"reported sandbox fault", &novav1.CodeExecuted{Status: "error", ErrorKind: "sandbox_fault"}, nil, "sandbox_fault"},
		{"replica could not run it", nil, errors.New("bwrap: no user namespaces"), "sandbox_fault"},
		{"error without kind", &novav1.CodeExecuted{Status: "error"}, nil, "code_error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := outcomeOf(tc.res, tc.err); got != tc.want {
				t.Errorf("outcomeOf = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLanguageLabelIsBounded(t *testing.T) {
	for in, want := range map[string]string{"": "python", "python": "python", "javascript": "javascript", "cobol": "other"} {
		if got := languageLabel(in); got != want {
			t.Errorf("languageLabel(%q) = %q, want %q", in, got, want)
		}
	}
}
