package jsonvalue_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// OwnObject splits what ParseObject splits into the same members, and
// reads what does not split as an object the way MustObject does.
func TestOwnObjectSplitsAsParseObject(t *testing.T) {
	long := make([]string, 2000)
	for i := range long {
		long[i] = fmt.Sprint(i)
	}
	for _, raw := range []string{
		`{}`, ` { } `, `{"a":1}`, `{"a": 1, "b" : [1, {"c": "}]"}], "d": null}`,
		`{"s":"a \"quoted\" \\ }","t":true,"f":false,"n":-1.5e3}`,
		`{"k\u00e9y":{"x":[[],{}]},"a\"b":"v"}`, `{"a":1,"a":2}`,
		`{"xs":[` + strings.Join(long, ",") + `],"n":{"deep":[{"e":"é"}]}}`,
		"{\n\t\"a\": [1,\n 2],\r\n \"b\": \"x y\"\n}",
	} {
		want, err := jsonvalue.ParseObject([]byte(raw))
		if err != nil {
			t.Fatalf("%s: %v", raw, err)
		}
		got := jsonvalue.OwnObject(&novav1.JSONValue{Raw: []byte(raw)})
		if !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Errorf("%s:\nOwnObject %q\nParseObject %q", raw, got, want)
		}
	}
	for _, raw := range []string{``, `null`, `[1]`, `"s"`, `{"a":}`, `{"a" 1}`, `{"a":1,}`, `{"a":[1}`, `{"a":"x`, `{"a":1} x`, `{a:1}`} {
		got := jsonvalue.OwnObject(&novav1.JSONValue{Raw: []byte(raw)})
		if want := jsonvalue.MustObject(&novav1.JSONValue{Raw: []byte(raw)}); !maps.EqualFunc(got, want, func(a, b json.RawMessage) bool { return string(a) == string(b) }) {
			t.Errorf("%q: OwnObject %q, MustObject %q", raw, got, want)
		}
	}
}

// A member of OwnObject's has no room to grow into its neighbours' bytes.
func TestOwnObjectMembersDoNotShareRoom(t *testing.T) {
	raw := []byte(`{"a":[1],"b":[2]}`)
	o := jsonvalue.OwnObject(&novav1.JSONValue{Raw: raw})
	_ = append(o["a"], 'X')
	if string(raw) != `{"a":[1],"b":[2]}` {
		t.Errorf("appending to a member wrote into the text: %s", raw)
	}
}

func BenchmarkObjectOfAList(b *testing.B) {
	xs := make([]string, 10000)
	for i := range xs {
		xs[i] = fmt.Sprint(i)
	}
	v := &novav1.JSONValue{Raw: []byte(`{"xs":[` + strings.Join(xs, ",") + `],"order":"A-1"}`)}
	b.Run("ParseObject", func(b *testing.B) {
		for b.Loop() {
			jsonvalue.MustObject(v)
		}
	})
	b.Run("OwnObject", func(b *testing.B) {
		for b.Loop() {
			jsonvalue.OwnObject(v)
		}
	})
}
