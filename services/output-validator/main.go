// Command output-validator runs NOVA's output validator: deterministic
// checks of an AI node's output, then a model's verdict on it.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
)

type config struct {
	service.Common
	llm.Settings
	Model   string `env:"NOVA_OUTPUT_VALIDATOR_MODEL" default:"gpt-4o-mini"`
	Workers int    `env:"NOVA_WORKERS" default:"4"`
}

func main() {
	var cfg config
	os.Exit(service.Main("output-validator", &cfg, func(ctx context.Context, env *service.Env) error {
		client, err := cfg.Settings.Client(bus.AgentOutputValidator, env.Logger, env.Telemetry.MeterProvider, env.Telemetry.TracerProvider)
		if err != nil {
			return err
		}
		return outputvalidator.Run(ctx, outputvalidator.Deps{
			Bus:            env.Bus,
			LLM:            client,
			Logger:         env.Logger,
			TracerProvider: env.Telemetry.TracerProvider,
			DefaultModel:   cfg.Model,
			Workers:        cfg.Workers,
		})
	}))
}
