// Command sandbox runs NOVA's code sandbox: programs from nova.cmd.sandbox
// run in bubblewrap and their results go back on the bus.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/service"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

type config struct {
	service.Common
	sandboxservice.Config
}

func main() {
	var cfg config
	os.Exit(service.Main("sandbox", &cfg, func(ctx context.Context, env *service.Env) error {
		s, err := sandboxservice.Start(ctx, cfg.Config, env)
		if err != nil {
			return err
		}
		defer s.Close()
		env.Started()
		return s.Run(ctx)
	}))
}
