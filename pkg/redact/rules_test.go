package redact

import (
	"encoding/base64"
	"math/rand/v2"
	"strings"
	"testing"
)

// Alphabets of fake tokens.
const (
	upper    = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	letters  = upper + "abcdefghijklmnopqrstuvwxyz"
	digits   = "0123456789"
	alnum    = letters + digits
	hexLower = "0123456789abcdef"
	lowerNum = "abcdefghijklmnopqrstuvwxyz" + digits
	upperNum = upper + digits
	base32   = upper + "234567"
	base64s  = alnum + "+/"
)

// fake is prefix and n characters of alphabet, the same on every run: a
// token of a real format that is nobody's secret. The tests assemble their
// tokens at run time so that no source file holds one that secret scanners
// would report.
func fake(prefix, alphabet string, n int) string {
	r := rand.New(rand.NewPCG(uint64(n), uint64(len(prefix)+len(alphabet))))
	b := []byte(prefix)
	for range n {
		b = append(b, alphabet[r.IntN(len(alphabet))])
	}
	return string(b)
}

// pemKey is a PEM block of the given type with n bytes of key data.
func pemKey(kind string, n int) string {
	body := base64.StdEncoding.EncodeToString([]byte(fake("", alnum, n)))
	var lines []string
	for len(body) > 64 {
		lines, body = append(lines, body[:64]), body[64:]
	}
	lines = append(lines, body)
	return "-----BEGIN " + kind + "-----\n" + strings.Join(lines, "\n") + "\n-----END " + kind + "-----"
}

