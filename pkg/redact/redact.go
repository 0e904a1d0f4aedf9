// Package redact hides secret-looking values before data leaves the process that owns
// it: in the chain of work, in prompts and in traces. It matches on key names, because
// values carry no marker of being secret, and errs on the side of hiding.
package redact

import (
	"slices"
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
// One exception keeps LLM usage readable: a number, or an object of numbers only,
// under a key that names token counts ("tokens_input", "max_tokens", "tokens") is
// not a secret, while a string or any other value under the same key still is.
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

// isTokenCount reports whether v is a number under a key like "prompt_tokens",
// or an object of numbers only under such a key ("tokens": {"prompt": 120,
// "completion": 30}, an AI node's usage).
func isTokenCount(k string, v any) bool {
	if !strings.Contains(strings.ToLower(k), "tokens") {
		return false
	}
	if m, ok := v.(map[string]any); ok {
		for _, e := range m {
			if !isNumber(e) {
				return false
			}
		}
		return len(m) > 0
	}
	return isNumber(v)
}

func isNumber(v any) bool {
	switch v.(type) {
	case int, int32, int64, uint, uint32, uint64, float32, float64:
		return true
	default:
		return false
	}
}

// minSecretChars is the shortest secret value SecretValues returns: replacing
// shorter ones would garble unrelated text.
const minSecretChars = 4

// SecretValues returns the strings stored under secret keys (IsSecretKey) at any
// depth of v, longest first (so that a secret containing another is replaced
// whole), without duplicates and without values shorter than 4 characters. Text
// derived from data, such as an error message or a traceback, can quote them;
// Scrub hides them there.
func SecretValues(v any) []string {
	var out []string
	var walk func(v any, secret bool)
	walk = func(v any, secret bool) {
		switch t := v.(type) {
		case string:
			if secret && len(t) >= minSecretChars {
				out = append(out, t)
			}
		case map[string]any:
			for k, e := range t {
				walk(e, secret || IsSecretKey(k))
			}
		case []any:
			for _, e := range t {
				walk(e, secret)
			}
		}
	}
	walk(v, false)
	slices.SortFunc(out, func(a, b string) int {
		if len(a) != len(b) {
			return len(b) - len(a)
		}
		return strings.Compare(a, b)
	})
	return slices.Compact(out)
}

// Scrub replaces every occurrence of the secrets (see SecretValues) in s by
// Placeholder.
func Scrub(s string, secrets []string) string {
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Placeholder)
	}
	return s
}
