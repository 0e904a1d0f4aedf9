package outputvalidator_test

import (
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// modelServer starts the scripted model server answering the output
// validator with answers in sequence (the last repeats; none: no rules).
func modelServer(t *testing.T, answers ...string) (*scripted.Server, *llm.Client) {
	t.Helper()
	rules := "rules: []\n"
	if len(answers) > 0 {
		var b strings.Builder
		b.WriteString("rules:\n  - match: {agent: output-validator}\n    responses:\n")
		for _, a := range answers {
			b.WriteString("      - " + a + "\n")
		}
		rules = b.String()
	}
	r, err := scripted.ParseRules([]byte(rules))
	if err != nil {
		t.Fatalf("rules: %v\n%s", err, rules)
	}
	srv, err := scripted.New(r)
	if err != nil {
		t.Fatalf("scripted server: %v", err)
	}
	ts := httptest.NewServer(srv)
	transport := &http.Transport{}
	t.Cleanup(func() {
		transport.CloseIdleConnections()
		ts.Close()
	})
	client, err := llm.New(llm.Config{
		APIKey: "test-key", BaseURL: ts.URL + "/v1", Agent: bus.AgentOutputValidator,
		MaxRetries: 1, Logger: slog.New(slog.DiscardHandler), HTTPClient: &http.Client{Transport: transport},
	})
	if err != nil {
		t.Fatal(err)
	}
	return srv, client
}

// content is a scripted answer with fixed usage.
func content(s string) string {
	return "{content: " + strconv.Quote(s) + ", usage: {prompt_tokens: 900, completion_tokens: 40, cached_tokens: 256}}"
}

func mustJSON(t *testing.T, m map[string]any) *novav1.JSONValue {
	t.Helper()
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return o.Proto()
}

func command(t *testing.T, spec *novav1.TaskSpec, before, updates map[string]any, deleted ...string) *novav1.ValidateOutput {
	t.Helper()
	return &novav1.ValidateOutput{
		Ref:           &novav1.StepRef{ExecutionId: "exec-1", NodeId: "n", StepId: "exec-1/n/1/6", Visit: 1, Attempt: 1, StepNumber: 6},
		Spec:          spec,
		ContextBefore: mustJSON(t, before),
		Updates:       mustJSON(t, updates),
		DeletedKeys:   deleted,
		Code:          "total = context['total']\ncontext['discount'] = total * 0.1",
		Stdout:        "",
	}
}

// Secrets in real formats (public documentation examples), split so that
// secret scanners do not report this file.
const (
	stripeKey   = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
	githubPAT   = "ghp_" + "R2d2C3poBb8xWq7Lm4Nz0Kv6Ty1Ju5Hs9Fg3"
	awsKeyID    = "AKIA" + "IOSFODNN7EXAMPLE"
	bearerToken = "c2VydmljZS0xOjQ4MjkxNzM2NTU"
)

var (
	discountTask = &novav1.TaskSpec{Task: "Calculate discount (10% if total > 1000)", NodeType: "action"}
	decisionTask = &novav1.TaskSpec{Task: "Approve orders over 1000", NodeType: "decision", DecisionValues: []string{"approve", "reject"}}
	boolDecision = &novav1.TaskSpec{Task: "Is the total over 1000?", NodeType: "decision", DecisionValues: []string{"false", "true"}}
)

func TestDeterministicChecks(t *testing.T) {
	before := map[string]any{"total": 1500}
	tests := []struct {
		name    string
		spec    *novav1.TaskSpec
		updates map[string]any
		deleted []string
		checks  []string // failed checks; nil means they pass and the model is asked
		reason  []string // substrings of the reason
	}{
		{name: "no updates", spec: discountTask, updates: map[string]any{},
			checks: []string{"no_updates"}, reason: []string{"no context updates", "context['result'] = value"}},
		{name: "a deletion is an update", spec: discountTask, updates: map[string]any{}, deleted: []string{"total"}},
		{name: "object repr", spec: discountTask, updates: map[string]any{"email_obj": "<email.message.Message object at 0x7f3a2c1b2d30>"},
			checks: []string{"not_serializable"}, reason: []string{`context["email_obj"] is the text "<email.message.Message object at 0x7f3a2c1b2d30>"`, "extract the fields"}},
		{name: "traceback", spec: discountTask, updates: map[string]any{"total_amount": "Traceback (most recent call last):\n  File \"<string>\", line 3\nKeyError: 'pdf'"},
			checks: []string{"error_text"}, reason: []string{`context["total_amount"] = "Traceback (most recent call last):"`}},
		{name: "Error: prefix", spec: discountTask, updates: map[string]any{"summary": "Error: could not parse the PDF"},
			checks: []string{"error_text"}, reason: []string{"fix the cause of the error"}},
		{name: "exception name", spec: discountTask, updates: map[string]any{"total": "ValueError: could not convert string to float: 'N/A'"},
			checks: []string{"error_text"}},
		{name: "error text quoting a secret", spec: discountTask, updates: map[string]any{"summary": "Error: 401 for token " + githubPAT},
			checks: []string{"error_text"}, reason: []string{`context["summary"] = "Error: 401 for token [REDACTED]"`}},
		{name: "nested error text", spec: discountTask, updates: map[string]any{"result": map[string]any{"items": []any{"ok", "exception: boom"}}},
			checks: []string{"error_text"}, reason: []string{`context["result"]["items"][1] = "exception: boom"`}},
		{name: "text about errors is not error text", spec: discountTask, updates: map[string]any{"report": "Error rate is 2%; no errors found", "status": "failed to reach 1000 orders, as expected"}},
		{name: "keys named for errors report on purpose", spec: discountTask, updates: map[string]any{"discount": 150, "last_error": "Error: retried once"}},
		{name: "None result", spec: discountTask, updates: map[string]any{"discount": 150, "total_amount": nil},
			checks: []string{"none_result"}, reason: []string{`context["total_amount"] set to None`, "del context[key]"}},
		{name: "several failures in order", spec: discountTask, updates: map[string]any{"a": nil, "b": "Error: boom"},
			checks: []string{"error_text", "none_result"}},
		{name: "decision value missing", spec: decisionTask, updates: map[string]any{"score": 3},
			checks: []string{"decision_value"}, reason: []string{`must set context['branch_decision'] to one of: "approve", "reject"`}},
		{name: "decision value None", spec: decisionTask, updates: map[string]any{"branch_decision": nil},
			checks: []string{"decision_value"}},
		{name: "decision value not an edge", spec: decisionTask, updates: map[string]any{"branch_decision": "Approve"},
			checks: []string{"decision_value"}, reason: []string{`is "Approve", which matches no outgoing edge; it must be exactly one of: "approve", "reject"`}},
		{name: "decision value a list", spec: decisionTask, updates: map[string]any{"branch_decision": []any{"approve"}},
			checks: []string{"decision_value"}, reason: []string{"is a list"}},
		{name: "decision value allowed", spec: decisionTask, updates: map[string]any{"branch_decision": "approve"}},
		{name: "boolean decision value", spec: boolDecision, updates: map[string]any{"branch_decision": true}},
		{name: "no updates on a decision node", spec: decisionTask, updates: map[string]any{},
			checks: []string{"no_updates", "decision_value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, client := modelServer(t, content(`{"valid": true, "reason": "The requested values are present."}`))
			v := outputvalidator.New(outputvalidator.Deps{LLM: client})
			res, err := v.Validate(t.Context(), command(t, tt.spec, before, tt.updates, tt.deleted...))
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome.Status != "success" {
				t.Errorf("outcome %+v", res.Outcome)
			}
			if tt.checks == nil {
				if !res.Valid || !res.ModelConsulted || len(srv.Requests()) != 1 || len(res.FailedChecks) != 0 {
					t.Errorf("want the checks to pass and the model to be asked; got %+v (requests %d)", res, len(srv.Requests()))
				}
				return
			}
			if !slices.Equal(res.FailedChecks, tt.checks) {
				t.Errorf("failed checks %v, want %v (reason %q)", res.FailedChecks, tt.checks, res.Reason)
			}
			if res.Valid || res.ModelConsulted || len(res.Outcome.ModelCalls) != 0 || len(srv.Requests()) != 0 {
				t.Errorf("a failed check must not ask the model: %+v, requests %d", res, len(srv.Requests()))
			}
			for _, w := range tt.reason {
				if !strings.Contains(res.Reason, w) {
					t.Errorf("reason %q lacks %q", res.Reason, w)
				}
			}
		})
	}
}

// NaN is not JSON; updates that hold it (Python's json.dumps writes the
// literal NaN) fail as not serializable, naming the cause.
func TestNaNIsNotSerializable(t *testing.T) {
	_, client := modelServer(t)
	cmd := command(t, discountTask, map[string]any{"total": 1500}, map[string]any{})
	cmd.Updates = &novav1.JSONValue{Raw: []byte(`{"ratio": NaN}`)}
	res, err := outputvalidator.New(outputvalidator.Deps{LLM: client}).Validate(t.Context(), cmd)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.FailedChecks, []string{"not_serializable"}) || !strings.Contains(res.Reason, "not JSON data") {
		t.Errorf("got %v: %q", res.FailedChecks, res.Reason)
	}
}

