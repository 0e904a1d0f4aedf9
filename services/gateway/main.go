// Command gateway is NOVA's HTTP API: it starts workflows and reads
// executions and their chain of work (see package gateway).
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/gateway/gateway"
)

type config struct {
	service.Common
	gateway.Config
}

func main() {
	var cfg config
	os.Exit(service.Main("gateway", &cfg, func(ctx context.Context, env *service.Env) error {
		return run(ctx, env, cfg)
	}))
}

func run(ctx context.Context, env *service.Env, cfg config) error {
	gw, err := gateway.Start(ctx, cfg.Config, env)
	if err != nil {
		return err
	}
	env.Started()
	return gw.Run(ctx)
}
