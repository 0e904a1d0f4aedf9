// Package runner runs one program in isolation with bubblewrap: its own user, pid,
// mount, ipc, uts, cgroup and network namespaces, a read-only view of the
// system, a private size-capped /tmp and resource limits.
//
// The node's code and its context never meet as text: the context is JSON that a
// fixed Python runner (runner.py) loads, the code is compiled on its own, and the
// runner reports the result on a separate descriptor, so nothing the code prints
// can corrupt the protocol.
//
// Three backends run the same runner.py:
//   - warm (Config.Zygotes > 0): a pool of zygotes, long-lived Python processes
//     in bubblewrap with the heavy modules imported, that fork every execution
//     into fresh namespaces (see warm.go and runner.py). No bwrap or interpreter
//     start and no import on the path of an execution.
//   - cold: one bubblewrap and interpreter per execution; also the fallback of
//     warm when no zygote is ready.
//   - process (Config.Backend = BackendProcess): a plain subprocess without any
//     isolation, for machines without user namespaces; never the default.
//
// Network: a sandbox never shares the host's network. When a node asks for it,
// the program gets an HTTP proxy on its own loopback that leads to the
// service's egress proxy (package egress), which allows only the node's
// allow_hosts.
package runner

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/services/sandbox/egress"
	"github.com/novaflow/nova/services/sandbox/isolation"
)

//go:embed runner.py
var runnerScript []byte

// Error kinds of a Result: what the engine should do about it.
const (
	KindCodeError          = "code_error"          // retry with the error as feedback
	KindTimeout            = "timeout"             // retry
	KindLimit              = "limit"               // a resource limit ended the run
	KindSandboxFault       = "sandbox_fault"       // retry elsewhere
	KindRuntimeUnavailable = "runtime_unavailable" // fail fast
	// KindCancelled: the program's execution was cancelled and the program
	// killed, or never started (the sandbox service sets it, not Run).
	KindCancelled = "cancelled"
)

// Limits a Result names when one ended the run.
const (
	LimitWallTime  = "wall_time"
	LimitCPUTime   = "cpu_time"
	LimitMemory    = "memory"
	LimitProcesses = "processes"
	LimitFileSize  = "file_size"
	LimitDisk      = "disk"
	LimitOutput    = "output"
)

// Result statuses.
const (
	StatusSuccess = "success"
	StatusError   = "error"
)

// Stages of a Request; they choose the default wall time.
const (
	StageTask     = "TASK"
	StageAnalysis = "ANALYSIS"
)

// Backends.
const (
	BackendBwrap   = "bwrap"
	BackendProcess = "process"
)

// Request is one program to run.
type Request struct {
	Code string
	// Context holds the context's members as exact JSON text, already
	// resolved (no object-store references).
	Context jsonvalue.Object
	// Timeout is the wall time allowed; 0 means the stage's default.
	Timeout time.Duration
	// Stage is StageTask (default) or StageAnalysis.
	Stage string
	// Network gives the program an HTTP(S) proxy through which it can reach
	// AllowHosts (and Config.EgressAllow); without it the program has only its
	// own loopback.
	Network bool
	// AllowHosts are allow_hosts patterns (see workflow.HostPattern).
	AllowHosts []string
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
	Updates jsonvalue.Object
	// Deleted lists the context keys the code removed.
	Deleted []string
	// Error is a human message such as "ValueError: amount must be positive".
	Error     string
	ErrorKind string // "" or one of the Kind constants
	// Limit names the limit that ended the run (one of the Limit constants)
	// when ErrorKind is KindLimit or KindTimeout.
	Limit string
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
	// Warm tells that a zygote ran the program.
	Warm bool
}

