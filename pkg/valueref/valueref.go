// Package valueref moves large context values out of events: a value whose
// JSON is over a threshold is stored once in a JetStream Object Store, named
// by its sha256, and travels as a reference
// {"$ref": "nova_values/<sha256>", "size": N, "sha256": "<hex>"}.
package valueref

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/valueref/refjson"
)

// DefaultThreshold is the JSON size above which a value is stored by reference.
const DefaultThreshold = 256 << 10

// ErrBadRef is returned for a reference that names no stored value or whose
// content does not match its digest.
var ErrBadRef = errors.New("bad value reference")

// Store puts and gets large values.
type Store struct {
	obj       jetstream.ObjectStore
	threshold int
}

// Open declares the bucket with replicas (creating it, or updating its
// settings) and opens it. threshold <= 0 means DefaultThreshold.
//
// Services, which own the deployment's settings, pass their replicas.
// Clients pass replicas <= 0: the bucket is opened as it is, and created
// with one replica only when no service has created it yet, so that a
// producer never changes a three-replica bucket to one.
func Open(ctx context.Context, js jetstream.JetStream, threshold int, replicas int) (*Store, error) {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	if replicas <= 0 {
		obj, err := js.ObjectStore(ctx, Bucket)
		if err == nil {
			return &Store{obj: obj, threshold: threshold}, nil
		}
		if !errors.Is(err, jetstream.ErrBucketNotFound) {
			return nil, fmt.Errorf("open object store %s: %w", Bucket, err)
		}
	}
	var obj jetstream.ObjectStore
	err := bus.Declare(ctx, "object store "+Bucket, func(ctx context.Context) (err error) {
		obj, err = js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      Bucket,
			Description: "NOVA context values too large to travel in events",
			Storage:     jetstream.FileStorage,
			Replicas:    max(replicas, 1),
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", Bucket, err)
	}
	return &Store{obj: obj, threshold: threshold}, nil
}

// Threshold is the size above which values are stored by reference.
func (s *Store) Threshold() int { return s.threshold }

// A reference and its JSON are package refjson's, which imports no NATS
// client; they are repeated here.
type Ref = refjson.Ref

// Bucket is refjson.Bucket, the Object Store bucket holding large values.
const Bucket = refjson.Bucket

// AsRef is refjson.AsRef.
func AsRef(v any) (Ref, bool) { return refjson.AsRef(v) }

// RawRef is refjson.RawRef.
func RawRef(raw json.RawMessage) (Ref, bool) { return refjson.RawRef(raw) }

// Shrink replaces, in place, every member of the object whose JSON is over
// the threshold by a reference, storing the value first (its exact text).
// Storing is idempotent: the same content is stored once.
func (s *Store) Shrink(ctx context.Context, o map[string]json.RawMessage) error {
	for k, raw := range o {
		if len(raw) <= s.threshold {
			continue
		}
		ref, err := s.put(ctx, raw)
		if err != nil {
			return fmt.Errorf("store context value %q: %w", k, err)
		}
		o[k] = ref.JSON()
	}
	return nil
}

// ShrinkTo stores members of the object by reference, the largest first,
// until its JSON text is at most limit bytes or no member is larger than
// its reference; it returns the text's size then. Shrink stores the members
// above the threshold; ShrinkTo is for an object that must fit a message
// though each of its values is small (50 values of 25 KB).
func (s *Store) ShrinkTo(ctx context.Context, o map[string]json.RawMessage, limit int) (int, error) {
	size := 2 // {}
	keys := make([]string, 0, len(o))
	for k, raw := range o {
		size += len(k) + 4 + len(raw) // "k":v, (an upper bound for escaped keys aside)
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Compare(len(o[b]), len(o[a])) })
	for _, k := range keys {
		if size <= limit {
			break
		}
		raw := o[k]
		if _, ok := RawRef(raw); ok {
			continue
		}
		ref, err := s.put(ctx, raw)
		if err != nil {
			return size, fmt.Errorf("store context value %q: %w", k, err)
		}
		text := ref.JSON()
		if len(text) >= len(raw) {
			break // the rest are smaller still: a reference saves nothing
		}
		o[k] = text
		size -= len(raw) - len(text)
	}
	return size, nil
}

func (s *Store) put(ctx context.Context, data []byte) (Ref, error) {
	sum := sha256.Sum256(data)
	ref := Ref{Name: hex.EncodeToString(sum[:]), Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])}
	if info, err := s.obj.GetInfo(ctx, ref.Name); err == nil && info.Size == uint64(len(data)) && !info.Deleted {
		return ref, nil
	}
	if _, err := s.obj.Put(ctx, jetstream.ObjectMeta{Name: ref.Name}, bytes.NewReader(data)); err != nil {
		return Ref{}, err
	}
	return ref, nil
}

// Expand replaces, in place, every member of the object that is a reference
// by the value's text, checking size and digest.
func (s *Store) Expand(ctx context.Context, o map[string]json.RawMessage) error {
	for k, raw := range o {
		ref, ok := RawRef(raw)
		if !ok {
			continue
		}
		val, err := s.Get(ctx, ref)
		if err != nil {
			return fmt.Errorf("context value %q: %w", k, err)
		}
		o[k] = val
	}
	return nil
}

// Get reads a referenced value's JSON text, checking its size, digest and
// syntax.
func (s *Store) Get(ctx context.Context, ref Ref) (json.RawMessage, error) {
	data, err := s.obj.GetBytes(ctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrBadRef, ref.Name, err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("%w %s: content does not match its size or sha256", ErrBadRef, ref.Name)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%w %s: not JSON", ErrBadRef, ref.Name)
	}
	return data, nil
}
