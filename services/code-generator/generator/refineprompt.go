package generator

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/novaflow/nova/pkg/contextsummary"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// The REFINE stage is the field-feedback refinement: code that already
// runs is improved from people's feedback on the fields of its output
// (missing, wrong, partial, format), with instructions chosen by the kind
// of code (agent type). Its prompt is the seed's type-specific refinement
// prompt, with NOVA's rules of how code runs and what counts as fixed.

// StageRefine is the stage of a refinement command.
const StageRefine = "REFINE"

// Languages of refined code.
const (
	LanguagePython     = "python"
	LanguageJavaScript = "javascript"
)

// JavaScriptModules are the third-party modules of the sandbox's JavaScript
// runtime (services/sandbox/jsrunner/runtime/package.json).
var JavaScriptModules = []string{"axios", "cheerio", "undici"}

// Agent types with instructions of their own; any other word gets the
// general ones.
const (
	AgentTypeScraper     = "scraper"
	AgentTypeTransformer = "transformer"
	AgentTypeAnalyzer    = "analyzer"
	AgentTypeAPIClient   = "api-client"
)

// Bounds of a refinement prompt, independent of the data's size.
const (
	maxRefineCode     = 16_000
	maxFeedbackText   = 2_000
	maxExamplesChars  = 3_000
	maxAnalysisFields = 40
	maxAttemptError   = 3_000
)

// refineInput is what a refinement prompt is built from.
type refineInput struct {
	cmd       *novav1.GenerateCode
	language  string
	context   map[string]any
	libraries []string
	docs      bool
	// secrets are the secrets the test context holds; every text from the
	// request is scrubbed of them and of secrets recognised by their look.
	secrets []string
}

func (in refineInput) scrub(s string) string { return redact.Scrub(s, in.secrets) }

// buildRefinePrompt returns the system and user messages of a refinement.
func buildRefinePrompt(in refineInput) (system, user string) {
	return refineSystemPrompt(in), refineUserPrompt(in)
}

func fence(language string) string {
	if language == LanguageJavaScript {
		return "javascript"
	}
	return "python"
}

func refineSystemPrompt(in refineInput) string {
	var b strings.Builder
	b.WriteString("You are NOVA's code refiner. You improve code that already runs in NOVA's isolated sandbox, " +
		"using people's feedback on the fields of its output. NOVA runs your code with the same test context, " +
		"analyses its output again and checks each field's feedback.\n\n")

	b.WriteString("HOW THE CODE RUNS\n")
	if in.language == LanguageJavaScript {
		b.WriteString("- JavaScript on Node.js. Export one function: module.exports = async (context) => { ... }. " +
			"It is called with the test context (summarised in the user message) and what it returns is the output. " +
			"Records are returned as an array of objects, one per item, with one key per field.\n")
		b.WriteString("- Available: Node's built-in modules and " + strings.Join(JavaScriptModules, ", ") +
			". Require nothing else: other packages are not installed.\n")
		b.WriteString("- console.log output is kept as the run's logs; use it sparingly.\n")
	} else {
		b.WriteString("- Python. A dict named `context` is already defined and holds the test context (summarised in the " +
			"user message); do not define or reassign it.\n")
		b.WriteString("- Store the output under ONE key of `context` (for example context['items'] = [...]): that key's value " +
			"is the output NOVA analyses. Records are a list of dicts, one per item, with one key per field.\n")
		b.WriteString("- Every value must be JSON-serializable: str, int, float, bool, None, and lists and dicts of these.\n")
		b.WriteString("- Available: the Python standard library and " + strings.Join(in.libraries, ", ") +
			". Import nothing else: other packages are not installed.\n")
	}
	b.WriteString("- The network is closed, except for the host of the test URL when there is one.\n")
	b.WriteString("- Never print, log, return or store secrets (passwords, tokens, API keys); use them only where the request needs them.\n")
	b.WriteString("- When something goes wrong, raise an error instead of returning error text: the failure is reported back to you.\n\n")

	if in.docs {
		b.WriteString("TOOLS\n")
		b.WriteString("You can call search_documentation(library, query) to read the signatures and docstrings of a Python " +
			"library installed in the sandbox. Use it when you are unsure of an API instead of guessing.\n\n")
	}

	b.WriteString("WHAT COUNTS AS FIXED\n")
	b.WriteString("Fields are keys of the output's records (of the output itself when it is one object). A field's feedback is resolved when:\n")
	b.WriteString("- missing: the field is populated (not null, not blank, not an empty list or object) in more than 70% of the records;\n")
	b.WriteString("- wrong: the expected values (the correct value, the examples' expected outputs) appear among the field's values, " +
		"or, when none are given, none of the values shown in the output analysis remains;\n")
	b.WriteString("- partial: the field is populated in more records than before (or in all of them);\n")
	b.WriteString("- format: every populated value has the format of the correct value or the examples' expected outputs " +
		"(the same JSON type; for text the same pattern of digits, letters and punctuation).\n")
	b.WriteString("Fields without feedback must keep working as they do.\n\n")

	b.WriteString("ANSWER FORMAT\n")
	fmt.Fprintf(&b, "Answer with ONLY the complete improved code, in one ```%s block, no explanation.\n", fence(in.language))
	return b.String()
}