func TestModelVerdict(t *testing.T) {
	tests := []struct {
		name       string
		answers    []string
		valid      bool
		status     string
		calls      int
		reason     string
		errorField string
	}{
		{"valid", []string{content(`{"valid": true, "reason": "discount 150 and final_total 1350 are correct"}`)},
			true, "success", 1, "discount 150 and final_total 1350 are correct", ""},
		{"valid without a reason", []string{content(`{"valid": true}`)},
			true, "success", 1, "the model found the output complete", ""},
		{"invalid", []string{content(`{"valid": false, "reason": "final_total is missing"}`)},
			false, "success", 1, "final_total is missing", ""},
		{"nonsense, then a verdict", []string{content(`{"looks_good": "yes"}`), content(`{"valid": true, "reason": "ok"}`)},
			true, "success", 2, "ok", ""},
		{"invalid without a reason, then with one", []string{content(`{"valid": false}`), content(`{"valid": false, "reason": "discount should be 150"}`)},
			false, "success", 2, "discount should be 150", ""},
		{"no usable verdict", []string{content(`{"looks_good": "yes"}`)},
			false, "error", 2, "no usable verdict", `the output validator's model gave no usable verdict after 2 answers: the model's answer was unusable: missing field "valid"`},
		{"model call refused", []string{`{status: 404, error: {message: "The model does not exist", type: invalid_request_error, code: model_not_found}}`},
			false, "error", 0, "model call failed", "the output validator's model call failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, client := modelServer(t, tt.answers...)
			v := outputvalidator.New(outputvalidator.Deps{LLM: client})
			res, err := v.Validate(t.Context(), command(t, discountTask, map[string]any{"total": 1500}, map[string]any{"discount": 150, "final_total": 1350}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Valid != tt.valid || res.Outcome.Status != tt.status || !res.ModelConsulted || !strings.Contains(res.Reason, tt.reason) ||
				!strings.Contains(res.Outcome.Error, tt.errorField) || len(res.FailedChecks) != 0 {
				t.Errorf("got valid=%v status=%q reason=%q error=%q checks=%v", res.Valid, res.Outcome.Status, res.Reason, res.Outcome.Error, res.FailedChecks)
			}
			if len(res.Outcome.ModelCalls) != tt.calls {
				t.Errorf("model calls %d, want %d", len(res.Outcome.ModelCalls), tt.calls)
			}
			for _, c := range res.Outcome.ModelCalls {
				if c.Model != outputvalidator.DefaultModel || c.PromptTokens != 900 || c.CompletionTokens != 40 || c.CachedTokens != 256 || !c.Scripted || c.CostUsd <= 0 {
					t.Errorf("model call %+v", c)
				}
			}
			if tt.calls > 0 && len(srv.Requests()) != tt.calls {
				t.Errorf("requests %d, want %d", len(srv.Requests()), tt.calls)
			}
		})
	}
}

// A transient error that outlasts the client's retries goes back to the bus
// for redelivery instead of costing the node an attempt.
func TestTransientModelErrorIsRedelivered(t *testing.T) {
	_, client := modelServer(t, `{status: 503, error: "overloaded"}`)
	v := outputvalidator.New(outputvalidator.Deps{LLM: client})
	res, err := v.Validate(t.Context(), command(t, discountTask, map[string]any{"total": 1500}, map[string]any{"discount": 150}))
	if err == nil || !llm.IsTransient(err) {
		t.Fatalf("Validate = %+v, %v; want a transient error", res, err)
	}
}

func TestPromptHidesSecretsAndData(t *testing.T) {
	raw := append([]byte("%PDF-1.4\n"), make([]byte, 150<<10)...)
	pdf := base64.StdEncoding.EncodeToString(raw) // about 200 KB
	srv, client := modelServer(t, content(`{"valid": true, "reason": "sent"}`))
	cmd := command(t, &novav1.TaskSpec{Task: "Email the invoice total to the client (relay key " + awsKeyID + ")", NodeType: "action", Model: "gpt-4.1-mini"},
		map[string]any{"email_password": "hunter2-secret", "total": 1500, "invoice_pdf": pdf, "smtp": map[string]any{"user": "bot", "api_token": "tok-very-secret"},
			"stripe": stripeKey, "notes": []any{"Authorization: Bearer " + bearerToken}},
		map[string]any{"email_sent": true, "summary": "Sent the total of 1500 EUR to Acme", "attachment_b64": pdf[:120_000], "receipt": "paid with " + stripeKey})
	cmd.Code = "pw = context['email_password']\nprint('logging in with', pw)\nprint(context['invoice_pdf'][:500])\ncontext['email_sent'] = True\n" +
		"gh = '" + githubPAT + "'"
	cmd.Stdout = "logging in with hunter2-secret\n" + pdf[:500] + "\ntoken tok-very-secret\n" +
		"upstream " + bearerToken + ", key " + awsKeyID + "\n"
	res, err := outputvalidator.New(outputvalidator.Deps{LLM: client}).Validate(t.Context(), cmd)
	if err != nil || !res.Valid {
		t.Fatalf("Validate = %+v, %v", res, err)
	}
	reqs := srv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("requests %d", len(reqs))
	}
	body := string(reqs[0].Body)
	for _, leak := range []string{"hunter2-secret", "tok-very-secret", pdf[:60], pdf[50_000:50_060], "JVBERi0",
		stripeKey, "4eC39Hq", bearerToken, githubPAT, awsKeyID} {
		if strings.Contains(body, leak) {
			t.Errorf("the prompt contains %q", leak)
		}
	}
	prompt := reqs[0].Text()
	for _, want := range []string{
		"OutputValidator", "Email the invoice total to the client (relay key [REDACTED])",
		"CONTEXT BEFORE THE RUN", "- email_password: string: present, value hidden", "- invoice_pdf: string, base64 data",
		"UPDATES MADE BY THE CODE", "- email_sent: boolean = true", `- summary: string, 34 chars = "Sent the total of 1500 EUR to Acme"`,
		"- attachment_b64: string, base64 data, 120000 chars (looks like a PDF); not shown",
		"pw = context['email_password']", "logging in with [REDACTED]", "[base64 data, 500 chars]", "token [REDACTED]",
		"- stripe: string: present, value hidden", `- receipt: string, 42 chars = "paid with [REDACTED]"`,
		"gh = '[REDACTED]'", "upstream [REDACTED], key [REDACTED]",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("prompt lacks %q", want)
		}
	}
	if reqs[0].Model != "gpt-4.1-mini" {
		t.Errorf("model %q: the node's model must win over the default", reqs[0].Model)
	}
	if len(body) > 12<<10 {
		t.Errorf("request body is %d bytes", len(body))
	}
}

