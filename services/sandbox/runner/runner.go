// Package runner runs one program in isolation with bubblewrap: its own user, pid,
// mount, ipc, uts, cgroup and (unless asked otherwise) network namespaces, a
// read-only view of the system, a private /tmp and resource limits.
//
// The node's code and its context never meet as text: the context is written to a
// JSON file that a fixed Python runner (runner.py) loads, the code is compiled from
// its own file, and the runner reports the result on a separate pipe, so nothing the
// code prints can corrupt the protocol.
package runner

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

//go:embed runner.py
var runnerScript []byte

// Error kinds of a Result.
const (
	KindCodeError          = "code_error"
	KindTimeout            = "timeout"
	KindLimit              = "limit"
	KindSandboxFault       = "sandbox_fault"
	KindRuntimeUnavailable = "runtime_unavailable"
)

// Result statuses.
const (
	StatusSuccess = "success"
	StatusError   = "error"
)

// Request is one program to run.
type Request struct {
	Code string
	// Context holds plain JSON values, already resolved (no object-store references).
	Context map[string]any
	// Timeout is the wall time allowed; 0 means Config.DefaultTimeout.
	Timeout time.Duration
	// Network shares the host's network; without it the program has only its own
	// loopback.
	Network bool
	// Language is "python" (the default); anything else gives a
	// runtime_unavailable result.
	Language string
}

// Result is what one run produced. Code errors, timeouts and limits are results;
// Run returns an error only when the sandbox itself failed.
type Result struct {
	Status string // StatusSuccess or StatusError
	// Updates holds the context keys the code added or changed (and those of a
	// protocol line). Numbers are json.Number so that large integers survive.
	Updates map[string]any
	// Deleted lists the context keys the code removed.
	Deleted []string
	// Error is a human message such as "ValueError: amount must be positive".
	Error     string
	ErrorKind string // "" or one of the Kind constants
	// Traceback is the Python traceback when the code raised; its line numbers
	// refer to the file "<node>".
	Traceback string
	// Stdout and Stderr are what the program printed, each capped at
	// Config.MaxOutputBytes; the bytes beyond are counted in the Dropped fields.
	Stdout, Stderr               string
	StdoutDropped, StderrDropped int64
	Duration                     time.Duration
	// SandboxID identifies this execution in the chain of work.
	SandboxID string
}

// Config configures a Runner. Zero values take the documented defaults.
type Config struct {
	Bwrap  string // default /usr/bin/bwrap
	Python string // default /usr/bin/python3; must live under /usr, the tree mounted inside
	// DefaultTimeout applies to requests without a timeout; default 30s.
	DefaultTimeout time.Duration
	// MaxOutputBytes caps stdout and stderr, each; default 1 MiB.
	MaxOutputBytes int64
	// MemoryBytes is the address-space limit (RLIMIT_AS); default 1 GiB, <0 none.
	MemoryBytes int64
	// FileSizeBytes is the largest file the program may write (RLIMIT_FSIZE);
	// default 256 MiB, <0 none.
	FileSizeBytes int64
	// MaxProcesses limits processes and threads (RLIMIT_NPROC); default 256, <0
	// none. Not applied when the sandbox runs as host root, where the count would
	// include every root process of the host.
	MaxProcesses int64
	// MaxResultBytes caps the encoded updates the runner may report; default 256 MiB.
	MaxResultBytes int64
	// WorkDir is the parent of the per-execution directories; default
	// os.TempDir(). When the sandbox runs as another user it must be searchable
	// by that user.
	WorkDir string
	// SandboxUID and SandboxGID: when the service runs as root, bubblewrap is
	// started as this user, so that the sandbox is not host root even inside its
	// user namespace. 0 means 65534 (nobody); -1 (either) keeps root (capabilities are
	// still dropped).
	SandboxUID, SandboxGID int
	// Logger receives warnings such as a temp dir that could not be removed;
	// default slog.Default().
	Logger *slog.Logger
}