func refineUserPrompt(in refineInput) string {
	r := in.cmd.GetRefinement()
	agentType := strings.TrimSpace(r.GetAgentType())
	if agentType == "" {
		agentType = "workflow"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "You are refining %s code based on user feedback.\n\n", in.scrub(agentType))

	b.WriteString("CURRENT CODE:\n")
	writeCode(&b, in.language, in.scrub(r.GetOriginalCode()))

	b.WriteString("OUTPUT ANALYSIS:\n")
	writeAnalysis(&b, r.GetOutputAnalysis().AsMap(), in)

	b.WriteString("USER FEEDBACK:\n")
	for _, f := range r.GetFeedback() {
		writeFeedback(&b, f, in)
	}
	b.WriteString("\n")

	switch agentType {
	case AgentTypeScraper:
		fmt.Fprintf(&b, "TEST URL: %s\n\n", in.testURL())
		b.WriteString("INSTRUCTIONS:\nFor each feedback item:\n" +
			"1. If correctSelector provided: Use that selector directly\n" +
			"2. If notes provided: Analyze the HTML structure and find elements matching the description\n" +
			"3. Update the field extraction logic in the code\n" +
			"4. Ensure selectors are specific enough to avoid false positives\n\n" +
			"Return the complete improved scraper code that fixes the feedback issues.\n\n")
	case AgentTypeTransformer:
		b.WriteString("SAMPLE INPUT:\n")
		b.WriteString(in.contextPart("sampleInput"))
		b.WriteString("\nINSTRUCTIONS:\nFor each feedback item:\n" +
			"1. If correctExpression provided: Use that transformation logic\n" +
			"2. If examples provided: Match the input→output pattern\n" +
			"3. Update the transformation logic for that field\n" +
			"4. Test with sample input to verify correctness\n\n" +
			"Return the complete improved transformer code.\n\n")
	case AgentTypeAnalyzer:
		b.WriteString("ANALYSIS CONTEXT:\n")
		b.WriteString(in.contextPart("context"))
		b.WriteString("\nINSTRUCTIONS:\nFor each feedback item:\n" +
			"1. If correctPattern provided: Detect the field by that pattern\n" +
			"2. If examples provided: Match the expected analysis pattern\n" +
			"3. If notes provided: Adjust analysis criteria accordingly\n" +
			"4. Update the analysis logic for that field\n\n" +
			"Return the complete improved analyzer code.\n\n")
	case AgentTypeAPIClient:
		fmt.Fprintf(&b, "ENDPOINT: %s\n", in.endpoint())
		b.WriteString("TEST CONTEXT:\n")
		b.WriteString(in.contextPart(""))
		b.WriteString("\nINSTRUCTIONS:\nFor each feedback item:\n" +
			"1. If notes provided: Adjust the request parameters (path, query, headers, body) accordingly\n" +
			"2. If correctExpression or examples provided: Map the response to the field that way\n" +
			"3. Update the response mapping for that field\n" +
			"4. Send credentials only in the request that needs them; never log them\n\n" +
			"Return the complete improved api-client code.\n\n")
	default:
		b.WriteString("TEST CONTEXT:\n")
		b.WriteString(in.contextPart(""))
		b.WriteString("\nINSTRUCTIONS:\nFor each feedback item:\n" +
			"1. If correctValue, correctExpression or examples provided: Produce exactly those values\n" +
			"2. If notes provided: Follow them\n" +
			"3. Update the logic that computes that field\n\n" +
			"Return the complete improved code.\n\n")
	}

	if len(r.GetAttempts()) > 0 {
		writeAttempts(&b, r.GetAttempts(), in)
	}
	fmt.Fprintf(&b, "Write the complete improved code now: only the ```%s block.\n", fence(in.language))
	return b.String()
}

