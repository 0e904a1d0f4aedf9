package redact

// The rules below recognise secrets by their look. Most are ported from
// gitleaks (https://github.com/gitleaks/gitleaks), config/gitleaks.toml of
// v8.30.1 (the file is unchanged up to commit
// b58d3f102cf3a2c84cb7f923d05c25c9b1aed84b), Copyright (c) 2019 Zachary Rice,
// MIT licence: see LICENSE.gitleaks beside this file. Each keeps its gitleaks
// id and entropy threshold; its regexp and keywords are gitleaks' with the
// changes listed below.
//
// Only the high-confidence rules are taken: those anchored on a fixed prefix
// or structure (ghp_, sk_live_, AKIA, eyJ….eyJ…, -----BEGIN … PRIVATE KEY-----).
// The generic and keyword-context rules (generic-api-key, "<name> = <hex>")
// are left out: they match hashes, uuids and base64 data, which workflows
// carry all the time.
//
// Changes from gitleaks, so that a rule finds a whole token in text:
//   - Every rule starts at a word boundary and ends where the token ends
//     (endOfToken: a character that cannot continue a token, or the end of
//     the text). gitleaks ends most rules with (?:[\x60'"\s;]|\\[nr]|$),
//     which misses "…sk_live_abc." in prose.
//   - Where gitleaks matches a fixed-length prefix of a token without
//     checking its end (ghp_…{36}, glpat-…{20}), the length is a minimum
//     here, so the whole token is hidden; where it has no group, one marks
//     the secret.
//   - A rule is tried only where one of its keywords starts (see ruleSet),
//     so keywords are the first characters of the secret: jwt "eyj" (a JSON
//     header always encodes to eyJ) for "ey", openai-api-key "sk-" for
//     "t3blbkfj"; hashicorp-tf-api-token's keyword sits 15 characters in
//     (offset). slack-webhook-url hides the URL from its host on, without
//     the scheme. vault-service-token keeps only the hvs. form (the legacy
//     "s.<24 chars>" form matches ordinary words).
//   - Allowlists (documentation examples such as AKIA…EXAMPLE) are not
//     ported: hiding an example costs nothing.
// Every regexp is RE2: none of these rules needs a lookaround.

// endOfToken ends a rule: a character that cannot continue a token, or the
// end of the text.
const endOfToken = `(?:[^0-9A-Za-z_-]|$)`

