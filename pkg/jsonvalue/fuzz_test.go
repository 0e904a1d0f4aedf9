package jsonvalue_test

import (
	"bytes"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
)

// FuzzParseObject: any object that parses writes back to bytes that parse
// to the same members, and compacting is idempotent.
func FuzzParseObject(f *testing.F) {
	for _, s := range []string{`{}`, `null`, `{"id":9007199254740993,"f":150.0,"z":-0.0,"big":1e308}`,
		`{"nested":{"l":[1,2.5,{"é":"ü"}]}, "s":"a\u0000b"}`, `{"a":1,"a":2}`, `[1]`, `{"a":`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		o, err := jsonvalue.ParseObject(data)
		if err != nil {
			return
		}
		again, err := jsonvalue.ParseObject(o.Bytes())
		if err != nil {
			t.Fatalf("Bytes of a parsed object does not parse: %v\n%s", err, o.Bytes())
		}
		if len(again) != len(o) {
			t.Fatalf("%d members, then %d", len(o), len(again))
		}
		for k, v := range o {
			c := jsonvalue.Compact(v)
			if !bytes.Equal(jsonvalue.Compact(c), c) {
				t.Fatalf("Compact not idempotent for %q", v)
			}
			if !bytes.Equal(jsonvalue.Compact(again[k]), c) {
				t.Fatalf("member %q: %s, then %s", k, v, again[k])
			}
			if _, err := jsonvalue.Decode(v); err != nil {
				t.Fatalf("member %q does not decode: %v", k, err)
			}
		}
	})
}
