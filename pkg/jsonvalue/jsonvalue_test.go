package jsonvalue_test

import (
	"encoding/json"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
)

// Values that float64 or a type change would alter, as Python's json module
// writes them.
var exactValues = []struct{ name, text string }{
	{"2**53 + 1", `9007199254740993`},
	{"int64 min", `-9223372036854775808`},
	{"int64 max", `9223372036854775807`},
	{"2**64", `18446744073709551616`},
	{"2**200", `1606938044258990275541962092341162602522202993782792835301376`},
	{"float with no fraction", `150.0`},
	{"negative zero", `-0.0`},
	{"largest exponent", `1e+308`},
	{"smallest subnormal", `5e-324`},
	{"deep nesting", `{"a":{"b":{"c":[[[{"d":[1,2.5,-0.0,{"e":9007199254740993}]}]]]}}}`},
	{"unicode", `{"клиент":"Zoë","ключ 🔑":"日本"}`},
}

func TestObjectKeepsValuesExactly(t *testing.T) {
	for _, tc := range exactValues {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte("{ \"v\" : " + tc.text + " ,\n \"w\": 1 }")
			o, err := jsonvalue.ParseObject(in)
			if err != nil {
				t.Fatal(err)
			}
			if got := string(o["v"]); got != tc.text {
				t.Errorf("member text %s, want %s", got, tc.text)
			}
			want := `{"v":` + tc.text + `,"w":1}`
			if got := string(o.Bytes()); got != want {
				t.Errorf("Bytes() = %s, want %s", got, want)
			}
			again, err := jsonvalue.FromProto(o.Proto())
			if err != nil || string(again.Bytes()) != want {
				t.Errorf("proto round trip: %s, %v", again.Bytes(), err)
			}
		})
	}
}

func TestParseObjectRefusesOtherValues(t *testing.T) {
	for _, in := range []string{`[1,2]`, `"x"`, `3`, `true`} {
		if _, err := jsonvalue.ParseObject([]byte(in)); !errors.Is(err, jsonvalue.ErrNotObject) {
			t.Errorf("ParseObject(%s): %v, want ErrNotObject", in, err)
		}
	}
	if _, err := jsonvalue.ParseObject([]byte(`{"a":`)); err == nil || errors.Is(err, jsonvalue.ErrNotObject) {
		t.Errorf("truncated JSON: %v, want a syntax error", err)
	}
	for _, in := range []string{``, `null`, ` `} {
		o, err := jsonvalue.ParseObject([]byte(in))
		if err != nil || len(o) != 0 {
			t.Errorf("ParseObject(%q) = %v, %v; want the empty object", in, o, err)
		}
	}
}

func TestMergeAndDecode(t *testing.T) {
	o, _ := jsonvalue.ParseObject([]byte(`{"id":9007199254740993,"f":150.0,"keep":"x"}`))
	updates, _ := jsonvalue.ParseObject([]byte(`{"f":151.5,"new":[1,2]}`))
	o.Merge(updates)
	if got, want := string(o.Bytes()), `{"f":151.5,"id":9007199254740993,"keep":"x","new":[1,2]}`; got != want {
		t.Errorf("merged %s, want %s", got, want)
	}
	m, err := o.Decoded()
	if err != nil {
		t.Fatal(err)
	}
	if m["id"] != json.Number("9007199254740993") {
		t.Errorf("decoded id %#v, want json.Number", m["id"])
	}
	if s, ok := o.String("keep"); !ok || s != "x" {
		t.Errorf("String(keep) = %q, %v", s, ok)
	}
	if _, ok := o.String("id"); ok {
		t.Error("String of a number reported ok")
	}
}

// FormatFloat must write what Python's json.dumps writes (checked with
// CPython 3.11), so a float read back from the audit store looks the same.
func TestFormatFloatMatchesPython(t *testing.T) {
	for _, tc := range []struct {
		f    float64
		want string
	}{
		{150, "150.0"}, {math.Copysign(0, -1), "-0.0"}, {0, "0.0"}, {1e308, "1e+308"},
		{1e16, "1e+16"}, {1e15, "1000000000000000.0"}, {0.0001, "0.0001"}, {1e-5, "1e-05"},
		{0.1, "0.1"}, {5e-324, "5e-324"}, {math.MaxFloat64, "1.7976931348623157e+308"},
		{123456789.125, "123456789.125"}, {-2.5e-7, "-2.5e-07"}, {1 << 53, "9007199254740992.0"},
	} {
		if got := jsonvalue.FormatFloat(tc.f); got != tc.want {
			t.Errorf("FormatFloat(%v) = %s, want %s", tc.f, got, tc.want)
		}
	}
}

func TestEncodeKeepsFloatsFloats(t *testing.T) {
	raw, err := jsonvalue.Encode(map[string]any{"f": 150.0, "i": 150, "n": json.Number("9007199254740993"), "s": "<b>"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(raw), `{"f":150.0,"i":150,"n":9007199254740993,"s":"<b>"}`; got != want {
		t.Errorf("Encode = %s, want %s", got, want)
	}
	if _, err := jsonvalue.Encode(math.NaN()); err == nil {
		t.Error("Encode(NaN) did not fail")
	}
}

func TestUnsafeForJavaScript(t *testing.T) {
	o, _ := jsonvalue.ParseObject([]byte(`{
		"ok": 9007199254740991, "neg_ok": -9007199254740991, "float": 1e300,
		"id": 9007199254740993,
		"order": {"ids": [1, -9007199254740992, 3]},
		"weird key": {"x": 18446744073709551616}
	}`))
	got := jsonvalue.UnsafeForJavaScript(o)
	want := []string{"id", "order.ids[1]", `["weird key"].x`}
	if !slices.Equal(got, want) {
		t.Errorf("UnsafeForJavaScript = %q, want %q", got, want)
	}
}

func TestObjectOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   any
		want string
	}{
		{"nil", nil, `{}`},
		{"map", map[string]any{"a": 1, "b": 2.0}, `{"a":1,"b":2.0}`},
		{"text", `{"id": 9007199254740993}`, `{"id":9007199254740993}`},
		{"raw", json.RawMessage(`{"f":150.0}`), `{"f":150.0}`},
	} {
		o, err := jsonvalue.ObjectOf(tc.in)
		if err != nil || string(o.Bytes()) != tc.want {
			t.Errorf("%s: ObjectOf = %s, %v; want %s", tc.name, o.Bytes(), err, tc.want)
		}
	}
	if _, err := jsonvalue.ObjectOf([]int{1}); !errors.Is(err, jsonvalue.ErrNotObject) {
		t.Errorf("ObjectOf(slice): %v", err)
	}
}
