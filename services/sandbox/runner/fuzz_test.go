package runner

import (
	"encoding/json"
	"reflect"
	"testing"
)

// FuzzProtocolScanner: the code's output, however it is cut into writes,
// yields the same protocol message (the last valid line), never a panic, and
// a message's context updates are JSON values.
func FuzzProtocolScanner(f *testing.F) {
	f.Add([]byte("hello\n{\"status\": \"success\", \"context_updates\": {\"id\": 9007199254740993, \"f\": 150.0}}\n"), uint16(7))
	f.Add([]byte(`{"status": "error", "message": "boom"}`), uint16(1))
	f.Add([]byte("{\"status\": \"success\"}\r\n  {\"context_updates\": {\"a\": [1, {\"b\": -0.0}]}, \"message\": 3}"), uint16(13))
	f.Add([]byte("{\"status\": 1}\n{\"context_updates\": []}\n{\"context_updates\": {\"a\": 1"), uint16(2))
	f.Fuzz(func(t *testing.T, out []byte, cut uint16) {
		if len(out) > 64<<10 {
			return
		}
		whole := &protocolScanner{maxLine: 1 << 10}
		whole.scan(out)
		whole.endLine()

		parts := &protocolScanner{maxLine: 1 << 10}
		step := int(cut%64) + 1
		for i := 0; i < len(out); i += step {
			parts.scan(out[i:min(i+step, len(out))])
		}
		parts.endLine()
		if !reflect.DeepEqual(whole.last, parts.last) {
			t.Fatalf("cut every %d bytes: %+v, whole: %+v", step, parts.last, whole.last)
		}
		if m := whole.last; m != nil {
			for k, v := range m.ContextUpdates {
				if !json.Valid(v) {
					t.Fatalf("update %q is not JSON: %q", k, v)
				}
			}
		}
	})
}
