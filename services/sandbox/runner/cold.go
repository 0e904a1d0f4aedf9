package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
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
	defer func() {
		if err := removeTree(dir); err != nil {
			r.cfg.Logger.Warn("sandbox dir not removed", "sandbox_id", j.id, "dir", dir, "err", err)
		}
	}()
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
	out := outcome{exitCode: -1}
	runCtx, cancel := context.WithTimeout(ctx, j.limits.timeout)
	defer cancel()

	// Read ends for us, write ends for the child: stdout, stderr, result, info.
	var readers, writers []*os.File
	defer func() {
		for _, f := range append(readers, writers...) {
			f.Close()
		}
	}()
	for range 4 {
		pr, pw, err := os.Pipe()
		if err != nil {
			return out, fmt.Errorf("pipe: %w", err)
		}
		readers, writers = append(readers, pr), append(writers, pw)
	}
	extra := []*os.File{writers[2], writers[3]}
	if !sandboxed {
		extra[1] = nil
	}
	if j.broker != nil {
		extra = append(extra, j.broker)
	}

	pid1 := newSandboxInit()
	defer pid1.close()
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
	err := cmd.Start()
	for _, f := range writers {
		f.Close()
	}
	writers = nil
	if err != nil {
		return out, fmt.Errorf("start %s: %w", filepath.Base(path), err)
	}
	killAll := func() {
		if pid1.kill() {
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
		wg.Go(func() { pid1.readInfo(readers[3]) })
	}
	exited := make(chan struct{})
	var limit string
	var watcher sync.WaitGroup
	watcher.Go(func() {
		select {
		case <-exited:
		case <-runCtx.Done():
			if ctx.Err() == nil {
				limit = LimitWallTime
			}
			killAll()
		case reason := <-j.killReq:
			limit = reason
			killAll()
		}
	})

	waitErr := cmd.Wait()
	if !sandboxed {
		// Without a pid namespace, what the program started lives on in its
		// process group (unless it left it: the process backend isolates nothing).
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	deadline := time.Now().Add(waitDelay)
	// Everything that held the pipes is dead by now; the timer is a safety net.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		for _, f := range readers {
			f.Close()
		}
		<-done
	}
	close(exited)
	watcher.Wait()
	// No process of the sandbox may outlive Run, including those that let go of
	// its output.
	if err := pid1.waitExit(deadline); err != nil {
		pid1.kill()
		if err := pid1.waitExit(time.Now().Add(waitDelay)); err != nil {
			return out, fmt.Errorf("wait for the sandbox to end: %w", err)
		}
	}
	j.stdout.lines.endLine()
	out.limit = limit
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		out.signal = ws.Signal()
	} else {
		out.exitCode = cmd.ProcessState.ExitCode()
		// bwrap reports a program killed by a signal as 128+signal.
		if sandboxed && out.exitCode > 128 && out.exitCode < 128+65 {
			out.signal, out.exitCode = syscall.Signal(out.exitCode-128), -1
		}
	}
	// An exit status is the program's business; anything else is a fault.
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && runCtx.Err() == nil {
		return out, fmt.Errorf("wait for %s: %w", filepath.Base(path), waitErr)
	}
	return out, nil
}

func (r *Runner) coldArgs(dir string, l limits, config string) []string {
	args := []string{
		"--unshare-all",
		"--die-with-parent",
		"--new-session",
		"--cap-drop", "ALL",
		"--hostname", "nova-sandbox",
		"--info-fd", strconv.Itoa(infoFD),
	}
	args = append(args, r.mounts...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--ro-bind", filepath.Join(dir, "in"), "/nova",
		"--size", strconv.FormatInt(l.disk, 10), "--tmpfs", "/tmp",
		"--chdir", "/tmp",
		"--clearenv",
	)
	for _, kv := range r.env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	return append(args, "--", r.cfg.Python, runnerInside, "run", config)
}

// systemMounts mounts /usr and what lives beside it read-only. On merged-/usr
// systems /bin, /lib... are symlinks and are recreated as such.
func systemMounts() ([]string, error) {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
			continue
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", p, err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", p, err)
			}
			args = append(args, "--symlink", target, p)
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	// Only the public parts of /etc: not /etc/ssl/private, not passwd or shadow.
	for _, p := range []string{
		"/etc/alternatives",
		"/etc/ssl/certs",
		"/etc/ssl/openssl.cnf",
		"/etc/ca-certificates",
		"/etc/localtime",
		"/etc/ld.so.cache",
		"/etc/mime.types",
	} {
		args = append(args, "--ro-bind-try", p, p)
	}
	return args, nil
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
			_ = removeTree(dir)
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
	if err := writeContext(files[2], j.req.Context); err != nil {
		return "", err
	}
	if r.cred != nil {
		for _, p := range append([]string{dir, in}, files...) {
			if err := os.Lchown(p, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
				return "", fmt.Errorf("hand dir to sandbox user: %w", err)
			}
		}
	}
	return dir, nil
}
