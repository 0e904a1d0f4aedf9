package gateway

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Scope is what an API key may do.
type Scope string

// Scopes. Admin implies every other.
const (
	// ScopeExecutionsWrite starts executions and cancels them.
	ScopeExecutionsWrite Scope = "executions:write"
	ScopeExecutionsRead  Scope = "executions:read"
	ScopeExecute         Scope = "execute"
	ScopeRefine          Scope = "refine"
	// ScopeSignal sends signals to executions' wait nodes: the decisions
	// (an approval, say) that resume them. executions:write does not
	// include it, so a key that starts workflows cannot decide for them.
	ScopeSignal Scope = "signal"
	ScopeAdmin  Scope = "admin"
)

var knownScopes = []Scope{ScopeExecutionsWrite, ScopeExecutionsRead, ScopeExecute, ScopeRefine, ScopeSignal, ScopeAdmin}

// KeyPrefix starts every key NewKey makes, so that pkg/redact recognises a
// key by its look wherever it is quoted.
const KeyPrefix = "nova_gk_"

// Key is one API key as the keys file holds it: only the SHA-256 of the
// key, never the key.
type Key struct {
	Name   string  `yaml:"name" json:"name"`
	SHA256 string  `yaml:"sha256" json:"sha256"`
	Scopes []Scope `yaml:"scopes" json:"scopes"`

	hash []byte
}

// Allows reports whether the key has scope s (admin has every scope).
func (k *Key) Allows(s Scope) bool {
	return slices.Contains(k.Scopes, s) || slices.Contains(k.Scopes, ScopeAdmin)
}

// Keys are the API keys the gateway accepts.
type Keys struct {
	keys []*Key
}

// NewKey makes a new random API key and the hex SHA-256 to put in the keys
// file. The key itself is shown once to whoever uses it and kept nowhere.
func NewKey() (key, sha256Hex string, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", "", fmt.Errorf("new API key: %w", err)
	}
	key = KeyPrefix + base64.RawURLEncoding.EncodeToString(b)
	return key, HashKey(key), nil
}

// HashKey is the hex SHA-256 of a key, as the keys file holds it.
func HashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// LoadKeys reads a keys file (see ParseKeys).
func LoadKeys(path string) (*Keys, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("API keys: %w", err)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("API keys file %s: %w", path, err)
	}
	return keys, nil
}

// ParseKeys reads a YAML or JSON list of keys, each with its name, the hex
// SHA-256 of the key and its scopes, e.g. in YAML's flow style:
//
//	[{name: ci, sha256: 9f86d0...0a08, scopes: [executions:write, executions:read]}]
//
// Every problem is reported at once.
func ParseKeys(data []byte) (*Keys, error) {
	var list []*Key
	if trimmed := bytes.TrimSpace(data); len(trimmed) > 0 && trimmed[0] == '[' {
		// JSON (which YAML would refuse where it is indented with tabs).
		dec := json.NewDecoder(bytes.NewReader(trimmed))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&list); err != nil {
			return nil, fmt.Errorf("want a list of {name, sha256, scopes}: %w", err)
		}
	} else {
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&list); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("want a list of {name, sha256, scopes}: %w", err)
		}
	}
	var errs []error
	seen := map[string]bool{}
	for i, k := range list {
		if k == nil {
			errs = append(errs, fmt.Errorf("key %d: empty", i+1))
			continue
		}
		where := fmt.Sprintf("key %d (%q)", i+1, k.Name)
		if strings.TrimSpace(k.Name) == "" {
			errs = append(errs, fmt.Errorf("key %d: name is required", i+1))
		} else if seen[k.Name] {
			errs = append(errs, fmt.Errorf("%s: name used twice", where))
		}
		seen[k.Name] = true
		h, err := hex.DecodeString(k.SHA256)
		if err != nil || len(h) != sha256.Size {
			errs = append(errs, fmt.Errorf("%s: sha256 must be the 64 hex digits of the key's SHA-256", where))
		}
		k.hash = h
		if len(k.Scopes) == 0 {
			errs = append(errs, fmt.Errorf("%s: scopes are required (%s)", where, scopeList()))
		}
		for _, s := range k.Scopes {
			if !slices.Contains(knownScopes, s) {
				errs = append(errs, fmt.Errorf("%s: unknown scope %q (known: %s)", where, s, scopeList()))
			}
		}
	}
	if len(list) == 0 && len(errs) == 0 {
		errs = append(errs, errors.New("no keys"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &Keys{keys: list}, nil
}

func scopeList() string {
	s := make([]string, len(knownScopes))
	for i, k := range knownScopes {
		s[i] = string(k)
	}
	return strings.Join(s, ", ")
}

// Len is the number of keys.
func (ks *Keys) Len() int { return len(ks.keys) }

// lookup returns the key whose hash is the presented key's, or nil. Every
// stored hash is compared in constant time, so the time taken tells nothing
// about which key, or how much of one, matched.
func (ks *Keys) lookup(presented string) *Key {
	sum := sha256.Sum256([]byte(presented))
	var found *Key
	for _, k := range ks.keys {
		if subtle.ConstantTimeCompare(sum[:], k.hash) == 1 {
			found = k
		}
	}
	return found
}

// LocalKey makes a new random key with the admin scope and the Keys that
// accept only it: what `nova dev` prints for its local gateway. The key is
// returned to be shown once; the Keys keep only its hash.
func LocalKey(name string) (string, *Keys, error) {
	key, sum, err := NewKey()
	if err != nil {
		return "", nil, err
	}
	hash, err := hex.DecodeString(sum)
	if err != nil {
		return "", nil, err
	}
	return key, &Keys{keys: []*Key{{Name: name, SHA256: sum, Scopes: []Scope{ScopeAdmin}, hash: hash}}}, nil
}
