package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/uuid"
)

// binBuild is a binary built once for every test of the package that runs
// it, in a directory of its own (TestMain removes it).
type binBuild struct {
	once     sync.Once
	dir, bin string
	err      error
}

// novaBuild and sandboxBuild are the nova and sandbox binaries.
var novaBuild, sandboxBuild binBuild

// get builds the package in pkgDir (relative to this one) as name, the
// first time a test asks, and gives its path.
func (b *binBuild) get(t *testing.T, name, pkgDir string) string {
	t.Helper()
	b.once.Do(func() {
		if b.dir, b.err = os.MkdirTemp("", "nova-e2e-"+name+"-"); b.err != nil {
			return
		}
		b.bin = filepath.Join(b.dir, name)
		cmd := exec.Command("go", "build", "-o", b.bin, ".")
		cmd.Dir = pkgDir
		if out, err := cmd.CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", name, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.bin
}

// buildNova builds the nova binary once per test run, so the CLI is tested as
// a user runs it: its output and its exit code.
func buildNova(t *testing.T) string {
	t.Helper()
	return novaBuild.get(t, "nova", "..")
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// nova runs the binary without the environment that points at external servers.
func nova(t *testing.T, bin string, args ...string) cliResult {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), bin, args...)
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "NATS_URL" && k != "MONGODB_URI" && k != "OTEL_EXPORTER_OTLP_ENDPOINT" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		t.Fatalf("nova %v: %v", args, err)
	}
	return cliResult{code: cmd.ProcessState.ExitCode(), stdout: stdout.String(), stderr: stderr.String()}
}

