// Command output-validator runs NOVA's output validator: deterministic
// checks of an AI node's output, then a model's verdict on it.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
)

type config struct {
	service.Common
	OpenAIAPIKey     string `env:"OPENAI_API_KEY" secret:"true"`
	OpenAIBaseURL    string `env:"OPENAI_BASE_URL"`
	OpenAIAPIVersion string `env:"OPENAI_API_VERSION"`
	Prices           string `env:"NOVA_LLM_PRICES"`
	Model            string `env:"NOVA_OUTPUT_VALIDATOR_MODEL" default:"gpt-4o-mini"`
	Workers          int    `env:"NOVA_WORKERS" default:"4"`
}

func main() {
	var cfg config
	os.Exit(service.Main("output-validator", &cfg, func(ctx context.Context, env *service.Env) error {
		prices, err := llm.ParsePrices(cfg.Prices, llm.DefaultPrices())
		if err != nil {
			return fmt.Errorf("NOVA_LLM_PRICES: %w", err)
		}
		client, err := llm.New(llm.Config{
			APIKey:          cfg.OpenAIAPIKey,
			BaseURL:         cfg.OpenAIBaseURL,
			AzureAPIVersion: cfg.OpenAIAPIVersion,
			Agent:           bus.AgentOutputValidator,
			Prices:          prices,
			Logger:          env.Logger,
			MeterProvider:   env.Telemetry.MeterProvider,
		})
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
