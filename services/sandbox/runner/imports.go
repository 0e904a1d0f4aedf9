package runner

import (
	"regexp"
	"strings"
)

var (
	importWord = regexp.MustCompile(`\bimport\b`)
	dottedName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)
	fromClause = regexp.MustCompile(`^from\s+([A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)$`)
)

// importedModules returns the top-level names of the modules a program's
// import statements name ("import a.b as c, d" and "from e.f import g" give
// a, d and e). It reads the text, not Python's grammar, and says ok false
// when it cannot be sure it saw every import: the word import anywhere but
// at the start of a statement or after "from <module>" (in a comment, in a
// string, a relative import, a statement continued over a line), or a
// dynamic import (__import__, importlib).
func importedModules(code string) (names []string, ok bool) {
	if strings.Contains(code, "__import__") || strings.Contains(code, "importlib") {
		return nil, false
	}
	seen := map[string]bool{}
	add := func(dotted string) {
		top, _, _ := strings.Cut(dotted, ".")
		if !seen[top] {
			seen[top] = true
			names = append(names, top)
		}
	}
	for _, m := range importWord.FindAllStringIndex(code, -1) {
		start := strings.LastIndexAny(code[:m[0]], "\n;:") + 1
		before := strings.TrimSpace(code[start:m[0]])
		if before != "" {
			from := fromClause.FindStringSubmatch(before)
			if from == nil {
				return nil, false
			}
			add(from[1])
			continue
		}
		rest := code[m[1]:]
		if end := strings.IndexAny(rest, "\n;#"); end >= 0 {
			rest = rest[:end]
		}
		for item := range strings.SplitSeq(rest, ",") {
			f := strings.Fields(item)
			if !(len(f) == 1 || len(f) == 3 && f[1] == "as") || !dottedName.MatchString(f[0]) {
				return nil, false
			}
			add(f[0])
		}
	}
	return names, true
}
