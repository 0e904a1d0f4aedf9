// Package refjson is a large value's reference as it travels in a context
// instead of the value: {"$ref": "nova_values/<sha256>", "size": N,
// "sha256": "<hex>"}. It reads and writes references without the store, and
// imports no NATS client, so that the graph engine's state machine can tell
// one; package valueref keeps the values and repeats each name for its
// callers.
package refjson

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Bucket is the Object Store bucket holding large values.
const Bucket = "nova_values"

// Ref is a reference to a stored value.
type Ref struct {
	Name   string
	Size   int64
	SHA256 string
}

// refJSON is the JSON form of a reference.
type refJSON struct {
	Ref    string `json:"$ref"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// AsRef reports whether v (a decoded JSON value, numbers as float64 or
// json.Number) is a reference.
func AsRef(v any) (Ref, bool) {
	m, ok := v.(map[string]any)
	if !ok || len(m) != 3 {
		return Ref{}, false
	}
	name, ok1 := m["$ref"].(string)
	sum, ok2 := m["sha256"].(string)
	var size int64
	var ok3 bool
	switch n := m["size"].(type) {
	case float64:
		size, ok3 = int64(n), true
	case json.Number:
		i, err := n.Int64()
		size, ok3 = i, err == nil
	}
	if !ok1 || !ok2 || !ok3 || !strings.HasPrefix(name, Bucket+"/") {
		return Ref{}, false
	}
	return Ref{Name: strings.TrimPrefix(name, Bucket+"/"), Size: size, SHA256: sum}, true
}

// RawRef reports whether raw is the JSON of a reference.
func RawRef(raw json.RawMessage) (Ref, bool) {
	// A reference is a small object with "$ref" first-level key; anything
	// else is rejected before decoding.
	if len(raw) == 0 || raw[0] != '{' || len(raw) > 512 || !bytes.Contains(raw, []byte(`"$ref"`)) {
		return Ref{}, false
	}
	var r refJSON
	d := json.NewDecoder(bytes.NewReader(raw))
	d.DisallowUnknownFields()
	if d.Decode(&r) != nil || !strings.HasPrefix(r.Ref, Bucket+"/") || r.SHA256 == "" {
		return Ref{}, false
	}
	return Ref{Name: strings.TrimPrefix(r.Ref, Bucket+"/"), Size: r.Size, SHA256: r.SHA256}, true
}

// JSON is the reference as it travels in a context.
func (r Ref) JSON() json.RawMessage {
	b, _ := json.Marshal(refJSON{Ref: Bucket + "/" + r.Name, Size: r.Size, SHA256: r.SHA256})
	return b
}