// Runner runs programs in bubblewrap sandboxes. It is safe for concurrent use.
type Runner struct {
	cfg    Config
	mounts []string // bwrap arguments for the system part of the file system
	env    []string
	cred   *syscall.Credential // nil: bwrap runs as the service's own user
	nproc  int64
}

// sandboxEnv is the only environment the sandbox sees. The BLAS/OpenMP/malloc
// settings keep the address space of numpy and threads independent of the host's
// core count, which RLIMIT_AS would otherwise turn into machine-dependent failures.
func sandboxEnv() []string {
	return []string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/tmp",
		"LANG=C.UTF-8",
		"PYTHONDONTWRITEBYTECODE=1",
		"PYTHONIOENCODING=utf-8",
		"OPENBLAS_NUM_THREADS=1",
		"OMP_NUM_THREADS=1",
		"MALLOC_ARENA_MAX=2",
	}
}

const (
	nobody       = 65534
	infoFD       = 4 // bwrap --info-fd; fd 3 is the result pipe
	waitDelay    = 5 * time.Second
	runnerInside = "/nova/runner.py"
)

// New checks that bubblewrap and python exist and prepares a Runner.
func New(cfg Config) (*Runner, error) {
	cfg = withDefaults(cfg)
	bwrap, err := exec.LookPath(cfg.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("bubblewrap not usable at %q (install the bubblewrap package): %w", cfg.Bwrap, err)
	}
	cfg.Bwrap = bwrap
	python := filepath.Clean(cfg.Python)
	if !strings.HasPrefix(python, "/usr/") {
		return nil, fmt.Errorf("python %q: must be an absolute path under /usr, the only tree mounted in the sandbox", cfg.Python)
	}
	if _, err := exec.LookPath(python); err != nil {
		return nil, fmt.Errorf("python not usable at %q: %w", python, err)
	}
	cfg.Python = python
	if fi, err := os.Stat(cfg.WorkDir); err != nil {
		return nil, fmt.Errorf("work dir: %w", err)
	} else if !fi.IsDir() {
		return nil, fmt.Errorf("work dir %q is not a directory", cfg.WorkDir)
	}

	r := &Runner{cfg: cfg, env: sandboxEnv(), nproc: cfg.MaxProcesses}
	if os.Geteuid() == 0 && cfg.SandboxUID >= 0 && cfg.SandboxGID >= 0 {
		r.cred = &syscall.Credential{Uid: uint32(cfg.SandboxUID), Gid: uint32(cfg.SandboxGID)}
		if err := checkSearchable(cfg.WorkDir, r.cred); err != nil {
			return nil, err
		}
	}
	if r.cred == nil && os.Geteuid() == 0 {
		r.nproc = -1
	}
	r.mounts, err = systemMounts()
	if err != nil {
		return nil, err
	}
	return r, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Bwrap == "" {
		cfg.Bwrap = "/usr/bin/bwrap"
	}
	if cfg.Python == "" {
		cfg.Python = "/usr/bin/python3"
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 30 * time.Second
	}
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = 1 << 20
	}
	if cfg.MemoryBytes == 0 {
		cfg.MemoryBytes = 1 << 30
	}
	if cfg.FileSizeBytes == 0 {
		cfg.FileSizeBytes = 256 << 20
	}
	if cfg.MaxProcesses == 0 {
		cfg.MaxProcesses = 256
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 256 << 20
	}
	if cfg.WorkDir == "" {
		cfg.WorkDir = os.TempDir()
	}
	if cfg.SandboxUID == 0 {
		cfg.SandboxUID = nobody
	}
	if cfg.SandboxGID == 0 {
		cfg.SandboxGID = nobody
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return cfg
}

