package codecache

import (
	"testing"

	"github.com/novaflow/nova/pkg/runtimeinfo"
)

func TestShape(t *testing.T) {
	tests := []struct {
		name, a, b string
		same       bool
	}{
		{"values differ", `{"total": 1500, "name": "Acme"}`, `{"name": "Zed", "total": 20.5}`, true},
		{"key order", `{"a": 1, "b": true}`, `{"b": false, "a": 2}`, true},
		{"array length", `{"items": [1, 2, 3]}`, `{"items": [7]}`, true},
		{"nested values", `{"o": {"x": [{"k": "v"}]}}`, `{"o": {"x": [{"k": "w"}, {"k": ""}]}}`, true},
		{"type differs", `{"total": 1500}`, `{"total": "1500"}`, false},
		{"extra key", `{"total": 1500}`, `{"total": 1500, "currency": "EUR"}`, false},
		{"renamed key", `{"total": 1500}`, `{"amount": 1500}`, false},
		{"nesting differs", `{"o": {"x": 1}}`, `{"o": {"x": {"y": 1}}}`, false},
		{"null versus value", `{"x": null}`, `{"x": 0}`, false},
		{"mixed array", `{"a": [1, "x"]}`, `{"a": [1]}`, false},
		{"empty array", `{"a": []}`, `{"a": [1]}`, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sa, sb := Shape([]byte(tc.a)), Shape([]byte(tc.b))
			if (sa == sb) != tc.same {
				t.Errorf("Shape(%s) = %s\nShape(%s) = %s\nsame = %v, want %v", tc.a, sa, tc.b, sb, sa == sb, tc.same)
			}
		})
	}
	if got := Shape([]byte(`{"b": [1, "x", 2], "a": {"c": null}}`)); got != `{"a":{"c":null},"b":[number|string]}` {
		t.Errorf("shape %s", got)
	}
	if got := Shape([]byte(`{"secret": "hunter2", "n": 42}`)); got != `{"n":number,"secret":string}` {
		t.Errorf("a shape must hold no values: %s", got)
	}
}

func TestKey(t *testing.T) {
	base := Input{Task: "Calculate discount", NodeType: "action", Shape: `{"total":number}`, Model: "gpt-4o-mini", Language: "python", Runtime: "python-3.11"}
	k := Key(base)
	if len(k) != 64 || Key(base) != k {
		t.Fatalf("key %q is not a stable sha256", k)
	}
	change := map[string]func(*Input){
		"task":     func(i *Input) { i.Task += "!" },
		"type":     func(i *Input) { i.NodeType = "decision" },
		"values":   func(i *Input) { i.DecisionValues = []string{"yes"} },
		"shape":    func(i *Input) { i.Shape = `{"total":string}` },
		"model":    func(i *Input) { i.Model = "gpt-4o" },
		"language": func(i *Input) { i.Language = "javascript" },
		"runtime":  func(i *Input) { i.Runtime = "python-3.12" },
		"boundary": func(i *Input) { i.Task, i.NodeType = "Calculate discountaction", "" },
	}
	for name, f := range change {
		in := base
		f(&in)
		if Key(in) == k {
			t.Errorf("changing the %s keeps the key", name)
		}
	}
	a, b := base, base
	a.DecisionValues, b.DecisionValues = []string{"yes", "no"}, []string{"no", "yes"}
	if Key(a) != Key(b) {
		t.Error("the order of decision values changes the key")
	}
}

func TestRuntimeFingerprint(t *testing.T) {
	if RuntimeFingerprint(nil) != "" || RuntimeFingerprint(&runtimeinfo.Info{}) != "" {
		t.Error("an unknown runtime must have no fingerprint")
	}
	info := func(python, pandas string) *runtimeinfo.Info {
		return &runtimeinfo.Info{Python: python, Modules: []string{"json", "pandas"},
			Libraries: []runtimeinfo.Library{{Name: "pandas", Distribution: "pandas", Version: pandas}}}
	}
	a := RuntimeFingerprint(info("3.11.2", "2.2.0"))
	if a == "" || a != RuntimeFingerprint(info("3.11.2", "2.2.0")) {
		t.Fatalf("fingerprint %q not stable", a)
	}
	if a == RuntimeFingerprint(info("3.12.1", "2.2.0")) || a == RuntimeFingerprint(info("3.11.2", "2.2.1")) {
		t.Error("a new python or library version keeps the fingerprint")
	}
}

func TestEntryRoundTrip(t *testing.T) {
	e := &Entry{Code: "context['x'] = 1", Language: "python", NodeType: "decision", Execution: "x1", Node: "n", Tokens: 10, CostUSD: 0.01}
	data, err := e.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Decode(data)
	if err != nil || *got != *e {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := Decode([]byte(`{"code": " "}`)); err == nil {
		t.Error("an entry without code decodes")
	}
}
