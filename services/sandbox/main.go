// Command sandbox runs NOVA's code sandbox: programs from nova.cmd.sandbox
// run in bubblewrap and their results go back on the bus.
package main

import (
	"context"
	"os"
	"time"

	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/services/sandbox/runner"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

type config struct {
	service.Common
	Workers        int           `env:"NOVA_SANDBOX_WORKERS" default:"2"`
	Timeout        time.Duration `env:"NOVA_SANDBOX_TIMEOUT" default:"30s"`
	MemoryBytes    int64         `env:"NOVA_SANDBOX_MEMORY_BYTES" default:"1073741824"`
	MaxOutputBytes int64         `env:"NOVA_SANDBOX_MAX_OUTPUT_BYTES" default:"65536"`
	Python         string        `env:"NOVA_SANDBOX_PYTHON" default:"/usr/bin/python3"`
	Bwrap          string        `env:"NOVA_SANDBOX_BWRAP" default:"/usr/bin/bwrap"`
	WorkDir        string        `env:"NOVA_SANDBOX_WORKDIR"`
	ValueThreshold int           `env:"NOVA_VALUE_REF_THRESHOLD" default:"262144"`
}

func main() {
	var cfg config
	os.Exit(service.Main("sandbox", &cfg, func(ctx context.Context, env *service.Env) error {
		r, err := runner.New(runner.Config{
			Bwrap:          cfg.Bwrap,
			Python:         cfg.Python,
			DefaultTimeout: cfg.Timeout,
			MemoryBytes:    cfg.MemoryBytes,
			MaxOutputBytes: cfg.MaxOutputBytes,
			WorkDir:        cfg.WorkDir,
			Logger:         env.Logger,
		})
		if err != nil {
			return err
		}
		values, err := valueref.Open(ctx, env.Bus.JetStream(), cfg.ValueThreshold, cfg.StreamReplicas)
		if err != nil {
			return err
		}
		return sandboxservice.Run(ctx, sandboxservice.Deps{Bus: env.Bus, Runner: r, Values: values, Logger: env.Logger, Workers: cfg.Workers,
			Python: cfg.Python, Replicas: cfg.StreamReplicas})
	}))
}
