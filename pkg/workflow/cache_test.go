package workflow

import (
	"errors"
	"strings"
	"testing"
)

func TestCacheSettings(t *testing.T) {
	const base = `
name: c
%s
nodes:
  - {id: start, type: start}
  - {id: a, type: action, prompt: "do a" %s}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: end}
`
	tests := []struct {
		name, workflow, node string
		enabled              bool
		validate             string
	}{
		{"defaults", "", "", true, CacheValidateRules},
		{"workflow off", "cache: false", "", false, CacheValidateRules},
		{"node off", "", ", cache: false", false, CacheValidateRules},
		{"node on beats workflow off", "cache: false", ", cache: true", true, CacheValidateRules},
		{"workflow model", "cache_validate: model", "", true, CacheValidateModel},
		{"node rules beats workflow model", "cache_validate: model", ", cache_validate: Rules", true, CacheValidateRules},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			def, err := Parse([]byte(strings.Replace(strings.Replace(base, "%s", tc.workflow, 1), "%s", tc.node, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if err := Validate(def, ValidateOptions{AllowPrompt: true}); err != nil {
				t.Fatal(err)
			}
			n := def.Nodes[1]
			if got := CacheEnabled(def, n); got != tc.enabled {
				t.Errorf("CacheEnabled = %v, want %v", got, tc.enabled)
			}
			if got := CacheValidate(def, n); got != tc.validate {
				t.Errorf("CacheValidate = %q, want %q", got, tc.validate)
			}
		})
	}
}

func TestCacheSettingsErrors(t *testing.T) {
	tests := []struct{ name, doc, field string }{
		{"cache not a boolean", `{name: c, cache: "no", nodes: [{id: s, type: start}, {id: e, type: end}], edges: [{from: s, to: e}]}`, "cache"},
		{"unknown cache_validate", `{name: c, cache_validate: always, nodes: [{id: s, type: start}, {id: e, type: end}], edges: [{from: s, to: e}]}`, "cache_validate"},
		{"node cache_validate", `{name: c, nodes: [{id: s, type: start}, {id: a, type: action, prompt: x, cache_validate: llm}, {id: e, type: end}], edges: [{from: s, to: a}, {from: a, to: e}]}`, "cache_validate"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			def, err := Parse([]byte(tc.doc))
			if err == nil {
				err = Validate(def, ValidateOptions{AllowPrompt: true})
			}
			var ve *ValidationError
			if !errors.As(err, &ve) {
				t.Fatalf("err = %v, want a ValidationError", err)
			}
			found := false
			for _, p := range ve.Problems {
				found = found || p.Field == tc.field
			}
			if !found {
				t.Errorf("problems %v name no field %q", ve.Problems, tc.field)
			}
		})
	}
}
