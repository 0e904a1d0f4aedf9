package valueref_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/internal/natstest"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
)

func openStore(t *testing.T, threshold int) *valueref.Store {
	t.Helper()
	st, err := valueref.Open(context.Background(), natstest.JetStream(t), threshold, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestShrinkAndExpand(t *testing.T) {
	st := openStore(t, 1024)
	ctx := context.Background()
	big := `"` + strings.Repeat("x", 5<<20) + `"`
	// A list of exact numbers: its text must come back byte for byte.
	rows := "[" + strings.Repeat("9007199254740993,150.0,-0.0,", 100) + "1e308]"
	m := jsonvalue.Object{"small": json.RawMessage(`"hi"`), "n": json.RawMessage(`1.0`),
		"big": json.RawMessage(big), "rows": json.RawMessage(rows)}
	if err := st.Shrink(ctx, m); err != nil {
		t.Fatal(err)
	}
	if string(m["small"]) != `"hi"` || string(m["n"]) != `1.0` {
		t.Errorf("small values changed: %s", m.Bytes())
	}
	if enc := m.Bytes(); len(enc) > 1024 {
		t.Errorf("shrunk context is %d bytes", len(enc))
	}
	ref, ok := valueref.RawRef(m["big"])
	if !ok || ref.Size != int64(len(big)) {
		t.Fatalf("big not a reference of the right size: %s", m["big"])
	}
	if _, ok := valueref.RawRef(m["rows"]); !ok {
		t.Errorf("large list not shrunk")
	}
	// Same content, same reference: storing is idempotent.
	again := jsonvalue.Object{"copy": json.RawMessage(big)}
	if err := st.Shrink(ctx, again); err != nil {
		t.Fatal(err)
	}
	if r2, _ := valueref.RawRef(again["copy"]); r2 != ref {
		t.Errorf("same content gave %v and %v", r2, ref)
	}
	if err := st.Expand(ctx, m); err != nil {
		t.Fatal(err)
	}
	if string(m["big"]) != big || string(m["rows"]) != rows {
		t.Error("expanded values differ from the originals")
	}
	// A decoded reference is recognised too (the sandbox's Python sees it).
	v, _ := jsonvalue.Decode(again["copy"])
	if r3, ok := valueref.AsRef(v); !ok || r3 != ref {
		t.Errorf("AsRef of a decoded reference: %v %v", r3, ok)
	}
}

func TestExpandRejectsBadReferences(t *testing.T) {
	st := openStore(t, 1024)
	ctx := context.Background()
	m := jsonvalue.Object{"big": json.RawMessage(`"` + strings.Repeat("y", 4096) + `"`)}
	if err := st.Shrink(ctx, m); err != nil {
		t.Fatal(err)
	}
	ref, _ := valueref.RawRef(m["big"])
	ref.Size = 12
	err := st.Expand(ctx, jsonvalue.Object{"big": ref.JSON()})
	if !errors.Is(err, valueref.ErrBadRef) {
		t.Errorf("tampered reference: %v", err)
	}
	missing := jsonvalue.Object{"gone": json.RawMessage(`{"$ref":"` + valueref.Bucket + `/nothing","size":1,"sha256":"00"}`)}
	if err := st.Expand(ctx, missing); !errors.Is(err, valueref.ErrBadRef) || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("missing reference: %v", err)
	}
}