// Run runs one program and waits for it. The error is non-nil only when the
// sandbox could not do its job (bwrap failed, ctx was cancelled); what the code
// did wrong is reported in the Result.
func (r *Runner) Run(ctx context.Context, req Request) (Result, error) {
	start := time.Now()
	res := Result{SandboxID: newSandboxID()}
	finish := func(err error) (Result, error) {
		res.Duration = time.Since(start)
		return res, err
	}

	if lang := strings.ToLower(req.Language); lang != "" && lang != "python" {
		res.Status, res.ErrorKind = StatusError, KindRuntimeUnavailable
		res.Error = fmt.Sprintf("language %q is not available in this sandbox (only python)", req.Language)
		return finish(nil)
	}
	timeout := req.Timeout
	if timeout <= 0 {
		timeout = r.cfg.DefaultTimeout
	}

	dir, err := r.prepare(res.SandboxID, req)
	if err != nil {
		return finish(fmt.Errorf("prepare sandbox %s: %w", res.SandboxID, err))
	}
	defer func() {
		if err := removeTree(dir); err != nil {
			r.cfg.Logger.Warn("sandbox dir not removed", "sandbox_id", res.SandboxID, "dir", dir, "err", err)
		}
	}()

	out, err := r.execute(ctx, timeout, dir, req.Network)
	if err != nil {
		return finish(fmt.Errorf("sandbox %s: %w", res.SandboxID, err))
	}
	res.Stdout, res.StdoutDropped = out.stdout.buf.String(), out.stdout.dropped
	res.Stderr, res.StderrDropped = out.stderr.buf.String(), out.stderr.dropped

	// The runner writes "S" before the code runs, then its report ending in a
	// newline: a report without one was cut short.
	started := len(out.result) > 0 && out.result[0] == 'S'
	payload := out.result
	if started {
		payload = payload[1:]
	}
	complete := len(payload) > 0 && payload[len(payload)-1] == '\n'

	switch {
	case out.resultTooBig:
		res.Status, res.ErrorKind = StatusError, KindLimit
		res.Error = fmt.Sprintf("the updated context exceeds the result limit of %d bytes", r.cfg.MaxResultBytes)
		return finish(nil)
	case complete:
		// A complete report wins even when a deadline fired just after it.
		return finish(r.interpret(&res, payload, out.protocol))
	case ctx.Err() != nil:
		res.Status, res.ErrorKind, res.Error = StatusError, KindSandboxFault, "run cancelled"
		return finish(fmt.Errorf("sandbox %s: run cancelled: %w", res.SandboxID, context.Cause(ctx)))
	case out.timedOut:
		res.Status, res.ErrorKind = StatusError, KindTimeout
		res.Error = "timeout after " + timeout.String()
		return finish(nil)
	case !started && len(payload) == 0:
		res.Status, res.ErrorKind = StatusError, KindSandboxFault
		res.Error = "sandbox did not start"
		return finish(fmt.Errorf("sandbox %s did not start (%s): %s", res.SandboxID, exitText(out.exitCode), tail(res.Stderr, 2000)))
	default:
		// The program ended without letting the runner report: os._exit, a signal.
		res.Status, res.ErrorKind = StatusError, KindCodeError
		res.Error = "the program ended without a result (" + exitText(out.exitCode) + ")"
		if sig := out.exitCode - 128; sig == int(syscall.SIGKILL) || sig == int(syscall.SIGXCPU) || sig == int(syscall.SIGXFSZ) {
			res.ErrorKind = KindLimit
			res.Error += "; a resource limit was probably exceeded"
		}
		return finish(nil)
	}
}

