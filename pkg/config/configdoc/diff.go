package configdoc

import (
	"fmt"
	"strings"
)

// Diff shows how got differs from want, line by line: "-" lines are only
// in want, "+" lines only in got, each run headed by its line in want. At
// most maxLines changed lines are shown. "" when they are equal.
func Diff(want, got string, maxLines int) string {
	if want == got {
		return ""
	}
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// A longest common subsequence table; the reference is a few hundred
	// lines, so the quadratic table is small. Past a bound, fall back to
	// the first differing line.
	if len(a)*len(b) > 4_000_000 {
		for i := range min(len(a), len(b)) {
			if a[i] != b[i] {
				return fmt.Sprintf("@@ line %d\n-%s\n+%s\n", i+1, a[i], b[i])
			}
		}
		return fmt.Sprintf("@@ line %d: the files differ in length (%d and %d lines)\n", min(len(a), len(b))+1, len(a), len(b))
	}
	lcs := make([][]int32, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	shown, inRun := 0, false
	emit := func(i int, sign byte, line string) bool {
		if shown == maxLines {
			fmt.Fprintf(&out, "... (more changes not shown)\n")
			return false
		}
		if !inRun {
			fmt.Fprintf(&out, "@@ line %d\n", i+1)
			inRun = true
		}
		fmt.Fprintf(&out, "%c%s\n", sign, line)
		shown++
		return true
	}
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			i, j, inRun = i+1, j+1, false
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			if !emit(i, '-', a[i]) {
				return out.String()
			}
			i++
		default:
			if !emit(i, '+', b[j]) {
				return out.String()
			}
			j++
		}
	}
	return out.String()
}
