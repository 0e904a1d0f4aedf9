package jsrunner

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/services/sandbox/egress"
	"github.com/novaflow/nova/services/sandbox/isolation"
	"github.com/novaflow/nova/services/sandbox/runner"
)

//go:embed runner.js
var runnerScript []byte

// Result is what one run produced: the fields shared with the Python runner and
// those of the execute-server contract.
type Result struct {
	runner.Result
	// Value is the JSON of the value the code gave (see the package
	// documentation); nil when there was none.
	Value json.RawMessage
	// HasValue tells a returned null from no value at all.
	HasValue bool
	// Items is the JSON array of Value when it is an array, else of Value
	// wrapped in an array; nil when the code gave no value.
	Items json.RawMessage
	// Logs holds one entry per console call, at most Config.MaxOutputBytes in
	// total; LogsDropped counts the bytes beyond.
	Logs        []string
	LogsDropped int64
	// Stack is the JavaScript stack of the error, without the runner's frames.
	// Traceback holds the same text, for code that handles both runtimes.
	Stack string
	// Exited is set when the code called process.exit; ExitCode is its code.
	Exited   bool
	ExitCode int
}

// Config configures a Runner. Zero values take the documented defaults.
type Config struct {
	Bwrap string // default /usr/bin/bwrap
	// Node and Prlimit must live under /usr, the tree mounted inside.
	Node    string // default /usr/bin/node
	Prlimit string // default /usr/bin/prlimit (util-linux)
	// NodeModules is a node_modules directory on the host holding axios and
	// cheerio (see runtime/README.md), mounted read-only at /nova/node_modules.
	// Empty: the code can require only Node's own modules.
	NodeModules string
	// DefaultTimeout applies to requests without a timeout; default 30s, and
	// AnalysisTimeout to those of stage ANALYSIS; default 15s.
	DefaultTimeout  time.Duration
	AnalysisTimeout time.Duration
	// CPUTime is the CPU time allowed (RLIMIT_CPU); default twice the run's wall
	// time, <0 none.
	CPUTime time.Duration
	// MaxOutputBytes caps stdout, stderr and the console logs, each; default 1 MiB.
	MaxOutputBytes int64
	// MemoryBytes limits writable memory (RLIMIT_DATA); the JavaScript heap gets
	// three quarters of it. Default 1 GiB, <0 none.
	MemoryBytes int64
	// FileSizeBytes is the largest file the code may write; default 256 MiB, <0 none.
	FileSizeBytes int64
	// DiskBytes is the size of the code's /tmp (a tmpfs, in memory); default 256 MiB.
	DiskBytes int64
	// MaxProcesses limits processes and threads (node itself uses about ten);
	// default 256, <0 none. Not applied when the sandbox runs as host root.
	MaxProcesses int64
	// MaxResultBytes caps the encoded report (updates and value); default 256 MiB.
	MaxResultBytes int64
	// Egress serves the runs that ask for the network (share it with the Python
	// runner's); default a Proxy of its own.
	Egress *egress.Proxy
	// EgressAllow are allow_hosts patterns every networked run may reach besides
	// its request's.
	EgressAllow []string
	// WorkDir is the parent of the per-execution directories; default
	// os.TempDir(). It must be searchable by the sandbox user.
	WorkDir string
	// SandboxUID and SandboxGID: when the service runs as root, bubblewrap runs
	// as this user. 0 means 65534 (nobody); -1 (either) keeps root.
	SandboxUID, SandboxGID int
	Logger                 *slog.Logger // default slog.Default()
}

// Runner runs JavaScript in bubblewrap sandboxes. It is safe for concurrent use.
type Runner struct {
	cfg    Config
	mounts []string
	cred   *syscall.Credential // nil: bwrap runs as the service's own user
	nproc  int64
	// systemCAs is the system's CA bundle, given to node in runs with network.
	systemCAs string
}

const (
	waitDelay = 5 * time.Second
	// Inside the sandbox.
	runnerPath      = "/nova/runner.js"
	nodeModulesPath = "/nova/node_modules"
	// Debian's bundle, under /etc/ssl/certs, which the sandbox mounts.
	systemCABundle = "/etc/ssl/certs/ca-certificates.crt"
)

