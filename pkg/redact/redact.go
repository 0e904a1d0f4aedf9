// Package redact hides secret-looking values before data leaves the process that owns
// it: in the chain of work, in prompts and in traces. It matches on key names, because
// values carry no marker of being secret, and errs on the side of hiding.
package redact

import (
	"strings"
)

// Placeholder replaces every redacted value.
const Placeholder = "[REDACTED]"

// secretWords are matched as substrings of the lowercased key, so "DB_PASSWORD",
// "github_token" and "X-Api_Key" all match.
var secretWords = []string{
	"password", "passwd", "secret", "token", "api_key", "apikey", "access_key",
	"private_key", "credential", "authorization", "auth_token", "session_key",
}

// IsSecretKey reports whether a value stored under key k should be hidden.
func IsSecretKey(k string) bool {
	k = strings.ToLower(k)
	for _, w := range secretWords {
		if strings.Contains(k, w) {
			return true
		}
	}
	return false
}

// Map returns a deep copy of m with secret values replaced; see Value. Nil stays nil.
func Map(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return redactMap(m)
}

// Value returns a deep copy of v in which the value of every secret key (IsSecretKey),
// at any depth of nested maps and slices, is replaced by Placeholder. It understands
// the shapes decoded JSON and structpb.AsMap produce (map[string]any, []any) plus
// map[string]string and []map[string]any; other values are returned as they are.
//
// One exception keeps LLM usage readable: a number under a key that names token
// counts ("tokens_input", "max_tokens", "total_tokens") is not a secret, while a
// string under the same key still is.
func Value(v any) any {
	switch t := v.(type) {
	case map[string]any:
		if t == nil {
			return t
		}
		return redactMap(t)
	case map[string]string:
		if t == nil {
			return t
		}
		out := make(map[string]string, len(t))
		for k, s := range t {
			if IsSecretKey(k) {
				s = Placeholder
			}
			out[k] = s
		}
		return out
	case []any:
		if t == nil {
			return t
		}
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = Value(e)
		}
		return out
	case []map[string]any:
		if t == nil {
			return t
		}
		out := make([]map[string]any, len(t))
		for i, e := range t {
			out[i] = Map(e)
		}
		return out
	default:
		return v
	}
}

func redactMap(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, e := range m {
		if IsSecretKey(k) && !isTokenCount(k, e) {
			out[k] = Placeholder
			continue
		}
		out[k] = Value(e)
	}
	return out
}

// isTokenCount reports whether v is a number under a key like "prompt_tokens".
func isTokenCount(k string, v any) bool {
	if !strings.Contains(strings.ToLower(k), "tokens") {
		return false
	}
	switch v.(type) {
	case int, int32, int64, uint, uint32, uint64, float32, float64:
		return true
	default:
		return false
	}
}
