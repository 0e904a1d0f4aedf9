package generator_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/code-generator/generator"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55 races in ObjectStore.Put (valueref's large values):
		// its publisher's cleanup can clear the status channel before the
		// goroutine it started reads it, which then waits on a nil channel.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
		// Idle keep-alive connections of the OpenAI client's transport.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
	)
}

const python = "/usr/bin/python3"

var quiet = slog.New(slog.DiscardHandler)

const discountCode = "# STAGE: TASK\n" +
	"total = context['total']\n" +
	"discount_rate = 0.10 if total > 1000 else 0.0\n" +
	"context['discount'] = total * discount_rate\n" +
	"context['final_total'] = total - context['discount']\n"

func fenced(code string) string { return "```python\n" + code + "```" }

// modelServer starts the scripted OpenAI-compatible server with rules and
// returns it with a client of it, as the service builds one.
func modelServer(t *testing.T, rules ...scripted.Rule) (*scripted.Server, *llm.Client) {
	t.Helper()
	srv, err := scripted.New(scripted.Rules{Rules: rules})
	if err != nil {
		t.Fatalf("scripted rules: %v", err)
	}
	_, stop, err := srv.Start(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop scripted server: %v", err)
		}
	})
	client, err := llm.New(llm.Config{APIKey: "sk-test", BaseURL: srv.BaseURL(), Agent: "code-generator", MaxRetries: 1})
	if err != nil {
		t.Fatal(err)
	}
	return srv, client
}

