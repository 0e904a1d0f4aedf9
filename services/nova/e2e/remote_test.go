package e2e

import (
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestRunRemote runs `nova run --remote` against a running system: the CLI
// starts nothing itself, only publishes the start event and waits.
func TestRunRemote(t *testing.T) {
	bin := buildNova(t)
	e := startEnv(t)
	runRemote := func(args ...string) cliResult {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), bin, append([]string{"run", "--remote"}, args...)...)
		cmd.Env = []string{"NATS_URL=" + e.s.NATSURL(), "MONGODB_URI=" + e.s.MongoURI(), "PATH=/usr/bin:/bin"}
		var out, errOut strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errOut
		_ = cmd.Run()
		return cliResult{code: cmd.ProcessState.ExitCode(), stdout: out.String(), stderr: errOut.String()}
	}

	res := runRemote(invoiceExample, "--set", "amount=500", "--json", "--chain")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	// --json --chain prints the run, then the chain of work.
	dec := json.NewDecoder(strings.NewReader(res.stdout))
	var run runJSON
	var chain map[string]any
	if err := dec.Decode(&run); err != nil {
		t.Fatalf("run JSON: %v\n%s", err, res.stdout)
	}
	if err := dec.Decode(&chain); err != nil || chain["nodes"] == nil {
		t.Errorf("no chain of work after the run: %v", err)
	}
	if run.Status != "succeeded" || !slices.Contains(run.Path, "auto_approve") {
		t.Fatalf("status %s, path %v", run.Status, run.Path)
	}
	// The execution ran in the test's system, whose audit store has it.
	if _, err := e.s.Store.Execution(e.ctx, run.ExecutionID); err != nil {
		t.Errorf("execution %s not in the system's store: %v", run.ExecutionID, err)
	}

	cmd := exec.CommandContext(t.Context(), bin, "run", "--remote", invoiceExample)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "--remote needs NATS_URL") {
		t.Errorf("without NATS_URL: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
}
