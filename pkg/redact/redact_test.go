package redact_test

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/novaflow/nova/pkg/redact"
)

func TestIsSecretKey(t *testing.T) {
	tests := []struct {
		key  string
		want bool
	}{
		{"password", true},
		{"DB_PASSWORD", true},
		{"passwd", true},
		{"client_secret", true},
		{"github_token", true},
		{"API_KEY", true},
		{"openaiApiKey", true},
		{"aws_access_key_id", true},
		{"private_key_pem", true},
		{"credentials", true},
		{"Authorization", true},
		{"auth_token", true},
		{"session_key", true},
		{"invoice_total", false},
		{"customer", false},
		{"branch_decision", false},
		{"keyword", false},
		{"", false},
	}
	for _, tt := range tests {
		t.Run(tt.key, func(t *testing.T) {
			if got := redact.IsSecretKey(tt.key); got != tt.want {
				t.Errorf("IsSecretKey(%q) = %v, want %v", tt.key, got, tt.want)
			}
		})
	}
}

func TestValue(t *testing.T) {
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"nil", nil, nil},
		{"scalar", "password", "password"},
		{
			"flat map",
			map[string]any{"user": "ann", "password": "hunter2"},
			map[string]any{"user": "ann", "password": redact.Placeholder},
		},
		{
			"nested map and slice",
			map[string]any{
				"db":    map[string]any{"host": "h", "Secret": map[string]any{"x": 1.0}},
				"items": []any{map[string]any{"api_key": "k", "n": 2.0}, "plain"},
			},
			map[string]any{
				"db":    map[string]any{"host": "h", "Secret": redact.Placeholder},
				"items": []any{map[string]any{"api_key": redact.Placeholder, "n": 2.0}, "plain"},
			},
		},
		{
			"string map",
			map[string]string{"Authorization": "Bearer x", "Accept": "json"},
			map[string]string{"Authorization": redact.Placeholder, "Accept": "json"},
		},
		{
			"slice of maps",
			[]map[string]any{{"token": "t"}},
			[]map[string]any{{"token": redact.Placeholder}},
		},
		{
			"exact numbers stay exact, token counts included",
			map[string]any{"amount": json.Number("18446744073709551616"), "ratio": json.Number("-0.0"), "tokens_input": json.Number("120")},
			map[string]any{"amount": json.Number("18446744073709551616"), "ratio": json.Number("-0.0"), "tokens_input": json.Number("120")},
		},
		{
			"token counts stay, token strings go",
			map[string]any{"tokens_input": 120.0, "max_tokens": int64(4096), "tokens": "abc", "token": 1234.0},
			map[string]any{"tokens_input": 120.0, "max_tokens": int64(4096), "tokens": redact.Placeholder, "token": redact.Placeholder},
		},
		{
			"usage objects of numbers stay, anything else under tokens goes",
			map[string]any{
				"tokens":      map[string]any{"prompt": 120.0, "completion": 30.0},
				"auth_tokens": map[string]any{"github": "ghp_x", "count": 2.0},
				"tokens_seen": map[string]any{},
			},
			map[string]any{
				"tokens":      map[string]any{"prompt": 120.0, "completion": 30.0},
				"auth_tokens": redact.Placeholder,
				"tokens_seen": redact.Placeholder,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact.Value(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Value() = %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestMapDoesNotModifyInput(t *testing.T) {
	nested := map[string]any{"password": "p"}
	list := []any{map[string]any{"secret": "s"}}
	in := map[string]any{"nested": nested, "list": list}

	out := redact.Map(in)

	if nested["password"] != "p" || list[0].(map[string]any)["secret"] != "s" {
		t.Fatalf("input was modified: %#v", in)
	}
	// The copy must be deep: changing it must not reach the caller's data either.
	out["nested"].(map[string]any)["added"] = true
	if _, ok := nested["added"]; ok {
		t.Error("output shares a nested map with the input")
	}
}

func TestMapNil(t *testing.T) {
	if got := redact.Map(nil); got != nil {
		t.Errorf("Map(nil) = %#v, want nil", got)
	}
}

func TestSecretValuesAndScrub(t *testing.T) {
	ctx := map[string]any{
		"email_password": "hunter2-abc",
		"user":           "ann",
		"smtp":           map[string]any{"host": "mail", "api_key": map[string]any{"primary": "hunter2-abc-longer"}},
		"tokens":         []any{map[string]any{"secret": "abc"}}, // too short to scrub
		"list":           []any{map[string]any{"auth_token": "hunter2-abc"}},
	}
	got := redact.SecretValues(ctx)
	want := []string{"hunter2-abc-longer", "hunter2-abc"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("SecretValues() = %q, want %q", got, want)
	}
	msg := "login refused for ann with hunter2-abc-longer (and hunter2-abc)"
	if got, want := redact.Scrub(msg, got), "login refused for ann with [REDACTED] (and [REDACTED])"; got != want {
		t.Errorf("Scrub() = %q, want %q", got, want)
	}
}

// Secrets in real formats, assembled at run time (see redact.Fake).
var (
	stripeKey   = redact.Fake("sk_live_", redact.Alnum, 24)
	openaiKey   = redact.Fake("sk-proj-", redact.Alnum, 74) + redact.Fake("T3BlbkFJ", redact.Alnum, 74)
	anthropic   = redact.Fake("sk-ant-api03-", redact.Alnum, 93) + "AA"
	awsKeyID    = redact.Fake("AKIA", redact.Base32, 16)
	githubPAT   = redact.Fake("ghp_", redact.Alnum, 36)
	hfToken     = redact.Fake("hf_", redact.Letters, 34)
	bearerToken = redact.Fake("", redact.Alnum, 40)
	privateKey  = redact.PEMKey("OPENSSH PRIVATE KEY", 400)
	jwtToken    = redact.JWT()
)

func TestValueHidesSecretsByTheirLook(t *testing.T) {
	const r = redact.Placeholder
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"stripe key under an innocuous key", map[string]any{"stripe": stripeKey}, map[string]any{"stripe": r}},
		{"openai key", map[string]any{"openai": openaiKey}, map[string]any{"openai": r}},
		{"anthropic key", map[string]any{"model_key_hint": anthropic}, map[string]any{"model_key_hint": r}},
		{"JWT", map[string]any{"session": jwtToken}, map[string]any{"session": r}},
		{"PEM private key", map[string]any{"deploy": privateKey}, map[string]any{"deploy": r}},
		{
			"inside longer text, the rest stays",
			map[string]any{"notes": "github token is " + githubPAT + ", rotate monthly"},
			map[string]any{"notes": "github token is " + r + ", rotate monthly"},
		},
		{
			"Bearer header in text keeps its scheme",
			map[string]any{"curl": "curl -H 'Authorization: Bearer " + bearerToken + "' https://api.example.com"},
			map[string]any{"curl": "curl -H 'Authorization: Bearer " + r + "' https://api.example.com"},
		},
		{
			"two secrets in one string",
			map[string]any{"notes": awsKeyID + " / " + hfToken},
			map[string]any{"notes": r + " / " + r},
		},
		{
			"nested in lists and maps",
			map[string]any{"providers": []any{
				map[string]any{"name": "aws", "id": awsKeyID, "region": "eu-west-1"},
				[]any{"plain", hfToken},
			}},
			map[string]any{"providers": []any{
				map[string]any{"name": "aws", "id": r, "region": "eu-west-1"},
				[]any{"plain", r},
			}},
		},
		{
			"string map of headers",
			map[string]string{"X-Upstream": "Bearer " + bearerToken, "Accept": "application/json"},
			map[string]string{"X-Upstream": "Bearer " + r, "Accept": "application/json"},
		},
		{"slice of maps", []map[string]any{{"stripe": stripeKey}}, []map[string]any{{"stripe": r}}},
		{"a bare string", "key=" + stripeKey, "key=" + r},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := redact.Value(tt.in); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Value() = %#v, want %#v", got, tt.want)
			}
		})
	}
}

