package e2e

import (
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
	run := decodeRunJSON(t, res.stdout)
	if run.Status != "succeeded" || !slices.Contains(run.Path, "auto_approve") {
		t.Fatalf("status %s, path %v", run.Status, run.Path)
	}
	// The execution ran in the test's system, whose audit store has it.
	if _, err := e.s.Store.Execution(e.ctx, run.ExecutionID); err != nil {
		t.Errorf("execution %s not in the system's store: %v", run.ExecutionID, err)
	}
	if !strings.Contains(res.stdout, `"nodes"`) {
		t.Errorf("--chain printed no chain of work:\n%s", res.stdout)
	}

	cmd := exec.CommandContext(t.Context(), bin, "run", "--remote", invoiceExample)
	cmd.Env = []string{"PATH=/usr/bin:/bin"}
	out, _ := cmd.CombinedOutput()
	if cmd.ProcessState.ExitCode() != 2 || !strings.Contains(string(out), "--remote needs NATS_URL") {
		t.Errorf("without NATS_URL: exit %d, %s", cmd.ProcessState.ExitCode(), out)
	}
}
