// Command code-generator runs NOVA's code-generator agent: GenerateCode
// commands from nova.cmd.code-generator are answered with Python written by
// an OpenAI-compatible model.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/code-generator/generator"
)

type config struct {
	service.Common
	llm.Settings
	// Prices override the default price table: "model=input/cached/output;..."
	// in USD per million tokens.
	Model   string `env:"NOVA_CODE_GENERATOR_MODEL" default:"gpt-4o"`
	Workers int    `env:"NOVA_WORKERS" default:"8"`
}

func main() {
	var cfg config
	os.Exit(service.Main(bus.AgentCodeGenerator, &cfg, func(ctx context.Context, env *service.Env) error {
		client, err := cfg.Settings.Client(bus.AgentCodeGenerator, env.Logger, env.Telemetry.MeterProvider, env.Telemetry.TracerProvider)
		if err != nil {
			return err
		}
		return generator.Run(ctx, generator.Deps{
			Bus:            env.Bus,
			LLM:            client,
			Logger:         env.Logger,
			TracerProvider: env.Telemetry.TracerProvider,
			DefaultModel:   cfg.Model,
			Workers:        cfg.Workers,
		})
	}))
}
