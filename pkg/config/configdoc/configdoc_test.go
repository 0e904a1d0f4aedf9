package configdoc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fakeRepo is a small checkout: services/x embeds pkg/ settings, its own
// package's (named like pkg/service) and has variables of its own;
// services/cli has no config struct and reads variables by name.
const fakeRepo = "testdata/repo"

func TestScanFindsEachServiceConfig(t *testing.T) {
	m, err := Scan(fakeRepo)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Service{}
	var names []string
	for _, svc := range m.Services {
		byName[svc.Name] = svc
		names = append(names, svc.Name)
	}
	// services/notes holds no Go, so it is no service.
	if got := strings.Join(names, ","); got != "cli,x" {
		t.Fatalf("services = %s, want cli,x", got)
	}
	tests := []struct {
		name string
		got  func() string
		want string
	}{
		{"x: own config struct", func() string { return structKeys(byName["x"].Own) }, "example.com/fake/services/x.config"},
		{"x: embedded, in field order", func() string { return includeKeys(byName["x"].Own[0].Includes) },
			"example.com/fake/pkg/service.Common example.com/fake/pkg/llm.Settings example.com/fake/services/x/xservice.Common"},
		{"x: own variables, unexported and untagged fields left out", func() string { return varNames(byName["x"].Own[0].Vars) }, "X_WORKERS X_PIPE"},
		{"cli: its own struct, from a loop over pointers", func() string { return structKeys(byName["cli"].Own) }, "example.com/fake/services/cli.cliSettings"},
		{"cli: a field's struct read with its file's imports, and a pointer variable's", func() string { return structKeys(byName["cli"].Loads) },
			"example.com/fake/pkg/llm.Settings example.com/fake/pkg/service.Common"},
		{"cli: direct reads by literal and by constant, not computed names", func() string {
			var out []string
			for _, d := range byName["cli"].Direct {
				out = append(out, d.Name+"@"+strings.Join(d.Files, "+"))
			}
			return strings.Join(out, " ")
		}, "CLI_HOME@services/cli/main.go FAKE_API_KEY@services/cli/main.go FAKE_URL@services/cli/main.go"},
		{"x: no direct reads (test files do not count)", func() string { return strings.Repeat("x", len(byName["x"].Direct)) }, ""},
		{"groups: sorted, a package name two packages share told apart by directory", func() string {
			var refs []string
			for _, g := range m.Groups {
				refs = append(refs, g.Ref)
			}
			return strings.Join(refs, " ")
		}, "llm.Limits llm.Settings pkg/service.Common services/x/xservice.Common"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.got(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func structKeys(structs []*Struct) string {
	var keys []string
	for _, s := range structs {
		keys = append(keys, s.Key)
	}
	return strings.Join(keys, " ")
}

func includeKeys(incs []*Include) string {
	var keys []string
	for _, inc := range incs {
		keys = append(keys, inc.Struct.Key)
	}
	return strings.Join(keys, " ")
}

func varNames(vars []*Var) string {
	var names []string
	for _, v := range vars {
		names = append(names, v.Name)
	}
	return strings.Join(names, " ")
}

func TestRenderRows(t *testing.T) {
	m, err := Scan(fakeRepo)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(Render(m))
	tests := []struct {
		name    string
		line    string
		present bool
	}{
		{"doc comment joined to one line", "| `X_WORKERS` | `int` | `4` | Workers is how many run at once. |", true},
		{"line comment; pipe in a default and markdown in a comment escaped",
			"| `X_PIPE` | `string` | `a\\|b` | Pipe is \\<a\\> or \\*b\\* or \\_c\\_. |", true},
		{"secret marked", "| `FAKE_PASSWORD` **secret** | `string` |  | Password authenticates to the bus. |", true},
		{"required marked; a named field's struct read without prefix", "| `FAKE_MAX` **required** | `int` | `3` |  |", true},
		{"a struct of another module with an env tag is a variable", "| `FAKE_TIMEOUT` | `time.Duration` | `10s` | Timeout is a struct type of another module: nothing to walk. |", true},
		{"the named field is shown in the tree", "  - [llm.Limits](#llmlimits) (field `Limits`)", true},
		{"a group several binaries read is in Shared settings", "### llm.Settings", true},
		{"...with its readers", "Type `Settings` of `pkg/llm`, read by cli, x.", true},
		{"a group one binary reads is in its section", "#### services/x/xservice.Common", true},
		{"direct read, secret as its declaration", "| `FAKE_API_KEY` **secret** | `services/cli/main.go` | [llm.Settings](#llmsettings) |", true},
		{"direct read by a constant of another package", "| `FAKE_URL` | `services/cli/main.go` | [pkg/service.Common](#pkgservicecommon) |", true},
		{"index: direct readers marked", "| `CLI_HOME` |  | cli (directly) |", true},
		{"index: a service's own struct links to its section", "| `CLI_DIR` | [cli](#cli) | cli |", true},
		{"a main package's own struct, found through a loop", "`services/cli`: struct `cliSettings` of package main.", true},
		{"index: readers through groups", "| `FAKE_URL` | [pkg/service.Common](#pkgservicecommon) | cli, x |", true},
		{"unexported field left out", "FAKE_HIDDEN", false},
		{"unexported field of main's struct left out", "X_INNER", false},
		{"file excluded by its build constraint", "X_IGNORED", false},
		{"test file's reads left out", "X_TEST_ONLY", false},
		{"computed name left out", "CLI_DYNAMIC", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := strings.Contains(doc, tt.line); got != tt.present {
				t.Errorf("contains %q = %v, want %v; the reference:\n%s", tt.line, got, tt.present, doc)
			}
		})
	}
}

func TestScanErrorsNameTheProblem(t *testing.T) {
	tests := []struct {
		name  string
		files map[string]string
		want  string
	}{
		{"no workspace", map[string]string{"services/a/main.go": "package main\n"}, "read the workspace"},
		{"a service outside the workspace", map[string]string{
			"go.work":            "go 1.26.0\n\nuse ./pkg\n",
			"pkg/go.mod":         "module example.com/p\n",
			"services/a/main.go": "package main\n",
		}, "services/a is in no module of go.work"},
		{"a config whose type cannot be told", map[string]string{
			"go.work":                    "go 1.26.0\n\nuse .\n",
			"go.mod":                     "module example.com/r\n",
			"pkg/service/service.go":     "package service\n\nfunc Main(name string, cfg any, run func() error) int { return 0 }\n",
			"services/a/main.go":         "package main\n\nimport \"example.com/r/pkg/service\"\n\nfunc main() { service.Main(\"a\", cfgOf(), nil) }\n\nfunc cfgOf() any { return nil }\n",
			"services/a/unrelated.go":    "package main\n",
			"services/b/readme.txt":      "no Go\n",
			"services/c/helpers_test.go": "package main\n",
		}, "services/a/main.go:5: cannot tell the struct type of cfgOf() passed to service.Main"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			for name, content := range tt.files {
				p := filepath.Join(root, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, err := Scan(root)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Scan: %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestDiff(t *testing.T) {
	tests := []struct {
		name, want, got string
		max             int
		diff            string
	}{
		{"equal", "a\nb\n", "a\nb\n", 10, ""},
		{"changed line", "a\nb\nc\n", "a\nB\nc\n", 10, "@@ line 2\n-b\n+B\n"},
		{"added line", "a\nc\n", "a\nb\nc\n", 10, "@@ line 2\n+b\n"},
		{"capped", "a\nb\nc\n", "x\ny\nz\n", 2, "@@ line 1\n-a\n-b\n... (more changes not shown)\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := Diff(tt.want, tt.got, tt.max); d != tt.diff {
				t.Errorf("Diff = %q, want %q", d, tt.diff)
			}
		})
	}
}

// TestReferenceIsUpToDate fails when a config struct's tags or comments
// changed without docs/reference/configuration.md being regenerated.
func TestReferenceIsUpToDate(t *testing.T) {
	root := repoRoot(t)
	m, err := Scan(root)
	if err != nil {
		t.Fatal(err)
	}
	const rel = "docs/reference/configuration.md"
	have, err := os.ReadFile(filepath.Join(root, rel))
	if err != nil {
		t.Fatalf("%v: run make config-doc and commit %s", err, rel)
	}
	if d := Diff(string(have), string(Render(m)), 40); d != "" {
		t.Errorf("%s is out of date with the config structs: run make config-doc and commit it.\n"+
			"- lines are in the committed file, + lines what the source generates now:\n%s", rel, d)
	}
}

// repoRoot walks up from the test's directory to the go.work of the
// checkout; outside one (the pkg module alone) there is nothing to check.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("no go.work above the test's directory: not in a NOVA checkout")
		}
		dir = parent
	}
}