// interpret turns the runner's report and a protocol line into the Result.
func (r *Runner) interpret(res *Result, payload []byte, protocol *protocolMessage) error {
	var rep struct {
		Status    string         `json:"status"`
		ErrorKind string         `json:"error_kind"`
		Error     string         `json:"error"`
		Traceback string         `json:"traceback"`
		Updates   map[string]any `json:"updates"`
		Deleted   []string       `json:"deleted"`
	}
	if err := decodeJSON(payload, &rep); err != nil {
		res.Status, res.ErrorKind, res.Error = StatusError, KindSandboxFault, "unreadable runner report"
		return fmt.Errorf("sandbox %s: decode runner report: %w", res.SandboxID, err)
	}
	if rep.Status != StatusSuccess {
		res.Status, res.ErrorKind, res.Error, res.Traceback = StatusError, rep.ErrorKind, rep.Error, rep.Traceback
		if rep.ErrorKind == KindSandboxFault {
			return fmt.Errorf("sandbox %s: %s", res.SandboxID, rep.Error)
		}
		return nil
	}
	if protocol != nil && protocol.Status == StatusError {
		res.Status, res.ErrorKind, res.Error = StatusError, KindCodeError, protocol.Message
		if res.Error == "" {
			res.Error = `the code reported status "error"`
		}
		return nil
	}
	res.Status, res.Updates, res.Deleted = StatusSuccess, rep.Updates, rep.Deleted
	if res.Updates == nil {
		res.Updates = map[string]any{}
	}
	if protocol != nil {
		for k, v := range protocol.ContextUpdates {
			res.Updates[k] = v
		}
		kept := res.Deleted[:0]
		for _, k := range res.Deleted {
			if _, ok := protocol.ContextUpdates[k]; !ok {
				kept = append(kept, k)
			}
		}
		res.Deleted = kept
	}
	return nil
}

// execution is what one bwrap process left behind.
type execution struct {
	stdout, stderr *capture
	protocol       *protocolMessage
	result         []byte
	resultTooBig   bool
	timedOut       bool
	exitCode       int
}

func (r *Runner) execute(ctx context.Context, timeout time.Duration, dir string, network bool) (execution, error) {
	out := execution{
		stdout: &capture{max: r.cfg.MaxOutputBytes, lines: &protocolScanner{maxLine: int(r.cfg.MaxResultBytes)}},
		stderr: &capture{max: r.cfg.MaxOutputBytes},
	}
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	resultR, resultW, err := os.Pipe()
	if err != nil {
		return out, fmt.Errorf("result pipe: %w", err)
	}
	defer resultR.Close()
	infoR, infoW, err := os.Pipe()
	if err != nil {
		resultW.Close()
		return out, fmt.Errorf("info pipe: %w", err)
	}
	defer infoR.Close()

	pid1 := newSandboxInit()
	defer pid1.close()
	cmd := exec.CommandContext(runCtx, r.cfg.Bwrap, r.args(dir, network)...)
	cmd.Dir = "/"
	cmd.Env = r.env // also what /proc/1/environ shows inside
	cmd.Stdout, cmd.Stderr = out.stdout, out.stderr
	cmd.ExtraFiles = []*os.File{resultW, infoW}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setpgid:    true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: r.cred,
	}
	cmd.Cancel = func() error {
		if pid1.kill() {
			return nil
		}
		// bwrap has not set up the namespaces yet; --die-with-parent takes the rest.
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = waitDelay

	err = cmd.Start()
	resultW.Close()
	infoW.Close()
	if err != nil {
		return out, fmt.Errorf("start bwrap: %w", err)
	}

	var wg sync.WaitGroup
	result := &boundedBuffer{max: r.cfg.MaxResultBytes}
	wg.Go(func() { result.readFrom(resultR) })
	wg.Go(func() { pid1.readInfo(infoR) })

	waitErr := cmd.Wait()
	deadline := time.Now().Add(waitDelay)
	// Everything that held the pipes is dead by now; the timer is a safety net.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		resultR.Close()
		infoR.Close()
		<-done
	}
	// No process of the sandbox may outlive Run, including those that let go of
	// its output.
	if err := pid1.waitExit(deadline); err != nil {
		pid1.kill()
		if err := pid1.waitExit(time.Now().Add(waitDelay)); err != nil {
			return out, fmt.Errorf("wait for the sandbox to end: %w", err)
		}
	}
	out.stdout.lines.endLine()
	out.protocol = out.stdout.lines.last
	out.result, out.resultTooBig = result.buf, result.overflow
	out.timedOut = errors.Is(runCtx.Err(), context.DeadlineExceeded) && ctx.Err() == nil
	out.exitCode = cmd.ProcessState.ExitCode()
	// An exit status is the program's business, a cancelled run or pipes held
	// past WaitDelay are judged by the caller; anything else is a fault.
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) && !errors.Is(waitErr, exec.ErrWaitDelay) && runCtx.Err() == nil {
		return out, fmt.Errorf("wait for bwrap: %w", waitErr)
	}
	return out, nil
}

