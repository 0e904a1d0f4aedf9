// Package outputcheck holds the deterministic checks of an AI node's
// output: the code produced updates, they are JSON data, no error text or
// None is passed off as a result, a decision's value matches an edge. They
// are pure functions of the updates and the task, so the output validator
// runs them before asking its model, and the graph engine runs them
// in-process on a code-cache hit whose output check is rules-only
// (cache_validate: rules), which saves that hit a trip over the bus.
package outputcheck

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/novaflow/nova/pkg/jsonvalue"

	"github.com/novaflow/nova/pkg/redact"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// Ids of the deterministic checks, in the order they run (failed_checks).
const (
	CheckNoUpdates       = "no_updates"
	CheckNotSerializable = "not_serializable"
	CheckErrorText       = "error_text"
	CheckNoneResult      = "none_result"
	CheckDecisionValue   = "decision_value"
)

const (
	branchDecision = "branch_decision"
	// maxFindingsPerCheck bounds the values one reason names.
	maxFindingsPerCheck = 5
	// maxErrorTextScanDepth bounds how deep nested results are scanned.
	maxErrorTextScanDepth = 4
)

// Finding is a failed deterministic check with a reason the code generator
// can act on.
type Finding struct {
	Check  string
	Reason string
}

var (
	// errorTextRe matches text that is clearly an error message: it starts
	// with "Error:", "Exception:", "Traceback", or a Python exception name
	// followed by a colon ("ValueError: ...", "KeyError: 'total'"). Text that
	// merely mentions errors ("Error rate is 2%") does not match.
	errorTextRe = regexp.MustCompile(`^(?i:error|exception|traceback)\s*:|^(?i:traceback)\s*\(|^[A-Z][A-Za-z]*(Error|Exception)\s*:`)
	// objectReprRe matches str() of a Python object, which carries none of
	// its data: "<email.message.Message object at 0x7f...>".
	objectReprRe = regexp.MustCompile(`^<[\w.]+ object at 0x[0-9a-fA-F]+>$`)
)

// Run runs every check on a run's updates and deleted keys and returns the
// failed ones in order; none means the output passed.
func Run(spec *novav1.TaskSpec, raw *novav1.JSONValue, deleted []string) []Finding {
	var out []Finding
	parsed, err := jsonvalue.FromProto(raw)
	if err != nil {
		return []Finding{{CheckNotSerializable, "the context updates are not JSON data (" + err.Error() +
			"); store plain strings, numbers, booleans, lists and dicts"}}
	}
	updates, err := parsed.Decoded()
	if err != nil {
		return []Finding{{CheckNotSerializable, "the context updates are not JSON data (" + err.Error() +
			"); store plain strings, numbers, booleans, lists and dicts"}}
	}
	keys := sortedKeys(updates)

	if len(updates) == 0 && len(deleted) == 0 {
		out = append(out, Finding{CheckNoUpdates,
			"the task code produced no context updates and deleted no keys: store the results in context (for example context['result'] = value) so the workflow can use them"})
	}

	var unserializable []string
	for _, k := range keys {
		if why := notJSON(updates[k]); why != "" {
			if redact.IsSecretKey(k) {
				why = "is not plain JSON data" // never quote a secret's value
			}
			unserializable = append(unserializable, fmt.Sprintf("context[%q] %s", k, why))
		}
	}
	if len(unserializable) > 0 {
		out = append(out, Finding{CheckNotSerializable, "values are not JSON data: " + joinLimited(unserializable) +
			"; store plain strings, numbers, booleans, lists and dicts (extract the fields you need from objects)"})
	}

	var errorTexts []string
	for _, k := range keys {
		if skipErrorScan(k) {
			continue
		}
		errorTexts = append(errorTexts, findErrorText(fmt.Sprintf("context[%q]", k), updates[k], 0)...)
	}
	if len(errorTexts) > 0 {
		out = append(out, Finding{CheckErrorText, "error text was stored as a result: " + joinLimited(errorTexts) +
			"; fix the cause of the error instead of storing its message as the value"})
	}

	var nones []string
	for _, k := range keys {
		if updates[k] == nil && k != branchDecision {
			nones = append(nones, fmt.Sprintf("context[%q]", k))
		}
	}
	if len(nones) > 0 {
		out = append(out, Finding{CheckNoneResult, joinLimited(nones) +
			" set to None: a missing result passed off as a value; compute the value (check why it came out None, e.g. a regex or lookup that found nothing), or use `del context[key]` if removing the key is what the task asks"})
	}

	if spec.GetNodeType() == "decision" {
		if f, ok := checkDecision(spec.GetDecisionValues(), updates); !ok {
			out = append(out, f)
		}
	}
	return out
}

