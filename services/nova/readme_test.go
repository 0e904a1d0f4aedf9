package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// example is a ```bash block of a documentation page: its script, and the
// answers it shows (the "# " lines), each a pattern in which … stands for
// anything.
type example struct {
	script   string
	patterns []string
}

// httpExamplePages are the pages whose ```bash blocks are run, in this
// order, against one nova dev: the HTTP API reference, then the refinement
// guide's example.
var httpExamplePages = []string{
	filepath.Join("docs", "reference", "http-api.md"),
	filepath.Join("docs", "guides", "refinement.md"),
}

// docExamples are the ```bash blocks of page (a path from the repository's
// root).
func docExamples(t *testing.T, page string) []example {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", page))
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	for _, block := range regexp.MustCompile("(?s)\n```bash\n(.*?)\n```").FindAllStringSubmatch(string(data), -1) {
		var ex example
		var script []string
		for _, line := range strings.Split(block[1], "\n") {
			if p, ok := strings.CutPrefix(strings.TrimSpace(line), "# "); ok {
				ex.patterns = append(ex.patterns, strings.TrimSpace(p))
			} else {
				script = append(script, line)
			}
		}
		ex.script = strings.Join(script, "\n")
		out = append(out, ex)
	}
	if len(out) == 0 {
		t.Fatalf("%s has no bash example", page)
	}
	return out
}

// match finds each pattern in out, in order; … matches anything.
func match(out string, patterns []string) error {
	pos := 0
	for _, p := range patterns {
		parts := strings.Split(p, "…")
		for i := range parts {
			parts[i] = regexp.QuoteMeta(parts[i])
		}
		re := regexp.MustCompile("(?s)" + strings.Join(parts, ".*?"))
		loc := re.FindStringIndex(out[pos:])
		if loc == nil {
			return fmt.Errorf("no %q after\n%s", p, out[:pos])
		}
		pos += loc[1]
	}
	return nil
}

// TestREADMEHTTPExamples runs the documentation's HTTP API examples (the
// pages of httpExamplePages, which the README links to) as written, in order,
// with curl against a nova dev, and checks the answers they show.
func TestREADMEHTTPExamples(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Fatal("curl is needed (Debian package curl; make deps installs it)")
	}
	var examples []example
	for _, page := range httpExamplePages {
		examples = append(examples, docExamples(t, page)...)
	}
	if len(examples) < 5 {
		t.Fatalf("found %d bash examples in %v", len(examples), httpExamplePages)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	m, _ := startDev(t, ctx, regexp.MustCompile(`HTTP API (http://\S+)\n\s+NOVA_API_KEY=(\S+)`), "--gateway-addr", "127.0.0.1:0")

	// One shell for all, as a reader pastes them one after another; each
	// block's output follows its marker.
	var script strings.Builder
	script.WriteString("set -eo pipefail\n")
	for i, ex := range examples {
		fmt.Fprintf(&script, "echo '@@@ example %d'\n%s\n", i, ex.script)
	}
	cmd := exec.CommandContext(ctx, "bash", "-c", script.String())
	cmd.Dir = filepath.Join("..", "..")
	cmd.Env = append(os.Environ(), "GW="+m[1], "NOVA_API_KEY="+m[2])
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	outputs := strings.Split(stdout.String(), "@@@ example ")
	if err != nil {
		t.Fatalf("the examples failed: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	if len(outputs) != len(examples)+1 {
		t.Fatalf("%d outputs for %d examples:\n%s", len(outputs)-1, len(examples), stdout.String())
	}
	for i, ex := range examples {
		if err := match(outputs[i+1], ex.patterns); err != nil {
			t.Errorf("example %d:\n%s\nanswered otherwise than the documentation shows: %v", i, ex.script, err)
		}
	}
}
