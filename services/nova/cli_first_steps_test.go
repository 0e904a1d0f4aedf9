package main

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/syncbuf"
)

// TestRunSaysWhatItWaitsFor: nova run examples/invoice-routing.yaml, the
// first command a newcomer types, reaches the manager's approval and says
// so at once: the signal, until when, and the exact nova signal command,
// whose payload meets the node's schema. Sending it, as printed, ends the
// run approved.
func TestRunSaysWhatItWaitsFor(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	var out, errOut syncbuf.Buffer
	exit := make(chan int, 1)
	file := filepath.Join("..", "..", "examples", "invoice-routing.yaml")
	go func() {
		exit <- cmdRun(ctx, []string{file, "--data-dir", t.TempDir(), "--timeout", "2m"}, &out, &errOut)
	}()
	notice := regexp.MustCompile(`nova run: execution (\S+) waits at node manager_approval for signal "approval" until \S+ \(in 7[12]h\d+m\d+s\)\n` +
		`(?s:.*?)send it from another terminal with:\n    NATS_URL=(\S+) nova signal (\S+) approval --data '(\{[^']*\})'\n`)
	var m []string
	for m == nil {
		select {
		case code := <-exit:
			t.Fatalf("nova run exited %d before it waited:\n%s%s", code, out.String(), errOut.String())
		case <-ctx.Done():
			t.Fatalf("nova run did not say what it waits for:\nstdout:\n%s\nstderr:\n%s", out.String(), errOut.String())
		case <-time.After(50 * time.Millisecond):
		}
		m = notice.FindStringSubmatch(errOut.String())
	}
	if m[1] != m[3] {
		t.Errorf("the notice names execution %s, its command %s", m[1], m[3])
	}
	if m[4] != `{"approved":true}` {
		t.Errorf("the payload to send is %s, want {\"approved\":true}", m[4])
	}
	if !strings.Contains(errOut.String(), "Approve or reject the invoice") {
		t.Errorf("the notice does not tell the wait node's description:\n%s", errOut.String())
	}

	t.Logf("nova run says:\n%s", errOut.String())
	// The command as printed.
	t.Setenv("NATS_URL", m[2])
	code, sigOut, sigErr := runCLI(ctx, cmdSignal, m[3], "approval", "--data", m[4])
	if code != exitOK || !strings.Contains(sigOut, "taken") {
		t.Fatalf("the printed nova signal: exit %d\n%s%s", code, sigOut, sigErr)
	}
	if code := <-exit; code != exitOK {
		t.Fatalf("nova run: exit %d after the signal\n%s%s", code, out.String(), errOut.String())
	}
	if s := out.String(); !strings.Contains(s, "status     succeeded") || !strings.Contains(s, "manager_approval -> record_approval") {
		t.Errorf("nova run after the approval:\n%s", s)
	}
}