// New checks that bubblewrap, node and prlimit exist and prepares a Runner.
func New(cfg Config) (*Runner, error) {
	cfg = withDefaults(cfg)
	bwrap, err := exec.LookPath(cfg.Bwrap)
	if err != nil {
		return nil, fmt.Errorf("bubblewrap not usable at %q (install the bubblewrap package): %w", cfg.Bwrap, err)
	}
	cfg.Bwrap = bwrap
	for _, p := range []*string{&cfg.Node, &cfg.Prlimit} {
		clean := filepath.Clean(*p)
		if !strings.HasPrefix(clean, "/usr/") {
			return nil, fmt.Errorf("%q: must be an absolute path under /usr, the only tree mounted in the sandbox", *p)
		}
		if _, err := exec.LookPath(clean); err != nil {
			return nil, fmt.Errorf("%q not usable (node comes from the nodejs package, prlimit from util-linux): %w", clean, err)
		}
		*p = clean
	}
	if _, err := egress.NewPolicy(cfg.EgressAllow); err != nil {
		return nil, fmt.Errorf("egress allow list: %w", err)
	}
	cred := isolation.Credential(cfg.SandboxUID, cfg.SandboxGID)
	if err := isolation.CheckWorkDir(cfg.WorkDir, cred); err != nil {
		return nil, err
	}

	r := &Runner{cfg: cfg, cred: cred, nproc: cfg.MaxProcesses}
	if r.cred == nil && os.Geteuid() == 0 {
		// RLIMIT_NPROC would count every root process of the host.
		r.nproc = -1
	}
	if cfg.NodeModules != "" {
		abs, err := filepath.Abs(cfg.NodeModules)
		if err != nil {
			return nil, fmt.Errorf("node modules: %w", err)
		}
		for _, m := range []string{"axios", "cheerio"} {
			if _, err := os.Stat(filepath.Join(abs, m, "package.json")); err != nil {
				return nil, fmt.Errorf("node modules %q lack %s (npm ci --prefix services/sandbox/jsrunner/runtime --omit=dev --ignore-scripts): %w", abs, m, err)
			}
		}
		if r.cred != nil {
			if err := isolation.CheckSearchable(abs, r.cred); err != nil {
				return nil, fmt.Errorf("node modules: %w", err)
			}
		}
		r.cfg.NodeModules = abs
	} else {
		cfg.Logger.Warn("javascript sandbox without node modules: axios and cheerio cannot be required")
	}
	r.mounts, err = isolation.SystemMounts()
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(systemCABundle); err == nil {
		r.systemCAs = systemCABundle
	}
	return r, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Bwrap == "" {
		cfg.Bwrap = "/usr/bin/bwrap"
	}
	if cfg.Node == "" {
		cfg.Node = "/usr/bin/node"
	}
	if cfg.Prlimit == "" {
		cfg.Prlimit = "/usr/bin/prlimit"
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 30 * time.Second
	}
	if cfg.AnalysisTimeout <= 0 {
		cfg.AnalysisTimeout = 15 * time.Second
	}
	if cfg.DiskBytes <= 0 {
		cfg.DiskBytes = 256 << 20
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
		cfg.SandboxUID = isolation.Nobody
	}
	if cfg.SandboxGID == 0 {
		cfg.SandboxGID = isolation.Nobody
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Egress == nil {
		cfg.Egress = &egress.Proxy{Logger: cfg.Logger}
	}
	return cfg
}

// Run runs one program and waits for it. The error is non-nil only when the
// sandbox could not do its job (bwrap failed, ctx was cancelled); what the code
// did wrong is reported in the Result.
func (r *Runner) Run(ctx context.Context, req runner.Request) (Result, error) {
	start := time.Now()
	var res Result
	res.SandboxID = runner.NewSandboxID()
	finish := func(err error) (Result, error) {
		res.Duration = time.Since(start)
		return res, err
	}

	if refuse(&res, req) {
		return finish(nil)
	}
	timeout := r.timeoutFor(req)
	var policy egress.Policy
	if req.Network {
		var err error
		if policy, err = egress.NewPolicy(append(slices.Clone(r.cfg.EgressAllow), req.AllowHosts...)); err != nil {
			res.Status, res.ErrorKind, res.Error = runner.StatusError, runner.KindCodeError, err.Error()
			return finish(nil)
		}
	}

	dir, err := r.prepare(res.SandboxID, req)
	if err != nil {
		res.Status, res.ErrorKind, res.Error = runner.StatusError, runner.KindSandboxFault, "prepare sandbox: "+err.Error()
		return finish(fmt.Errorf("prepare sandbox %s: %w", res.SandboxID, err))
	}
	defer func() {
		if err := isolation.RemoveTree(dir); err != nil {
			r.cfg.Logger.Warn("sandbox dir not removed", "sandbox_id", res.SandboxID, "dir", dir, "err", err)
		}
	}()

	if req.Network {
		stop, err := r.serveEgress(ctx, filepath.Join(dir, "net"), policy)
		if err != nil {
			res.Status, res.ErrorKind, res.Error = runner.StatusError, runner.KindSandboxFault, "egress: "+err.Error()
			return finish(fmt.Errorf("sandbox %s: egress: %w", res.SandboxID, err))
		}
		defer stop()
	}

	out, err := r.execute(ctx, timeout, dir, req.Network)
	if err != nil {
		res.Status, res.ErrorKind, res.Error = runner.StatusError, runner.KindSandboxFault, err.Error()
		return finish(fmt.Errorf("sandbox %s: %w", res.SandboxID, err))
	}
	return finish(r.judge(ctx, &res, out, timeout))
}

// refuse fills res and returns true for a request this runner does not run:
// another language, or a context that JavaScript would change.
func refuse(res *Result, req runner.Request) bool {
	switch strings.ToLower(req.Language) {
	case "", "javascript", "js", "node":
	default:
		res.Status, res.ErrorKind = runner.StatusError, runner.KindRuntimeUnavailable
		res.Error = fmt.Sprintf("language %q is not available in the javascript sandbox", req.Language)
		return true
	}
	if unsafe := jsonvalue.UnsafeForJavaScript(req.Context); len(unsafe) > 0 {
		// JSON.parse would round them: refuse rather than change a value.
		res.Status, res.ErrorKind = runner.StatusError, runner.KindCodeError
		res.Error = fmt.Sprintf("context holds integers that JavaScript cannot represent exactly (beyond ±%d): %s; "+
			"a JavaScript node would round them, so it does not run (use a Python node, or carry such ids as strings)",
			1<<53-1, strings.Join(unsafe, ", "))
		return true
	}
	return false
}

// timeoutFor is the request's wall time, or the default of its stage.
func (r *Runner) timeoutFor(req runner.Request) time.Duration {
	if req.Timeout > 0 {
		return req.Timeout
	}
	if strings.EqualFold(req.Stage, runner.StageAnalysis) {
		return r.cfg.AnalysisTimeout
	}
	return r.cfg.DefaultTimeout
}

// judge fills res from what the run left: its output, and the runner's
// report, else the limit, cancellation or crash that cut it short.
func (r *Runner) judge(ctx context.Context, res *Result, out outcome, timeout time.Duration) error {
	res.Stdout, res.StdoutDropped = out.stdout.String(), out.stdout.dropped
	res.Stderr, res.StderrDropped = out.stderr.String(), out.stderr.dropped
	res.Logs, res.LogsDropped = out.logs.entries, out.logs.dropped

	// The runner writes "S" before the code's part begins, then its report
	// ending in a newline: a report without one was cut short.
	started := len(out.result) > 0 && out.result[0] == 'S'
	payload := out.result
	if started {
		payload = payload[1:]
	}
	complete := len(payload) > 0 && payload[len(payload)-1] == '\n'

	switch {
	case out.resultTooBig:
		res.Status, res.ErrorKind, res.Limit = runner.StatusError, runner.KindLimit, runner.LimitOutput
		res.Error = fmt.Sprintf("the result exceeds the limit of %d bytes", r.cfg.MaxResultBytes)
		return nil
	case complete:
		// A complete report wins even when a deadline fired just after it.
		return r.interpret(res, payload)
	case ctx.Err() != nil:
		res.Status, res.ErrorKind, res.Error = runner.StatusError, runner.KindSandboxFault, "run cancelled"
		return fmt.Errorf("sandbox %s: run cancelled: %w", res.SandboxID, context.Cause(ctx))
	case out.timedOut:
		res.Status, res.ErrorKind, res.Limit = runner.StatusError, runner.KindTimeout, runner.LimitWallTime
		res.Error = "timeout after " + timeout.String()
		return nil
	case !started:
		res.Status, res.ErrorKind = runner.StatusError, runner.KindSandboxFault
		res.Error = "sandbox did not start"
		return fmt.Errorf("sandbox %s did not start (%s): %s", res.SandboxID, exitText(out.exitCode), tail(res.Stderr, 2000))
	default:
		r.classifyCrash(res, out.exitCode)
		return nil
	}
}

// classifyCrash explains a run that ended without a report: a V8 heap abort, a
// limit's signal, or the code killing its own process.
func (r *Runner) classifyCrash(res *Result, exitCode int) {
	res.Status, res.ErrorKind = runner.StatusError, runner.KindCodeError
	sig := syscall.Signal(exitCode - 128)
	switch {
	case strings.Contains(res.Stderr, "JavaScript heap out of memory") || strings.Contains(res.Stderr, "Fatal JavaScript out of memory"):
		res.ErrorKind, res.Limit = runner.KindLimit, runner.LimitMemory
		res.Error = fmt.Sprintf("JavaScript heap out of memory (memory limit %d MiB)", r.cfg.MemoryBytes>>20)
	case sig == syscall.SIGXCPU:
		res.ErrorKind, res.Limit = runner.KindLimit, runner.LimitCPUTime
		res.Error = "CPU time limit exceeded"
	case sig == syscall.SIGXFSZ:
		res.ErrorKind, res.Limit = runner.KindLimit, runner.LimitFileSize
		res.Error = fmt.Sprintf("file size limit of %d bytes exceeded", r.cfg.FileSizeBytes)
	case sig == syscall.SIGKILL:
		res.ErrorKind = runner.KindLimit
		res.Error = "the program was killed (" + exitText(exitCode) + "); a resource limit was probably exceeded"
	default:
		res.Error = "the program ended without a result (" + exitText(exitCode) + ")"
	}
}

// report is runner.js's report on fd 3.
type report struct {
	Status      string           `json:"status"`
	ErrorKind   string           `json:"error_kind"`
	Limit       string           `json:"limit"`
	Error       string           `json:"error"`
	Stack       string           `json:"stack"`
	Updates     jsonvalue.Object `json:"updates"`
	Deleted     []string         `json:"deleted"`
	HasValue    bool             `json:"has_value"`
	Value       json.RawMessage  `json:"value"`
	Exited      bool             `json:"exited"`
	ExitCode    int              `json:"exit_code"`
	LogsDropped int64            `json:"logs_dropped"`
}

func (r *Runner) interpret(res *Result, payload []byte) error {
	var rep report
	if err := runner.DecodeJSON(payload, &rep); err != nil {
		res.Status, res.ErrorKind, res.Error = runner.StatusError, runner.KindSandboxFault, "unreadable runner report"
		return fmt.Errorf("sandbox %s: decode runner report: %w", res.SandboxID, err)
	}
	// The runner drops console output beyond the cap before it reaches the pipe.
	res.LogsDropped += rep.LogsDropped
	res.Exited, res.ExitCode = rep.Exited, rep.ExitCode
	if rep.Status != runner.StatusSuccess {
		res.Status, res.ErrorKind, res.Error, res.Limit = runner.StatusError, rep.ErrorKind, rep.Error, rep.Limit
		res.Stack, res.Traceback = rep.Stack, rep.Stack
		if res.ErrorKind == "" {
			res.ErrorKind = runner.KindCodeError
		}
		if rep.ErrorKind == runner.KindSandboxFault {
			return fmt.Errorf("sandbox %s: %s", res.SandboxID, rep.Error)
		}
		return nil
	}
	res.Status, res.Updates, res.Deleted = runner.StatusSuccess, rep.Updates, rep.Deleted
	if res.Updates == nil {
		res.Updates = jsonvalue.Object{}
	}
	if rep.HasValue {
		value := jsonvalue.Compact(rep.Value)
		if len(value) == 0 {
			value = json.RawMessage("null")
		}
		res.HasValue, res.Value, res.Items = true, value, value
		if value[0] != '[' {
			res.Items = append(append(json.RawMessage("["), value...), ']')
		}
	}
	return nil
}

// prepare writes the runner, the code and the context into a fresh directory
// whose in/ is mounted read-only at /nova, and net/ (the egress socket's) at
// /nova-net when the run has network.
func (r *Runner) prepare(id string, req runner.Request) (dir string, err error) {
	dir, err = os.MkdirTemp(r.cfg.WorkDir, "nova-js-"+id+"-")
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
	dirs := []string{dir, in}
	if req.Network {
		dirs = append(dirs, filepath.Join(dir, "net"))
	}
	if r.cfg.NodeModules != "" {
		dirs = append(dirs, filepath.Join(in, "node_modules")) // the mount point
	}
	for _, d := range dirs[1:] {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", fmt.Errorf("create dir: %w", err)
		}
	}
	code, mjs := filepath.Join(in, "code.js"), filepath.Join(in, "code.mjs")
	files := []string{filepath.Join(in, "runner.js"), code, filepath.Join(in, "context.json")}
	if err := os.WriteFile(files[0], runnerScript, 0o600); err != nil {
		return "", fmt.Errorf("write runner: %w", err)
	}
	if err := os.WriteFile(code, []byte(req.Code), 0o600); err != nil {
		return "", fmt.Errorf("write code: %w", err)
	}
	// The same file under the name Node loads as an ES module.
	if err := os.Link(code, mjs); err != nil {
		return "", fmt.Errorf("link code: %w", err)
	}
	if err := runner.WriteContext(files[2], req.Context); err != nil {
		return "", err
	}
	if err := isolation.Chown(r.cred, append(dirs, files...)...); err != nil {
		return "", fmt.Errorf("hand dir to sandbox user: %w", err)
	}
	return dir, nil
}
