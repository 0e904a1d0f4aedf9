// Command code-generator runs NOVA's code-generator agent: GenerateCode
// commands from nova.cmd.code-generator are answered with Python written by
// an OpenAI-compatible model.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/code-generator/generator"
)

type config struct {
	service.Common
	generator.Config
}

func main() {
	var cfg config
	os.Exit(service.Main(bus.AgentCodeGenerator, &cfg, func(ctx context.Context, env *service.Env) error {
		s, err := generator.Start(ctx, cfg.Config, env)
		if err != nil {
			return err
		}
		env.Started()
		return s.Run(ctx)
	}))
}