func TestDecisionPromptListsTheValues(t *testing.T) {
	srv, client := modelServer(t, content(`{"valid": true, "reason": "1500 > 1000, approve"}`))
	res, err := outputvalidator.New(outputvalidator.Deps{LLM: client}).Validate(t.Context(),
		command(t, decisionTask, map[string]any{"total": 1500}, map[string]any{"branch_decision": "approve"}))
	if err != nil || !res.Valid {
		t.Fatalf("Validate = %+v, %v", res, err)
	}
	if p := srv.Requests()[0].Text(); !strings.Contains(p, `NODE TYPE: decision (the code sets branch_decision to one of: "approve", "reject"`) {
		t.Errorf("prompt does not list the decision values:\n%s", p)
	}
}

// Cached code is checked by the rules alone: passing output is accepted
// without a model call, failing output is still refused.
func TestRulesOnlyConsultsNoModel(t *testing.T) {
	tests := []struct {
		name    string
		updates map[string]any
		valid   bool
	}{
		{"passing output", map[string]any{"discount": 150, "final_total": 1350}, true},
		{"no updates", map[string]any{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, client := modelServer(t, content(`{"valid": false, "reason": "the model should not be asked"}`))
			v := outputvalidator.New(outputvalidator.Deps{LLM: client})
			cmd := command(t, discountTask, map[string]any{"total": 1500}, tt.updates)
			cmd.RulesOnly = true
			res, err := v.Validate(t.Context(), cmd)
			if err != nil {
				t.Fatal(err)
			}
			if res.Valid != tt.valid || res.ModelConsulted || len(srv.Requests()) != 0 || len(res.Outcome.ModelCalls) != 0 {
				t.Errorf("valid=%v (want %v) consulted=%v requests=%d reason=%q", res.Valid, tt.valid, res.ModelConsulted, len(srv.Requests()), res.Reason)
			}
		})
	}
}

