package service_test

import (
	"testing"

	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// obj makes a context from Go values (jsonvalue.ObjectOf): a float64 is
// written with a fraction (150.0), so use ints, json.Number or JSON text where
// an integer is meant.
func obj(t testing.TB, m map[string]any) jsonvalue.Object {
	t.Helper()
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		t.Fatalf("context %v: %v", m, err)
	}
	return o
}

// updatesOf is a result's context updates as exact JSON text per key; a
// result without updates has none.
func updatesOf(t testing.TB, res *novav1.CodeExecuted) jsonvalue.Object {
	t.Helper()
	o, err := jsonvalue.FromProto(res.GetContextUpdates())
	if err != nil {
		t.Fatalf("context updates %s: %v", res.GetContextUpdates().GetRaw(), err)
	}
	return o
}

// decodedUpdates is updatesOf decoded into Go values (numbers as json.Number).
func decodedUpdates(t testing.TB, res *novav1.CodeExecuted) map[string]any {
	t.Helper()
	m, err := updatesOf(t, res).Decoded()
	if err != nil {
		t.Fatal(err)
	}
	return m
}
