package outputschema_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/novaflow/nova/services/sandbox/outputschema"
)

// FuzzAnalyze: any JSON value is described without a panic, and the
// description encodes as JSON.
func FuzzAnalyze(f *testing.F) {
	for _, s := range []string{`[{"title":"a","price":1.5},{"title":"b","price":null}]`, `{"a":1}`, `"text"`, `[]`, `[[1,2],[3]]`,
		`[{"a":{"b":[1,{"c":9007199254740993}]}}, 1, "x", null]`, `123456789012345678901234567890`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 64<<10 {
			return
		}
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if dec.Decode(&v) != nil {
			return
		}
		a := outputschema.Analyze(v)
		if _, err := json.Marshal(a); err != nil {
			t.Fatalf("analysis does not encode: %v", err)
		}
		if m, ok := v.(map[string]any); ok {
			_ = outputschema.ForUpdates(m)
		}
	})
}
