// Command code-validator runs NOVA's code validator: generated Python from
// nova.cmd.code-validator is checked statically (never run, no model) and the
// findings go back to the graph engine.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/code-validator/validator"
)

type config struct {
	service.Common
	Workers int    `env:"NOVA_WORKERS" default:"4"`
	Python  string `env:"NOVA_VALIDATOR_PYTHON" default:"/usr/bin/python3"`
	// Forbidden is what node code may not import or call: a module forbids
	// its submodules too, a trailing * is a prefix (see validator.DefaultForbidden).
	Forbidden []string `env:"NOVA_FORBIDDEN_IMPORTS" default:"subprocess,_posixsubprocess,multiprocessing,pty,socket,_socket,ctypes,_ctypes,signal,resource,importlib,os.system,os.popen,os.fork,os.forkpty,os.kill,os.killpg,os.exec*,os.spawn*,os.posix_spawn*"`
	// Prelude is what the sandbox defines before node code runs.
	Prelude []string `env:"NOVA_VALIDATOR_PRELUDE" default:"context,json,math,re,datetime"`
}

func main() {
	var cfg config
	os.Exit(service.Main("code-validator", &cfg, func(ctx context.Context, env *service.Env) error {
		return validator.Run(ctx, validator.Deps{
			Bus:            env.Bus,
			Logger:         env.Logger,
			TracerProvider: env.Telemetry.TracerProvider,
			Workers:        cfg.Workers,
			Python:         cfg.Python,
			Forbidden:      cfg.Forbidden,
			Prelude:        cfg.Prelude,
			Replicas:       cfg.StreamReplicas,
		})
	}))
}
