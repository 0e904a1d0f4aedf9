package gateway_test

import (
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/services/gateway/gateway"
)

func TestNewKey(t *testing.T) {
	key, hash, err := gateway.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := gateway.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	if key == other || !strings.HasPrefix(key, gateway.KeyPrefix) || len(key) != len(gateway.KeyPrefix)+43 {
		t.Errorf("keys %q and %q", key, other)
	}
	if gateway.HashKey(key) != hash || len(hash) != 64 {
		t.Errorf("hash %q of %q", hash, key)
	}
	// Quoted anywhere NOVA writes text, the key is hidden by its look.
	if got, found := redact.Text("curl -H 'Authorization: token " + key + "'"); !found || strings.Contains(got, key) {
		t.Errorf("redact.Text does not hide the key: %q", got)
	}
}

func TestParseKeys(t *testing.T) {
	hash := strings.Repeat("ab", 32)
	tests := []struct {
		name, file string
		problems   []string // substrings of the error; nil: valid
	}{
		{"YAML", "- name: ci\n  sha256: " + hash + "\n  scopes: [executions:write, executions:read]\n", nil},
		{"JSON", "[\n\t{\"name\": \"ci\", \"sha256\": \"" + hash + "\", \"scopes\": [\"admin\"]}\n]", nil},
		{"every problem at once", "- name: ci\n  sha256: xyz\n  scopes: [execute, launch]\n- name: ci\n  sha256: " + hash + "\n  scopes: []\n- sha256: " + hash + "\n  scopes: [refine]\n",
			[]string{`key 1 ("ci"): sha256 must be`, `unknown scope "launch"`, `key 2 ("ci"): name used twice`, "key 2 (\"ci\"): scopes are required", "key 3: name is required"}},
		{"a key instead of its hash", "- name: ci\n  sha256: nova_gk_abc\n  scopes: [admin]\n", []string{"sha256 must be"}},
		{"unknown field", "- name: ci\n  key: secret\n  sha256: " + hash + "\n  scopes: [admin]\n", []string{"key"}},
		{"not a list", "name: ci\n", []string{"want a list"}},
		{"empty", "", []string{"no keys"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys, err := gateway.ParseKeys([]byte(tt.file))
			if tt.problems == nil {
				if err != nil || keys.Len() != 1 {
					t.Fatalf("ParseKeys = %v, %v", keys, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseKeys accepted %q", tt.file)
			}
			for _, p := range tt.problems {
				if !strings.Contains(err.Error(), p) {
					t.Errorf("error %q does not say %q", err, p)
				}
			}
		})
	}
}

func TestKeyScopes(t *testing.T) {
	tests := []struct {
		scopes []gateway.Scope
		scope  gateway.Scope
		want   bool
	}{
		{[]gateway.Scope{gateway.ScopeExecutionsRead}, gateway.ScopeExecutionsRead, true},
		{[]gateway.Scope{gateway.ScopeExecutionsRead}, gateway.ScopeExecutionsWrite, false},
		{[]gateway.Scope{gateway.ScopeExecute, gateway.ScopeRefine}, gateway.ScopeExecutionsRead, false},
		{[]gateway.Scope{gateway.ScopeAdmin}, gateway.ScopeExecutionsWrite, true},
		{[]gateway.Scope{gateway.ScopeAdmin}, gateway.ScopeRefine, true},
		// Signalling is a scope of its own: starting workflows does not
		// include deciding for them.
		{[]gateway.Scope{gateway.ScopeSignal}, gateway.ScopeSignal, true},
		{[]gateway.Scope{gateway.ScopeExecutionsWrite}, gateway.ScopeSignal, false},
		{[]gateway.Scope{gateway.ScopeAdmin}, gateway.ScopeSignal, true},
	}
	for _, tt := range tests {
		k := gateway.Key{Scopes: tt.scopes}
		if got := k.Allows(tt.scope); got != tt.want {
			t.Errorf("%v allows %s = %v, want %v", tt.scopes, tt.scope, got, tt.want)
		}
	}
}
