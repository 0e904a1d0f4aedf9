package generator

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/novaflow/nova/pkg/contextsummary"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// AnalysisKey is where analysis code stores its findings. The engine runs
// the analysis code like task code and passes that run's updates back as
// GenerateCode.data_insights.
const AnalysisKey = "_data_analysis"

// BranchDecisionKey is the key a decision node's code must set.
const BranchDecisionKey = "branch_decision"

// Bounds that keep a prompt's size independent of the data's.
const (
	maxContextChars  = 12_000
	maxInsightsChars = 6_000
	maxHistoryCode   = 12_000
	maxHistoryError  = 4_000
	maxTaskChars     = 8_000
)

// DefaultLibraries are the third-party modules of NOVA's sandbox image,
// offered when the runtime has not published what it holds.
var DefaultLibraries = []string{
	"fitz (PyMuPDF)", "pandas", "requests", "PIL (Pillow)", "bs4 (BeautifulSoup)", "lxml", "openpyxl", "pypdf",
}

// promptInput is what a prompt is built from.
type promptInput struct {
	cmd       *novav1.GenerateCode
	context   map[string]any
	insights  map[string]any
	libraries []string
	// docs reports whether search_documentation is offered.
	docs bool
	// secrets are the secrets the context and insights hold
	// (redact.SecretValues); texts are scrubbed of them, and of secrets
	// recognised by their look, before they are shortened, which could cut
	// a secret short of its look.
	secrets []string
}

// buildPrompt returns the system and user messages of a generation request.
func buildPrompt(in promptInput) (system, user string) {
	return systemPrompt(in), userPrompt(in)
}

func systemPrompt(in promptInput) string {
	stage := requestedStage(in.cmd)
	var b strings.Builder
	b.WriteString("You are NOVA's code generator. You write the Python code for one step of a workflow; " +
		"NOVA validates it, runs it in an isolated sandbox and checks its result.\n\n")

	b.WriteString("HOW THE CODE RUNS\n")
	b.WriteString("- A dict named `context` is already defined and holds the workflow's data (summarised in the user message). " +
		"Do not define, load or parse it yourself, and do not reassign it.\n")
	b.WriteString("- Return results by modifying `context` in place: store each result under a new, descriptive key " +
		"(for example context['discount'] = 150.0). Keys you do not touch are kept as they are.\n")
	b.WriteString("- Every value you store must be JSON-serializable: str, int, float, bool, None, and lists and dicts of these. " +
		"Convert dates, Decimals, bytes and library objects (extract the fields you need as plain values).\n")
	b.WriteString("- Values too large for the prompt are summarised there, but when the code runs `context` holds their real values. " +
		"Encoded data stays encoded: a base64 string must be decoded with base64.b64decode(context['key']) before use.\n")
	b.WriteString("- Read the keys the summary lists, with their exact names. Never print, log or store secrets " +
		"(passwords, tokens, API keys); use them only where the task needs them.\n")
	b.WriteString("- When something goes wrong, raise an exception instead of storing error text or None as a result: " +
		"a failure is reported back so the code can be fixed.\n")
	b.WriteString("- Printing one final line json.dumps({\"status\": \"success\", \"context_updates\": {...}}) is also understood, " +
		"but prefer modifying `context`.\n")
	b.WriteString("- Available: the Python standard library and " + strings.Join(in.libraries, ", ") +
		". Import nothing else: other packages are not installed.\n\n")

	if in.docs {
		b.WriteString("TOOLS\n")
		b.WriteString("You can call search_documentation(library, query) at any point to read the signatures and docstrings " +
			"of a library installed in the sandbox (for example library \"fitz\", query \"extract text\"). " +
			"Use it when you are unsure of an API instead of guessing.\n\n")
	}

	if stage == StageAnalysis {
		b.WriteString("STAGE: ANALYSIS\n")
		b.WriteString("The data must be understood before the task can be solved. Do not solve the task yet. " +
			"Write code that inspects the data the task needs (type, format, structure, size, encoding, pages, text layer, " +
			"columns, sample fields: whatever the task depends on) and stores its findings as one JSON-serializable dict in " +
			"context['" + AnalysisKey + "'], with clear keys. Keep the findings compact: counts, names and short samples, " +
			"never whole contents. Change no other key.\n\n")
	} else {
		b.WriteString("STAGE: TASK\n")
		b.WriteString("Write the code that carries out the task.\n")
		if offersAnalysis(in) {
			b.WriteString("Only if the task cannot be solved without first inspecting data whose structure is unknown, " +
				"you may instead answer analysis code marked `" + StageMarker(StageAnalysis) + "` that stores its findings " +
				"as a dict in context['" + AnalysisKey + "'] and solves nothing; you will then be asked for the task code, " +
				"with those findings. Simple data (numbers, short strings, small objects) needs no analysis.\n")
		}
		b.WriteString("\n")
		if in.cmd.GetSpec().GetNodeType() == "decision" {
			writeDecisionRules(&b, in.cmd.GetSpec().GetDecisionValues())
		} else {
			b.WriteString("Do not set context['" + BranchDecisionKey + "']: it is reserved for decision nodes.\n\n")
		}
	}

	b.WriteString("ANSWER FORMAT\n")
	b.WriteString("Answer with ONLY the code, in one ```python block, no explanation. The first line of the code must be the stage marker `" +
		StageMarker(stage) + "`.\n")
	return b.String()
}