// TestCLIAgainstNovaDev runs the commands a newcomer types against one
// nova dev, with NATS_URL alone: nova register (and nova validate) say
// that a called workflow is not registered, register it, answer an
// unchanged definition at once; nova run --remote runs a registered
// workflow by its name; nova watch says at once that an execution is
// unknown; a refused nova cancel or nova signal --json prints the refusal
// as JSON; nova rerun finds nova dev's store on its own, from a directory
// without ./.nova.
func TestCLIAgainstNovaDev(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	m, _ := startDev(t, ctx, regexp.MustCompile(`NATS_URL=(\S+)`), "--gateway-addr", "off")
	t.Setenv("NATS_URL", m[1])
	t.Setenv("MONGODB_URI", "")
	dir := t.TempDir()
	t.Chdir(dir)
	write := func(name, text string) string {
		t.Helper()
		if err := os.WriteFile(name, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return name
	}
	child := write("child.yaml", `name: cli-child
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: "context['x'] = context['x'] * 2"}
  - {id: end, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: end}
`)
	parent := write("parent.yaml", `name: cli-parent
nodes:
  - {id: start, type: start}
  - {id: call, type: workflow, workflow: cli-child, input: {x: n}, output: {doubled: x}}
  - {id: check, type: action, code: "assert context['doubled'] == 42, context"}
  - {id: end, type: end}
edges:
  - {from: start, to: call}
  - {from: call, to: check}
  - {from: check, to: end}
`)
	bad := write("bad.yaml", "name: bad one\nnodes: []\n")

	steps := []struct {
		name         string
		cmd          func(context.Context, []string, io.Writer, io.Writer) int
		args         []string
		code         int
		stdout       string
		stderr       string
		stdoutAbsent string
	}{
		{"validate: the called workflow is not registered", cmdValidate, []string{parent}, exitInvalid, "",
			`calls workflow "cli-child" (node call), which is not registered at ` + m[1], ""},
		{"register: the called workflow is not registered", cmdRegister, []string{parent}, exitInvalid, "",
			`calls workflow "cli-child" (node call), which is not registered`, ""},
		{"register: an invalid definition", cmdRegister, []string{bad}, exitInvalid, "", "bad.yaml", ""},
		{"register the child", cmdRegister, []string{child}, exitOK, `workflow "cli-child" registered: revision`, "", ""},
		{"register the child again, unchanged", cmdRegister, []string{child, "--timeout", "5s"}, exitOK,
			`workflow "cli-child" unchanged: revision`, "", ""},
		{"validate: now registered", cmdValidate, []string{parent}, exitOK, `workflow "cli-parent" is valid`, "", ""},
		{"register the parent", cmdRegister, []string{parent, "--json"}, exitOK, `"workflow": "cli-parent"`, "", ""},
		{"run the registered parent by its name", cmdRun, []string{"--remote", "cli-parent", "--set", "n=21"}, exitOK,
			"status     succeeded", "", ""},
		{"run it with its chain of work, found through nova dev", cmdRun, []string{"--remote", "cli-parent", "--set", "n=21", "--chain"}, exitOK,
			`chain of work of `, "", ""},
		{"run a name neither a file nor registered", cmdRun, []string{"--remote", "cli-nowhere"}, exitInvalid, "",
			`"cli-nowhere" is neither a file nor a workflow registered at`, ""},
		{"watch an unknown execution", cmdWatch, []string{"no-such-execution", "--timeout", "3s"}, exitFailed, "",
			`no execution "no-such-execution": the engine at`, ""},
		{"cancel an unknown execution, --json", cmdCancel, []string{"no-such-execution", "--json"}, exitInvalid,
			`"refused": true`, `no execution "no-such-execution"`, ""},
		{"signal an unknown execution, --json", cmdSignal, []string{"no-such-execution", "approval", "--json"}, exitInvalid,
			`"outcome": "refused"`, `no execution "no-such-execution"`, ""},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			start := time.Now()
			code, out, errOut := runCLI(ctx, s.cmd, s.args...)
			if code != s.code || !strings.Contains(out, s.stdout) || !strings.Contains(errOut, s.stderr) {
				t.Errorf("exit %d, want %d; stdout %q (want %q), stderr %q (want %q)", code, s.code, out, s.stdout, errOut, s.stderr)
			}
			if strings.Contains(errOut, "deadline exceeded") {
				t.Errorf("stderr %q says only that time ran out", errOut)
			}
			t.Logf("%s in %v", s.name, time.Since(start).Round(time.Millisecond))
		})
	}

	t.Run("validate offline says it could not check", func(t *testing.T) {
		t.Setenv("NATS_URL", "nats://127.0.0.1:1")
		code, out, errOut := runCLI(ctx, cmdValidate, parent)
		if code != exitOK || !strings.Contains(out, "is valid") || !strings.Contains(errOut, "could not check that the workflows it calls (cli-child) are registered: no deployment reachable at nats://127.0.0.1:1") {
			t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})

	t.Run("rerun finds nova dev's store", func(t *testing.T) {
		failing := write("failing.yaml", `name: cli-fails
nodes:
  - {id: start, type: start}
  - {id: divide, type: action, code: "context['y'] = 1 / context['x']"}
  - {id: end, type: end}
edges:
  - {from: start, to: divide}
  - {from: divide, to: end}
`)
		code, out, errOut := runCLI(ctx, cmdRun, failing, "--remote", "--set", "x=0")
		id := regexp.MustCompile(`execution  (\S+)`).FindStringSubmatch(out)
		if code != exitFailed || id == nil {
			t.Fatalf("nova run: exit %d, want 1 (1/0)\n%s%s", code, out, errOut)
		}
		code, out, errOut = runCLI(ctx, cmdRerun, id[1], "--set", "x=4")
		if code != exitOK || !strings.Contains(out, "rerun of   "+id[1]+" from node divide") || !strings.Contains(out, `"y": 0.25`) {
			t.Errorf("nova rerun without --mongo or --data-dir: exit %d\n%s%s", code, out, errOut)
		}
		if _, err := os.Stat(filepath.Join(dir, ".nova")); err == nil {
			t.Errorf("nova rerun made ./.nova: it opened a store of its own, not nova dev's")
		}
	})
}