// Config configures a Runner. Zero values take the documented defaults.
type Config struct {
	// Backend is BackendBwrap (default) or BackendProcess, which runs programs
	// WITHOUT ANY ISOLATION and is only for machines without user namespaces.
	Backend string
	Bwrap   string // default /usr/bin/bwrap
	Python  string // default /usr/bin/python3; must live under /usr, the tree mounted inside
	// Zygotes is the number of warm zygotes; 0 runs every program cold (a new
	// bubblewrap and interpreter each time). A zygote runs any number of
	// programs at once (it only forks and supervises them); ZygotesFor sizes
	// the pool for a number of workers.
	Zygotes int
	// Preload lists the modules the zygotes import; default runner.py's
	// DEFAULT_PRELOAD (pandas, numpy, fitz, PIL, requests, bs4, lxml, openpyxl,
	// pypdf and common standard modules).
	Preload []string
	// LightZygotes is the number of light zygotes, besides Zygotes, that
	// import only common standard modules (runner.py's STANDARD_PRELOAD). A
	// program whose import statements name only standard modules, none of
	// which the full zygotes have loaded and a light one has not, runs on a
	// light zygote, whose fork copies the page tables of about a fifth of the
	// memory; any other runs on a full one. Either takes the other's programs
	// while it has no zygote ready. Default 1 when Zygotes > 0; <0 none.
	LightZygotes int
	// ZygoteIdle is how long a full zygote may go without a program before
	// it is stopped, its memory (about 100 MiB with the default preloads)
	// given back; the next program that would run on it starts it again and
	// runs meanwhile on a light zygote, or cold. 0 (the default) keeps them
	// always. Light zygotes are always kept.
	ZygoteIdle time.Duration
	// DefaultTimeout is the wall time of a task without its own; default 30s.
	DefaultTimeout time.Duration
	// AnalysisTimeout is the wall time of an analysis without its own; default 15s.
	AnalysisTimeout time.Duration
	// CPUTime is the CPU time of the program's main process (RLIMIT_CPU);
	// default the wall time, <0 none.
	CPUTime time.Duration
	// MaxOutputBytes caps stdout and stderr, each; default 1 MiB.
	MaxOutputBytes int64
	// OutputLimitBytes is how much a program may print on one stream before it
	// is stopped (limit "output"); default 64 MiB, <0 none.
	OutputLimitBytes int64
	// MemoryBytes is the address space the program may allocate (RLIMIT_AS):
	// beyond the pre-imported modules in warm mode, in all in cold mode;
	// default 1 GiB, <0 none.
	MemoryBytes int64
	// FileSizeBytes is the largest file the program may write (RLIMIT_FSIZE);
	// default 256 MiB, <0 none.
	FileSizeBytes int64
	// DiskBytes is the size of the program's /tmp (a tmpfs, in memory);
	// default 256 MiB.
	DiskBytes int64
	// MaxProcesses limits processes and threads (RLIMIT_NPROC, counted per
	// execution in its own user namespace); default 256, <0 none. Not applied
	// by the process backend run as root, where it would count every root
	// process of the host.
	MaxProcesses int64
	// MaxResultBytes caps the encoded updates the runner may report; default 256 MiB.
	MaxResultBytes int64
	// EgressAllow are allow_hosts patterns every networked program may reach
	// besides its request's.
	EgressAllow []string
	// BreakerThreshold is the number of consecutive sandbox faults after which
	// Run answers runtime_unavailable without trying, for BreakerCoolDown; then
	// one run is let through to probe. Defaults 5 and 30s; a threshold <0
	// disables the breaker.
	BreakerThreshold int
	BreakerCoolDown  time.Duration
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

// Runner runs programs in sandboxes. It is safe for concurrent use. Close it
// when it runs warm.
type Runner struct {
	cfg     Config
	mounts  []string // bwrap arguments for the system part of the file system
	env     []string
	cred    *syscall.Credential // nil: bwrap runs as the service's own user
	nproc   int64
	proxy   *egress.Proxy
	breaker *breaker
	pool    *pool // nil when cold
	light   *pool // nil without light zygotes
	// jobs tracks the egress brokers of running programs.
	jobs sync.WaitGroup
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
	waitDelay    = 5 * time.Second
	runnerInside = "/nova/runner.py"
)

// New checks that bubblewrap and python exist and prepares a Runner; with
// Zygotes > 0 it starts the warm pool in the background (runs are cold until a
// zygote is ready).
// ZygotesFor is the warm pool for workers programs at once: one zygote per
// four. A zygote's own work per program is the fork (a few milliseconds for
// the preloaded modules' page tables), so one keeps several workers busy,
// while each holds its own copy of those modules (tens of MiB).
func ZygotesFor(workers int) int { return max(1, (workers+3)/4) }

func New(cfg Config) (*Runner, error) {
	cfg = withDefaults(cfg)
	switch cfg.Backend {
	case BackendBwrap, BackendProcess:
	default:
		return nil, fmt.Errorf("sandbox backend %q: use %q or %q", cfg.Backend, BackendBwrap, BackendProcess)
	}
	if cfg.Backend == BackendBwrap {
		bwrap, err := exec.LookPath(cfg.Bwrap)
		if err != nil {
			return nil, fmt.Errorf("bubblewrap not usable at %q (install the bubblewrap package): %w", cfg.Bwrap, err)
		}
		cfg.Bwrap = bwrap
	}
	python := filepath.Clean(cfg.Python)
	if !strings.HasPrefix(python, "/usr/") {
		return nil, fmt.Errorf("python %q: must be an absolute path under /usr, the only tree mounted in the sandbox", cfg.Python)
	}
	if _, err := exec.LookPath(python); err != nil {
		return nil, fmt.Errorf("python not usable at %q: %w", python, err)
	}
	cfg.Python = python
	cred := isolation.Credential(cfg.SandboxUID, cfg.SandboxGID)
	if err := isolation.CheckWorkDir(cfg.WorkDir, cred); err != nil {
		return nil, err
	}
	if _, err := egress.NewPolicy(cfg.EgressAllow); err != nil {
		return nil, fmt.Errorf("egress allow list: %w", err)
	}

	r := &Runner{
		cfg:     cfg,
		env:     sandboxEnv(),
		cred:    cred,
		nproc:   cfg.MaxProcesses,
		proxy:   &egress.Proxy{Logger: cfg.Logger},
		breaker: newBreaker(cfg.BreakerThreshold, cfg.BreakerCoolDown),
	}
	if cfg.Backend == BackendProcess {
		cfg.Logger.Warn("sandbox backend is 'process': programs run with NO ISOLATION from this host (no namespaces, no network restriction, no private files); use only where user namespaces are unavailable and the code is trusted")
		if os.Geteuid() == 0 {
			r.nproc = -1
		}
		return r, nil
	}
	var err error
	// Python's mimetypes module reads /etc/mime.types.
	r.mounts, err = isolation.SystemMounts("/etc/mime.types")
	if err != nil {
		return nil, err
	}
	if cfg.Zygotes > 0 {
		r.pool = newPool(r, cfg.Zygotes, false)
		if cfg.LightZygotes > 0 {
			r.light = newPool(r, cfg.LightZygotes, true)
		}
	}
	return r, nil
}

func withDefaults(cfg Config) Config {
	if cfg.Backend == "" {
		cfg.Backend = BackendBwrap
	}
	if cfg.Bwrap == "" {
		cfg.Bwrap = "/usr/bin/bwrap"
	}
	if cfg.Python == "" {
		cfg.Python = "/usr/bin/python3"
	}
	if cfg.DefaultTimeout <= 0 {
		cfg.DefaultTimeout = 30 * time.Second
	}
	if cfg.AnalysisTimeout <= 0 {
		cfg.AnalysisTimeout = 15 * time.Second
	}
	if cfg.MaxOutputBytes <= 0 {
		cfg.MaxOutputBytes = 1 << 20
	}
	if cfg.OutputLimitBytes == 0 {
		cfg.OutputLimitBytes = 64 << 20
	}
	if cfg.MemoryBytes == 0 {
		cfg.MemoryBytes = 1 << 30
	}
	if cfg.FileSizeBytes == 0 {
		cfg.FileSizeBytes = 256 << 20
	}
	if cfg.DiskBytes <= 0 {
		cfg.DiskBytes = 256 << 20
	}
	if cfg.MaxProcesses == 0 {
		cfg.MaxProcesses = 256
	}
	if cfg.MaxResultBytes <= 0 {
		cfg.MaxResultBytes = 256 << 20
	}
	if cfg.BreakerThreshold == 0 {
		cfg.BreakerThreshold = 5
	}
	if cfg.BreakerCoolDown <= 0 {
		cfg.BreakerCoolDown = 30 * time.Second
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
	if cfg.LightZygotes == 0 && cfg.Zygotes > 0 {
		cfg.LightZygotes = 1
	}
	return cfg
}

// Close stops the warm pool and waits for its zygotes to end. Runs still in
// progress on a zygote end with a sandbox fault.
func (r *Runner) Close() error {
	for _, p := range []*pool{r.pool, r.light} {
		if p != nil {
			p.close()
		}
	}
	r.jobs.Wait()
	return nil
}

// WarmReady reports how many zygotes, full and light, are ready to take
// programs; WarmSize how many there are to be.
func (r *Runner) WarmReady() int {
	n := 0
	for _, p := range []*pool{r.pool, r.light} {
		if p != nil {
			n += p.readyCount()
		}
	}
	return n
}

// WarmSize is the number of zygotes, full and light, the runner keeps.
func (r *Runner) WarmSize() int {
	if r.pool == nil {
		return 0
	}
	return r.cfg.Zygotes + max(r.cfg.LightZygotes, 0)
}

// limits are what one execution may use, resolved from the request and the config.
type limits struct {
	timeout   time.Duration
	cpu       time.Duration // 0: none
	memory    int64         // 0: none
	fileSize  int64
	processes int64
	disk      int64
}

func (r *Runner) limitsFor(req Request) limits {
	l := limits{
		timeout:   req.Timeout,
		memory:    max(r.cfg.MemoryBytes, 0),
		fileSize:  max(r.cfg.FileSizeBytes, 0),
		processes: max(r.nproc, 0),
		disk:      r.cfg.DiskBytes,
	}
	if l.timeout <= 0 {
		l.timeout = r.cfg.DefaultTimeout
		if strings.EqualFold(req.Stage, StageAnalysis) {
			l.timeout = r.cfg.AnalysisTimeout
		}
	}
	switch {
	case r.cfg.CPUTime > 0:
		l.cpu = r.cfg.CPUTime
	case r.cfg.CPUTime == 0:
		l.cpu = l.timeout
	}
	return l
}

// config is the part of runner.py's configuration common to all modes.
func (l limits) config(id string, network bool) map[string]any {
	return map[string]any{
		"id":      id,
		"timeout": l.timeout.Seconds(),
		"cpu":     math.Ceil(l.cpu.Seconds()),
		"memory":  l.memory,
		"fsize":   l.fileSize,
		"nproc":   l.processes,
		"disk":    l.disk,
		"network": network,
	}
}

// job is one execution in flight, whatever the backend.
type job struct {
	id      string
	req     Request
	limits  limits
	broker  *os.File // the sandbox's end of the egress broker; nil without network
	stdout  *capture
	stderr  *capture
	result  *boundedBuffer
	killReq chan string // a reason to end the program early ("output"); buffered
}

func (j *job) requestKill(reason string) {
	select {
	case j.killReq <- reason:
	default:
	}
}

// outcome is what a backend reports once no process of the job is left.
type outcome struct {
	limit    string // a limit the backend enforced: LimitWallTime, LimitOutput or ""
	exitCode int    // of the runner's process, -1 if unknown or killed by a signal
	signal   syscall.Signal
	cpu      time.Duration // CPU time of the runner's process, when cpuKnown
	cpuKnown bool
	warm     bool
}

// Run runs one program and waits for it. The error is non-nil only when the
// sandbox could not do its job (it failed to start or broke down, ctx was
// cancelled); what the code did wrong is reported in the Result.
func (r *Runner) Run(ctx context.Context, req Request) (Result, error) {
	start := time.Now()
	res := Result{SandboxID: NewSandboxID()}
	finish := func(err error) (Result, error) {
		res.Duration = time.Since(start)
		return res, err
	}

	if lang := strings.ToLower(req.Language); lang != "" && lang != "python" {
		res.Status, res.ErrorKind = StatusError, KindRuntimeUnavailable
		res.Error = fmt.Sprintf("language %q is not available in this sandbox (only python)", req.Language)
		return finish(nil)
	}
	probe, why := r.breaker.allow()
	if why != "" {
		res.Status, res.ErrorKind = StatusError, KindRuntimeUnavailable
		res.Error = why
		return finish(nil)
	}
	err := r.run(ctx, req, &res)
	switch {
	case ctx.Err() != nil:
		r.breaker.done(probe) // neither a fault nor a success
	case res.ErrorKind == KindSandboxFault && err != nil, res.ErrorKind == KindRuntimeUnavailable:
		why := res.Error
		if err != nil {
			why = tail(err.Error(), 300)
		}
		if r.breaker.fault(probe, why) {
			r.cfg.Logger.Error("sandbox circuit breaker open: runs answer runtime_unavailable until it probes again",
				"consecutive_faults", r.cfg.BreakerThreshold, "cool_down", r.cfg.BreakerCoolDown, "last_error", res.Error)
		}
	default:
		r.breaker.success(probe)
	}
	return finish(err)
}

func (r *Runner) run(ctx context.Context, req Request, res *Result) error {
	j := r.newJob(res.SandboxID, req)
	if req.Network {
		policy, err := egress.NewPolicy(append(append([]string(nil), r.cfg.EgressAllow...), req.AllowHosts...))
		if err != nil {
			res.Status, res.ErrorKind, res.Error = StatusError, KindCodeError, err.Error()
			return nil
		}
		stop, err := r.startBroker(ctx, j, policy)
		if err != nil {
			res.Status, res.ErrorKind, res.Error = StatusError, KindSandboxFault, "egress broker: "+err.Error()
			return fmt.Errorf("sandbox %s: egress broker: %w", j.id, err)
		}
		defer stop()
	}

	var out outcome
	var err error
	switch {
	case r.cfg.Backend == BackendProcess:
		out, err = r.runProcess(ctx, j)
	case r.pool != nil:
		out, err = r.runWarm(ctx, j)
	default:
		out, err = r.runCold(ctx, j)
	}
	res.Warm = out.warm
	res.Stdout, res.StdoutDropped = j.stdout.buf.String(), j.stdout.dropped
	res.Stderr, res.StderrDropped = j.stderr.buf.String(), j.stderr.dropped
	if err != nil {
		res.Status, res.ErrorKind, res.Error = StatusError, KindSandboxFault, "sandbox failure: "+err.Error()
		if ctx.Err() != nil {
			res.Error = "run cancelled"
		}
		return fmt.Errorf("sandbox %s: %w", j.id, err)
	}
	return r.judge(ctx, j, out, res)
}

// newJob is the job of req, its output bounded as configured.
func (r *Runner) newJob(id string, req Request) *job {
	j := &job{
		id:      id,
		req:     req,
		limits:  r.limitsFor(req),
		stdout:  &capture{max: r.cfg.MaxOutputBytes, lines: &protocolScanner{maxLine: int(r.cfg.MaxResultBytes)}},
		stderr:  &capture{max: r.cfg.MaxOutputBytes},
		result:  &boundedBuffer{max: r.cfg.MaxResultBytes},
		killReq: make(chan string, 1),
	}
	if r.cfg.OutputLimitBytes > 0 {
		for _, c := range []*capture{j.stdout, j.stderr} {
			c.stopAt, c.stop = r.cfg.OutputLimitBytes, func() { j.requestKill(LimitOutput) }
		}
	}
	return j
}

// judge fills res from what the job left once it ended: the runner's
// report, else the limit, cancellation or exit that cut it short.
func (r *Runner) judge(ctx context.Context, j *job, out outcome, res *Result) error {
	// The runner writes "S" before the code runs, then its report ending in a
	// newline: a report without one was cut short.
	payload := j.result.buf
	started := len(payload) > 0 && payload[0] == 'S'
	if started {
		payload = payload[1:]
	}
	complete := len(payload) > 0 && payload[len(payload)-1] == '\n'

	switch {
	case j.result.overflow:
		res.Status, res.ErrorKind, res.Limit = StatusError, KindLimit, LimitOutput
		res.Error = fmt.Sprintf("the updated context exceeds the result limit of %d bytes", r.cfg.MaxResultBytes)
		return nil
	case complete:
		// A complete report wins even when a deadline fired just after it.
		return r.interpret(res, payload, j.stdout.lines.last, started, j.limits)
	case ctx.Err() != nil:
		res.Status, res.ErrorKind, res.Error = StatusError, KindSandboxFault, "run cancelled"
		return fmt.Errorf("sandbox %s: run cancelled: %w", res.SandboxID, context.Cause(ctx))
	case out.limit == LimitWallTime:
		res.Status, res.ErrorKind, res.Limit = StatusError, KindTimeout, LimitWallTime
		res.Error = "timeout after " + j.limits.timeout.String()
		return nil
	case out.limit == LimitOutput:
		res.Status, res.ErrorKind, res.Limit = StatusError, KindLimit, LimitOutput
		res.Error = fmt.Sprintf("the program printed more than the output limit of %d bytes on one stream and was stopped", r.cfg.OutputLimitBytes)
		return nil
	case !started:
		res.Status, res.ErrorKind = StatusError, KindSandboxFault
		res.Error = "sandbox did not start"
		if _, statErr := os.Stat(r.cfg.Python); statErr != nil {
			res.ErrorKind = KindRuntimeUnavailable
			res.Error = fmt.Sprintf("python is not available at %s: %v", r.cfg.Python, statErr)
		}
		return fmt.Errorf("sandbox %s did not start (%s): %s", res.SandboxID, exitText(out), tail(res.Stderr, 2000))
	default:
		explainMissingResult(res, j.limits, out)
		return nil
	}
}

// explainMissingResult explains a program that ended without letting the
// runner report (os._exit, a signal): a limit's signal, or the code's doing.
func explainMissingResult(res *Result, l limits, out outcome) {
	res.Status, res.ErrorKind = StatusError, KindCodeError
	res.Error = "the program ended without a result (" + exitText(out) + ")"
	switch {
	case out.signal == syscall.SIGXCPU,
		out.signal == syscall.SIGKILL && out.cpuKnown && l.cpu > 0 && out.cpu >= l.cpu:
		res.ErrorKind, res.Limit = KindLimit, LimitCPUTime
		res.Error = fmt.Sprintf("the program used more than its CPU time limit of %s and was killed", l.cpu)
	case out.signal == syscall.SIGXFSZ:
		res.ErrorKind, res.Limit = KindLimit, LimitFileSize
		res.Error = fmt.Sprintf("the program wrote a file beyond the file size limit of %d bytes and was killed", l.fileSize)
	}
}

// interpret turns the runner's report and a protocol line into the Result.
func (r *Runner) interpret(res *Result, payload []byte, protocol *protocolMessage, started bool, l limits) error {
	var rep struct {
		Status    string           `json:"status"`
		ErrorKind string           `json:"error_kind"`
		Limit     string           `json:"limit"`
		Error     string           `json:"error"`
		Traceback string           `json:"traceback"`
		Updates   jsonvalue.Object `json:"updates"`
		Deleted   []string         `json:"deleted"`
	}
	if err := DecodeJSON(payload, &rep); err != nil {
		if started {
			// The code ran and could write anything to the result channel.
			res.Status, res.ErrorKind = StatusError, KindCodeError
			res.Error = "the program corrupted the runner's report: " + err.Error()
			return nil
		}
		res.Status, res.ErrorKind, res.Error = StatusError, KindSandboxFault, "unreadable runner report"
		return fmt.Errorf("sandbox %s: decode runner report: %w", res.SandboxID, err)
	}
	if rep.Status != StatusSuccess {
		res.Status, res.ErrorKind, res.Error, res.Traceback = StatusError, rep.ErrorKind, rep.Error, rep.Traceback
		res.Limit = rep.Limit
		if rep.ErrorKind == KindSandboxFault && !started {
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
		res.Updates = jsonvalue.Object{}
	}
	for k, v := range res.Updates {
		res.Updates[k] = jsonvalue.Compact(v)
	}
	if protocol != nil {
		for k, v := range protocol.ContextUpdates {
			res.Updates[k] = jsonvalue.Compact(v)
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

// startBroker creates the egress broker of a networked job: the sandbox's end
// goes in j.broker, the service's end is served until stop is called.
func (r *Runner) startBroker(ctx context.Context, j *job, policy egress.Policy) (stop func(), err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	j.broker = os.NewFile(uintptr(fds[1]), "egress-broker")
	f := os.NewFile(uintptr(fds[0]), "egress-broker")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		j.broker.Close()
		return nil, err
	}
	conn := c.(*net.UnixConn)
	ctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	r.jobs.Add(1)
	done := make(chan struct{})
	go func() {
		defer r.jobs.Done()
		defer close(done)
		r.proxy.ServeBroker(ctx, conn, policy)
	}()
	return func() {
		j.broker.Close()
		cancel()
		<-done
	}, nil
}

// NewSandboxID returns a fresh Result.SandboxID.
func NewSandboxID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b) // never fails
	return hex.EncodeToString(b)
}

func exitText(out outcome) string {
	switch {
	case out.signal != 0:
		return "killed by " + unixSignalName(out.signal)
	case out.exitCode < 0:
		return "killed"
	default:
		return "exit status " + strconv.Itoa(out.exitCode)
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
