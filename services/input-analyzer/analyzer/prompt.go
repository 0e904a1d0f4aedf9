package analyzer

import (
	"strings"

	"github.com/novaflow/nova/pkg/contextsummary"
	"github.com/novaflow/nova/pkg/redact"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const systemPrompt = `You are NOVA's InputAnalyzer (NOVA agent: input-analyzer), the first step of a pipeline that solves a workflow task by generating Python code that runs in a sandbox and reads and updates a dict named context.

Your only job: decide whether the data in the context must be ANALYSED before the task code is written. Analysis means a separate Python program that runs first and inspects the data (its format, structure, size, pages, columns, encoding, ...) and returns insights that the code generator uses to write the task code. It costs one extra generation and one extra execution.

Analysis is needed when the task depends on data whose content or structure cannot be known from the summary below: documents and files (PDF, images, spreadsheets, archives), usually base64 encoded; large texts; large or irregular nested JSON; values stored by reference.
Analysis is not needed when the summary already shows everything the code needs: numbers, booleans, short strings, small objects or lists of obvious shape, or when the task does not depend on the complex data.

You see a summary of the context (keys, types, sizes, short samples), never the raw values. Do not solve the task and do not write code.

Answer with only a JSON object:
{"needs_analysis": true or false, "reasoning": "one or two sentences", "complexity": "low" or "medium" or "high"}
complexity rates how hard the data is to work with: low (plain values), medium (structured or long data), high (binary documents, large or irregular data).`

func userPrompt(spec *novav1.TaskSpec, s contextsummary.Summary) string {
	var b strings.Builder
	b.WriteString("TASK:\n")
	b.WriteString(redact.Scrub(strings.TrimSpace(spec.GetTask()), nil)) // a pasted key has no place in a prompt
	b.WriteString("\n\nNODE TYPE: ")
	if t := spec.GetNodeType(); t != "" {
		b.WriteString(t)
	} else {
		b.WriteString("action")
	}
	b.WriteString("\n\nCONTEXT SUMMARY (the code reads the real values from context at run time):\n")
	b.WriteString(s.Text())
	b.WriteString("\nDoes this data need analysis before the task code is written? Answer with the JSON object.")
	return b.String()
}
