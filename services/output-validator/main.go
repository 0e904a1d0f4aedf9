// Command output-validator runs NOVA's output validator: deterministic
// checks of an AI node's output, then a model's verdict on it.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
)

type config struct {
	service.Common
	outputvalidator.Config
}

func main() {
	var cfg config
	os.Exit(service.Main(bus.AgentOutputValidator, &cfg, func(ctx context.Context, env *service.Env) error {
		s, err := outputvalidator.Start(ctx, cfg.Config, env)
		if err != nil {
			return err
		}
		env.Started()
		return s.Run(ctx)
	}))
}