// gitleaksRules are the rules ported from gitleaks. A rule's first group,
// when it has one, is the secret; otherwise the whole match is.
var gitleaksRules = []ruleDef{
	{id: "aws-access-token", keywords: []string{"a3t", "akia", "asia", "abia", "acca"}, entropy: 3,
		re: `\b((?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA)[A-Z2-7]{16})\b`},

	{id: "github-pat", keywords: []string{"ghp_"}, entropy: 3, re: `\b(ghp_[0-9a-zA-Z]{36,})` + endOfToken},
	{id: "github-oauth", keywords: []string{"gho_"}, entropy: 3, re: `\b(gho_[0-9a-zA-Z]{36,})` + endOfToken},
	{id: "github-app-token", keywords: []string{"ghu_", "ghs_"}, entropy: 3, re: `\b((?:ghu|ghs)_[0-9a-zA-Z]{36,})` + endOfToken},
	{id: "github-refresh-token", keywords: []string{"ghr_"}, entropy: 3, re: `\b(ghr_[0-9a-zA-Z]{36,})` + endOfToken},
	{id: "github-fine-grained-pat", keywords: []string{"github_pat_"}, entropy: 3, re: `\b(github_pat_\w{82,})` + endOfToken},

	{id: "gitlab-pat", keywords: []string{"glpat-"}, entropy: 3, re: `\b(glpat-[\w-]{20,})` + endOfToken},
	{id: "gitlab-pat-routable", keywords: []string{"glpat-"}, entropy: 4,
		re: `\b(glpat-[0-9a-zA-Z_-]{27,300}\.[0-9a-z]{2}[0-9a-z]{7})\b`},
	{id: "gitlab-ptt", keywords: []string{"glptt-"}, entropy: 3, re: `\b(glptt-[0-9a-f]{40,})` + endOfToken},
	{id: "gitlab-rrt", keywords: []string{"gr1348941"}, entropy: 3, re: `\b(GR1348941[\w-]{20,})` + endOfToken},
	{id: "gitlab-runner-authentication-token", keywords: []string{"glrt-"}, entropy: 3,
		re: `\b(glrt-[0-9a-zA-Z_\-]{20,})` + endOfToken},
	{id: "gitlab-runner-authentication-token-routable", keywords: []string{"glrt-"}, entropy: 4,
		re: `\b(glrt-t\d_[0-9a-zA-Z_\-]{27,300}\.[0-9a-z]{2}[0-9a-z]{7})\b`},
	{id: "gitlab-deploy-token", keywords: []string{"gldt-"}, entropy: 3, re: `\b(gldt-[0-9a-zA-Z_\-]{20,})` + endOfToken},
	{id: "gitlab-cicd-job-token", keywords: []string{"glcbt-"}, entropy: 3,
		re: `\b(glcbt-[0-9a-zA-Z]{1,5}_[0-9a-zA-Z_-]{20,})` + endOfToken},
	{id: "gitlab-feed-token", keywords: []string{"glft-"}, entropy: 3, re: `\b(glft-[0-9a-zA-Z_\-]{20,})` + endOfToken},
	{id: "gitlab-oauth-app-secret", keywords: []string{"gloas-"}, entropy: 3, re: `\b(gloas-[0-9a-zA-Z_\-]{64,})` + endOfToken},

	{id: "slack-bot-token", keywords: []string{"xoxb"}, entropy: 3,
		re: `\b(xoxb-[0-9]{10,13}-[0-9]{10,13}[a-zA-Z0-9-]*)` + endOfToken},
	{id: "slack-user-token", keywords: []string{"xoxp-", "xoxe-"}, entropy: 2,
		re: `\b(xox[pe](?:-[0-9]{10,13}){3}-[a-zA-Z0-9-]{28,})` + endOfToken},
	{id: "slack-app-token", keywords: []string{"xapp"}, entropy: 2, re: `(?i)\b(xapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+)` + endOfToken},
	{id: "slack-legacy-bot-token", keywords: []string{"xoxb"}, entropy: 2, re: `\b(xoxb-[0-9]{8,14}-[a-zA-Z0-9]{18,})` + endOfToken},
	{id: "slack-legacy-token", keywords: []string{"xoxo", "xoxs"}, entropy: 2, re: `\b(xox[os]-\d+-\d+-\d+-[a-fA-F\d]+)` + endOfToken},
	{id: "slack-legacy-workspace-token", keywords: []string{"xoxa", "xoxr"}, entropy: 2,
		re: `\b(xox[ar]-(?:\d-)?[0-9a-zA-Z]{8,})` + endOfToken},
	{id: "slack-config-access-token", keywords: []string{"xoxe.xoxb-", "xoxe.xoxp-"}, entropy: 2,
		re: `(?i)\b(xoxe.xox[bp]-\d-[A-Z0-9]{163,})` + endOfToken},
	{id: "slack-config-refresh-token", keywords: []string{"xoxe-"}, entropy: 2, re: `(?i)\b(xoxe-\d-[A-Z0-9]{146,})` + endOfToken},
	{id: "slack-webhook-url", keywords: []string{"hooks.slack.com"},
		re: `\b(hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9+/]{43,})`},

	{id: "stripe-access-token", keywords: []string{"sk_test", "sk_live", "sk_prod", "rk_test", "rk_live", "rk_prod"}, entropy: 2,
		re: `\b((?:sk|rk)_(?:test|live|prod)_[a-zA-Z0-9]{10,})` + endOfToken},
	{id: "openai-api-key", keywords: []string{"sk-"}, entropy: 3,
		re: `\b(sk-(?:proj|svcacct|admin)-(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})T3BlbkFJ(?:[A-Za-z0-9_-]{74}|[A-Za-z0-9_-]{58})\b|sk-[a-zA-Z0-9]{20}T3BlbkFJ[a-zA-Z0-9]{20})` + endOfToken},
	{id: "anthropic-api-key", keywords: []string{"sk-ant-api03"}, re: `\b(sk-ant-api03-[a-zA-Z0-9_\-]{93}AA)` + endOfToken},
	{id: "anthropic-admin-api-key", keywords: []string{"sk-ant-admin01"}, re: `\b(sk-ant-admin01-[a-zA-Z0-9_\-]{93}AA)` + endOfToken},
	{id: "gcp-api-key", keywords: []string{"aiza"}, entropy: 4, re: `\b(AIza[\w-]{35})` + endOfToken},
	{id: "huggingface-access-token", keywords: []string{"hf_"}, entropy: 2, re: `\b(hf_(?i:[a-z]{34}))` + endOfToken},
	{id: "huggingface-organization-api-token", keywords: []string{"api_org_"}, entropy: 2, re: `\b(api_org_(?i:[a-z]{34}))` + endOfToken},
	{id: "perplexity-api-key", keywords: []string{"pplx-"}, entropy: 4, re: `\b(pplx-[a-zA-Z0-9]{48})` + endOfToken},

	{id: "jwt", keywords: []string{"eyj"}, entropy: 3,
		re: `\b(ey[a-zA-Z0-9]{17,}\.ey[a-zA-Z0-9\/\\_-]{17,}\.(?:[a-zA-Z0-9\/\\_-]{10,}={0,2})?)` + endOfToken},
	{id: "private-key", keywords: []string{"-----begin"},
		re: `(?i)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----[\s\S-]{64,}?KEY(?: BLOCK)?-----`},
	{id: "age-secret-key", keywords: []string{"age-secret-key-1"}, re: `\b(AGE-SECRET-KEY-1[QPZRY9X8GF2TVDW0S3JN54KHCE6MUA7L]{58})` + endOfToken},

	{id: "npm-access-token", keywords: []string{"npm_"}, entropy: 2, re: `(?i)\b(npm_[a-z0-9]{36})` + endOfToken},
	{id: "pypi-upload-token", keywords: []string{"pypi-ageichlwas5vcmc"}, entropy: 3, re: `\b(pypi-AgEIcHlwaS5vcmc[\w-]{50,})` + endOfToken},
	{id: "sendgrid-api-token", keywords: []string{"sg."}, entropy: 2, re: `\b(SG\.(?i)[a-z0-9=_\-\.]{66})` + endOfToken},
	{id: "twilio-api-key", keywords: []string{"sk"}, entropy: 3, re: `\b(SK[0-9a-fA-F]{32})` + endOfToken},
	{id: "digitalocean-pat", keywords: []string{"dop_v1_"}, entropy: 3, re: `\b(dop_v1_[a-f0-9]{64})` + endOfToken},
	{id: "digitalocean-access-token", keywords: []string{"doo_v1_"}, entropy: 3, re: `\b(doo_v1_[a-f0-9]{64})` + endOfToken},
	{id: "digitalocean-refresh-token", keywords: []string{"dor_v1_"}, re: `(?i)\b(dor_v1_[a-f0-9]{64})` + endOfToken},
	{id: "shopify-access-token", keywords: []string{"shpat_"}, entropy: 2, re: `\b(shpat_[a-fA-F0-9]{32})` + endOfToken},
	{id: "shopify-custom-access-token", keywords: []string{"shpca_"}, entropy: 2, re: `\b(shpca_[a-fA-F0-9]{32})` + endOfToken},
	{id: "shopify-private-app-access-token", keywords: []string{"shppa_"}, entropy: 2, re: `\b(shppa_[a-fA-F0-9]{32})` + endOfToken},
	{id: "shopify-shared-secret", keywords: []string{"shpss_"}, entropy: 2, re: `\b(shpss_[a-fA-F0-9]{32})` + endOfToken},
	{id: "sentry-user-token", keywords: []string{"sntryu_"}, entropy: 3.5, re: `\b(sntryu_[a-f0-9]{64})` + endOfToken},
	{id: "sentry-org-token", keywords: []string{"sntrys_eyjpyxqio"}, entropy: 4.5,
		re: `\b(sntrys_eyJpYXQiO[a-zA-Z0-9+/]{10,200}(?:LCJyZWdpb25fdXJs|InJlZ2lvbl91cmwi|cmVnaW9uX3VybCI6)[a-zA-Z0-9+/]{10,200}={0,2}_[a-zA-Z0-9+/]{43})(?:[^a-zA-Z0-9+/]|\z)`},
	{id: "vault-service-token", keywords: []string{"hvs."}, entropy: 3.5, re: `\b(hvs\.[\w-]{90,120})` + endOfToken},
	{id: "vault-batch-token", keywords: []string{"hvb."}, entropy: 4, re: `\b(hvb\.[\w-]{138,300})` + endOfToken},
	{id: "hashicorp-tf-api-token", keywords: []string{"atlasv1"}, offset: 15, entropy: 3.5,
		re: `(?i)\b([a-z0-9]{14}\.(?-i:atlasv1)\.[a-z0-9\-_=]{60,70})` + endOfToken},
	{id: "databricks-api-token", keywords: []string{"dapi"}, entropy: 3, re: `\b(dapi[a-f0-9]{32}(?:-\d)?)` + endOfToken},
	{id: "doppler-api-token", keywords: []string{"dp.pt."}, entropy: 2, re: `\b(dp\.pt\.(?i)[a-z0-9]{43})` + endOfToken},
	{id: "linear-api-key", keywords: []string{"lin_api_"}, entropy: 2, re: `\b(lin_api_(?i)[a-z0-9]{40})` + endOfToken},
	{id: "grafana-cloud-api-token", keywords: []string{"glc_"}, entropy: 3, re: `(?i)\b(glc_[A-Za-z0-9+/]{32,400}={0,3})` + endOfToken},
	{id: "grafana-service-account-token", keywords: []string{"glsa_"}, entropy: 3,
		re: `(?i)\b(glsa_[A-Za-z0-9]{32}_[A-Fa-f0-9]{8})` + endOfToken},
	{id: "notion-api-token", keywords: []string{"ntn_"}, entropy: 4, re: `\b(ntn_[0-9]{11}[A-Za-z0-9]{32}[A-Za-z0-9]{3})` + endOfToken},
	{id: "1password-service-account-token", keywords: []string{"ops_"}, entropy: 4, re: `\b(ops_eyJ[a-zA-Z0-9+/]{250,}={0,3})` + endOfToken},
}