func TestCLI(t *testing.T) {
	bin := buildNova(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	invalid := []struct {
		name, file string
		want       []string
	}{
		{
			name: "edge to an unknown node",
			file: write("unknown-edge.yaml", `
name: bad
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "x = 1"}
  - {id: done, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: nowhere}
`),
			want: []string{`edges[1].to`, `unknown node "nowhere"`},
		},
		{
			name: "no start node",
			file: write("no-start.yaml", `
name: bad
nodes:
  - {id: a, type: action, code: "x = 1"}
  - {id: done, type: end}
edges:
  - {from: a, to: done}
`),
			want: []string{"no start node"},
		},
		{
			name: "unreachable node",
			file: write("unreachable.yaml", `
name: bad
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "x = 1"}
  - {id: orphan, type: action, code: "x = 2"}
  - {id: done, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: done}
  - {from: orphan, to: done}
`),
			want: []string{`node "orphan": unreachable`},
		},
		{
			name: "decision node without edges",
			file: write("decision-no-edges.yaml", `
name: bad
nodes:
  - {id: start, type: start}
  - {id: route, type: decision, code: "context['branch_decision'] = 'x'"}
  - {id: done, type: end}
edges:
  - {from: start, to: route}
`),
			want: []string{`node "route": decision node has no outgoing edges`},
		},
		{
			name: "duplicate node ids",
			file: write("duplicate.yaml", `
name: bad
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "x = 1"}
  - {id: a, type: action, code: "x = 2"}
  - {id: done, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: done}
`),
			want: []string{`node "a", field "id": duplicate node id`},
		},
		{
			name: "malformed YAML",
			file: write("malformed.yaml", "name: bad\nnodes: [\n  {id: start, type: start\n"),
			want: []string{"malformed workflow definition", "malformed.yaml"},
		},
		{
			name: "missing file",
			file: filepath.Join(dir, "does-not-exist.yaml"),
			want: []string{"does-not-exist.yaml", "no such file or directory"},
		},
	}
	for _, tc := range invalid {
		for _, cmd := range []string{"validate", "run"} {
			t.Run(cmd+" "+tc.name, func(t *testing.T) {
				dataDir := filepath.Join(t.TempDir(), "data")
				args := []string{cmd, tc.file}
				if cmd == "run" {
					args = append(args, "--data-dir", dataDir)
				}
				r := nova(t, bin, args...)
				if r.code != 2 {
					t.Errorf("exit code %d, want 2; stderr:\n%s", r.code, r.stderr)
				}
				mustContain(t, "stderr", r.stderr, append([]string{"nova " + cmd + ": "}, tc.want...)...)
				if r.stdout != "" {
					t.Errorf("stdout = %q, want nothing", r.stdout)
				}
				if _, err := os.Stat(dataDir); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("data dir exists (%v): nothing may start for an invalid workflow", err)
				}
			})
		}
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{name: "--set without =", args: []string{"run", invoiceExample, "--set", "amount"}, want: `--set "amount": want key=value`},
		{name: "--set without key", args: []string{"run", invoiceExample, "--set", "=5"}, want: `--set "=5": want key=value`},
		{name: "context file not an object", args: []string{"run", invoiceExample, "--context-file", write("ctx.json", "[1, 2]")},
			want: "is not a JSON object"},
		{name: "no file", args: []string{"run"}, want: "want exactly one workflow FILE"},
		{name: "two files", args: []string{"validate", invoiceExample, invoiceExample}, want: "want exactly one workflow FILE"},
		{name: "unknown flag", args: []string{"run", invoiceExample, "--no-such-flag"}, want: "flag provided but not defined: -no-such-flag"},
		{name: "--detach without --remote", args: []string{"run", invoiceExample, "--detach"}, want: "--detach needs --remote"},
		{name: "--detach with --chain", args: []string{"run", invoiceExample, "--remote", "--detach", "--chain"},
			want: "--detach does not wait for the end, so it has no chain of work to print"},
		{name: "unknown command", args: []string{"frobnicate"}, want: `unknown command "frobnicate"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := tc.args
			if args[0] == "run" {
				args = append(args, "--data-dir", filepath.Join(t.TempDir(), "data"))
			}
			r := nova(t, bin, args...)
			if r.code != 2 {
				t.Errorf("exit code %d, want 2; stderr:\n%s", r.code, r.stderr)
			}
			mustContain(t, "stderr", r.stderr, tc.want)
		})
	}

	t.Run("validate a valid workflow", func(t *testing.T) {
		r := nova(t, bin, "validate", invoiceExample)
		if r.code != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		mustContain(t, "stdout", r.stdout, `workflow "invoice-routing" is valid (9 nodes, 10 edges)`)
	})

	t.Run("run --json prints the result and keeps the chain", func(t *testing.T) {
		dataDir := t.TempDir()
		// Above this threshold of the context, even the sample's 1500 is
		// approved automatically (a manager's approval waits for a signal).
		r := nova(t, bin, "run", invoiceExample, "--json", "--set", "approval_threshold=2000", "--data-dir", dataDir)
		if r.code != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		res := decodeRunJSON(t, r.stdout)
		if res.Status != "succeeded" || res.ExecutionID == "" || res.Error != "" || res.Context["approval_route"] != "automatic" ||
			res.Context["amount"] != 1500.0 {
			t.Errorf("result = %+v, want 1500 succeeded through automatic approval", res)
		}
		if want := []string{"start", "extract", "validate", "check_amount", "auto_approve", "done"}; !slices.Equal(res.Path, want) {
			t.Errorf("path = %v, want %v", res.Path, want)
		}
		if len(res.Nodes) != 6 {
			t.Errorf("nodes = %+v, want the 6 visited nodes", res.Nodes)
		}
		for _, n := range res.Nodes {
			if n.Status != "succeeded" || n.Error != "" {
				t.Errorf("node %+v, want succeeded", n)
			}
		}

		// The chain of work outlives the run: another process reads it.
		r = nova(t, bin, "chain", res.ExecutionID, "--data-dir", dataDir, "--json")
		if r.code != 0 {
			t.Fatalf("nova chain: exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		var chain struct {
			Execution struct {
				ExecutionID string `json:"execution_id"`
				Status      string `json:"status"`
			} `json:"execution"`
			Nodes []struct {
				NodeID string `json:"node_id"`
				Status string `json:"status"`
				Steps  []any  `json:"steps"`
			} `json:"nodes"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &chain); err != nil {
			t.Fatalf("nova chain --json: %v\n%s", err, r.stdout)
		}
		var ids []string
		for _, n := range chain.Nodes {
			ids = append(ids, n.NodeID)
		}
		if chain.Execution.ExecutionID != res.ExecutionID || chain.Execution.Status != "succeeded" || !slices.Equal(ids, res.Path) {
			t.Errorf("nova chain: execution %q %q, nodes %v; want %s succeeded with nodes %v",
				chain.Execution.ExecutionID, chain.Execution.Status, ids, res.ExecutionID, res.Path)
		}
		if r := nova(t, bin, "chain", "no-such-execution", "--data-dir", dataDir); r.code != 2 || !strings.Contains(r.stderr, "not found") {
			t.Errorf("nova chain of an unknown execution: exit %d, stderr %q; want 2 and not found", r.code, r.stderr)
		}
	})

	t.Run("run prints the spend; a default budget stops it", func(t *testing.T) {
		file := write("cli-ai.yaml", `
name: cli-ai
nodes:
  - {id: start, type: start}
  - {id: discount, type: action, prompt: "Calculate discount (10% if total > 1000)"}
  - {id: done, type: end}
edges:
  - {from: start, to: discount}
  - {from: discount, to: done}
`)
		// The built-in scripted model answers: one generation and one
		// verdict, priced by the built-in table.
		r := nova(t, bin, "run", file, "--set", "total=1500", "--data-dir", t.TempDir(), "--progress=false")
		if r.code != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		if !regexp.MustCompile(`(?m)^spend      \$0\.\d{6} in 2 model calls \(discount \$0\.\d{6}\)$`).MatchString(r.stdout) {
			t.Errorf("no spend line in\n%s", r.stdout)
		}
		// The deployment's default budget (the workflow sets none) allows
		// one call: the verdict's is not made.
		t.Setenv("NOVA_BUDGET_MAX_MODEL_CALLS", "1")
		r = nova(t, bin, "run", file, "--set", "total=1500", "--data-dir", t.TempDir(), "--json")
		if r.code != 1 {
			t.Fatalf("exit code %d, want 1; stderr:\n%s", r.code, r.stderr)
		}
		res := decodeRunJSON(t, r.stdout)
		want := `node "discount" failed: budget_exceeded: max_model_calls of workflow "cli-ai" (deployment default): 1 model calls made of 1 allowed`
		if res.Error != want || res.ModelCalls != 1 || res.CostUSD <= 0 {
			t.Errorf("error %q, %d calls, $%g; want %q after the one call", res.Error, res.ModelCalls, res.CostUSD, want)
		}
		t.Setenv("NOVA_BUDGET_MAX_MODEL_CALLS", "-1")
		if r := nova(t, bin, "run", file, "--data-dir", t.TempDir()); r.code != 2 || !strings.Contains(r.stderr, `NOVA_BUDGET_MAX_MODEL_CALLS="-1"`) {
			t.Errorf("a negative default: exit %d, stderr %q; want 2 naming the variable", r.code, r.stderr)
		}
	})

	t.Run("run of a failing workflow exits 1", func(t *testing.T) {
		r := nova(t, bin, "run", invoiceExample, "--json", "--set", "amount=-5", "--data-dir", t.TempDir())
		if r.code != 1 {
			t.Fatalf("exit code %d, want 1; stderr:\n%s", r.code, r.stderr)
		}
		res := decodeRunJSON(t, r.stdout)
		if res.Status != "failed" {
			t.Errorf("status %q, want failed", res.Status)
		}
		mustContain(t, "error", res.Error, `node "validate" failed`, "ValueError: invalid invoice: amount must be positive, got -5")
		i := slices.IndexFunc(res.Nodes, func(n runNode) bool { return n.ID == "validate" })
		if i < 0 || res.Nodes[i].Status != "failed" || res.Nodes[i].Attempts != 1 || !strings.Contains(res.Nodes[i].Error, "amount must be positive") {
			t.Errorf("nodes = %+v, want validate failed after 1 attempt with its error", res.Nodes)
		}
	})

	t.Run("run prints the path and the chain of work", func(t *testing.T) {
		r := nova(t, bin, "run", invoiceExample, "--chain", "--set", "amount=500", "--data-dir", t.TempDir())
		if r.code != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		mustContain(t, "stdout", r.stdout,
			"status     succeeded",
			"path       start -> extract -> validate -> check_amount -> auto_approve -> done",
			`#4 check_amount [decision] visit 1: success`,
			`decision "low" -> auto_approve`,
			"step 1 sandbox/code_execution attempt 1: success")
	})

	t.Run("run shows branches and map items", func(t *testing.T) {
		example := filepath.Join("..", "..", "..", "examples", "order-batch.yaml")
		r := nova(t, bin, "run", example, "--progress", "--chain", "--data-dir", t.TempDir(),
			"--set", `orders=[{"id": 1, "total": 120}, {"id": 2, "total": 2400}, {"id": 3, "total": 75}]`)
		if r.code != 0 {
			t.Fatalf("exit code %d, want 0; stderr:\n%s", r.code, r.stderr)
		}
		mustContain(t, "stdout", r.stdout,
			"status     succeeded",
			`"report": "3 orders, 2595 in all, high risk: [2]"`,
			"score[2]", "branch b1", "branch b2",
			"] visit 1: success, ", ", item 1\n", "branch b2\n")
	})
}

