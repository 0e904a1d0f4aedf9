package validator

import (
	"context"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/service"
)

// Config is the code validator's configuration as its binary and nova dev
// read it from the environment.
type Config struct {
	// Workers is how many commands a replica checks at once.
	Workers int `env:"NOVA_WORKERS" default:"4"`
	// Python runs the checker.
	Python string `env:"NOVA_VALIDATOR_PYTHON" default:"/usr/bin/python3"`
	// Forbidden is what node code may not import or call: a module forbids
	// its submodules too, a trailing * is a prefix (see DefaultForbidden).
	Forbidden []string `env:"NOVA_FORBIDDEN_IMPORTS" default:"subprocess,_posixsubprocess,multiprocessing,pty,socket,_socket,ctypes,_ctypes,signal,resource,importlib,os.system,os.popen,os.fork,os.forkpty,os.kill,os.killpg,os.exec*,os.spawn*,os.posix_spawn*"`
	// Prelude is what the sandbox defines before node code runs.
	Prelude []string `env:"NOVA_VALIDATOR_PRELUDE" default:"context,json,math,re,datetime"`
}

// StartOption gives Start what its caller already holds.
type StartOption func(*Deps)

// WithRuntime reads the sandbox's runtime description from src instead of
// the object store directly (nova dev looks for it often while the
// sandbox beside it starts).
func WithRuntime(src RuntimeSource) StartOption { return func(d *Deps) { d.Runtime = src } }

// Start builds the code validator in env: it loads the sandbox's runtime
// description, publishes its fingerprint and declares its work-queue
// consumer before it returns. Its binary and nova dev start it this way.
func Start(ctx context.Context, cfg Config, env *service.Env, opts ...StartOption) (*agent.Service, error) {
	d := Deps{Bus: env.Bus, Logger: env.Logger, TracerProvider: env.Telemetry.TracerProvider, Workers: cfg.Workers,
		Python: cfg.Python, Forbidden: cfg.Forbidden, Prelude: cfg.Prelude, Replicas: env.Replicas}
	for _, opt := range opts {
		opt(&d)
	}
	return start(ctx, d)
}
