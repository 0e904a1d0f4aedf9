package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/novaflow/nova/services/sandbox/isolation"
)

// bwrap's --info-fd. runner.py's result is fd 3 and its egress broker fd 5.
const infoFD = 4

// runCold runs one program in its own bubblewrap: a new interpreter, nothing
// shared with any other execution.
func (r *Runner) runCold(ctx context.Context, j *job) (outcome, error) {
	dir, err := r.prepare(j)
	if err != nil {
		return outcome{}, fmt.Errorf("prepare sandbox: %w", err)
	}
	defer r.removeDir(j.id, dir)
	config := j.limits.config(j.id, j.broker != nil)
	config["code"], config["context"] = "/nova/code.py", "/nova/context.json"
	text, err := json.Marshal(config)
	if err != nil {
		return outcome{}, err
	}

	args := r.coldArgs(dir, j.limits, string(text))
	return r.execute(ctx, j, r.cfg.Bwrap, args, "/", true)
}

// execute runs one runner process (bwrap or, for the process backend, python
// itself) and waits until no process of it is left.
func (r *Runner) execute(ctx context.Context, j *job, path string, args []string, dir string, sandboxed bool) (outcome, error) {
	runCtx, cancel := context.WithTimeout(ctx, j.limits.timeout)
	defer cancel()

	// Read ends for us, write ends for the child: stdout, stderr, result, info.
	readers, writers, err := pipes(4)
	if err != nil {
		return outcome{exitCode: -1}, err
	}
	defer func() {
		for _, f := range append(readers, writers...) {
			f.Close()
		}
	}()

	pid1 := isolation.NewPID1()
	defer pid1.Close()
	cmd := r.runnerCommand(path, args, dir, writers, j.broker, sandboxed)
	err = cmd.Start()
	for _, f := range writers {
		f.Close()
	}
	writers = nil
	if err != nil {
		return outcome{exitCode: -1}, fmt.Errorf("start %s: %w", filepath.Base(path), err)
	}
	killAll := func() {
		if pid1.Kill() {
			return
		}
		// bwrap has not set up the namespaces yet (--die-with-parent takes the
		// rest), or the process backend: its process group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}

	var wg sync.WaitGroup
	wg.Go(func() { copyTo(j.stdout, readers[0]) })
	wg.Go(func() { copyTo(j.stderr, readers[1]) })
	wg.Go(func() { j.result.readFrom(readers[2]) })
	if sandboxed {
		wg.Go(func() { pid1.ReadInfo(readers[3]) })
	}
	exited := make(chan struct{})
	var limit string
	var watcher sync.WaitGroup
	watcher.Go(func() { limit = enforceLimits(ctx, runCtx, j.killReq, exited, killAll) })

	waitErr := cmd.Wait()
	if !sandboxed {
		// Without a pid namespace, what the program started lives on in its
		// process group (unless it left it: the process backend isolates nothing).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(waitDelay)
	// Everything that held the pipes is dead by now; the deadline is a safety net.
	isolation.AwaitReaders(&wg, deadline, readers...)
	close(exited)
	watcher.Wait()
	// No process of the sandbox may outlive Run, including those that let go of
	// its output.
	if err := pid1.End(deadline, waitDelay); err != nil {
		return outcome{exitCode: -1}, fmt.Errorf("wait for the sandbox to end: %w", err)
	}
	j.stdout.lines.endLine()
	out := exitOutcome(cmd.ProcessState, sandboxed)
	out.limit = limit
	// An exit status is the program's business; anything else is a fault.
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && runCtx.Err() == nil {
		return out, fmt.Errorf("wait for %s: %w", filepath.Base(path), waitErr)
	}
	return out, nil
}

// pipes opens n pipes; on an error it closes those it opened.
func pipes(n int) (readers, writers []*os.File, err error) {
	for range n {
		pr, pw, err := os.Pipe()
		if err != nil {
			for _, f := range append(readers, writers...) {
				f.Close()
			}
			return nil, nil, fmt.Errorf("pipe: %w", err)
		}
		readers, writers = append(readers, pr), append(writers, pw)
	}
	return readers, writers, nil
}

// runnerCommand is the runner process, writing to the write ends of its
// stdout, stderr, result and (sandboxed only) bwrap's info pipe, with the
// egress broker when the job has network.
func (r *Runner) runnerCommand(path string, args []string, dir string, writers []*os.File, broker *os.File, sandboxed bool) *exec.Cmd {
	extra := []*os.File{writers[2], writers[3]}
	if !sandboxed {
		extra[1] = nil
	}
	if broker != nil {
		extra = append(extra, broker)
	}
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = r.env // also what /proc/1/environ shows inside
	cmd.Stdout, cmd.Stderr = writers[0], writers[1]
	cmd.ExtraFiles = extra
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: r.cred,
	}
	return cmd
}

// enforceLimits kills the runner's processes when its wall time runs out or
// the job asks for it (killReq), until exited closes; it returns the limit
// it enforced, "" when none (or when ctx itself ended).
func enforceLimits(ctx, runCtx context.Context, killReq <-chan string, exited <-chan struct{}, killAll func()) string {
	select {
	case <-exited:
		return ""
	case <-runCtx.Done():
		limit := ""
		if ctx.Err() == nil {
			limit = LimitWallTime
		}
		killAll()
		return limit
	case reason := <-killReq:
		killAll()
		return reason
	}
}

// exitOutcome reads the runner's exit status or signal from its process state.
func exitOutcome(ps *os.ProcessState, sandboxed bool) outcome {
	out := outcome{exitCode: -1}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		out.signal = ws.Signal()
		return out
	}
	out.exitCode = ps.ExitCode()
	// bwrap reports a program killed by a signal as 128+signal.
	if sandboxed && out.exitCode > 128 && out.exitCode < 128+65 {
		out.signal, out.exitCode = syscall.Signal(out.exitCode-128), -1
	}
	return out
}

