// Command input-analyzer runs NOVA's input analyzer: for each AI node it
// decides whether the data must be analysed before the task code is written.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/input-analyzer/analyzer"
)

type config struct {
	service.Common
	llm.Settings
	Model   string `env:"NOVA_INPUT_ANALYZER_MODEL" default:"gpt-4o-mini"`
	Workers int    `env:"NOVA_WORKERS" default:"4"`
}

func main() {
	var cfg config
	os.Exit(service.Main("input-analyzer", &cfg, func(ctx context.Context, env *service.Env) error {
		client, err := cfg.Settings.Client(bus.AgentInputAnalyzer, env.Logger, env.Telemetry.MeterProvider, env.Telemetry.TracerProvider)
		if err != nil {
			return err
		}
		return analyzer.Run(ctx, analyzer.Deps{
			Bus:            env.Bus,
			LLM:            client,
			Logger:         env.Logger,
			TracerProvider: env.Telemetry.TracerProvider,
			DefaultModel:   cfg.Model,
			Workers:        cfg.Workers,
		})
	}))
}
