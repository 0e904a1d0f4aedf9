// Package redact hides secrets before data leaves the process that owns it:
// in the chain of work, in prompts and in traces. It recognises a secret two
// ways and errs on the side of hiding: by the name of its key (IsSecretKey:
// "password", "api_key", ...), whatever the value, and by its look (Text:
// "sk_live_...", "ghp_...", "AKIA...", a JWT, a PEM private key, "Bearer
// ..."), whatever the key. The formats are a curated subset of gitleaks'
// rules (rules.go).
package redact

import (
	"encoding/json"
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

// Text returns s with every secret recognised by its look replaced by
// Placeholder, and whether there was one. Only the secret goes: the text
// around it stays readable ("token is [REDACTED]"); for "Bearer <token>" and
// "Authorization: Basic <credentials>" the credentials go, the scheme stays.
func Text(s string) (string, bool) {
	spans := secretRules.spans(s)
	if len(spans) == 0 {
		return s, false
	}
	var b strings.Builder
	b.Grow(len(s))
	last := 0
	for _, sp := range spans {
		b.WriteString(s[last:sp.start])
		b.WriteString(Placeholder)
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String(), true
}

// ContainsSecret reports whether s holds a secret recognised by its look
// (see Text), and the id of the rule that found it ("github-pat",
// "stripe-access-token", "jwt", ...).
func ContainsSecret(s string) (ruleID string, ok bool) {
	secretRules.find(s, func(sp span) bool {
		ruleID, ok = sp.rule, true
		return false
	})
	return ruleID, ok
}

// Map returns a deep copy of m with secrets replaced; see Value. Nil stays nil.
func Map(m map[string]any) map[string]any {
	if m == nil {
		return nil
	}
	return redactMap(m, hideInText)
}

// Value returns a deep copy of v in which the value of every secret key
// (IsSecretKey), at any depth of nested maps and slices, is replaced by
// Placeholder, and so is every secret a string holds (see Text), under any
// key. It understands the shapes decoded JSON and structpb.AsMap produce
// (map[string]any, []any, json.Number) plus map[string]string and
// []map[string]any; other values are returned as they are.
//
// One exception keeps LLM usage readable: a number, or an object of numbers only,
// under a key that names token counts ("tokens_input", "max_tokens", "tokens") is
// not a secret, while a string or any other value under the same key still is.
func Value(v any) any { return value(v, hideInText) }

// hideInText is Text without its report.
func hideInText(s string) string {
	s, _ = Text(s)
	return s
}

// value is Value with what becomes of a string not under a secret key
// (BenchmarkRedactMap keeps strings as they are for its key-only baseline).
func value(v any, str func(string) string) any {
	switch t := v.(type) {
	case string:
		return str(t)
	case map[string]any:
		if t == nil {
			return t
		}
		return redactMap(t, str)
	case map[string]string:
		if t == nil {
			return t
		}
		out := make(map[string]string, len(t))
		for k, s := range t {
			if IsSecretKey(k) {
				s = Placeholder
			} else {
				s = str(s)
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
			out[i] = value(e, str)
		}
		return out
	case []map[string]any:
		if t == nil {
			return t
		}
		out := make([]map[string]any, len(t))
		for i, e := range t {
			if e != nil {
				out[i] = redactMap(e, str)
			}
		}
		return out
	default:
		return v
	}
}

func redactMap(m map[string]any, str func(string) string) map[string]any {
	out := make(map[string]any, len(m))
	for k, e := range m {
		if IsSecretKey(k) && !isTokenCount(k, e) {
			out[k] = Placeholder
			continue
		}
		out[k] = value(e, str)
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
	case int, int32, int64, uint, uint32, uint64, float32, float64, json.Number:
		return true
	default:
		return false
	}
}

// minSecretChars is the shortest secret value SecretValues returns: replacing
// shorter ones would garble unrelated text.
const minSecretChars = 4

// SecretValues returns the strings stored under secret keys (IsSecretKey) at
// any depth of v, and the secrets other strings hold (see Text), longest
// first (so that a secret containing another is replaced whole), without
// duplicates and without values shorter than 4 characters. Text derived
// from data, such as an error message or a traceback, can quote them; Scrub
// hides them there, even where a secret lost the look that gave it away
// (the token of "Bearer <token>" printed alone).
func SecretValues(v any) []string {
	var out []string
	add := func(s string) {
		if len(s) >= minSecretChars {
			out = append(out, s)
		}
	}
	var walk func(v any, secret bool)
	walk = func(v any, secret bool) {
		switch t := v.(type) {
		case string:
			if secret {
				add(t)
				return
			}
			secretRules.find(t, func(sp span) bool {
				add(t[sp.start:sp.end])
				return true
			})
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

// Scrub replaces by Placeholder every occurrence in s of the secrets (see
// SecretValues) and every secret recognised by its look (see Text).
func Scrub(s string, secrets []string) string {
	for _, v := range secrets {
		s = strings.ReplaceAll(s, v, Placeholder)
	}
	return hideInText(s)
}
