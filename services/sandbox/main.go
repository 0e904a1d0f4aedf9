// Command sandbox runs NOVA's code sandbox: programs from nova.cmd.sandbox
// run in bubblewrap and their results go back on the bus.
package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/services/sandbox/jsrunner"
	"github.com/novaflow/nova/services/sandbox/runner"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

type config struct {
	service.Common
	Workers int `env:"NOVA_SANDBOX_WORKERS" default:"2"`
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
	Preload         string        `env:"NOVA_SANDBOX_PRELOAD"`
	Timeout         time.Duration `env:"NOVA_SANDBOX_TIMEOUT" default:"30s"`
	AnalysisTimeout time.Duration `env:"NOVA_SANDBOX_ANALYSIS_TIMEOUT" default:"15s"`
	// CPUTime is RLIMIT_CPU; 0 means the run's wall time.
	CPUTime          time.Duration `env:"NOVA_SANDBOX_CPU_TIME" default:"0s"`
	MemoryBytes      int64         `env:"NOVA_SANDBOX_MEMORY_BYTES" default:"1073741824"`
	FileSizeBytes    int64         `env:"NOVA_SANDBOX_FILE_SIZE_BYTES" default:"268435456"`
	DiskBytes        int64         `env:"NOVA_SANDBOX_DISK_BYTES" default:"268435456"`
	MaxProcesses     int64         `env:"NOVA_SANDBOX_MAX_PROCESSES" default:"256"`
	MaxOutputBytes   int64         `env:"NOVA_SANDBOX_MAX_OUTPUT_BYTES" default:"65536"`
	OutputLimitBytes int64         `env:"NOVA_SANDBOX_OUTPUT_LIMIT_BYTES" default:"67108864"`
	// EgressAllow: allow_hosts patterns every networked node may reach
	// (comma-separated), besides its own.
	EgressAllow      string        `env:"NOVA_SANDBOX_EGRESS_ALLOW"`
	BreakerThreshold int           `env:"NOVA_SANDBOX_BREAKER_THRESHOLD" default:"5"`
	BreakerCoolDown  time.Duration `env:"NOVA_SANDBOX_BREAKER_COOLDOWN" default:"30s"`
	Python           string        `env:"NOVA_SANDBOX_PYTHON" default:"/usr/bin/python3"`
	Bwrap            string        `env:"NOVA_SANDBOX_BWRAP" default:"/usr/bin/bwrap"`
	WorkDir          string        `env:"NOVA_SANDBOX_WORKDIR"`
	ValueThreshold   int           `env:"NOVA_VALUE_REF_THRESHOLD" default:"262144"`
	// NodeModules holds axios and cheerio for JavaScript nodes (make deps
	// installs them at services/sandbox/jsrunner/runtime/node_modules).
	NodeModules string `env:"NOVA_SANDBOX_NODE_MODULES"`
	Node        string `env:"NOVA_SANDBOX_NODE" default:"/usr/bin/node"`
	JavaScript  bool   `env:"NOVA_SANDBOX_JAVASCRIPT" default:"true"`
}

func main() {
	var cfg config
	os.Exit(service.Main("sandbox", &cfg, func(ctx context.Context, env *service.Env) error {
		zygotes := 0
		if cfg.Warm {
			zygotes = cmp.Or(cfg.Zygotes, runner.ZygotesFor(cfg.Workers))
		}
		r, err := runner.New(runner.Config{
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
		})
		if err != nil {
			return err
		}
		defer r.Close()
		var js *jsrunner.Runner
		if cfg.JavaScript {
			js, err = jsrunner.New(jsrunner.Config{
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
			if err != nil {
				return fmt.Errorf("JavaScript runtime (NOVA_SANDBOX_JAVASCRIPT=false turns it off): %w", err)
			}
		}
		values, err := valueref.Open(ctx, env.Bus.JetStream(), cfg.ValueThreshold, cfg.StreamReplicas)
		if err != nil {
			return err
		}
		return sandboxservice.Run(ctx, sandboxservice.Deps{Bus: env.Bus, Runner: r, JS: js, Values: values, Logger: env.Logger, Workers: cfg.Workers,
			Python: cfg.Python, Replicas: cfg.StreamReplicas, MeterProvider: env.Telemetry.MeterProvider, TracerProvider: env.Telemetry.TracerProvider})
	}))
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
