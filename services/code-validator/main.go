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
	validator.Config
}

func main() {
	var cfg config
	os.Exit(service.Main("code-validator", &cfg, func(ctx context.Context, env *service.Env) error {
		s, err := validator.Start(ctx, cfg.Config, env)
		if err != nil {
			return err
		}
		env.Started()
		return s.Run(ctx)
	}))
}