// TestBudgetRefusal: the verdict's call is made only if it fits the step's
// allowance; the corrective second call after an unusable answer too.
func TestBudgetRefusal(t *testing.T) {
	limit := &novav1.BudgetLimit{Name: "max_model_calls", Scope: `workflow "w"`, Allowed: 4, Spent: 3}
	for _, tc := range []struct {
		name     string
		calls    int32
		consumed bool
	}{{"no call left", 0, false}, {"no second call", 1, true}} {
		t.Run(tc.name, func(t *testing.T) {
			srv, client := modelServer(t, content(`{"looks_good": "yes"}`))
			v := outputvalidator.New(outputvalidator.Deps{LLM: client})
			ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{ModelCalls: proto.Int32(tc.calls), CallsLimit: limit})
			res, err := v.Validate(ctx, command(t, discountTask, map[string]any{"total": 1500}, map[string]any{"discount": 150}))
			if err != nil {
				t.Fatal(err)
			}
			if res.Valid || res.Outcome.Status != "error" || res.Outcome.GetBudgetExceeded() == nil || res.ModelConsulted != tc.consumed ||
				!strings.HasPrefix(res.Reason, "budget_exceeded: max_model_calls") {
				t.Errorf("got valid=%v status=%q consulted=%v reason=%q", res.Valid, res.Outcome.Status, res.ModelConsulted, res.Reason)
			}
			if n := len(srv.Requests()); n != int(tc.calls) {
				t.Errorf("requests %d, want %d", n, tc.calls)
			}
		})
	}
}
