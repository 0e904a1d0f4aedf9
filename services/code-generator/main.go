// Command code-generator runs NOVA's code-generator agent: GenerateCode
// commands from nova.cmd.code-generator are answered with Python written by
// an OpenAI-compatible model.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/code-generator/generator"
)

type config struct {
	service.Common
	OpenAIKey        string `env:"OPENAI_API_KEY" secret:"true"`
	OpenAIBaseURL    string `env:"OPENAI_BASE_URL"`
	OpenAIAPIVersion string `env:"OPENAI_API_VERSION"`
	// Prices override the default price table: "model=input/cached/output;..."
	// in USD per million tokens.
	Prices  string `env:"NOVA_LLM_PRICES"`
	Model   string `env:"NOVA_CODE_GENERATOR_MODEL" default:"gpt-4o"`
	Workers int    `env:"NOVA_WORKERS" default:"8"`
}

func main() {
	var cfg config
	os.Exit(service.Main(bus.AgentCodeGenerator, &cfg, func(ctx context.Context, env *service.Env) error {
		if cfg.OpenAIKey == "" && cfg.OpenAIBaseURL == "" {
			env.Logger.Warn("neither OPENAI_API_KEY nor OPENAI_BASE_URL is set: model calls will fail")
		}
		prices, err := llm.ParsePrices(cfg.Prices, llm.DefaultPrices())
		if err != nil {
			return fmt.Errorf("NOVA_LLM_PRICES: %w", err)
		}
		client, err := llm.New(llm.Config{
			APIKey:          cfg.OpenAIKey,
			BaseURL:         cfg.OpenAIBaseURL,
			AzureAPIVersion: cfg.OpenAIAPIVersion,
			Agent:           bus.AgentCodeGenerator,
			Prices:          prices,
			Logger:          env.Logger,
			MeterProvider:   env.Telemetry.MeterProvider,
		})
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