// TestRunDetachAndSignal drives the invoice example as make demo does:
// nova run --remote --detach starts it on a running system and prints its
// execution id at once; the execution waits at the wait node
// manager_approval, nova watch shows it there, and nova signal approves it.
func TestRunDetachAndSignal(t *testing.T) {
	bin := buildNova(t)
	e := startEnv(t)
	cli := func(args ...string) cliResult {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, args...)
		cmd.Env = []string{"NATS_URL=" + e.s.NATSURL(), "MONGODB_URI=" + e.s.MongoURI(), "PATH=/usr/bin:/bin"}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
	}

	r := cli("run", invoiceExample, "--remote", "--detach")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || r.stdout != id+"\n" || uuid.Validate(id) != nil {
		t.Fatalf("nova run --detach: exit %d, stdout %q, stderr %q; want 0 and the execution id alone", r.code, r.stdout, r.stderr)
	}
	e.waitingFor(id, "manager_approval", "signal")
	r = cli("watch", id, "--timeout", "2s")
	if r.code != 1 || !strings.Contains(r.stdout, "▶ manager_approval started") || strings.Contains(r.stdout, "status ") ||
		!strings.Contains(r.stderr, "deadline exceeded") {
		t.Errorf("nova watch of the waiting execution: exit %d\n%s%s\nwant it at manager_approval when it gives up", r.code, r.stdout, r.stderr)
	}

	r = cli("signal", id, "approval", "--set", "approved=true", "--set", "reviewed_by=manager_1")
	if want := fmt.Sprintf("execution %s: signal \"approval\" taken; node manager_approval moved on to record_approval\n", id); r.code != 0 || r.stdout != want {
		t.Fatalf("nova signal: exit %d, stdout %q, stderr %q; want 0 and %q", r.code, r.stdout, r.stderr, want)
	}
	r = cli("watch", id)
	if r.code != 0 || !strings.Contains(r.stdout, "✓ record_approval") || !strings.Contains(r.stdout, "status     succeeded") {
		t.Errorf("nova watch after the approval: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	e.auditIdle()
	r = cli("chain", id)
	if r.code != 0 {
		t.Fatalf("nova chain: exit %d, stderr %q", r.code, r.stderr)
	}
	mustContain(t, "nova chain", r.stdout, `(workflow "invoice-routing", succeeded`,
		"#5 manager_approval [wait] visit 1: success", "next record_approval", "context changed: approved, reviewed_by",
		"#6 record_approval [action] visit 1: success")

	// --json prints the id as an object; the execution runs on without
	// the CLI.
	r = cli("run", invoiceExample, "--remote", "--detach", "--json", "--set", "amount=500")
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &started); r.code != 0 || err != nil || uuid.Validate(started.ExecutionID) != nil {
		t.Fatalf("nova run --detach --json: exit %d, stdout %q (%v), stderr %q", r.code, r.stdout, err, r.stderr)
	}
	if r := cli("watch", started.ExecutionID); r.code != 0 || !strings.Contains(r.stdout, "✓ auto_approve") {
		t.Errorf("nova watch of the small invoice: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

type runNode struct {
	ID         string  `json:"id"`
	Status     string  `json:"status"`
	Attempts   int     `json:"attempts"`
	Error      string  `json:"error"`
	CostUSD    float64 `json:"cost_usd"`
	ModelCalls int     `json:"model_calls"`
}

type runJSON struct {
	ExecutionID string         `json:"execution_id"`
	Status      string         `json:"status"`
	Context     map[string]any `json:"context"`
	Path        []string       `json:"path"`
	Nodes       []runNode      `json:"nodes"`
	Error       string         `json:"error"`
	CostUSD     float64        `json:"cost_usd"`
	ModelCalls  int            `json:"model_calls"`
}

// decodeRunJSON decodes `nova run --json`, checking it has exactly the
// documented fields.
func decodeRunJSON(t *testing.T, out string) runJSON {
	t.Helper()
	var raw map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, out)
	}
	keys := slices.Sorted(maps.Keys(raw))
	if want := []string{"context", "cost_usd", "error", "execution_id", "model_calls", "nodes", "path", "status"}; !slices.Equal(keys, want) {
		t.Errorf("JSON fields = %v, want %v", keys, want)
	}
	var nodes []map[string]json.RawMessage
	_ = json.Unmarshal(raw["nodes"], &nodes)
	for _, n := range nodes {
		if keys := slices.Sorted(maps.Keys(n)); !slices.Equal(keys, []string{"attempts", "cost_usd", "error", "id", "model_calls", "status"}) {
			t.Errorf("node JSON fields = %v, want attempts, cost_usd, error, id, model_calls, status", keys)
		}
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	var res runJSON
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	return res
}
