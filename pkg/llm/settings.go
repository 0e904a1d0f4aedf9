package llm

import (
	"fmt"
	"log/slog"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Settings is the model API configuration every agent service reads from
// the environment; embed it in the service's config struct.
type Settings struct {
	// APIKey authenticates with the model API.
	APIKey string `env:"OPENAI_API_KEY" secret:"true"`
	// BaseURL is an OpenAI-compatible API (Azure, Ollama, vLLM, llama.cpp);
	// unset: OpenAI's.
	BaseURL string `env:"OPENAI_BASE_URL"`
	// APIVersion selects Azure OpenAI, with its API version.
	APIVersion string `env:"OPENAI_API_VERSION"`
	// Prices overrides the built-in price table: "model=input/cached/output;...".
	Prices string `env:"NOVA_LLM_PRICES"`
}

// Client builds the client an agent calls the model with.
func (s Settings) Client(agent string, log *slog.Logger, mp metric.MeterProvider, tp trace.TracerProvider) (*Client, error) {
	if s.APIKey == "" && s.BaseURL == "" {
		log.Warn("neither OPENAI_API_KEY nor OPENAI_BASE_URL is set: model calls will fail")
	}
	prices, err := ParsePrices(s.Prices, DefaultPrices())
	if err != nil {
		return nil, fmt.Errorf("NOVA_LLM_PRICES: %w", err)
	}
	return New(Config{
		APIKey:          s.APIKey,
		BaseURL:         s.BaseURL,
		AzureAPIVersion: s.APIVersion,
		Agent:           agent,
		Prices:          prices,
		Logger:          log,
		MeterProvider:   mp,
		TracerProvider:  tp,
	})
}
