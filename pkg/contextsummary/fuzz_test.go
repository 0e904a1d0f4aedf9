package contextsummary_test

import (
	"testing"

	"github.com/novaflow/nova/pkg/contextsummary"
	"github.com/novaflow/nova/pkg/jsonvalue"
)

// FuzzSummarize: any JSON context summarises without panicking, with one
// field per key.
func FuzzSummarize(f *testing.F) {
	for _, s := range []string{`{}`, `{"pdf":"JVBERi0xLjQK","n":1,"f":1.5,"l":[1,[2,[3,[4]]]],"o":{"a":{"b":{"c":{}}}}}`,
		`{"$ref":{"$ref":"sha256:x","size":1,"sha256":"x"}}`, `{"api_key":"sk_live_x","s":"` + "\xff" + `"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 256<<10 {
			return
		}
		o, err := jsonvalue.ParseObject(data)
		if err != nil {
			return
		}
		m, err := o.Decoded()
		if err != nil {
			return
		}
		s := contextsummary.Summarize(m, contextsummary.Options{})
		if got := len(s.Keys()); got != len(m) {
			t.Fatalf("%d keys summarised, context has %d", got, len(m))
		}
	})
}
