package jsrunner

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// Values a JavaScript number holds exactly come back as the same JSON text,
// whether the code copies them, returns them or leaves them alone.
func TestRunExactContext(t *testing.T) {
	r := newTestRunner(t, Config{})
	ctx, err := jsonvalue.ParseObject([]byte(`{
		"max_safe": 9007199254740991,
		"min_safe": -9007199254740991,
		"half": 1.5,
		"tiny": 5e-324,
		"nested": {"a": [{"b": 9007199254740991, "c": [true, null, "x"]}], "d": {"e": {"f": -1.25}}},
		"ключ": 1,
		"emoji😀": "значение 😀"
	}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range ctx.Keys() {
		want := ctx[k]
		key := jsString(t, k)
		tests := []struct {
			name, code string
			updates    jsonvalue.Object
			value      json.RawMessage // nil for no value
		}{
			{
				name:    "copied",
				code:    "context['out_' + " + key + "] = context[" + key + "]",
				updates: jsonvalue.Object{"out_" + k: want},
			},
			{
				name:    "returned",
				code:    "context.other = 1\nreturn context[" + key + "]",
				updates: jsonvalue.Object{"other": json.RawMessage(`1`)},
				value:   want,
			},
			{
				name:    "read and left untouched",
				code:    "JSON.stringify(context[" + key + "])",
				updates: jsonvalue.Object{},
			},
		}
		for _, tt := range tests {
			t.Run(k+"/"+tt.name, func(t *testing.T) {
				res := run(t, r, runner.Request{Code: tt.code, Context: ctx})
				if res.Status != runner.StatusSuccess {
					t.Fatalf("status %s: %s %s\n%s", res.Status, res.ErrorKind, res.Error, res.Stack)
				}
				if got, want := string(res.Updates.Bytes()), string(tt.updates.Bytes()); got != want {
					t.Errorf("updates\n got %s\nwant %s", got, want)
				}
				if string(res.Value) != string(tt.value) || res.HasValue != (tt.value != nil) {
					t.Errorf("value %s (has %v), want %s", res.Value, res.HasValue, tt.value)
				}
			})
		}
	}
}

// An integer beyond ±(2**53 - 1) would be rounded by JSON.parse: the run is
// refused as a code_error naming where the integer is, and the code never runs.
func TestRunRefusesUnsafeIntegers(t *testing.T) {
	r := newTestRunner(t, Config{})
	tests := []struct {
		name    string
		context string
		paths   []string // in the error
	}{
		{name: "key with a dot", context: `{"order.id": 9007199254740993}`, paths: []string{`["order.id"]`}},
		{name: "nested path", context: `{"order": {"ids": [1, 9007199254740993]}}`, paths: []string{"order.ids[1]"}},
		{name: "negative", context: `{"n": -9007199254740992}`, paths: []string{"n"}},
		{name: "2**200 deep in a list", context: `{"a": [[{"b": 1606938044258990275541962092341162602522202993782792835301376}]]}`, paths: []string{"a[0][0].b"}},
		{
			name:    "every one is named, safe values are not",
			context: `{"safe_int": 9007199254740991, "x": 18446744073709551616, "y": {"z": -9223372036854775808}, "safe_float": 1e+308}`,
			paths:   []string{"x", "y.z"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, err := jsonvalue.ObjectOf(tt.context)
			if err != nil {
				t.Fatal(err)
			}
			res := run(t, r, runner.Request{Code: "console.log('ran')\ncontext.ran = true\nreturn 1", Context: ctx})
			if res.Status != runner.StatusError || res.ErrorKind != runner.KindCodeError {
				t.Fatalf("status %s kind %s error %q; want a code_error", res.Status, res.ErrorKind, res.Error)
			}
			for _, p := range tt.paths {
				if !strings.Contains(res.Error, p) {
					t.Errorf("error %q does not name %s", res.Error, p)
				}
			}
			if strings.Contains(res.Error, "safe_") {
				t.Errorf("error %q names a safe value", res.Error)
			}
			if len(res.Updates) != 0 || res.HasValue || slices.Contains(res.Logs, "ran") {
				t.Errorf("the code ran: updates %s, value %s, logs %q", res.Updates, res.Value, res.Logs)
			}
		})
	}
}

// jsString is a JavaScript string literal for s (a JSON string literal is one).
func jsString(t testing.TB, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