func writeDecisionRules(b *strings.Builder, values []string) {
	b.WriteString("DECISION NODE\n")
	b.WriteString("This node decides which branch the workflow takes next. Your code MUST set context['" + BranchDecisionKey + "'] ")
	if len(values) == 0 {
		b.WriteString("to a string naming the branch to take (for example 'true' or 'false'), on every path through the code.\n")
	} else {
		b.WriteString("to exactly one of these values, a string spelled exactly as listed, on every path through the code:\n")
		for _, v := range values {
			fmt.Fprintf(b, "  - %q\n", v)
		}
		b.WriteString("Any other value, or none, fails the node.\n")
	}
	b.WriteString("Evaluate the condition the task describes from the data in `context`; you may also store the facts the decision rests on under other new keys.\n\n")
}

func userPrompt(in promptInput) string {
	var b strings.Builder
	b.WriteString("TASK\n")
	b.WriteString(shortenMiddle(redact.Scrub(strings.TrimSpace(in.cmd.GetSpec().GetTask()), in.secrets), maxTaskChars))
	b.WriteString("\n\n")

	b.WriteString("CONTEXT (keys, types, sizes and short samples; the code reads the real values from `context`)\n")
	b.WriteString(summaryText(in.context, contextsummary.Options{}, maxContextChars))
	b.WriteString("\n")

	if len(in.insights) > 0 {
		b.WriteString("DATA INSIGHTS (what the analysis code found when it ran on this data)\n")
		insights := in.insights
		if inner, ok := insights[AnalysisKey].(map[string]any); ok && len(insights) == 1 {
			insights = inner
		}
		b.WriteString(summaryText(insights, contextsummary.Options{SampleChars: 300, MaxDepth: 4}, maxInsightsChars))
		b.WriteString("\n")
	}

	if len(in.cmd.GetHistory()) > 0 {
		writeHistory(&b, in.cmd.GetHistory(), in.secrets)
	}

	stage := requestedStage(in.cmd)
	fmt.Fprintf(&b, "Write the %s code now: only the ```python block, starting with `%s`.\n", strings.ToLower(stage), StageMarker(stage))
	return b.String()
}

