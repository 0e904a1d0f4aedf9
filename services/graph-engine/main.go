// Command graph-engine runs NOVA's graph engine against an external NATS.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/graph-engine/engine"
)

type config struct {
	service.Common
	engine.Settings
}

func main() {
	var cfg config
	os.Exit(service.Main("graph-engine", &cfg, func(ctx context.Context, env *service.Env) error {
		e, err := engine.Start(ctx, cfg.Settings, env)
		if err != nil {
			return err
		}
		env.Started()
		return e.Run(ctx)
	}))
}
