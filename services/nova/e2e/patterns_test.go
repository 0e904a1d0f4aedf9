package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestPatterns runs every example of docs/patterns.md: each workflow
// control-flow pattern NOVA supports directly, with what must come of it.

// patternExample is one ```yaml block of the page.
type patternExample struct {
	pattern string // the heading it is under
	yaml    string
	context map[string]any
	signals []patternSignal
	expect  string
	want    map[string]any
	wantLen map[string]int
	visits  map[string]int
	part    bool // a workflow another example runs
}

type patternSignal struct {
	node, name string // node "" sends it right after the start
	payload    map[string]any
}

func readPatterns(t *testing.T) (examples []patternExample, support map[string]string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "patterns.md"))
	if err != nil {
		t.Fatal(err)
	}
	support = map[string]string{}
	heading := ""
	lines := strings.Split(string(data), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		switch {
		case strings.HasPrefix(line, "### "):
			heading = strings.TrimPrefix(line, "### ")
		case strings.HasPrefix(line, "**Supported:** "):
			s := strings.TrimPrefix(line, "**Supported:** ")
			switch {
			case strings.HasPrefix(s, "directly"):
				support[heading] = "directly"
			case strings.HasPrefix(s, "with a workaround"):
				support[heading] = "workaround"
			case strings.HasPrefix(s, "no"):
				support[heading] = "no"
			default:
				t.Fatalf("%s: support %q", heading, s)
			}
		case line == "```yaml":
			ex := patternExample{pattern: heading}
			var body []string
			for i++; i < len(lines) && lines[i] != "```"; i++ {
				l := lines[i]
				c, ok := strings.CutPrefix(l, "# ")
				if !ok {
					body = append(body, l)
					continue
				}
				key, val, _ := strings.Cut(c, " ")
				switch key {
				case "context:":
					mustJSON(t, val, &ex.context)
				case "expect:":
					ex.expect = val
				case "expect-context:":
					mustJSON(t, val, &ex.want)
				case "expect-context-len:":
					mustJSON(t, val, &ex.wantLen)
				case "visits:":
					ex.visits = map[string]int{}
					for _, kv := range strings.Split(val, ",") {
						k, v, _ := strings.Cut(strings.TrimSpace(kv), "=")
						n, err := strconv.Atoi(v)
						if err != nil {
							t.Fatalf("%s: visits %q", heading, val)
						}
						ex.visits[k] = n
					}
				case "signal", "signal-first":
					s := patternSignal{}
					rest := val
					if key == "signal" {
						s.node, rest, _ = strings.Cut(rest, " ")
					}
					s.name, rest, _ = strings.Cut(rest, " ")
					mustJSON(t, rest, &s.payload)
					ex.signals = append(ex.signals, s)
				case "part":
					ex.part = true
				default:
					t.Fatalf("%s: unknown comment %q", heading, c)
				}
			}
			ex.yaml = strings.Join(body, "\n")
			examples = append(examples, ex)
		}
	}
	return examples, support
}

func mustJSON(t *testing.T, s string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(s), v); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
}

var patternNumber = regexp.MustCompile(`^(\d+)\. `)

func TestPatterns(t *testing.T) {
	examples, support := readPatterns(t)
	count := map[string]int{}
	for h, s := range support {
		if !patternNumber.MatchString(h) {
			t.Errorf("heading %q is not a numbered pattern", h)
		}
		count[s]++
	}
	ran := map[string]bool{}
	for _, ex := range examples {
		if !ex.part {
			ran[ex.pattern] = true
		}
	}
	for h, s := range support {
		if s == "directly" && !ran[h] {
			t.Errorf("%s: supported directly, but has no example", h)
		}
	}
	t.Logf("patterns: %d directly, %d with a workaround, %d not supported", count["directly"], count["workaround"], count["no"])
	if len(support) != 43 || count["directly"] < 38 {
		t.Errorf("%d patterns, %d directly; want 43, at least 38 directly", len(support), count["directly"])
	}
	page, _ := os.ReadFile(filepath.Join("..", "..", "..", "docs", "patterns.md"))
	said := fmt.Sprintf("**Count: %d directly, %d with a workaround, %d not supported.**", count["directly"], count["workaround"], count["no"])
	if !strings.Contains(string(page), said) {
		t.Errorf("the page does not say %s", said)
	}

	e := startEnv(t)
	// Every workflow is registered first: some run others (or themselves).
	defs := map[string]*novav1.WorkflowDefinition{}
	for _, ex := range examples {
		def := parse(t, ex.yaml)
		if err := e.client.Register(e.ctx, def); err != nil {
			t.Fatalf("%s: register: %v", ex.pattern, err)
		}
		defs[ex.pattern+"/"+def.Name] = def
	}
	for _, ex := range examples {
		if ex.part {
			continue
		}
		def := parse(t, ex.yaml)
		t.Run(ex.pattern, func(t *testing.T) {
			exec, err := e.client.Start(e.ctx, nil, def.Name, ex.context)
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range ex.signals {
				if s.node != "" {
					e.waitingFor(exec.ID, s.node, "")
				}
				e.signalExec(exec.ID, s.name, s.payload)
			}
			wc, err := exec.Wait(e.ctx)
			if err != nil {
				t.Fatal(err)
			}
			if wc.Status != ex.expect {
				t.Fatalf("status %q (%s), want %s", wc.Status, wc.Error, ex.expect)
			}
			got := ctxMap(wc.Context)
			for k, v := range ex.want {
				if a, b := mustMarshal(got[k]), mustMarshal(v); a != b {
					t.Errorf("context[%q] = %s, want %s", k, a, b)
				}
			}
			for k, n := range ex.wantLen {
				if l, _ := got[k].([]any); len(l) != n {
					t.Errorf("context[%q] has %d entries, want %d", k, len(l), n)
				}
			}
			if len(ex.visits) > 0 {
				nodes := e.chain(exec.ID)
				for node, n := range ex.visits {
					done := 0
					for _, v := range visits(nodes, node) {
						if v.Status == "success" && v.Item == nil {
							done++
						}
					}
					if done != n {
						t.Errorf("node %s ran %d times, want %d", node, done, n)
					}
				}
			}
		})
	}
}

func mustMarshal(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