// jwt is a signed JSON Web Token.
func jwt() string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"HS256","typ":"JWT"}`)) + "." +
		enc([]byte(`{"sub":"1234567890","name":"Ann Lee","iat":1516239022}`)) + "." + fake("", alnum+"-_", 43)
}

// ruleExamples has, for every rule, a text holding one secret and the
// secret, as the rule's own format describes it.
func ruleExamples() map[string]struct{ text, secret string } {
	ex := map[string]struct{ text, secret string }{}
	token := func(id, secret string) { ex[id] = struct{ text, secret string }{secret, secret} }
	inText := func(id, text, secret string) { ex[id] = struct{ text, secret string }{text, secret} }

	token("aws-access-token", fake("AKIA", base32, 16))
	token("github-pat", fake("ghp_", alnum, 36))
	token("github-oauth", fake("gho_", alnum, 36))
	token("github-app-token", fake("ghs_", alnum, 36))
	token("github-refresh-token", fake("ghr_", alnum, 36))
	token("github-fine-grained-pat", fake("github_pat_", alnum, 22)+fake("_", alnum, 59))
	token("gitlab-pat", fake("glpat-", alnum, 20))
	token("gitlab-pat-routable", fake("glpat-", alnum, 30)+fake(".01", lowerNum, 7))
	token("gitlab-ptt", fake("glptt-", hexLower, 40))
	token("gitlab-rrt", fake("GR1348941", alnum, 20))
	token("gitlab-runner-authentication-token", fake("glrt-", alnum, 20))
	token("gitlab-runner-authentication-token-routable", fake("glrt-t1_", alnum, 30)+fake(".01", lowerNum, 7))
	token("gitlab-deploy-token", fake("gldt-", alnum, 20))
	token("gitlab-cicd-job-token", fake("glcbt-64_", alnum, 20))
	token("gitlab-feed-token", fake("glft-", alnum, 20))
	token("gitlab-oauth-app-secret", fake("gloas-", alnum, 64))
	token("slack-bot-token", fake("xoxb-", digits, 10)+fake("-", digits, 12)+fake("-", alnum, 24))
	token("slack-user-token", fake("xoxp-", digits, 10)+fake("-", digits, 11)+fake("-", digits, 12)+fake("-", alnum, 32))
	token("slack-app-token", fake("xapp-1-A", upperNum, 10)+fake("-", digits, 13)+fake("-", hexLower, 64))
	token("slack-legacy-bot-token", fake("xoxb-", digits, 8)+fake("-", alnum, 24))
	token("slack-legacy-token", fake("xoxs-", digits, 10)+fake("-", digits, 9)+fake("-", digits, 11)+fake("-", hexLower, 64))
	token("slack-legacy-workspace-token", fake("xoxa-2-", alnum, 30))
	token("slack-config-access-token", fake("xoxe.xoxp-1-", upperNum, 164))
	token("slack-config-refresh-token", fake("xoxe-1-", upperNum, 146))
	webhook := "hooks.slack.com/services/" + fake("T", upperNum, 8) + fake("/B", upperNum, 10) + fake("/", alnum, 24)
	inText("slack-webhook-url", "https://"+webhook, webhook)
	token("stripe-access-token", fake("sk_live_", alnum, 24))
	token("openai-api-key", fake("sk-proj-", alnum, 74)+fake("T3BlbkFJ", alnum, 74))
	token("anthropic-api-key", fake("sk-ant-api03-", alnum, 93)+"AA")
	token("anthropic-admin-api-key", fake("sk-ant-admin01-", alnum, 93)+"AA")
	token("gcp-api-key", fake("AIza", alnum, 35))
	token("huggingface-access-token", fake("hf_", letters, 34))
	token("huggingface-organization-api-token", fake("api_org_", letters, 34))
	token("perplexity-api-key", fake("pplx-", alnum, 48))
	token("jwt", jwt())
	token("private-key", pemKey("RSA PRIVATE KEY", 600))
	token("age-secret-key", fake("AGE-SECRET-KEY-1", "QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L", 58))
	token("npm-access-token", fake("npm_", alnum, 36))
	token("pypi-upload-token", fake("pypi-AgEIcHlwaS5vcmc", alnum, 60))
	token("sendgrid-api-token", fake("SG.", alnum, 22)+fake(".", alnum, 43))
	token("twilio-api-key", fake("SK", hexLower, 32))
	token("digitalocean-pat", fake("dop_v1_", hexLower, 64))
	token("digitalocean-access-token", fake("doo_v1_", hexLower, 64))
	token("digitalocean-refresh-token", fake("dor_v1_", hexLower, 64))
	token("shopify-access-token", fake("shpat_", hexLower, 32))
	token("shopify-custom-access-token", fake("shpca_", hexLower, 32))
	token("shopify-private-app-access-token", fake("shppa_", hexLower, 32))
	token("shopify-shared-secret", fake("shpss_", hexLower, 32))
	token("sentry-user-token", fake("sntryu_", hexLower, 64))
	token("sentry-org-token", fake("sntrys_eyJpYXQiO", base64s, 40)+fake("LCJyZWdpb25fdXJs", base64s, 60)+fake("_", base64s, 43))
	token("vault-service-token", fake("hvs.", alnum, 100))
	token("vault-batch-token", fake("hvb.", alnum, 150))
	token("hashicorp-tf-api-token", fake("", lowerNum, 14)+fake(".atlasv1.", lowerNum, 65))
	token("databricks-api-token", fake("dapi", hexLower, 32))
	token("doppler-api-token", fake("dp.pt.", alnum, 43))
	token("linear-api-key", fake("lin_api_", alnum, 40))
	token("grafana-cloud-api-token", fake("glc_", alnum, 60))
	token("grafana-service-account-token", fake("glsa_", alnum, 32)+fake("_", hexLower, 8))
	token("notion-api-token", fake("ntn_", digits, 11)+fake("", alnum, 35))
	token("1password-service-account-token", fake("ops_eyJ", base64s, 260))

	bearer := fake("", alnum, 40)
	inText("bearer-token", "Authorization: Bearer "+bearer, bearer)
	basic := base64.StdEncoding.EncodeToString([]byte("ann:hunter2-horse-staple"))
	token("nova-gateway-key", fake("nova_gk_", alnum, 43))
	inText("authorization-basic", `{"Authorization": "Basic `+basic+`"}`, basic)
	cut := pemKey("PRIVATE KEY", 600)
	cut = cut[:len(cut)/2]
	inText("private-key-unterminated", cut, cut)
	return ex
}

// TestEveryRuleFindsItsExample keeps the rule list honest: every rule has an
// example of its format, finds it, and Text hides all of it.
func TestEveryRuleFindsItsExample(t *testing.T) {
	examples := ruleExamples()
	for _, r := range secretRules.rules {
		t.Run(r.id, func(t *testing.T) {
			ex, ok := examples[r.id]
			if !ok {
				t.Fatalf("rule %s has no example in ruleExamples", r.id)
			}
			one := newRuleSet([]ruleDef{r.ruleDef})
			if len(one.spans(ex.text)) == 0 {
				t.Errorf("rule %s does not find its example %q", r.id, ex.text)
			}
			for _, text := range []string{ex.text, "see " + ex.text + ".", "(" + ex.text + ")\n"} {
				got, found := Text(text)
				if !found || strings.Contains(got, ex.secret) || !strings.Contains(got, Placeholder) {
					t.Errorf("Text(%q) = %q, %v; want the secret replaced by %s", text, got, found, Placeholder)
				}
			}
		})
	}
	if len(examples) != len(secretRules.rules) {
		t.Errorf("%d examples for %d rules: an example names no rule", len(examples), len(secretRules.rules))
	}
}

func TestRuleIDsAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range secretRules.rules {
		if seen[r.id] {
			t.Errorf("rule id %s twice", r.id)
		}
		seen[r.id] = true
	}
}