func (r *Runner) args(dir string, network bool) []string {
	args := []string{
		"--unshare-all",
		"--die-with-parent",
		"--new-session",
		"--cap-drop", "ALL",
		"--hostname", "nova-sandbox",
		"--info-fd", strconv.Itoa(infoFD),
	}
	if network {
		args = append(args, "--share-net",
			"--ro-bind-try", "/etc/resolv.conf", "/etc/resolv.conf",
			"--ro-bind-try", "/etc/hosts", "/etc/hosts",
			"--ro-bind-try", "/etc/nsswitch.conf", "/etc/nsswitch.conf",
			"--ro-bind-try", "/etc/gai.conf", "/etc/gai.conf",
		)
	}
	args = append(args, r.mounts...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--ro-bind", filepath.Join(dir, "in"), "/nova",
		"--bind", filepath.Join(dir, "tmp"), "/tmp",
		"--chdir", "/tmp",
		"--clearenv",
	)
	for _, kv := range r.env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	return append(args, "--",
		r.cfg.Python, runnerInside,
		strconv.FormatInt(max(r.cfg.MemoryBytes, 0), 10),
		strconv.FormatInt(max(r.cfg.FileSizeBytes, 0), 10),
		strconv.FormatInt(max(r.nproc, 0), 10),
	)
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

// prepare writes the runner, the code and the context into a fresh directory:
// in/ is mounted read-only at /nova, tmp/ read-write at /tmp.
func (r *Runner) prepare(id string, req Request) (dir string, err error) {
	dir, err = os.MkdirTemp(r.cfg.WorkDir, "nova-sandbox-"+id+"-")
	if err != nil {
		return "", fmt.Errorf("create dir: %w", err)
	}
	defer func() {
		if err != nil {
			_ = removeTree(dir)
			dir = ""
		}
	}()
	in, tmp := filepath.Join(dir, "in"), filepath.Join(dir, "tmp")
	for _, d := range []string{in, tmp} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", fmt.Errorf("create dir: %w", err)
		}
	}
	files := []string{filepath.Join(in, "runner.py"), filepath.Join(in, "code.py"), filepath.Join(in, "context.json")}
	if err := os.WriteFile(files[0], runnerScript, 0o600); err != nil {
		return "", fmt.Errorf("write runner: %w", err)
	}
	if err := os.WriteFile(files[1], []byte(req.Code), 0o600); err != nil {
		return "", fmt.Errorf("write code: %w", err)
	}
	if err := writeContext(files[2], req.Context); err != nil {
		return "", err
	}
	if r.cred != nil {
		for _, p := range append([]string{dir, in, tmp}, files...) {
			if err := os.Lchown(p, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
				return "", fmt.Errorf("hand dir to sandbox user: %w", err)
			}
		}
	}
	return dir, nil
}

func newSandboxID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

func exitText(code int) string {
	switch {
	case code > 128 && code < 128+65:
		return "killed by " + unixSignalName(syscall.Signal(code-128))
	case code < 0:
		return "killed"
	default:
		return "exit status " + strconv.Itoa(code)
	}
}

func unixSignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGKILL:
		return "SIGKILL"
	case syscall.SIGSEGV:
		return "SIGSEGV"
	case syscall.SIGABRT:
		return "SIGABRT"
	case syscall.SIGXCPU:
		return "SIGXCPU"
	case syscall.SIGXFSZ:
		return "SIGXFSZ"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return "signal " + strconv.Itoa(int(sig))
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
