package generator

import (
	"regexp"
	"strings"
)

// Stages of generated code, as the engine names them.
const (
	StageAnalysis = "ANALYSIS"
	StageTask     = "TASK"
)

// StageMarker is the first line of code of the given stage.
func StageMarker(stage string) string { return "# STAGE: " + stage }

var (
	// fenceRE matches a fenced block; the language tag is optional and the
	// closing fence may be missing when the answer was cut off.
	fenceRE  = regexp.MustCompile("(?sm)```[ \\t]*([A-Za-z0-9_+-]*)[^\\n]*\\n(.*?)(?:^[ \\t]*```|\\z)")
	stageRE  = regexp.MustCompile(`(?im)^[ \t]*#[ \t]*STAGE[ \t]*:[ \t]*(ANALYSIS|TASK)\b`)
	codeLine = regexp.MustCompile(`^\s*(import\s|from\s+\S+\s+import\s|def\s|class\s|for\s|while\s|if\s|try:|with\s|return\b|print\(|raise\s|assert\s|` +
		`context\s*[\[.]|[A-Za-z_][\w.]*(\[[^\]]*\])*\s*(=|\+=|-=|\*=|/=)[^=])`)
)

// extractCode finds the program in a model's answer: the first fenced block
// tagged Python (or untagged), else the whole answer. It returns "" when the
// answer holds no code at all.
func extractCode(answer string) string {
	var untagged string
	for _, m := range fenceRE.FindAllStringSubmatch(answer, -1) {
		lang, body := strings.ToLower(m[1]), m[2]
		switch lang {
		case "python", "py", "python3":
			if hasCode(body) {
				return tidy(body)
			}
		case "":
			if untagged == "" && hasCode(body) {
				untagged = body
			}
		}
	}
	if untagged != "" {
		return tidy(untagged)
	}
	if strings.Contains(answer, "```") {
		// Fenced blocks in another language, or empty ones: not Python.
		return ""
	}
	if looksLikeCode(answer) {
		return tidy(answer)
	}
	return ""
}

// extractCodeIn is extractCode for code in language: for JavaScript the
// first fenced block tagged JavaScript (or untagged), else the whole answer
// when it reads as JavaScript.
func extractCodeIn(answer, language string) string {
	if language != LanguageJavaScript {
		return extractCode(answer)
	}
	var untagged string
	for _, m := range fenceRE.FindAllStringSubmatch(answer, -1) {
		lang, body := strings.ToLower(m[1]), m[2]
		switch lang {
		case "javascript", "js", "node", "nodejs", "mjs", "cjs":
			if hasJSCode(body) {
				return tidy(body)
			}
		case "":
			if untagged == "" && hasJSCode(body) {
				untagged = body
			}
		}
	}
	if untagged != "" {
		return tidy(untagged)
	}
	if strings.Contains(answer, "```") {
		return ""
	}
	for _, line := range strings.Split(answer, "\n") {
		if jsLine.MatchString(line) {
			return tidy(answer)
		}
	}
	return ""
}

// jsLine is a line that reads as a JavaScript statement.
var jsLine = regexp.MustCompile(`^\s*(module\.exports\b|exports\.|export\s|import\s|const\s|let\s|var\s|function\b|async\s|return\b|await\s|if\s*\(|for\s*\(|while\s*\(|try\s*\{|throw\s|console\.|[A-Za-z_$][\w$.]*\s*=[^=])`)

// hasJSCode reports a line that is neither blank nor a comment.
func hasJSCode(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "//") && !strings.HasPrefix(t, "/*") && !strings.HasPrefix(t, "*") {
			return true
		}
	}
	return false
}

// detectStage reads the stage marker; code without one is task code.
func detectStage(code string) string {
	if m := stageRE.FindStringSubmatch(code); m != nil {
		return strings.ToUpper(m[1])
	}
	return StageTask
}

// hasCode reports a line that is neither blank nor a comment.
func hasCode(s string) bool {
	for _, line := range strings.Split(s, "\n") {
		t := strings.TrimSpace(line)
		if t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

// looksLikeCode tells an unfenced program from prose: at least one line must
// read as a Python statement.
func looksLikeCode(s string) bool {
	if !hasCode(s) {
		return false
	}
	for _, line := range strings.Split(s, "\n") {
		if codeLine.MatchString(line) {
			return true
		}
	}
	return false
}

func tidy(code string) string {
	return strings.Trim(strings.ReplaceAll(code, "\r\n", "\n"), "\n") + "\n"
}