// writeHistory feeds back every failed attempt, oldest first, whole: the
// model needs each error next to the code that caused it.
func writeHistory(b *strings.Builder, history []*novav1.AttemptRecord, secrets []string) {
	b.WriteString("EARLIER ATTEMPTS FAILED\n")
	fmt.Fprintf(b, "Your code for this task has failed %d time(s). Each attempt, oldest first, with its code and its error:\n\n", len(history))
	for i, h := range history {
		n := h.GetAttempt()
		if n == 0 {
			n = int32(i + 1)
		}
		fmt.Fprintf(b, "Attempt %d: FAILED in %s\n", n, phaseText(h.GetPhase()))
		b.WriteString("Code:\n```python\n")
		b.WriteString(strings.TrimRight(shortenMiddle(elideEncoded(redact.Scrub(h.GetCode(), secrets)), maxHistoryCode), "\n"))
		b.WriteString("\n```\n")
		b.WriteString("Error:\n")
		b.WriteString(strings.TrimSpace(shortenMiddle(elideEncoded(redact.Scrub(h.GetError(), secrets)), maxHistoryError)))
		b.WriteString("\n\n")
	}
	b.WriteString("Find the cause of every error above and fix it. Do not repeat an approach that already failed; " +
		"read the context keys exactly as the summary names them.\n\n")
}

func phaseText(phase string) string {
	switch phase {
	case "validation":
		return "validation (static checks before running; the code was not run)"
	case "execution":
		return "execution (the sandbox ran the code and it failed)"
	case "output_validation":
		return "output validation (the code ran, but its result does not accomplish the task)"
	case "":
		return "an unknown phase"
	}
	return phase
}

// summaryText renders a bounded summary; keys beyond the bound are named.
func summaryText(m map[string]any, opts contextsummary.Options, limit int) string {
	s := contextsummary.Summarize(m, opts)
	text := s.Text()
	if len(text) <= limit {
		return text
	}
	var b strings.Builder
	shown := 0
	for _, f := range s.Fields {
		one := contextsummary.Summary{Fields: []contextsummary.Field{f}}.Text()
		if b.Len()+len(one) > limit*3/4 {
			break
		}
		b.WriteString(one)
		shown++
	}
	rest := s.Keys()[shown:]
	list := strings.Join(rest, ", ")
	fmt.Fprintf(&b, "- … %d more keys, not described to keep this short: %s\n", len(rest), shortenHead(list, limit/4))
	return b.String()
}

// requestedStage is the stage the command asks for, TASK unless ANALYSIS
// or REFINE.
func requestedStage(cmd *novav1.GenerateCode) string {
	switch {
	case strings.EqualFold(cmd.GetStage(), StageAnalysis):
		return StageAnalysis
	case strings.EqualFold(cmd.GetStage(), StageRefine):
		return StageRefine
	}
	return StageTask
}

// offersAnalysis lets the model choose analysis itself only before any
// analysis ran and on the first attempt: analysis is never repeated.
func offersAnalysis(in promptInput) bool {
	return len(in.insights) == 0 && len(in.cmd.GetHistory()) == 0 && in.cmd.GetSpec().GetNodeType() != "decision"
}

// encodedRun is a run of base64 long enough to be data rather than words.
var encodedRun = regexp.MustCompile(`[A-Za-z0-9+/_-]{200,}={0,2}`)

// elideEncoded replaces encoded data quoted in code or errors (a traceback
// can echo a value) by its size: prompts never carry the data itself.
func elideEncoded(s string) string {
	return encodedRun.ReplaceAllStringFunc(s, func(run string) string {
		return fmt.Sprintf("[encoded data, %d chars, left out]", len(run))
	})
}

// shortenHead keeps the start of s.
func shortenHead(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return validUTF8Prefix(s, n) + fmt.Sprintf("… [%d more bytes]", len(s)-n)
}

// shortenMiddle keeps the start and the end of s (a traceback's or a
// program's end matters as much as its start).
func shortenMiddle(s string, n int) string {
	if len(s) <= n {
		return s
	}
	head := validUTF8Prefix(s, n/2)
	tail := s[len(s)-n/2:]
	for len(tail) > 0 && tail[0]&0xC0 == 0x80 {
		tail = tail[1:]
	}
	return head + fmt.Sprintf("\n… [%d bytes left out] …\n", len(s)-len(head)-len(tail)) + tail
}

func validUTF8Prefix(s string, n int) string {
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
