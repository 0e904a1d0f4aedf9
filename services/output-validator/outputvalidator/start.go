package outputvalidator

import (
	"context"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
)

// Config is the output validator's configuration as its binary and nova dev read it
// from the environment.
type Config struct {
	llm.Settings
	// Model is asked when neither the node nor its workflow names one.
	Model string `env:"NOVA_OUTPUT_VALIDATOR_MODEL" default:"gpt-4o-mini"`
	// Workers is how many commands a replica handles at once.
	Workers int `env:"NOVA_WORKERS" default:"4"`
}

// Start builds the output validator in env: its model client (cfg's model API, or
// the one agent.WithLLM gives) and its work-queue consumer, declared before
// it returns. Its binary and nova dev start it this way.
func Start(ctx context.Context, cfg Config, env *service.Env, opts ...agent.Option) (*agent.Service, error) {
	tel := env.Telemetry
	client, err := agent.Apply(opts).Client(cfg.Settings, bus.AgentOutputValidator, env.Logger, tel.MeterProvider, tel.TracerProvider)
	if err != nil {
		return nil, err
	}
	return start(ctx, Deps{Bus: env.Bus, LLM: client, Logger: env.Logger, TracerProvider: tel.TracerProvider,
		DefaultModel: cfg.Model, Workers: cfg.Workers})
}
