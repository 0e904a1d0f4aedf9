package service

import (
	"cmp"
	"context"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/services/sandbox/jsrunner"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// Config is the sandbox's configuration as its binary and nova dev read it
// from the environment.
type Config struct {
	// Workers is how many programs a replica runs at once; 0: one per CPU
	// the process may use (GOMAXPROCS, which follows its CPU affinity and
	// its cgroup's CPU limit).
	Workers int `env:"NOVA_SANDBOX_WORKERS" default:"0"`
	// Backend "process" runs programs with NO ISOLATION (machines without user
	// namespaces only); it is logged at WARN on every start.
	Backend string `env:"NOVA_SANDBOX_BACKEND" default:"bwrap"`
	// Warm keeps zygotes (pre-imported interpreters) that fork every program;
	// false starts a new bubblewrap and interpreter for each one.
	Warm bool `env:"NOVA_SANDBOX_WARM" default:"true"`
	// Zygotes is the size of the warm pool; 0 means one per four workers
	// (runner.ZygotesFor).
	Zygotes int `env:"NOVA_SANDBOX_ZYGOTES" default:"0"`
	// LightZygotes is the number of zygotes beside them that import only
	// standard modules, for programs that need nothing else; 0: none.
	LightZygotes int `env:"NOVA_SANDBOX_LIGHT_ZYGOTES" default:"1"`
	// ZygoteIdle stops a full zygote after this long without a program; the
	// next program that needs it starts it again. 0: kept always.
	ZygoteIdle time.Duration `env:"NOVA_SANDBOX_ZYGOTE_IDLE" default:"0s"`
	// Preload lists the modules zygotes import (comma-separated); empty: the
	// runner's default list (pandas, numpy, fitz, PIL, requests, bs4, lxml, ...).
	Preload string `env:"NOVA_SANDBOX_PRELOAD"`
	// Timeout is the wall time of a program whose command names none.
	Timeout time.Duration `env:"NOVA_SANDBOX_TIMEOUT" default:"30s"`
	// AnalysisTimeout is the wall time of an AI node's data analysis code
	// whose command names none.
	AnalysisTimeout time.Duration `env:"NOVA_SANDBOX_ANALYSIS_TIMEOUT" default:"15s"`
	// CPUTime is RLIMIT_CPU; 0 means the run's wall time.
	CPUTime time.Duration `env:"NOVA_SANDBOX_CPU_TIME" default:"0s"`
	// MemoryBytes is the address space a program may allocate (RLIMIT_AS),
	// beyond the pre-imported modules of a warm zygote.
	MemoryBytes int64 `env:"NOVA_SANDBOX_MEMORY_BYTES" default:"1073741824"`
	// FileSizeBytes is the largest file a program may write (RLIMIT_FSIZE).
	FileSizeBytes int64 `env:"NOVA_SANDBOX_FILE_SIZE_BYTES" default:"268435456"`
	// DiskBytes is the size of a program's /tmp (a tmpfs, in memory).
	DiskBytes int64 `env:"NOVA_SANDBOX_DISK_BYTES" default:"268435456"`
	// MaxProcesses limits a program's processes and threads (RLIMIT_NPROC
	// in its own user namespace).
	MaxProcesses int64 `env:"NOVA_SANDBOX_MAX_PROCESSES" default:"256"`
	// MaxOutputBytes is how much of stdout and stderr, each, is kept.
	MaxOutputBytes int64 `env:"NOVA_SANDBOX_MAX_OUTPUT_BYTES" default:"65536"`
	// OutputLimitBytes is how much a program may print on one stream before
	// it is stopped (limit "output").
	OutputLimitBytes int64 `env:"NOVA_SANDBOX_OUTPUT_LIMIT_BYTES" default:"67108864"`
	// EgressAllow: allow_hosts patterns every networked node may reach
	// (comma-separated), besides its own.
	EgressAllow string `env:"NOVA_SANDBOX_EGRESS_ALLOW"`
	// BreakerThreshold consecutive sandbox faults answer every program
	// runtime_unavailable for BreakerCoolDown, then one run probes.
	BreakerThreshold int           `env:"NOVA_SANDBOX_BREAKER_THRESHOLD" default:"5"`
	BreakerCoolDown  time.Duration `env:"NOVA_SANDBOX_BREAKER_COOLDOWN" default:"30s"`
	// Python is the interpreter programs run with.
	Python string `env:"NOVA_SANDBOX_PYTHON" default:"/usr/bin/python3"`
	// Bwrap is bubblewrap, which isolates each program.
	Bwrap string `env:"NOVA_SANDBOX_BWRAP" default:"/usr/bin/bwrap"`
	// WorkDir holds the per-program directories (default the system's
	// temporary directory).
	WorkDir string `env:"NOVA_SANDBOX_WORKDIR"`
	// ValueThreshold is the size in bytes over which a value the program
	// sets goes to the value store and travels by reference.
	ValueThreshold int `env:"NOVA_VALUE_REF_THRESHOLD" default:"262144"`
	// NodeModules holds axios and cheerio for JavaScript nodes (make deps
	// installs them at services/sandbox/jsrunner/runtime/node_modules).
	NodeModules string `env:"NOVA_SANDBOX_NODE_MODULES"`
	// Node runs JavaScript nodes.
	Node string `env:"NOVA_SANDBOX_NODE" default:"/usr/bin/node"`
	// JavaScript turns JavaScript nodes on; off, they fail as
	// runtime_unavailable.
	JavaScript bool `env:"NOVA_SANDBOX_JAVASCRIPT" default:"true"`
}

// RunWorkers is how many programs the replica runs at once: Workers, or
// when that is 0 one per CPU the process may use.
func (cfg Config) RunWorkers() int {
	if cfg.Workers > 0 {
		return cfg.Workers
	}
	return runtime.GOMAXPROCS(0)
}

// DefaultConfig is the configuration with every default, as the binary
// reads it from an empty environment.
func DefaultConfig() Config {
	var cfg Config
	if err := config.Load(&cfg, func(string) string { return "" }); err != nil {
		panic(fmt.Sprintf("sandbox: a setting's default does not parse: %v", err))
	}
	return cfg
}

// StartOption gives Start what its caller decides.
type StartOption func(*startOptions)

type startOptions struct {
	optionalJS      bool
	runtimeCacheDir string
}

// OptionalJavaScript runs Python nodes when the JavaScript runtime cannot
// start (JavaScript nodes then fail, as runtime_unavailable), where the
// binary refuses to start: a developer's nova dev without node.
func OptionalJavaScript() StartOption { return func(o *startOptions) { o.optionalJS = true } }

// WithRuntimeCacheDir caches runtime descriptions in dir (tests; default
// runtimeinfo.DefaultCacheDir()).
func WithRuntimeCacheDir(dir string) StartOption {
	return func(o *startOptions) { o.runtimeCacheDir = dir }
}

// Service is a sandbox whose runners are up and whose consumer is declared.
type Service struct {
	deps   Deps
	runner *runner.Runner
}

// Start builds the sandbox in env from cfg: its Python runner (with its
// warm zygotes), its JavaScript runner, the value store and its work-queue
// consumer, declared before it returns. The sandbox binary and nova dev
// start it this way; Close stops the runners.
func Start(ctx context.Context, cfg Config, env *service.Env, opts ...StartOption) (*Service, error) {
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	r, err := runner.New(cfg.runnerConfig(env))
	if err != nil {
		return nil, err
	}
	// Where bubblewrap cannot build a sandbox no program can run: say so
	// now, and why, rather than at the first node.
	if err := r.CheckIsolation(ctx); err != nil {
		_ = r.Close()
		return nil, err
	}
	js, err := cfg.javaScript(env, o.optionalJS)
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	values, err := valueref.Open(ctx, env.Bus.JetStream(), cfg.ValueThreshold, env.Replicas)
	if err == nil {
		err = env.Bus.EnsureStreams(ctx)
	}
	if err == nil {
		_, err = env.Bus.DeclareConsumer(ctx, ConsumerSpec(cfg.RunWorkers()))
	}
	if err != nil {
		_ = r.Close()
		return nil, err
	}
	tel := env.Telemetry
	env.Logger.Info("sandbox workers", "workers", cfg.RunWorkers(), "set", cfg.Workers > 0, "cpus", runtime.GOMAXPROCS(0))
	return &Service{runner: r, deps: Deps{Bus: env.Bus, Runner: r, JS: js, Values: values, Logger: env.Logger, Workers: cfg.RunWorkers(),
		Python: cfg.Python, RuntimeCacheDir: o.runtimeCacheDir, Replicas: env.Replicas,
		MeterProvider: tel.MeterProvider, TracerProvider: tel.TracerProvider}}, nil
}

// Run serves programs until ctx ends; programs already running finish.
func (s *Service) Run(ctx context.Context) error { return Run(ctx, s.deps) }

// Close stops the runners' zygotes.
func (s *Service) Close() error { return s.runner.Close() }

func (cfg Config) runnerConfig(env *service.Env) runner.Config {
	zygotes := 0
	if cfg.Warm {
		zygotes = cmp.Or(cfg.Zygotes, runner.ZygotesFor(cfg.RunWorkers()))
	}
	return runner.Config{
		Backend:          cfg.Backend,
		Bwrap:            cfg.Bwrap,
		Python:           cfg.Python,
		Zygotes:          zygotes,
		LightZygotes:     cmp.Or(cfg.LightZygotes, -1),
		ZygoteIdle:       cfg.ZygoteIdle,
		Preload:          list(cfg.Preload),
		DefaultTimeout:   cfg.Timeout,
		AnalysisTimeout:  cfg.AnalysisTimeout,
		CPUTime:          cfg.CPUTime,
		MemoryBytes:      cfg.MemoryBytes,
		FileSizeBytes:    cfg.FileSizeBytes,
		DiskBytes:        cfg.DiskBytes,
		MaxProcesses:     cfg.MaxProcesses,
		MaxOutputBytes:   cfg.MaxOutputBytes,
		OutputLimitBytes: cfg.OutputLimitBytes,
		EgressAllow:      list(cfg.EgressAllow),
		BreakerThreshold: cfg.BreakerThreshold,
		BreakerCoolDown:  cfg.BreakerCoolDown,
		WorkDir:          cfg.WorkDir,
		Logger:           env.Logger,
	}
}

// javaScript is the JavaScript runner, nil when it is turned off, or when
// it cannot start and optional says to go on without it.
func (cfg Config) javaScript(env *service.Env, optional bool) (*jsrunner.Runner, error) {
	if !cfg.JavaScript {
		return nil, nil
	}
	js, err := jsrunner.New(jsrunner.Config{
		Bwrap:           cfg.Bwrap,
		Node:            cfg.Node,
		NodeModules:     cfg.NodeModules,
		DefaultTimeout:  cfg.Timeout,
		AnalysisTimeout: cfg.AnalysisTimeout,
		MemoryBytes:     cfg.MemoryBytes,
		FileSizeBytes:   cfg.FileSizeBytes,
		DiskBytes:       cfg.DiskBytes,
		MaxProcesses:    cfg.MaxProcesses,
		MaxOutputBytes:  cfg.MaxOutputBytes,
		EgressAllow:     list(cfg.EgressAllow),
		WorkDir:         cfg.WorkDir,
		Logger:          env.Logger,
	})
	switch {
	case err == nil:
		return js, nil
	case optional:
		env.Logger.Warn("no JavaScript runtime: JavaScript nodes will fail", "err", err)
		return nil, nil
	default:
		return nil, fmt.Errorf("JavaScript runtime (NOVA_SANDBOX_JAVASCRIPT=false turns it off): %w", err)
	}
}

// list splits a comma-separated setting.
func list(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