// TestTextLeavesOrdinaryValues: workflows carry hashes, ids, encoded files
// and prose; none of it is a secret.
func TestTextLeavesOrdinaryValues(t *testing.T) {
	sum := sha256.Sum256([]byte("invoice 42"))
	random := make([]byte, 48<<10)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), random...)
	tests := []struct{ name, text string }{
		{"uuid", "3f2b8c1e-9d4a-4b7e-8f10-2c5d6e7f8a9b"},
		{"sha256 hex", hex.EncodeToString(sum[:])},
		{"git commit", "b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b"},
		{"md5 hex with an SK-like neighbour", "TASK" + hex.EncodeToString(sum[:16])},
		{"base64 image", base64.StdEncoding.EncodeToString(png)},
		{"base64 data URI", "data:image/png;base64," + base64.StdEncoding.EncodeToString(png)},
		{"base64url data", base64.RawURLEncoding.EncodeToString(random)},
		{"big number", "18446744073709551616"},
		{"decimal", "-0.000001234"},
		{"email and URL", "ann.lee@example.com https://example.com/api/v1/items?id=42&sort=desc"},
		{"prose about bearers", "The bearer of this letter is authorised to collect the parcel."},
		{"prose about bearer tokens", "Send a bearer token in the Authorization header; see Bearer authentication (RFC 6750)."},
		{"placeholder bearer", "Authorization: Bearer YOUR_ACCESS_TOKEN"},
		{"template bearer", "headers = {'Authorization': f'Bearer {token}'}"},
		{"sk- in prose", "Use sk-learn (scikit-learn) and ask the task desk about risk-based pricing."},
		{"a key prefix alone", "keys start with sk_live_ or AKIA or ghp_"},
		{"a JWT header alone", "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"},
		{"public key", redact.PEMKey("PUBLIC KEY", 300)},
		{"certificate", redact.PEMKey("CERTIFICATE", 600)},
		{"xoxo", "See you soon, xoxo-Ann"},
		{"empty", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, found := redact.Text(tt.text); found || got != tt.text {
				id, _ := redact.ContainsSecret(tt.text)
				t.Errorf("Text() hid something (rule %s): %.200q", id, got)
			}
		})
	}
}

