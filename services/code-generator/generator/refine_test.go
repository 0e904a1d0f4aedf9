package generator_test

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/structpb"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm/scripted"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/code-generator/generator"
)

const scraperCode = "const cheerio = require('cheerio')\n" +
	"module.exports = async (ctx) => {\n" +
	"  const $ = cheerio.load(ctx.html)\n" +
	"  return $('.product').map((i, el) => ({ title: $(el).find('h2').text() })).get()\n" +
	"}\n"

const refinedScraper = "const cheerio = require('cheerio')\n" +
	"module.exports = async (ctx) => {\n" +
	"  const $ = cheerio.load(ctx.html)\n" +
	"  return $('.product').map((i, el) => ({ title: $(el).find('h2').text(), price: $(el).find('.price').text() })).get()\n" +
	"}\n"

func analysis(t *testing.T, fields ...map[string]any) *structpb.Struct {
	t.Helper()
	list := make([]any, len(fields))
	for i, f := range fields {
		list[i] = f
	}
	s, err := structpb.NewStruct(map[string]any{"type": "array", "isStructured": true, "itemCount": 2, "fields": list})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func refineCommand(t *testing.T, agentType, language string, testContext map[string]any, feedback ...*novav1.FieldFeedback) *novav1.GenerateCode {
	t.Helper()
	return &novav1.GenerateCode{
		Ref:   &novav1.StepRef{ExecutionId: "refine-1", NodeId: "refine", StepId: "refine-1/refine/1/1", Visit: 1, Attempt: 1, StepNumber: 1},
		Spec:  &novav1.TaskSpec{Task: "refine", NodeType: "action", Language: language},
		Stage: generator.StageRefine,
		Refinement: &novav1.Refinement{
			AgentType:    agentType,
			OriginalCode: scraperCode,
			OutputAnalysis: analysis(t, map[string]any{"name": "title", "type": "string", "required": true, "coverage": 100,
				"examples": []any{"Lamp", "Chair"}}),
			Feedback:    feedback,
			TestContext: mustJSON(t, testContext),
		},
	}
}

func TestRefineScraperInJavaScript(t *testing.T) {
	srv, client := modelServer(t, scripted.Rule{
		Name: "refine-scraper",
		Match: scripted.Match{Agent: "code-generator", SystemContains: scripted.Strings{"code refiner", "module.exports"},
			UserContains: scripted.Strings{"You are refining scraper code"}},
		Respond: respond("Here it is:\n```javascript\n" + refinedScraper + "```"),
	})
	g := newGenerator(t, client, nil)
	cmd := refineCommand(t, "scraper", "javascript",
		map[string]any{"url": "https://shop.example/list", "html": "<div class=product>…</div>", "api_token": "tok-very-secret-123"},
		&novav1.FieldFeedback{Field: "price", Issue: "missing", CorrectSelector: ".price", Notes: "the price under the title",
			CorrectValue: jsonvalue.Proto([]byte(`"$19.99"`))})
	res := generate(t, g, cmd)
	requireSuccess(t, res)
	if res.GetCode() != refinedScraper || res.GetStage() != generator.StageRefine {
		t.Errorf("code %q stage %q", res.GetCode(), res.GetStage())
	}
	reqs := chats(srv)
	if len(reqs) != 1 {
		t.Fatalf("%d model requests", len(reqs))
	}
	r := reqs[0]
	if len(r.Tools) != 0 {
		t.Errorf("tools %v offered for JavaScript; the documentation is the Python runtime's", r.Tools)
	}
	user := r.LastUser()
	for _, want := range []string{
		"CURRENT CODE:\n```javascript\n" + scraperCode,
		"- Total items: 2",
		"title (string, 100% populated) e.g. [\"Lamp\",\"Chair\"]",
		"- Field \"price\": missing",
		"Notes: the price under the title",
		"Correct selector: .price",
		"Correct value: \"$19.99\"",
		"TEST URL: https://shop.example/list",
		"1. If correctSelector provided: Use that selector directly",
		"Return the complete improved scraper code that fixes the feedback issues.",
	} {
		if !strings.Contains(user, want) {
			t.Errorf("user prompt lacks %q:\n%s", want, user)
		}
	}
	if strings.Contains(string(r.Body), "tok-very-secret-123") {
		t.Error("the request carries the test context's secret")
	}
	if strings.Contains(user, "EARLIER REFINEMENT ATTEMPTS") {
		t.Error("a first attempt shows earlier attempts")
	}
}

func TestRefineCarriesEarlierAttempts(t *testing.T) {
	const fixed = "context['rows'] = [{'name': r['n'].title(), 'price': float(r['p'])} for r in context['sampleInput']]\n"
	srv, client := modelServer(t, scripted.Rule{
		Name:    "refine-transformer",
		Match:   scripted.Match{Agent: "code-generator", UserContains: scripted.Strings{"You are refining transformer code"}},
		Respond: respond(fenced(fixed)),
	})
	g := newGenerator(t, client, nil)
	cmd := refineCommand(t, "transformer", "python", map[string]any{"sampleInput": []any{map[string]any{"n": "lamp", "p": "19.5"}}},
		&novav1.FieldFeedback{Field: "name", Issue: "format", CorrectExpression: "n.title()",
			Examples: []*novav1.FeedbackExample{{Input: jsonvalue.Proto([]byte(`"lamp"`)), ExpectedOutput: jsonvalue.Proto([]byte(`"Lamp"`))}}},
		&novav1.FieldFeedback{Field: "price", Issue: "missing"})
	cmd.Refinement.OriginalCode = "context['rows'] = [{'name': r['n']} for r in context['sampleInput']]\n"
	cmd.Refinement.Attempts = []*novav1.RefineAttempt{
		{Attempt: 1, Code: "context['rows'] = oops\n", Error: "NameError: name 'oops' is not defined"},
		{Attempt: 2, Code: "context['rows'] = [{'name': r['n'].title()} for r in context['sampleInput']]\n",
			Resolved: []string{"name"}, Remaining: []string{"price"},
			OutputAnalysis: analysis(t, map[string]any{"name": "name", "type": "string", "coverage": 100, "examples": []any{"Lamp"}})},
	}
	res := generate(t, g, cmd)
	requireSuccess(t, res)
	if res.GetCode() != fixed || res.GetStage() != generator.StageRefine {
		t.Errorf("code %q stage %q", res.GetCode(), res.GetStage())
	}
	r := chats(srv)[0]
	if len(r.Tools) != 1 || r.Tools[0] != generator.SearchTool {
		t.Errorf("tools %v, want the documentation for Python", r.Tools)
	}
	if !strings.Contains(r.System(), "Store the output under ONE key of `context`") {
		t.Errorf("system prompt lacks how Python output is read:\n%s", r.System())
	}
	user := r.LastUser()
	for _, want := range []string{
		"SAMPLE INPUT:\n- sampleInput",
		"- Field \"name\": format\n  Correct expression: n.title()\n  Expected: [{\"expectedOutput\":\"Lamp\",\"input\":\"lamp\"}]",
		"- Field \"price\": missing",
		"Attempt 1: FAILED: NameError: name 'oops' is not defined",
		"Attempt 2: ran; resolved: name; still unresolved: price\n  price: not in the output",
		"Code of attempt 2:\n```python\ncontext['rows'] = [{'name': r['n'].title()}",
		"without breaking the fields already resolved",
	} {
		if !strings.Contains(user, want) {
			t.Errorf("user prompt lacks %q:\n%s", want, user)
		}
	}
}

func TestRefineAsksAgainForCode(t *testing.T) {
	srv, client := modelServer(t, scripted.Rule{
		Name:  "refine",
		Match: scripted.Match{Agent: "code-generator"},
		Responses: []scripted.Response{
			{Content: "I would change the selector to .price."},
			{Content: "```js\n" + refinedScraper + "```"},
		},
	})
	g := newGenerator(t, client, nil)
	res := generate(t, g, refineCommand(t, "crawler", "javascript", map[string]any{"url": "https://shop.example/"},
		&novav1.FieldFeedback{Field: "price", Issue: "missing"}))
	requireSuccess(t, res)
	if res.GetCode() != refinedScraper {
		t.Errorf("code %q", res.GetCode())
	}
	reqs := chats(srv)
	if len(reqs) != 2 || !strings.Contains(reqs[1].LastUser(), "contained no JavaScript code") {
		t.Fatalf("requests %d; the second should ask for the JavaScript again", len(reqs))
	}
	// Another word than the known agent types gets the general instructions.
	if user := reqs[0].LastUser(); !strings.Contains(user, "You are refining crawler code") ||
		!strings.Contains(user, "TEST CONTEXT:\n- url") || !strings.Contains(user, "Return the complete improved code.") {
		t.Errorf("user prompt:\n%s", user)
	}
	if len(res.GetOutcome().GetModelCalls()) != 2 || !res.GetOutcome().GetModelCalls()[0].GetScripted() {
		t.Errorf("model calls %v, want two, labelled scripted", res.GetOutcome().GetModelCalls())
	}
}

func TestRefineRefusesWhatItCannotRefine(t *testing.T) {
	srv, client := modelServer(t)
	g := newGenerator(t, client, nil)
	noCode := refineCommand(t, "scraper", "javascript", nil, &novav1.FieldFeedback{Field: "price", Issue: "missing"})
	noCode.Refinement.OriginalCode = " "
	noFeedback := refineCommand(t, "scraper", "javascript", nil)
	ruby := refineCommand(t, "scraper", "ruby", nil, &novav1.FieldFeedback{Field: "price", Issue: "missing"})
	for name, c := range map[string]struct {
		cmd  *novav1.GenerateCode
		says string
	}{
		"no code":     {noCode, "needs the original code"},
		"no feedback": {noFeedback, "feedback on at least one field"},
		"ruby":        {ruby, `language "ruby" is not supported`},
	} {
		t.Run(name, func(t *testing.T) {
			res := generate(t, g, c.cmd)
			if res.GetOutcome().GetStatus() != "error" || !strings.Contains(res.GetOutcome().GetError(), c.says) {
				t.Errorf("outcome %v, want an error saying %q", res.GetOutcome(), c.says)
			}
		})
	}
	if n := len(chats(srv)); n != 0 {
		t.Errorf("%d model calls for commands that cannot be refined", n)
	}
}

// An analyzer's feedback can name the pattern the field is found by (seed
// 004's correctPattern); the prompt carries it and says to use it.
func TestRefineAnalyzerPattern(t *testing.T) {
	fixed := "import re\ncontext['rows'] = [{'invoice': m} for m in re.findall(r'INV-\\d{4}', context['text'])]\n"
	srv, client := modelServer(t, scripted.Rule{
		Name:      "refine",
		Match:     scripted.Match{Agent: "code-generator"},
		Responses: []scripted.Response{{Content: "```python\n" + fixed + "```"}},
	})
	g := newGenerator(t, client, nil)
	res := generate(t, g, refineCommand(t, "analyzer", "python", map[string]any{"text": "INV-0001 and INV-0002"},
		&novav1.FieldFeedback{Field: "invoice", Issue: "missing", CorrectPattern: `INV- followed by four digits`}))
	requireSuccess(t, res)
	user := chats(srv)[0].LastUser()
	for _, want := range []string{
		"- Field \"invoice\": missing\n  Correct pattern: INV- followed by four digits",
		"1. If correctPattern provided: Detect the field by that pattern",
	} {
		if !strings.Contains(user, want) {
			t.Errorf("user prompt lacks %q:\n%s", want, user)
		}
	}
}
