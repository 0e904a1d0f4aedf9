// Package validatorinfo publishes which code validator is deployed, as a
// fingerprint of everything its verdict depends on besides its input (its
// checks, its settings, its interpreter and its build), in a JetStream KV
// bucket, the way the sandbox publishes its runtime (runtimeinfo). The
// graph engine follows it: a code-cache entry keeps the verdict the code
// got with the validator's fingerprint, and a hit reuses that verdict only
// while the published fingerprint is the same; after a change the cached
// code goes through the validator again.
package validatorinfo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
)

// Bucket is the KV bucket of published fingerprints; Key is the code
// validator's.
const (
	Bucket = "nova_validators"
	Key    = "code-validator"
)

// Declare creates or updates the bucket.
func Declare(ctx context.Context, js jetstream.JetStream, replicas int) (jetstream.KeyValue, error) {
	var kv jetstream.KeyValue
	err := bus.Declare(ctx, "KV "+Bucket, func(ctx context.Context) (err error) {
		kv, err = js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      Bucket,
			Description: "NOVA validators' fingerprints: a cached code's verdict is reused only from the same validator",
			History:     1,
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open KV %s: %w", Bucket, err)
	}
	return kv, nil
}

// Publish makes fingerprint the deployed code validator's. With replicas of
// different builds (a rolling upgrade), the last one started is named: a
// verdict of another build is then not reused, which costs a trip, never a
// wrong verdict, since the fingerprint it names is the one that ran.
func Publish(ctx context.Context, js jetstream.JetStream, fingerprint string, replicas int) error {
	kv, err := Declare(ctx, js, replicas)
	if err != nil {
		return err
	}
	if _, err := kv.PutString(ctx, Key, fingerprint); err != nil {
		return fmt.Errorf("publish code validator fingerprint: %w", err)
	}
	return nil
}

// Fingerprint hashes parts (the caller's checks and settings, each
// length-prefixed) with the running executable, so that any new build is a
// new validator.
func Fingerprint(parts ...string) (string, error) {
	build, err := executableDigest()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	for _, p := range append([]string{build}, parts...) {
		fmt.Fprintf(h, "%d:%s;", len(p), p)
	}
	return "cv-" + hex.EncodeToString(h.Sum(nil))[:24], nil
}

var executable struct {
	once   sync.Once
	digest string
	err    error
}

// executableDigest is the sha256 of the running binary, read once per
// process.
func executableDigest() (string, error) {
	executable.once.Do(func() {
		path, err := os.Executable()
		if err != nil {
			executable.err = fmt.Errorf("find the executable: %w", err)
			return
		}
		f, err := os.Open(path)
		if err != nil {
			executable.err = fmt.Errorf("read the executable: %w", err)
			return
		}
		defer f.Close()
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			executable.err = fmt.Errorf("read the executable: %w", err)
			return
		}
		executable.digest = hex.EncodeToString(h.Sum(nil))
	})
	return executable.digest, executable.err
}

// Follower keeps the published code validator fingerprint current by
// watching its key.
type Follower struct {
	kv      jetstream.KeyValue
	current atomic.Pointer[string]
}

// NewFollower returns a Follower of kv (from Declare); it knows nothing
// until Run has read the key.
func NewFollower(kv jetstream.KeyValue) *Follower { return &Follower{kv: kv} }

// Current is the published fingerprint, "" when none is (yet) known.
func (f *Follower) Current() string {
	if p := f.current.Load(); p != nil {
		return *p
	}
	return ""
}

// Set replaces the known fingerprint (tests).
func (f *Follower) Set(fingerprint string) { f.current.Store(&fingerprint) }

// Run watches the key until ctx ends. A watch that breaks (the bucket was
// deleted, the connection lost) forgets the fingerprint, so no verdict is
// reused on a stale one, and is opened again a moment later.
func (f *Follower) Run(ctx context.Context) error {
	for {
		_ = f.watch(ctx)
		f.Set("")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
}

func (f *Follower) watch(ctx context.Context) error {
	w, err := f.kv.Watch(ctx, Key)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("watch closed")
			}
			if e == nil {
				continue // the initial values are all delivered
			}
			if e.Operation() != jetstream.KeyValuePut {
				f.Set("")
				continue
			}
			f.Set(string(e.Value()))
		}
	}
}
