package redact_test

import (
	"reflect"
	"testing"

	"github.com/novaflow/nova/pkg/redact"
)

func TestIsSecretKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"password", true},
		{"DB_PASSWORD", true},
		{"passwd", true},
		{"client_secret", true},
		{"github_token", true},
		{"API_KEY", true},
		{"openaiApiKey", true},
		{"aws_access_key_id", true},
		{"private_key_pem", true},
		{"credentials", true},
		{"Authorization", true},
		{"auth_token", true},
		{"session_key", true},
		{"invoice_total", false},
		{"customer", false},
		{"branch_decision", false},
		{"keyword", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := redact.IsSecretKey(tt.key); got != tt.want {
				t.Errorf("IsSecretKey(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

func TestValue(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"scalar", "password", "password"},
		{
			"flat map",
			map[string]any{"user": "ann", "password": "hunter2"},
			map[string]any{"user": "ann", "password": redact.Placeholder},
		},
		{
			"nested map and slice",
			map[string]any{
				"db":    map[string]any{"host": "h", "Secret": map[string]any{"x": 1.0}},
				"items": []any{map[string]any{"api_key": "k", "n": 2.0}, "plain"},
			},
			map[string]any{
				"db":    map[string]any{"host": "h", "Secret": redact.Placeholder},
				"items": []any{map[string]any{"api_key": redact.Placeholder, "n": 2.0}, "plain"},
			},
		},
		{
			"string map",
			map[string]string{"Authorization": "Bearer x", "Accept": "json"},
			map[string]string{"Authorization": redact.Placeholder, "Accept": "json"},
		},
		{
			"slice of maps",
			[]map[string]any{{"token": "t"}},
			[]map[string]any{{"token": redact.Placeholder}},
		},
		{
			"token counts stay, token strings go",
			map[string]any{"tokens_input": 120.0, "max_tokens": int64(4096), "tokens": "abc", "token": 1234.0},
			map[string]any{"tokens_input": 120.0, "max_tokens": int64(4096), "tokens": redact.Placeholder, "token": redact.Placeholder},
		},
		{
			"usage objects of numbers stay, anything else under tokens goes",
			map[string]any{
				"tokens":      map[string]any{"prompt": 120.0, "completion": 30.0},
				"auth_tokens": map[string]any{"github": "ghp_x", "count": 2.0},
				"tokens_seen": map[string]any{},
			},
			map[string]any{
				"tokens":      map[string]any{"prompt": 120.0, "completion": 30.0},
				"auth_tokens": redact.Placeholder,
				"tokens_seen": redact.Placeholder,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact.Value(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Value() = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestMapDoesNotModifyInput(t *testing.T) {
	nested := map[string]any{"password": "p"}
	list := []any{map[string]any{"secret": "s"}}
	in := map[string]any{"nested": nested, "list": list}

	out := redact.Map(in)

	if nested["password"] != "p" || list[0].(map[string]any)["secret"] != "s" {
		t.Fatalf("input was modified: %#v", in)
	}
	// The copy must be deep: changing it must not reach the caller's data either.
	out["nested"].(map[string]any)["added"] = true
	if _, ok := nested["added"]; ok {
		t.Error("output shares a nested map with the input")
	}
}

func TestMapNil(t *testing.T) {
	if got := redact.Map(nil); got != nil {
		t.Errorf("Map(nil) = %#v, want nil", got)
	}
}

func TestSecretValuesAndScrub(t *testing.T) {
	ctx := map[string]any{
		"email_password": "hunter2-abc",
		"user":           "ann",
		"smtp":           map[string]any{"host": "mail", "api_key": map[string]any{"primary": "hunter2-abc-longer"}},
		"tokens":         []any{map[string]any{"secret": "abc"}}, // too short to scrub
		"list":           []any{map[string]any{"auth_token": "hunter2-abc"}},
	}
	got := redact.SecretValues(ctx)
	want := []string{"hunter2-abc-longer", "hunter2-abc"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SecretValues() = %q, want %q", got, want)
	}
	msg := "login refused for ann with hunter2-abc-longer (and hunter2-abc)"
	if got, want := redact.Scrub(msg, got), "login refused for ann with [REDACTED] (and [REDACTED])"; got != want {
		t.Errorf("Scrub() = %q, want %q", got, want)
	}
}
