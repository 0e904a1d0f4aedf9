package runner

import (
	"encoding/json"
	"math/big"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
)

// exactContext is a context whose values JSON libraries commonly change: the
// text of each must come back as it went in. Keys are written as JSON text
// so that nothing in the test passes them through float64.
func exactContext(t testing.TB) jsonvalue.Object {
	t.Helper()
	pow200 := new(big.Int).Lsh(big.NewInt(1), 200).String()
	// Python refuses to read or write integers of more than 4300 digits by
	// default.
	digits5000 := "-" + strings.Repeat("9876543210", 500)
	deep := strings.Repeat(`{"l":[`, 100) + `9007199254740993,-0.0,150.0` + strings.Repeat(`]}`, 100)
	o, err := jsonvalue.ParseObject([]byte(`{
		"above_2_53": 9007199254740993,
		"min_int64": -9223372036854775808,
		"above_uint64": 18446744073709551616,
		"pow_2_200": ` + pow200 + `,
		"digits_5000": ` + digits5000 + `,
		"float_150": 150.0,
		"neg_zero": -0.0,
		"max_exp": 1e+308,
		"small_exp": 1e-05,
		"deep": ` + deep + `,
		"mixed": {"ids": [9007199254740993, -9007199254740993], "ratio": 0.1, "zero": 0.0, "n": null, "t": true},
		"ключ": 1,
		"名前": "ascii value",
		"emoji😀": [1.0, 2],
		"unicode_value": {"ключ": "значение 😀"}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// sameText reports whether got is exactly the JSON text want. Python writes
// strings with non-ASCII characters as \u escapes (json.dumps' ensure_ascii),
// so a want holding any is compared as values instead: strings equal, and
// numbers still by their literal text (json.Number), so 150 is not 150.0.
func sameText(t testing.TB, got, want json.RawMessage) bool {
	t.Helper()
	if !isASCII(want) {
		return reflect.DeepEqual(decoded(t, got), decoded(t, want))
	}
	return string(got) == string(want)
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= 0x80 {
			return false
		}
	}
	return true
}

// pyString is a Python string literal for s (a JSON string literal is one).
func pyString(t testing.TB, s string) string {
	t.Helper()
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestRunExactContext(t *testing.T) {
	forEachMode(t, Config{}, testRunExactContext)
}

func testRunExactContext(t *testing.T, r *Runner) {
	ctx := exactContext(t)
	for _, k := range ctx.Keys() {
		want := ctx[k]
		tests := []struct {
			name, code string
			updates    jsonvalue.Object
		}{
			{
				name:    "copied",
				code:    "context['out_' + " + pyString(t, k) + "] = context[" + pyString(t, k) + "]",
				updates: jsonvalue.Object{"out_" + k: want},
			},
			{
				name:    "read and left untouched",
				code:    "v = context[" + pyString(t, k) + "]\njson.dumps(v)",
				updates: jsonvalue.Object{},
			},
			{
				name:    "put back after a round trip through json",
				code:    "context[" + pyString(t, k) + "] = json.loads(json.dumps(context[" + pyString(t, k) + "]))",
				updates: jsonvalue.Object{},
			},
		}
		for _, tt := range tests {
			t.Run(k+"/"+tt.name, func(t *testing.T) {
				res := run(t, r, Request{Code: tt.code, Context: ctx})
				if res.Status != StatusSuccess {
					t.Fatalf("status %q (%s: %s)\n%s\nstderr: %s", res.Status, res.ErrorKind, res.Error, res.Traceback, res.Stderr)
				}
				if !slices.Equal(res.Updates.Keys(), tt.updates.Keys()) {
					t.Fatalf("updated keys %q, want %q", res.Updates.Keys(), tt.updates.Keys())
				}
				for key, want := range tt.updates {
					if !sameText(t, res.Updates[key], want) {
						t.Errorf("update %q\n got %.300s\nwant %.300s", key, res.Updates[key], want)
					}
				}
				if len(res.Deleted) != 0 {
					t.Errorf("deleted %q", res.Deleted)
				}
			})
		}
	}
}

// The updates of a protocol line keep their numbers' text too.
func TestRunExactProtocolLine(t *testing.T) {
	forEachMode(t, Config{}, func(t *testing.T, r *Runner) {
		res := run(t, r, Request{Code: `print(json.dumps({"status": "success", "context_updates": {"id": 9007199254740993, "p": 2**200, "f": 150.0, "z": -0.0, "e": 1e308}}))`})
		if res.Status != StatusSuccess {
			t.Fatalf("status %q (%s: %s)", res.Status, res.ErrorKind, res.Error)
		}
		want := `{"e":1e+308,"f":150.0,"id":9007199254740993,"p":1606938044258990275541962092341162602522202993782792835301376,"z":-0.0}`
		if got := string(res.Updates.Bytes()); got != want {
			t.Errorf("updates %s, want %s", got, want)
		}
	})
}

// A value that equals the old one in Python but is not the same JSON is an
// update: 0.0 and -0.0, 1 and 1.0, 1 and True. The same value assigned again
// is not.
func TestRunTypeChangesAreUpdates(t *testing.T) {
	forEachMode(t, Config{}, testRunTypeChangesAreUpdates)
}

func testRunTypeChangesAreUpdates(t *testing.T, r *Runner) {
	ctx := jsonvalue.Object{
		"zero":     json.RawMessage(`0.0`),
		"neg_zero": json.RawMessage(`-0.0`),
		"one":      json.RawMessage(`1`),
		"one_f":    json.RawMessage(`1.0`),
		"nested":   json.RawMessage(`{"v":[0.0,1]}`),
	}
	tests := []struct {
		name, code string
		updates    string // exact JSON text; {} for none
	}{
		{name: "0.0 to -0.0", code: "context['zero'] = -0.0", updates: `{"zero":-0.0}`},
		{name: "-0.0 to 0.0", code: "context['neg_zero'] = 0.0", updates: `{"neg_zero":0.0}`},
		{name: "1 to 1.0", code: "context['one'] = 1.0", updates: `{"one":1.0}`},
		{name: "1.0 to 1", code: "context['one_f'] = 1", updates: `{"one_f":1}`},
		{name: "1 to True", code: "context['one'] = True", updates: `{"one":true}`},
		{name: "nested 0.0 to -0.0", code: "context['nested']['v'][0] = -0.0", updates: `{"nested":{"v":[-0.0,1]}}`},
		{name: "nested 1 to 1.0", code: "context['nested']['v'][1] = 1.0", updates: `{"nested":{"v":[0.0,1.0]}}`},
		{name: "nested 1 to True", code: "context['nested']['v'][1] = True", updates: `{"nested":{"v":[0.0,true]}}`},
		{name: "the same values again", code: "context['zero'] = 0.0\ncontext['neg_zero'] = -0.0\ncontext['one'] = 1\ncontext['one_f'] = 1.0\ncontext['nested'] = {'v': [0.0, 1]}", updates: `{}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := run(t, r, Request{Code: tt.code, Context: ctx})
			if res.Status != StatusSuccess {
				t.Fatalf("status %q (%s: %s)\n%s", res.Status, res.ErrorKind, res.Error, res.Traceback)
			}
			if got := string(res.Updates.Bytes()); got != tt.updates {
				t.Errorf("updates %s, want %s", got, tt.updates)
			}
		})
	}
}
