// Package valueref moves large context values out of events: a value whose
// JSON is over a threshold is stored once in a JetStream Object Store, named
// by its sha256, and travels as a reference
// {"$ref": "nova_values/<sha256>", "size": N, "sha256": "<hex>"}.
package valueref

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
)

// Bucket is the Object Store bucket holding large values.
const Bucket = "nova_values"

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

// Open creates (or opens) the bucket. threshold <= 0 means DefaultThreshold.
func Open(ctx context.Context, js jetstream.JetStream, threshold int, replicas int) (*Store, error) {
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	obj, err := js.CreateOrUpdateObjectStore(ctx, jetstream.ObjectStoreConfig{
		Bucket:      Bucket,
		Description: "NOVA context values too large to travel in events",
		Storage:     jetstream.FileStorage,
		Replicas:    max(replicas, 1),
	})
	if err != nil {
		return nil, fmt.Errorf("open object store %s: %w", Bucket, err)
	}
	return &Store{obj: obj, threshold: threshold}, nil
}

// Threshold is the size above which values are stored by reference.
func (s *Store) Threshold() int { return s.threshold }

// Ref is a reference to a stored value.
type Ref struct {
	Name   string
	Size   int64
	SHA256 string
}

// AsRef reports whether v is a reference map.
func AsRef(v any) (Ref, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 3 {
		return Ref{}, false
	}
	name, ok1 := m["$ref"].(string)
	sum, ok2 := m["sha256"].(string)
	size, ok3 := m["size"].(float64)
	if !ok1 || !ok2 || !ok3 || !strings.HasPrefix(name, Bucket+"/") {
		return Ref{}, false
	}
	return Ref{Name: strings.TrimPrefix(name, Bucket+"/"), Size: int64(size), SHA256: sum}, true
}

func (r Ref) value() map[string]any {
	return map[string]any{"$ref": Bucket + "/" + r.Name, "size": float64(r.Size), "sha256": r.SHA256}
}

// Shrink replaces, in place, every top-level value of m whose JSON is over
// the threshold by a reference, storing the value first. Storing is
// idempotent: the same content is stored once.
func (s *Store) Shrink(ctx context.Context, m map[string]any) error {
	for k, v := range m {
		if _, isRef := AsRef(v); isRef {
			continue
		}
		if str, ok := v.(string); ok && len(str) <= s.threshold/2 {
			continue // cannot be over the threshold once encoded
		}
		data, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("encode context value %q: %w", k, err)
		}
		if len(data) <= s.threshold {
			continue
		}
		ref, err := s.put(ctx, data)
		if err != nil {
			return fmt.Errorf("store context value %q: %w", k, err)
		}
		m[k] = ref.value()
	}
	return nil
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

// Expand replaces, in place, every top-level reference in m by its value,
// checking size and digest.
func (s *Store) Expand(ctx context.Context, m map[string]any) error {
	for k, v := range m {
		ref, ok := AsRef(v)
		if !ok {
			continue
		}
		val, err := s.Get(ctx, ref)
		if err != nil {
			return fmt.Errorf("context value %q: %w", k, err)
		}
		m[k] = val
	}
	return nil
}

// Get reads and decodes a referenced value.
func (s *Store) Get(ctx context.Context, ref Ref) (any, error) {
	data, err := s.obj.GetBytes(ctx, ref.Name)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrBadRef, ref.Name, err)
	}
	sum := sha256.Sum256(data)
	if int64(len(data)) != ref.Size || hex.EncodeToString(sum[:]) != ref.SHA256 {
		return nil, fmt.Errorf("%w %s: content does not match its size or sha256", ErrBadRef, ref.Name)
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrBadRef, ref.Name, err)
	}
	return v, nil
}