func checkDecision(allowed []string, updates map[string]any) (Finding, bool) {
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = strconv.Quote(a)
	}
	list := strings.Join(quoted, ", ")
	v, present := updates[branchDecision]
	if !present || v == nil {
		reason := "a decision node's code must set context['branch_decision']"
		if len(allowed) > 0 {
			reason += " to one of: " + list
		}
		return Finding{CheckDecisionValue, reason}, false
	}
	s, ok := workflow.DecisionString(v)
	if !ok {
		return Finding{CheckDecisionValue, fmt.Sprintf("context['branch_decision'] is a %s; it must be one of: %s", jsonType(v), list)}, false
	}
	if len(allowed) > 0 && !slices.Contains(allowed, s) {
		return Finding{CheckDecisionValue, fmt.Sprintf("context['branch_decision'] is %q, which matches no outgoing edge; it must be exactly one of: %s", s, list)}, false
	}
	return Finding{}, true
}

// notJSON says why v (decoded JSON) is not plain data, or "". NaN and
// infinities cannot reach here: the sandbox refuses them.
func notJSON(v any) string {
	switch k := v.(type) {
	case string:
		if objectReprRe.MatchString(strings.TrimSpace(k)) {
			return fmt.Sprintf("is the text %q: str() of a Python object, not its data", shorten(k, 80))
		}
	case map[string]any:
		for _, name := range slices.Sorted(maps.Keys(k)) {
			if why := notJSON(k[name]); why != "" {
				return fmt.Sprintf("[%q] %s", name, why)
			}
		}
	case []any:
		for i, e := range k {
			if why := notJSON(e); why != "" {
				return fmt.Sprintf("[%d] %s", i, why)
			}
		}
	}
	return ""
}

func findErrorText(path string, v any, depth int) []string {
	if depth > maxErrorTextScanDepth {
		return nil
	}
	switch t := v.(type) {
	case string:
		s := strings.TrimSpace(t)
		if errorTextRe.MatchString(s) || strings.Contains(s, "Traceback (most recent call last)") {
			// The finding goes on to the next prompt and the chain of work.
			return []string{fmt.Sprintf("%s = %q", path, shorten(firstLine(redact.Scrub(s, nil)), 120))}
		}
	case map[string]any:
		var out []string
		for _, k := range sortedKeys(t) {
			if skipErrorScan(k) {
				continue
			}
			out = append(out, findErrorText(fmt.Sprintf("%s[%q]", path, k), t[k], depth+1)...)
		}
		return out
	case []any:
		var out []string
		for i, e := range t {
			out = append(out, findErrorText(fmt.Sprintf("%s[%d]", path, i), e, depth+1)...)
		}
		return out
	}
	return nil
}

// skipErrorScan exempts secrets (their values are never quoted) and keys
// named for an error, which report one on purpose: whether the task
// succeeded anyway is the model's judgement.
func skipErrorScan(key string) bool {
	return redact.IsSecretKey(key) || strings.Contains(strings.ToLower(key), "error")
}

// Reason is the findings' reasons, one line per check, each led by its id.
func Reason(findings []Finding) string {
	lines := make([]string, len(findings))
	for i, f := range findings {
		lines[i] = f.Check + ": " + f.Reason
	}
	return strings.Join(lines, "\n")
}

// Checks are the findings' check ids, in order.
func Checks(findings []Finding) []string {
	ids := make([]string, len(findings))
	for i, f := range findings {
		ids[i] = f.Check
	}
	return ids
}

func jsonType(v any) string {
	switch v.(type) {
	case map[string]any:
		return "dict"
	case []any:
		return "list"
	}
	return fmt.Sprintf("%T", v)
}

func sortedKeys(m map[string]any) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func joinLimited(items []string) string {
	if len(items) <= maxFindingsPerCheck {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:maxFindingsPerCheck], "; ") + fmt.Sprintf("; and %d more", len(items)-maxFindingsPerCheck)
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}
