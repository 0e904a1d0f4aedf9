package valueref_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/valueref"
)

func openStore(t *testing.T, threshold int) *valueref.Store {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("not ready")
	}
	t.Cleanup(s.Shutdown)
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, _ := jetstream.New(nc)
	st, err := valueref.Open(context.Background(), js, threshold, 1)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestShrinkAndExpand(t *testing.T) {
	st := openStore(t, 1024)
	ctx := context.Background()
	big := strings.Repeat("x", 5<<20)
	m := map[string]any{"small": "hi", "n": 1.0, "big": big, "rows": make([]any, 400)}
	if err := st.Shrink(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m["small"] != "hi" || m["n"] != 1.0 {
		t.Errorf("small values changed: %v", m)
	}
	enc, _ := json.Marshal(m)
	if len(enc) > 1024 {
		t.Errorf("shrunk context is %d bytes", len(enc))
	}
	ref, ok := valueref.AsRef(m["big"])
	if !ok || ref.Size != int64(len(big)+2) {
		t.Fatalf("big not a reference of the right size: %v", m["big"])
	}
	if _, ok := valueref.AsRef(m["rows"]); !ok {
		t.Errorf("large list not shrunk")
	}
	// Same content, same reference: storing is idempotent.
	again := map[string]any{"copy": big}
	if err := st.Shrink(ctx, again); err != nil {
		t.Fatal(err)
	}
	if r2, _ := valueref.AsRef(again["copy"]); r2 != ref {
		t.Errorf("same content gave %v and %v", r2, ref)
	}
	if err := st.Expand(ctx, m); err != nil {
		t.Fatal(err)
	}
	if m["big"] != big || len(m["rows"].([]any)) != 400 {
		t.Error("expanded values differ from the originals")
	}
}

func TestExpandRejectsBadReferences(t *testing.T) {
	st := openStore(t, 1024)
	ctx := context.Background()
	m := map[string]any{"big": strings.Repeat("y", 4096)}
	if err := st.Shrink(ctx, m); err != nil {
		t.Fatal(err)
	}
	tampered := m["big"].(map[string]any)
	tampered["size"] = float64(12)
	err := st.Expand(ctx, map[string]any{"big": tampered})
	if !errors.Is(err, valueref.ErrBadRef) {
		t.Errorf("tampered reference: %v", err)
	}
	missing := map[string]any{"gone": map[string]any{"$ref": valueref.Bucket + "/nothing", "size": 1.0, "sha256": "00"}}
	if err := st.Expand(ctx, missing); !errors.Is(err, valueref.ErrBadRef) || !strings.Contains(err.Error(), `"gone"`) {
		t.Errorf("missing reference: %v", err)
	}
}
