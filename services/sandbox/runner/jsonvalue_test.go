package runner

import (
	"encoding/json"
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
)

// obj makes a request context from Go values (jsonvalue.ObjectOf): a float64
// is written with a fraction (150.0), so use ints, json.Number or JSON text
// where an integer is meant.
func obj(t testing.TB, m map[string]any) jsonvalue.Object {
	t.Helper()
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		t.Fatalf("context %v: %v", m, err)
	}
	return o
}

// decoded is the Go value of a JSON text, numbers as json.Number; nil (no
// value at all) decodes to nil.
func decoded(t testing.TB, raw json.RawMessage) any {
	t.Helper()
	if raw == nil {
		return nil
	}
	v, err := jsonvalue.Decode(raw)
	if err != nil {
		t.Fatalf("decode %s: %v", raw, err)
	}
	return v
}
