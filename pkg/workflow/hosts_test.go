package workflow_test

import (
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/workflow"
)

func TestHostPatternMatches(t *testing.T) {
	type dest struct {
		host string
		port int
	}
	tests := []struct {
		pattern string
		allow   []dest
		deny    []dest
	}{
		{pattern: "api.example.com", allow: []dest{{"api.example.com", 443}, {"API.example.com.", 80}}, deny: []dest{{"api.example.com", 8443}, {"example.com", 443}, {"evil-api.example.com", 443}}},
		{pattern: "api.example.com:8443", allow: []dest{{"api.example.com", 8443}}, deny: []dest{{"api.example.com", 443}}},
		{pattern: "api.example.com:*", allow: []dest{{"api.example.com", 1}, {"api.example.com", 65535}}},
		{pattern: "*.example.com", allow: []dest{{"a.example.com", 443}, {"a.b.example.com", 80}}, deny: []dest{{"example.com", 443}, {"badexample.com", 443}}},
		{pattern: "*", allow: []dest{{"anything.org", 443}, {"203.0.113.1", 80}}, deny: []dest{{"anything.org", 22}}},
		{pattern: "127.0.0.1:8080", allow: []dest{{"127.0.0.1", 8080}}, deny: []dest{{"localhost", 8080}, {"127.0.0.2", 8080}, {"127.0.0.1", 8081}}},
		{pattern: "[::1]:*", allow: []dest{{"::1", 9}, {"[::1]", 10}}, deny: []dest{{"127.0.0.1", 9}}},
	}
	for _, tt := range tests {
		t.Run(tt.pattern, func(t *testing.T) {
			p, err := workflow.ParseHostPattern(tt.pattern)
			if err != nil {
				t.Fatalf("ParseHostPattern: %v", err)
			}
			for _, d := range tt.allow {
				if !p.Matches(d.host, d.port) {
					t.Errorf("%s does not allow %s:%d", tt.pattern, d.host, d.port)
				}
			}
			for _, d := range tt.deny {
				if p.Matches(d.host, d.port) {
					t.Errorf("%s allows %s:%d", tt.pattern, d.host, d.port)
				}
			}
		})
	}
}

func TestParseHostPatternErrors(t *testing.T) {
	for _, s := range []string{"", "http://example.com", "example.com/path", "user@example.com", "example.com:", "example.com:0", "example.com:http", "exa mple.com", "-bad.example.com", "[::1", "[::1]x"} {
		t.Run(s, func(t *testing.T) {
			_, err := workflow.ParseHostPattern(s)
			if err == nil || !strings.Contains(err.Error(), "allow_hosts entry") {
				t.Errorf("ParseHostPattern(%q) = %v, want an error naming the entry", s, err)
			}
		})
	}
}