func (r *Runner) coldArgs(dir string, l limits, config string) []string {
	args := isolation.Sandbox{
		InfoFD:    infoFD,
		System:    r.mounts,
		In:        filepath.Join(dir, "in"),
		DiskBytes: l.disk,
		Env:       r.env,
	}.Args()
	return append(args, "--", r.cfg.Python, runnerInside, "run", config)
}

// prepare writes the runner, the code and the context into a fresh directory
// whose in/ is mounted read-only at /nova.
func (r *Runner) prepare(j *job) (dir string, err error) {
	dir, err = os.MkdirTemp(r.cfg.WorkDir, "nova-sandbox-"+j.id+"-")
	if err != nil {
		return "", fmt.Errorf("create dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = isolation.RemoveTree(dir)
			dir = ""
		}
	}()
	in := filepath.Join(dir, "in")
	if err := os.Mkdir(in, 0o700); err != nil {
		return "", fmt.Errorf("create dir: %w", err)
	}
	files := []string{filepath.Join(in, "runner.py"), filepath.Join(in, "code.py"), filepath.Join(in, "context.json")}
	if err := os.WriteFile(files[0], runnerScript, 0o600); err != nil {
		return "", fmt.Errorf("write runner: %w", err)
	}
	if err := os.WriteFile(files[1], []byte(j.req.Code), 0o600); err != nil {
		return "", fmt.Errorf("write code: %w", err)
	}
	if err := WriteContext(files[2], j.req.Context); err != nil {
		return "", err
	}
	if err := isolation.Chown(r.cred, append([]string{dir, in}, files...)...); err != nil {
		return "", fmt.Errorf("hand dir to sandbox user: %w", err)
	}
	return dir, nil
}

// removeDir removes a per-execution directory; one left behind is litter, not
// a fault of the run.
func (r *Runner) removeDir(id, dir string) {
	if err := isolation.RemoveTree(dir); err != nil {
		r.cfg.Logger.Warn("sandbox dir not removed", "sandbox_id", id, "dir", dir, "err", err)
	}
}