func newGenerator(t *testing.T, client *llm.Client, info *runtimeinfo.Info) *generator.Generator {
	t.Helper()
	g, err := generator.New(generator.Deps{LLM: client, Runtime: info, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func mustJSON(t *testing.T, m map[string]any) *novav1.JSONValue {
	t.Helper()
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		t.Fatal(err)
	}
	return o.Proto()
}

func command(t *testing.T, spec *novav1.TaskSpec, ctxMap map[string]any) *novav1.GenerateCode {
	t.Helper()
	return &novav1.GenerateCode{
		Ref:     &novav1.StepRef{ExecutionId: "exec-1", NodeId: "calc", StepId: "exec-1/calc/1/2", Visit: 1, Attempt: 1, StepNumber: 2},
		Spec:    spec,
		Context: mustJSON(t, ctxMap),
		Stage:   generator.StageTask,
	}
}

func generate(t *testing.T, g *generator.Generator, cmd *novav1.GenerateCode) *novav1.CodeGenerated {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := g.Generate(ctx, cmd)
	if err != nil {
		t.Fatalf("Generate: %v", err)
	}
	return res
}

func requireSuccess(t *testing.T, res *novav1.CodeGenerated) {
	t.Helper()
	if res.GetOutcome().GetStatus() != "success" {
		t.Fatalf("outcome = %q (%s), want success", res.GetOutcome().GetStatus(), res.GetOutcome().GetError())
	}
}

// chats are the recorded chat completion requests.
func chats(srv *scripted.Server) []scripted.Recorded {
	var out []scripted.Recorded
	for _, r := range srv.Requests() {
		if strings.HasSuffix(r.Path, "/chat/completions") {
			out = append(out, r)
		}
	}
	return out
}

func respond(content string) *scripted.Response { return &scripted.Response{Content: content} }

func TestDiscountTask(t *testing.T) {
	srv, client := modelServer(t, scripted.Rule{
		Name:    "discount",
		Match:   scripted.Match{Agent: "code-generator", UserContains: scripted.Strings{"Calculate discount"}},
		Respond: respond("Here is the code:\n" + fenced(discountCode)),
	})
	g := newGenerator(t, client, nil)
	cmd := command(t, &novav1.TaskSpec{Task: "Calculate discount (10% if total > 1000)", NodeType: "action"},
		map[string]any{"total": 1500})

	res := generate(t, g, cmd)
	requireSuccess(t, res)
	if res.GetCode() != discountCode {
		t.Errorf("code = %q, want the fenced code without the fence %q", res.GetCode(), discountCode)
	}
	if res.GetStage() != generator.StageTask {
		t.Errorf("stage = %q, want TASK", res.GetStage())
	}
	if res.GetRef().GetStepId() != cmd.GetRef().GetStepId() {
		t.Errorf("ref not echoed: %v", res.GetRef())
	}
	calls := res.GetOutcome().GetModelCalls()
	if len(calls) != 1 {
		t.Fatalf("model calls = %d, want 1", len(calls))
	}
	if c := calls[0]; c.GetModel() != generator.DefaultModel || !c.GetScripted() || c.GetPromptTokens() == 0 || c.GetCompletionTokens() == 0 || c.GetCostUsd() <= 0 {
		t.Errorf("model call = %+v, want the default model, scripted, with tokens and a cost", c)
	}
	reqs := chats(srv)
	if len(reqs) != 1 {
		t.Fatalf("requests = %d, want 1", len(reqs))
	}
	req := reqs[0]
	if res.GetPromptBytes() != int64(len(req.Messages[0].Content)+len(req.Messages[1].Content)) {
		t.Errorf("prompt_bytes = %d, want the size of the two prompt messages", res.GetPromptBytes())
	}
	if len(req.Tools) != 1 || req.Tools[0] != generator.SearchTool {
		t.Errorf("tools offered = %v, want [%s]", req.Tools, generator.SearchTool)
	}
	for _, want := range []string{
		"Calculate discount (10% if total > 1000)",
		"- total: number = 1500",
		"# STAGE: TASK",
		"```python",
		"modifying `context` in place",
		"JSON-serializable",
		"base64.b64decode",
		"search_documentation(library, query)",
		"Do not set context['branch_decision']",
	} {
		if !strings.Contains(req.Text(), want) {
			t.Errorf("prompt lacks %q:\n%s", want, req.Text())
		}
	}
}

func TestModelResolution(t *testing.T) {
	tests := []struct {
		name      string
		specModel string
		deflt     string
		want      string
	}{
		{"node or workflow model", "gpt-4o-mini", "gpt-4.1", "gpt-4o-mini"},
		{"service default", "", "gpt-4.1", "gpt-4.1"},
		{"built-in default", "", "", generator.DefaultModel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, client := modelServer(t, scripted.Rule{Respond: respond(fenced(discountCode))})
			g, err := generator.New(generator.Deps{LLM: client, DefaultModel: tt.deflt, Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			res := generate(t, g, command(t, &novav1.TaskSpec{Task: "Calculate discount", Model: tt.specModel}, map[string]any{"total": 1500}))
			requireSuccess(t, res)
			if got := chats(srv)[0].Model; got != tt.want {
				t.Errorf("requested model = %q, want %q", got, tt.want)
			}
			if got := res.GetOutcome().GetModelCalls()[0].GetModel(); got != tt.want {
				t.Errorf("recorded model = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecisionPromptListsAllowedValues(t *testing.T) {
	code := "# STAGE: TASK\ncontext['branch_decision'] = 'approved' if context['amount'] <= 1000 else 'rejected'\n"
	srv, client := modelServer(t, scripted.Rule{Respond: respond(fenced(code))})
	g := newGenerator(t, client, nil)
	res := generate(t, g, command(t, &novav1.TaskSpec{
		Task:           "Approve invoices up to 1000, reject the rest",
		NodeType:       "decision",
		DecisionValues: []string{"approved", "rejected"},
	}, map[string]any{"amount": 1200}))
	requireSuccess(t, res)
	if res.GetCode() != code {
		t.Errorf("code = %q", res.GetCode())
	}
	system := chats(srv)[0].System()
	for _, want := range []string{
		"DECISION NODE",
		"MUST set context['branch_decision']",
		"exactly one of these values",
		"  - \"approved\"\n  - \"rejected\"\n",
	} {
		if !strings.Contains(system, want) {
			t.Errorf("decision prompt lacks %q:\n%s", want, system)
		}
	}
	if strings.Contains(system, "Do not set context['branch_decision']") {
		t.Errorf("decision prompt forbids branch_decision:\n%s", system)
	}
}

func TestRetryPromptCarriesEveryAttempt(t *testing.T) {
	history := []*novav1.AttemptRecord{
		{Attempt: 1, Phase: "execution", Code: "# STAGE: TASK\nsend_email(email_user, password)\n",
			Error: "Traceback (most recent call last):\n  File \"<node>\", line 2\nNameError: name 'email_user' is not defined"},
		{Attempt: 2, Phase: "output_validation", Code: "# STAGE: TASK\nemail_user = context.get('user')\ncontext['email_sent'] = email_user is not None\n",
			Error: "email_sent is False: context['user'] does not exist, the address is in context['email_user']"},
	}
	fixed := "# STAGE: TASK\ncontext['email_sent'] = bool(context['email_user'])\n"
	srv, client := modelServer(t, scripted.Rule{
		Match:   scripted.Match{Contains: scripted.Strings{"NameError", "email_sent is False"}},
		Respond: respond(fenced(fixed)),
	})
	g := newGenerator(t, client, nil)
	cmd := command(t, &novav1.TaskSpec{Task: "Send an email notification", NodeType: "action"},
		map[string]any{"email_user": "test@example.com"})
	cmd.Ref.Attempt = 3
	cmd.History = history

	res := generate(t, g, cmd)
	requireSuccess(t, res)
	if res.GetCode() != fixed {
		t.Errorf("code = %q", res.GetCode())
	}
	prompt := chats(srv)[0].Text()
	for _, want := range []string{
		"EARLIER ATTEMPTS FAILED",
		"Attempt 1: FAILED in execution",
		"send_email(email_user, password)",
		"NameError: name 'email_user' is not defined",
		"Attempt 2: FAILED in output validation",
		"email_user = context.get('user')",
		"the address is in context['email_user']",
		"Find the cause of every error",
	} {
		if !strings.Contains(prompt, want) {
			t.Errorf("retry prompt lacks %q:\n%s", want, prompt)
		}
	}
	if strings.Index(prompt, "Attempt 1:") > strings.Index(prompt, "Attempt 2:") {
		t.Error("attempts are not oldest first")
	}
	if strings.Contains(prompt, "you may instead answer analysis code") {
		t.Error("a retry offers analysis, which is never repeated")
	}
}

func TestAnalysisStageAndInsights(t *testing.T) {
	analysis := "# STAGE: ANALYSIS\nimport base64, fitz\ndoc = fitz.open(stream=base64.b64decode(context['pdf_data_b64']), filetype='pdf')\n" +
		"context['_data_analysis'] = {'pages': len(doc)}\n"
	task := "# STAGE: TASK\ncontext['total'] = '1234.56'\n"
	srv, client := modelServer(t,
		scripted.Rule{Name: "analysis", Match: scripted.Match{SystemContains: scripted.Strings{"STAGE: ANALYSIS"}}, Respond: respond(fenced(analysis))},
		scripted.Rule{Name: "task", Match: scripted.Match{UserContains: scripted.Strings{"DATA INSIGHTS"}}, Respond: respond(fenced(task))},
	)
	g := newGenerator(t, client, nil)
	ctxMap := map[string]any{"pdf_data_b64": base64.StdEncoding.EncodeToString(make([]byte, 3000))}

	cmd := command(t, &novav1.TaskSpec{Task: "Extract the invoice total", NodeType: "action"}, ctxMap)
	cmd.Stage = generator.StageAnalysis
	res := generate(t, g, cmd)
	requireSuccess(t, res)
	if res.GetStage() != generator.StageAnalysis || res.GetCode() != analysis {
		t.Errorf("analysis answer: stage %q, code %q", res.GetStage(), res.GetCode())
	}
	system := chats(srv)[0].System()
	for _, want := range []string{"context['_data_analysis']", "Do not solve the task yet", "`# STAGE: ANALYSIS`"} {
		if !strings.Contains(system, want) {
			t.Errorf("analysis prompt lacks %q:\n%s", want, system)
		}
	}

	cmd = command(t, &novav1.TaskSpec{Task: "Extract the invoice total", NodeType: "action"}, ctxMap)
	cmd.DataInsights = mustJSON(t, map[string]any{"_data_analysis": map[string]any{
		"pages": 1, "has_text_layer": true, "text_sample": "INVOICE 2024-001 Acme Corp Total: $1,234.56",
	}})
	res = generate(t, g, cmd)
	requireSuccess(t, res)
	if res.GetStage() != generator.StageTask {
		t.Errorf("task stage = %q", res.GetStage())
	}
	user := chats(srv)[1].LastUser()
	for _, want := range []string{"- pages: number = 1", "- has_text_layer: boolean = true", "Total: $1,234.56"} {
		if !strings.Contains(user, want) {
			t.Errorf("task prompt lacks insight %q:\n%s", want, user)
		}
	}
}

func TestStageMarkerIsReportedAsMarked(t *testing.T) {
	tests := []struct {
		name      string
		requested string
		answer    string
		want      string
	}{
		{"task asked, task marked", generator.StageTask, "# STAGE: TASK\ncontext['x'] = 1\n", generator.StageTask},
		{"task asked, analysis marked", generator.StageTask, "# STAGE: ANALYSIS\ncontext['_data_analysis'] = {'rows': 3}\n", generator.StageAnalysis},
		{"analysis asked, task marked", generator.StageAnalysis, "# STAGE: TASK\ncontext['x'] = 1\n", generator.StageTask},
		{"no marker", generator.StageTask, "context['x'] = 1\n", generator.StageTask},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, client := modelServer(t, scripted.Rule{Respond: respond(fenced(tt.answer))})
			g := newGenerator(t, client, nil)
			cmd := command(t, &novav1.TaskSpec{Task: "Count the rows"}, map[string]any{"rows": []any{1, 2, 3}})
			cmd.Stage = tt.requested
			res := generate(t, g, cmd)
			requireSuccess(t, res)
			if res.GetStage() != tt.want {
				t.Errorf("stage = %q, want %q", res.GetStage(), tt.want)
			}
			if res.GetCode() != tt.answer {
				t.Errorf("code = %q, want %q", res.GetCode(), tt.answer)
			}
		})
	}
}

func TestNonsenseAnswer(t *testing.T) {
	const nonsense = "I'm sorry, but I can't help with that."
	t.Run("recovers when asked again", func(t *testing.T) {
		srv, client := modelServer(t, scripted.Rule{Responses: []scripted.Response{
			{Content: nonsense}, {Content: fenced(discountCode)},
		}})
		g := newGenerator(t, client, nil)
		res := generate(t, g, command(t, &novav1.TaskSpec{Task: "Calculate discount"}, map[string]any{"total": 1500}))
		requireSuccess(t, res)
		if res.GetCode() != discountCode {
			t.Errorf("code = %q", res.GetCode())
		}
		if n := len(res.GetOutcome().GetModelCalls()); n != 2 {
			t.Errorf("model calls = %d, want 2", n)
		}
		reqs := chats(srv)
		if len(reqs) != 2 {
			t.Fatalf("requests = %d, want 2", len(reqs))
		}
		msgs := reqs[1].Messages
		if got := msgs[len(msgs)-2]; got.Role != "assistant" || got.Content != nonsense {
			t.Errorf("second request does not show the model its answer: %+v", got)
		}
		if !strings.Contains(reqs[1].LastUser(), "contained no Python code") {
			t.Errorf("second request lacks the correction: %q", reqs[1].LastUser())
		}
	})
	t.Run("fails clearly when it persists", func(t *testing.T) {
		srv, client := modelServer(t, scripted.Rule{Respond: respond(nonsense)})
		g := newGenerator(t, client, nil)
		res := generate(t, g, command(t, &novav1.TaskSpec{Task: "Calculate discount"}, map[string]any{"total": 1500}))
		if res.GetOutcome().GetStatus() != "error" {
			t.Fatalf("outcome = %q, want error", res.GetOutcome().GetStatus())
		}
		if msg := res.GetOutcome().GetError(); !strings.Contains(msg, "no Python code") || !strings.Contains(msg, "can't help") {
			t.Errorf("error = %q, want it to say no code came and quote the answer", msg)
		}
		if res.GetCode() != "" {
			t.Errorf("code = %q, want none", res.GetCode())
		}
		if n := len(chats(srv)); n != 2 {
			t.Errorf("requests = %d, want 2 (one corrective retry)", n)
		}
		if n := len(res.GetOutcome().GetModelCalls()); n != 2 {
			t.Errorf("model calls recorded = %d, want 2", n)
		}
	})
}

func TestModelErrorIsAnOutcome(t *testing.T) {
	_, client := modelServer(t, scripted.Rule{Respond: &scripted.Response{
		Status: 404, Error: &scripted.ErrorSpec{Message: "The model `gpt-nope` does not exist", Type: "invalid_request_error", Code: "model_not_found"},
	}})
	g := newGenerator(t, client, nil)
	res := generate(t, g, command(t, &novav1.TaskSpec{Task: "Calculate discount", Model: "gpt-nope"}, map[string]any{"total": 1500}))
	if res.GetOutcome().GetStatus() != "error" || !strings.Contains(res.GetOutcome().GetError(), "gpt-nope") {
		t.Errorf("outcome = %+v, want an error naming the model", res.GetOutcome())
	}
}

// pdfBase64 makes a one-page invoice with PyMuPDF, as a user would pass it.
func pdfBase64(t *testing.T) string {
	t.Helper()
	script := `import base64, sys, fitz
doc = fitz.open()
page = doc.new_page()
page.insert_text((72, 72), "INVOICE 2024-001\nAcme Corp\nTotal: $1,234.56")
sys.stdout.write(base64.b64encode(doc.tobytes()).decode())`
	out, err := exec.Command(python, "-c", script).Output()
	if err != nil {
		t.Fatalf("make a PDF with PyMuPDF (%s, python3-fitz): %v", python, err)
	}
	return string(out)
}

// Secrets in real formats (public documentation examples), split so that
// secret scanners do not report this file.
const (
	stripeKey   = "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc"
	githubPAT   = "ghp_" + "R2d2C3poBb8xWq7Lm4Nz0Kv6Ty1Ju5Hs9Fg3"
	awsKeyID    = "AKIA" + "IOSFODNN7EXAMPLE"
	bearerToken = "c2VydmljZS0xOjQ4MjkxNzM2NTU"
)

func TestSecretsAndDataNeverReachTheModel(t *testing.T) {
	const secret = "hunter2-secret"
	pdf := pdfBase64(t)
	srv, client := modelServer(t, scripted.Rule{Respond: respond(fenced("# STAGE: TASK\ncontext['sent'] = True\n"))})
	g := newGenerator(t, client, nil)
	ctxMap := map[string]any{
		"email_user":     "test@example.com",
		"email_password": secret,
		"smtp":           map[string]any{"host": "mail.example.com", "api_token": "tok-" + secret},
		"pdf_data_b64":   pdf,
		"client_name":    "Acme Corp",
		// Secrets by their look, under keys that do not say so.
		"stripe": stripeKey,
		"notes":  []any{"upstream: Authorization: Bearer " + bearerToken},
	}
	// An error long enough to be shortened, with a secret where the cut
	// falls (maxHistoryError is 4000 bytes: the first 2000 are kept).
	long := "Traceback (most recent call last):\n"
	long += strings.Repeat("  at step\n", (1990-len(long))/10)
	long += githubPAT + " refused\n" + strings.Repeat("  at step\n", 300)
	leaks := []string{secret, stripeKey, "4eC39Hq", bearerToken, githubPAT, githubPAT[:10], awsKeyID}
	for _, stage := range []string{generator.StageAnalysis, generator.StageTask} {
		cmd := command(t, &novav1.TaskSpec{Task: "Email the invoice total to the client; the relay key is " + awsKeyID, NodeType: "action"}, ctxMap)
		cmd.Stage = stage
		cmd.DataInsights = mustJSON(t, map[string]any{"_data_analysis": map[string]any{"pages": 1, "login": map[string]any{"password": secret}}})
		// A traceback may quote a secret or the data; neither may be fed back.
		cmd.History = []*novav1.AttemptRecord{
			{Attempt: 1, Phase: "execution",
				Code:  "# STAGE: TASK\nsmtp.login(context['email_user'], '" + secret + "')\nstripe.api_key = '" + stripeKey + "'\n",
				Error: "SMTPAuthenticationError: bad credentials for " + secret + "; data was " + pdf + "; upstream said " + bearerToken},
			{Attempt: 2, Phase: "execution", Code: "# STAGE: TASK\npush()\n", Error: long},
		}
		requireSuccess(t, generate(t, g, cmd))
	}
	reqs := chats(srv)
	if len(reqs) != 2 {
		t.Fatalf("requests = %d, want 2", len(reqs))
	}
	for i, r := range reqs {
		body := string(r.Body)
		for _, leak := range leaks {
			if strings.Contains(body, leak) {
				t.Errorf("request %d carries the secret %q", i, leak)
			}
		}
		for off := 0; off+64 <= len(pdf); off += 64 {
			if strings.Contains(body, pdf[off:off+64]) {
				t.Errorf("request %d carries the PDF's base64 (at offset %d)", i, off)
				break
			}
		}
		text := r.Text()
		for _, want := range []string{"email_password", "[REDACTED]", "pdf_data_b64", "looks like a PDF", "email_user",
			"- stripe: string: present, value hidden", "the relay key is [REDACTED]", "stripe.api_key = '[REDACTED]'", "upstream said [REDACTED]"} {
			if !strings.Contains(text, want) {
				t.Errorf("request %d lacks %q (keys stay visible, values are described)", i, want)
			}
		}
	}
}

var (
	runtimeOnce sync.Once
	runtimeInfo *runtimeinfo.Info
	runtimeErr  error
)

// sandboxRuntime indexes the local python3 as the sandbox does at start-up.
func sandboxRuntime(t *testing.T) *runtimeinfo.Info {
	t.Helper()
	runtimeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		runtimeInfo, runtimeErr = runtimeinfo.Generate(ctx, python,
			runtimeinfo.WithLibraries(runtimeinfo.LibrarySpec{Name: "fitz"}, runtimeinfo.LibrarySpec{Name: "json"}))
	})
	if runtimeErr != nil {
		t.Fatalf("index the python runtime (%s with python3-fitz): %v", python, runtimeErr)
	}
	return runtimeInfo
}

// docsRules: the model looks up fitz first, then answers with code.
func docsRules() []scripted.Rule {
	args, _ := json.Marshal(map[string]string{"library": "fitz", "query": "extract text"})
	return []scripted.Rule{
		{Name: "lookup", Match: scripted.Match{HasToolResult: new(false)},
			Respond: &scripted.Response{ToolCalls: []scripted.ToolCallSpec{{Name: generator.SearchTool, Arguments: args}}}},
		{Name: "code", Match: scripted.Match{HasToolResult: new(true)},
			Respond: respond(fenced("# STAGE: TASK\nimport base64, fitz\ndoc = fitz.open(stream=base64.b64decode(context['pdf_data_b64']), filetype='pdf')\n" +
				"context['text'] = ''.join(page.get_text() for page in doc)\n"))},
	}
}

func TestSearchDocumentationRoundTrip(t *testing.T) {
	info := sandboxRuntime(t)
	srv, client := modelServer(t, docsRules()...)
	g := newGenerator(t, client, info)
	res := generate(t, g, command(t, &novav1.TaskSpec{Task: "Extract the text of the PDF"}, map[string]any{"pdf_data_b64": pdfBase64(t)}))
	requireSuccess(t, res)
	if !strings.Contains(res.GetCode(), "page.get_text()") {
		t.Errorf("code = %q", res.GetCode())
	}
	reqs := chats(srv)
	if len(reqs) != 2 {
		t.Fatalf("requests = %d, want 2 (tool call, then answer)", len(reqs))
	}
	var toolMsg *scripted.Message
	for i, m := range reqs[1].Messages {
		if m.Role == "tool" {
			toolMsg = &reqs[1].Messages[i]
		}
	}
	if toolMsg == nil {
		t.Fatalf("second request has no tool message: %+v", reqs[1].Messages)
	}
	if !strings.Contains(toolMsg.Content, "Page.get_text") {
		t.Errorf("tool answer lacks fitz's Page.get_text documentation:\n%s", toolMsg.Content)
	}
	if len(res.GetToolCalls()) != 1 {
		t.Fatalf("tool calls = %d, want 1", len(res.GetToolCalls()))
	}
	tc := res.GetToolCalls()[0]
	if tc.GetName() != generator.SearchTool || !strings.Contains(tc.GetArguments(), `"fitz"`) || !strings.Contains(tc.GetResult(), "get_text") {
		t.Errorf("tool call recorded as %+v", tc)
	}
	if n := len(res.GetOutcome().GetModelCalls()); n != 2 {
		t.Errorf("model calls = %d, want 2", n)
	}
	if res.GetPromptBytes() <= int64(len(toolMsg.Content)) {
		t.Errorf("prompt_bytes = %d does not count the tool answer (%d bytes)", res.GetPromptBytes(), len(toolMsg.Content))
	}
	if !strings.Contains(reqs[0].System(), "fitz (PyMuPDF") {
		t.Errorf("system prompt does not list the runtime's libraries:\n%s", reqs[0].System())
	}
}

func TestSearchDocumentationWithoutIndex(t *testing.T) {
	srv, client := modelServer(t, docsRules()...)
	g := newGenerator(t, client, nil) // no bus, nothing published
	res := generate(t, g, command(t, &novav1.TaskSpec{Task: "Extract the text of the PDF"}, map[string]any{"pdf_data_b64": pdfBase64(t)}))
	requireSuccess(t, res)
	if got := res.GetToolCalls()[0].GetResult(); got != "documentation index unavailable" {
		t.Errorf("tool answer = %q", got)
	}
	if !strings.Contains(chats(srv)[1].Text(), "documentation index unavailable") {
		t.Error("the model was not told the index is unavailable")
	}
}

// TestBudgetRefusal: a generation whose call would not fit the step's
// allowance is not made; the outcome says budget_exceeded with the limit.
// An answer without code is asked again only while the allowance holds a
// second call.
func TestBudgetRefusal(t *testing.T) {
	srv, client := modelServer(t, scripted.Rule{Respond: respond("I'm sorry, but I can't help with that.")})
	g := newGenerator(t, client, nil)
	limit := &novav1.BudgetLimit{Name: "max_model_calls", Scope: `workflow "w"`, Allowed: 3, Spent: 2}
	ctx := llm.WithAllowance(t.Context(), &novav1.Allowance{ModelCalls: proto.Int32(1), CallsLimit: limit})
	res, err := g.Generate(ctx, command(t, &novav1.TaskSpec{Task: "Calculate discount"}, map[string]any{"total": 1500}))
	if err != nil {
		t.Fatal(err)
	}
	be := res.GetOutcome().GetBudgetExceeded()
	if res.GetOutcome().GetStatus() != "error" || be.GetLimit().GetName() != "max_model_calls" || be.GetStepSpent() != 1 ||
		res.GetOutcome().GetError() != `budget_exceeded: max_model_calls of workflow "w": 3 model calls made of 3 allowed` {
		t.Errorf("outcome %v", res.GetOutcome())
	}
	if n, calls := len(chats(srv)), len(res.GetOutcome().GetModelCalls()); n != 1 || calls != 1 {
		t.Errorf("%d requests, %d calls recorded; want the first call only", n, calls)
	}
}
