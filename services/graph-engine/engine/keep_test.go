package engine

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
)

// KeepSettings' default (a struct tag, which cannot name the constant) is
// DefaultKeepEnded, which docs/reference/configuration.md gives and engines built without the
// setting use; a keep that is no positive duration is refused by name.
func TestKeepSettings(t *testing.T) {
	var k KeepSettings
	if err := config.Load(&k, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if got, err := k.Keep(); err != nil || got != DefaultKeepEnded {
		t.Errorf("NOVA_KEEP_ENDED_STATE unset: %v, %v; want the engine's DefaultKeepEnded %v", got, err, DefaultKeepEnded)
	}
	for _, bad := range []time.Duration{0, -time.Hour} {
		if _, err := (KeepSettings{KeepEnded: bad}).Keep(); err == nil || !strings.Contains(err.Error(), "NOVA_KEEP_ENDED_STATE") {
			t.Errorf("keep %v: error %v, want one naming NOVA_KEEP_ENDED_STATE", bad, err)
		}
	}
}

// A bucket of executions stored before states could expire is changed in
// place when the engine starts: its states stay, and ended ones stored from
// then on expire.
func TestExecutionsBucketGainsExpiry(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	b := devstacktest.Bus(ctx, t, "keep-engine-test")
	js := b.JetStream()
	old, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketExecutions, History: 1, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := old.Put(ctx, "before", []byte("state")); err != nil {
		t.Fatal(err)
	}
	e, err := New(ctx, Deps{Bus: b})
	if err != nil {
		t.Fatalf("the engine on a bucket without expiry: %v", err)
	}
	stream, err := js.Stream(ctx, "KV_"+BucketExecutions)
	if err != nil {
		t.Fatal(err)
	}
	if cfg := stream.CachedInfo().Config; !cfg.AllowMsgTTL || cfg.SubjectDeleteMarkerTTL != stateMarkerTTL {
		t.Errorf("bucket config: AllowMsgTTL %v, SubjectDeleteMarkerTTL %v; want true, %v", cfg.AllowMsgTTL, cfg.SubjectDeleteMarkerTTL, stateMarkerTTL)
	}
	if entry, err := e.execs.Get(ctx, "before"); err != nil || string(entry.Value()) != "state" {
		t.Fatalf("the state stored before: %v, %v", entry, err)
	}
	// A second start finds the bucket as it left it.
	if _, err := New(ctx, Deps{Bus: b}); err != nil {
		t.Fatalf("the engine started again: %v", err)
	}
	entry, err := e.execs.Get(ctx, "before")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store(ctx, "before", []byte("ended"), entry.Revision(), time.Second); err != nil {
		t.Fatal(err)
	}
	var apiErr *jetstream.APIError
	_, err = e.store(ctx, "before", []byte("again"), entry.Revision(), time.Second)
	if !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
		t.Errorf("a store at a revision passed: %v; want a wrong-last-sequence error", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := e.execs.Get(ctx, "before")
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the state stored with a TTL of 1s is still there after 10s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