// novaRules are NOVA's own: credentials in HTTP headers, which carry no
// vendor prefix, NOVA's own API keys, and a private key cut short
// (gitleaks' private-key needs the END line, which a truncated log or stdout
// has lost).
var novaRules = []ruleDef{
	// "Bearer <token>", alone or after "Authorization:". The token must mix
	// letters and digits, so that prose ("the bearer of this letter") and
	// placeholders ("Bearer YOUR_ACCESS_TOKEN") stay; a full stop after it
	// ends the sentence, not the token.
	{id: "bearer-token", keywords: []string{"bearer"}, valid: lettersAndDigits,
		re: `(?i)\bbearer[ \t]+([\w=~@.+/-]{15,}[\w=~@+/-])`},
	// "Authorization: Basic <base64 of user:password>", as a header line, a
	// curl -H argument or a dict entry.
	{id: "authorization-basic", keywords: []string{"authorization"},
		re: `(?i)\bauthorization["']?[ \t]*[:=][ \t]*["']?basic[ \t]+([a-z0-9+/]{8,}={0,3})`},
	// The gateway's API keys (services/gateway/gateway.NewKey): 32 random
	// bytes, base64url.
	{id: "nova-gateway-key", keywords: []string{"nova_gk_"}, entropy: 3, re: `\b(nova_gk_[A-Za-z0-9_-]{43})` + endOfToken},
	{id: "private-key-unterminated", keywords: []string{"-----begin"},
		re: `(?i)-----BEGIN[ A-Z0-9_-]{0,100}PRIVATE KEY(?: BLOCK)?-----[\sA-Za-z0-9+/=]{16,}`},
}