func writeCode(b *strings.Builder, language, code string) {
	fmt.Fprintf(b, "```%s\n", fence(language))
	b.WriteString(strings.TrimRight(shortenMiddle(elideEncoded(code), maxRefineCode), "\n"))
	b.WriteString("\n```\n\n")
}

// writeAnalysis renders an output analysis as the seed does (items and each
// field's coverage), with each field's type and examples.
func writeAnalysis(b *strings.Builder, a map[string]any, in refineInput) {
	if len(a) == 0 {
		b.WriteString("- No analysis: the code gave no output that could be analysed.\n\n")
		return
	}
	typ, _ := a["type"].(string)
	structured, _ := a["isStructured"].(bool)
	items, _ := a["itemCount"].(float64)
	fmt.Fprintf(b, "- Output type: %s", typ)
	if typ == "array" && !structured {
		b.WriteString(" (not a list of records with the same fields)")
	}
	b.WriteString("\n")
	fmt.Fprintf(b, "- Total items: %d\n", int64(items))
	fields, _ := a["fields"].([]any)
	if len(fields) == 0 {
		b.WriteString("- Fields detected: none\n\n")
		return
	}
	b.WriteString("- Fields detected:\n")
	for i, f := range fields {
		if i == maxAnalysisFields {
			fmt.Fprintf(b, "  … %d more fields\n", len(fields)-i)
			break
		}
		m, _ := f.(map[string]any)
		name, _ := m["name"].(string)
		ftype, _ := m["type"].(string)
		cov, _ := m["coverage"].(float64)
		fmt.Fprintf(b, "  %s (%s, %d%% populated)", in.scrub(name), ftype, int64(cov))
		if ex, ok := m["examples"].([]any); ok && len(ex) > 0 {
			fmt.Fprintf(b, " e.g. %s", in.jsonText(redact.Value(ex), 300))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

func writeFeedback(b *strings.Builder, f *novav1.FieldFeedback, in refineInput) {
	text := func(s string) string { return shortenHead(in.scrub(strings.TrimSpace(s)), maxFeedbackText) }
	fmt.Fprintf(b, "- Field %q: %s\n", in.scrub(f.GetField()), f.GetIssue())
	if v := f.GetNotes(); v != "" {
		fmt.Fprintf(b, "  Notes: %s\n", text(v))
	}
	if v := f.GetCorrectValue(); v != nil {
		fmt.Fprintf(b, "  Correct value: %s\n", text(string(v.GetRaw())))
	}
	if v := f.GetCorrectSelector(); v != "" {
		fmt.Fprintf(b, "  Correct selector: %s\n", text(v))
	}
	if v := f.GetCorrectExpression(); v != "" {
		fmt.Fprintf(b, "  Correct expression: %s\n", text(v))
	}
	if v := f.GetCorrectPattern(); v != "" {
		fmt.Fprintf(b, "  Correct pattern: %s\n", text(v))
	}
	if ex := f.GetExamples(); len(ex) > 0 {
		list := make([]any, 0, len(ex))
		for _, e := range ex {
			m := map[string]any{}
			if v, err := jsonvalue.Decode(e.GetInput().GetRaw()); err == nil && e.GetInput() != nil {
				m["input"] = v
			}
			if v, err := jsonvalue.Decode(e.GetExpectedOutput().GetRaw()); err == nil && e.GetExpectedOutput() != nil {
				m["expectedOutput"] = v
			}
			list = append(list, m)
		}
		fmt.Fprintf(b, "  Expected: %s\n", in.jsonText(redact.Value(list), maxExamplesChars))
	}
}

// writeAttempts feeds back every earlier attempt's outcome, and the latest
// attempt's code, which the next one should start from.
func writeAttempts(b *strings.Builder, attempts []*novav1.RefineAttempt, in refineInput) {
	b.WriteString("EARLIER REFINEMENT ATTEMPTS (oldest first)\n")
	for _, a := range attempts {
		fmt.Fprintf(b, "Attempt %d: ", a.GetAttempt())
		if e := strings.TrimSpace(a.GetError()); e != "" {
			fmt.Fprintf(b, "FAILED: %s\n", strings.TrimSpace(shortenMiddle(elideEncoded(in.scrub(e)), maxAttemptError)))
			continue
		}
		fmt.Fprintf(b, "ran; resolved: %s; still unresolved: %s\n", listOrNone(a.GetResolved(), in), listOrNone(a.GetRemaining(), in))
		if len(a.GetRemaining()) > 0 {
			writeRemaining(b, a.GetOutputAnalysis().AsMap(), a.GetRemaining(), in)
		}
	}
	last := attempts[len(attempts)-1]
	if strings.TrimSpace(last.GetCode()) != "" {
		fmt.Fprintf(b, "\nCode of attempt %d:\n", last.GetAttempt())
		writeCode(b, in.language, in.scrub(last.GetCode()))
	} else {
		b.WriteString("\n")
	}
	b.WriteString("Fix what is still unresolved, and every error above, without breaking the fields already resolved. " +
		"Do not repeat an approach that already failed.\n\n")
}

// writeRemaining shows how the unresolved fields looked in an attempt's output.
func writeRemaining(b *strings.Builder, a map[string]any, remaining []string, in refineInput) {
	fields, _ := a["fields"].([]any)
	for _, name := range remaining {
		found := false
		for _, f := range fields {
			m, _ := f.(map[string]any)
			if m["name"] != name {
				continue
			}
			found = true
			cov, _ := m["coverage"].(float64)
			fmt.Fprintf(b, "  %s: %d%% populated", in.scrub(name), int64(cov))
			if ex, ok := m["examples"].([]any); ok && len(ex) > 0 {
				fmt.Fprintf(b, ", e.g. %s", in.jsonText(redact.Value(ex), 300))
			}
			b.WriteString("\n")
		}
		if !found {
			fmt.Fprintf(b, "  %s: not in the output\n", in.scrub(name))
		}
	}
}

func listOrNone(names []string, in refineInput) string {
	if len(names) == 0 {
		return "none"
	}
	return in.scrub(strings.Join(names, ", "))
}

// testURL is the test context's url, for scrapers.
func (in refineInput) testURL() string {
	if u, ok := in.context["url"].(string); ok && u != "" {
		return in.scrub(u)
	}
	return "(none given)"
}

// endpoint is where an API client sends its requests.
func (in refineInput) endpoint() string {
	for _, k := range []string{"endpoint", "url"} {
		if u, ok := in.context[k].(string); ok && u != "" {
			return in.scrub(u)
		}
	}
	return "(none given)"
}

// contextPart summarises one member of the test context (key), or the whole
// context when key is empty or absent: keys, types, sizes and short samples,
// never whole values, secrets hidden.
func (in refineInput) contextPart(key string) string {
	ctx := in.context
	if v, ok := in.context[key]; ok && key != "" {
		ctx = map[string]any{key: v}
	}
	if len(ctx) == 0 {
		return "(empty)\n"
	}
	return in.scrub(summaryText(redact.Map(ctx), contextsummary.Options{SampleChars: 200}, maxContextChars))
}

// jsonText is v as compact JSON, shortened, scrubbed.
func (in refineInput) jsonText(v any, limit int) string {
	raw, err := json.Marshal(v)
	if err != nil {
		return "(unprintable)"
	}
	return shortenHead(elideEncoded(in.scrub(string(raw))), limit)
}
