package jsonvalue_test

import (
	"bytes"
	"reflect"
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

// FuzzDecode: Decode gives what encoding/json's decoder alone gives
// (DecodeAny, numbers as json.Number), and fails where it fails.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`null`, `true`, `false`, `0`, `-0`, `01`, `1.`, `.5`, `-`, `1e`, `1e+`, `1E-7`,
		`9007199254740993`, `150.0`, `-0.0e+00`, `""`, `"a"`, `"é"`, `"a\"b"`, `"a\\"`, `"\u00e9"`, "\"a\x01\"",
		"\"\xff\"", `"`, `"a`, ` 1`, `1 `, `nul`, `truex`, `[1]`, `{"a":1}`, `1 2`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, err := jsonvalue.Decode(raw)
		want, wantErr := jsonvalue.DecodeAny(raw)
		if (err != nil) != (wantErr != nil) {
			t.Fatalf("Decode(%q): error %v, the decoder's %v", raw, err, wantErr)
		}
		if err == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("Decode(%q) = %#v, the decoder gives %#v", raw, got, want)
		}
	})
}

// BenchmarkDecoded: a context's members decoded, as the audit store and the
// agents do with every context they read.
func BenchmarkDecoded(b *testing.B) {
	o, err := jsonvalue.ParseObject([]byte(`{"x":1,"total":1234.5,"name":"orders-2026-11","ok":true,"note":null,` +
		`"count":42,"region":"eu-west","id":9007199254740993,"items":[{"sku":"a","qty":2},{"sku":"b","qty":1}]}`))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := o.Decoded(); err != nil {
			b.Fatal(err)
		}
	}
}
