package outputvalidator

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/novaflow/nova/pkg/contextsummary"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const systemPrompt = `You are NOVA's OutputValidator (NOVA agent: output-validator), the last check in a pipeline that solves a workflow task by generating Python code and running it in a sandbox against a dict named context.

Judge whether the code's result completes the task. Compare the context before the run with the updates the code made. The output is valid when the updates hold the results the task asks for, with plausible, meaningful values. It is invalid when a requested result is missing, empty, obviously wrong or inconsistent with the input, a placeholder, or an error message passed off as a result.

Deterministic checks have already passed: there are updates, they are JSON data, none is None or error text, and a decision node's branch_decision is an allowed value. Do not judge code style or efficiency. Values are summarised: large values show only type and size, and secret values are hidden; a summarised or hidden value is not a reason to reject.

Answer with only a JSON object:
{"valid": true or false, "reason": "one or two sentences; when invalid, say exactly what is wrong so the code can be fixed"}`

const (
	maxCodeChars   = 8000
	maxStdoutChars = 1500
	// updatesSampleChars shows short results whole: they are what is judged.
	updatesSampleChars = 200
)

// base64Run finds encoded data printed to stdout or pasted into code.
var base64Run = regexp.MustCompile(`[A-Za-z0-9+/=]{100,}`)

func userPrompt(cmd *novav1.ValidateOutput) string {
	before, updates := jsonvalue.Map(cmd.GetContextBefore()), jsonvalue.Map(cmd.GetUpdates())
	scrub := scrubber(before, updates)
	spec := cmd.GetSpec()

	var b strings.Builder
	b.WriteString("TASK:\n")
	b.WriteString(scrub(strings.TrimSpace(spec.GetTask())))
	b.WriteString("\n\nNODE TYPE: ")
	if spec.GetNodeType() == "decision" {
		quoted := make([]string, len(spec.GetDecisionValues()))
		for i, v := range spec.GetDecisionValues() {
			quoted[i] = strconv.Quote(v)
		}
		fmt.Fprintf(&b, "decision (the code sets branch_decision to one of: %s; check the choice fits the task and the data)", strings.Join(quoted, ", "))
	} else {
		b.WriteString("action")
	}
	b.WriteString("\n\nCONTEXT BEFORE THE RUN (summary):\n")
	b.WriteString(contextsummary.Summarize(before, contextsummary.Options{}).Text())
	b.WriteString("\nUPDATES MADE BY THE CODE (summary):\n")
	if len(updates) == 0 {
		b.WriteString("(none)\n")
	} else {
		b.WriteString(contextsummary.Summarize(updates, contextsummary.Options{SampleChars: updatesSampleChars}).Text())
	}
	b.WriteString("\nDELETED KEYS: ")
	if d := cmd.GetDeletedKeys(); len(d) > 0 {
		b.WriteString(strings.Join(d, ", "))
	} else {
		b.WriteString("(none)")
	}
	b.WriteString("\n\nCODE:\n```python\n")
	b.WriteString(shorten(scrub(strings.TrimSpace(cmd.GetCode())), maxCodeChars))
	b.WriteString("\n```\n\nSTDOUT (excerpt):\n")
	if out := strings.TrimSpace(cmd.GetStdout()); out != "" {
		b.WriteString(shorten(scrub(out), maxStdoutChars))
	} else {
		b.WriteString("(empty)")
	}
	b.WriteString("\n\nDoes the output complete the task? Answer with the JSON object.")
	return b.String()
}

// scrubber returns a function hiding, in the task, code and stdout, the
// values of secret keys and the other secrets found in the contexts (code
// may print them), every secret recognised by its look, and long runs of
// base64 (code may print data). It runs before text is shortened, which
// could cut a secret short of its look.
func scrubber(contexts ...map[string]any) func(string) string {
	all := make([]any, len(contexts))
	for i, c := range contexts {
		all[i] = c
	}
	secrets := redact.SecretValues(all)
	return func(s string) string {
		return base64Run.ReplaceAllStringFunc(redact.Scrub(s, secrets), func(run string) string {
			return fmt.Sprintf("[base64 data, %d chars]", len(run))
		})
	}
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