func TestContainsSecret(t *testing.T) {
	tests := []struct {
		text, want string
	}{
		{"pay with " + stripeKey, "stripe-access-token"},
		{"Bearer " + bearerToken, "bearer-token"},
		{jwtToken, "jwt"},
		{privateKey, "private-key"},
		{"a plain sentence", ""},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			id, ok := redact.ContainsSecret(tt.text)
			if id != tt.want || ok != (tt.want != "") {
				t.Errorf("ContainsSecret() = %q, %v, want %q", id, ok, tt.want)
			}
		})
	}
}

// TestScrubHidesSecretsByTheirLook: a traceback may quote a secret that a
// context value held under an innocuous key, whole or without the look that
// gave it away, or one the code found elsewhere.
func TestScrubHidesSecretsByTheirLook(t *testing.T) {
	ctx := map[string]any{
		"notes":  []any{"Authorization: Bearer " + bearerToken},
		"stripe": stripeKey,
		"total":  json.Number("12.50"),
	}
	secrets := redact.SecretValues(ctx)
	if want := []string{bearerToken, stripeKey}; !reflect.DeepEqual(secrets, want) {
		t.Fatalf("SecretValues() = %q, want %q", secrets, want)
	}
	msg := "HTTPError 401: token " + bearerToken + " refused; charge with " + stripeKey + " skipped; fetched " + githubPAT
	want := "HTTPError 401: token [REDACTED] refused; charge with [REDACTED] skipped; fetched [REDACTED]"
	if got := redact.Scrub(msg, secrets); got != want {
		t.Errorf("Scrub() = %q, want %q", got, want)
	}
}
