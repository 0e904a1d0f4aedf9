// Package codecache names and describes entries of the generated-code cache:
// the code an AI node's pipeline accepted, kept in a JetStream KV bucket so a
// repeated task calls no model. An entry is found by a key over everything
// that decides whether the same code fits again: the task, the node's type
// and decision values, the shape of the context (never its values), the
// model and the sandbox runtime.
package codecache

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/novaflow/nova/pkg/codecache/cacheentry"
	"github.com/novaflow/nova/pkg/runtimeinfo"
)

// Bucket is the KV bucket holding the entries, one per key.
const Bucket = "nova_codecache"

// An entry, its key and its group are package cacheentry's, which imports
// no NATS client; they are repeated here.
type (
	Input          = cacheentry.Input
	Entry          = cacheentry.Entry
	Verdict        = cacheentry.Verdict
	EntryEmbedding = cacheentry.EntryEmbedding
	SemanticOrigin = cacheentry.SemanticOrigin
	Match          = cacheentry.Match
	Ranking        = cacheentry.Ranking
)

// Key is cacheentry.Key.
func Key(in Input) string { return cacheentry.Key(in) }

// Shape is cacheentry.Shape.
func Shape(raw []byte) string { return cacheentry.Shape(raw) }

// Group is cacheentry.Group.
func Group(in Input, embeddingModel string) string { return cacheentry.Group(in, embeddingModel) }

// CodeDigest is cacheentry.CodeDigest.
func CodeDigest(code string) string { return cacheentry.CodeDigest(code) }

// Decode is cacheentry.Decode.
func Decode(data []byte) (*Entry, error) { return cacheentry.Decode(data) }

// RuntimeFingerprint identifies what generated code can rely on in a Python
// runtime: the interpreter's version and the installed libraries' versions.
// Empty for a nil description: the caller must then not use the cache.
func RuntimeFingerprint(info *runtimeinfo.Info) string {
	if info == nil || info.Python == "" {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "python %s\n", info.Python)
	for _, l := range info.Libraries {
		fmt.Fprintf(h, "%s %s %s %t\n", l.Name, l.Distribution, l.Version, l.Error == "")
	}
	for _, m := range info.Modules {
		fmt.Fprintf(h, "module %s\n", m)
	}
	return "python-" + info.Python + "-" + hex.EncodeToString(h.Sum(nil))[:16]
}
