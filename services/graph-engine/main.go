// Command graph-engine runs NOVA's graph engine against an external NATS.
package main

import (
	"context"
	"os"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	"github.com/novaflow/nova/services/graph-engine/engine"
)

type config struct {
	service.Common
	NodeTimeout    time.Duration `env:"NOVA_NODE_TIMEOUT" default:"30s"`
	Workers        int           `env:"NOVA_WORKERS" default:"8"`
	ValueThreshold int           `env:"NOVA_VALUE_REF_THRESHOLD" default:"262144"`
	// AllowPrompt accepts AI (prompt) nodes; turn it off where the AI
	// agents are not deployed, so such workflows fail at validation.
	AllowPrompt     bool          `env:"NOVA_ALLOW_PROMPT" default:"true"`
	MaxAttempts     int           `env:"NOVA_MAX_ATTEMPTS" default:"3"`
	AnalysisTimeout time.Duration `env:"NOVA_ANALYSIS_TIMEOUT" default:"15s"`
	// The generated-code cache's entries live this long, within this cap.
	CodeCacheTTL      time.Duration `env:"NOVA_CODECACHE_TTL" default:"720h"`
	CodeCacheMaxBytes int64         `env:"NOVA_CODECACHE_MAX_BYTES" default:"268435456"`
	// The default budget of every workflow: NOVA_BUDGET_MAX_USD,
	// NOVA_BUDGET_MAX_USD_PER_DAY, NOVA_BUDGET_MAX_MODEL_CALLS.
	workflow.BudgetSettings
	// How long an ended execution's state is kept: NOVA_KEEP_ENDED_STATE.
	engine.KeepSettings
	// The code cache's semantic level: NOVA_CODECACHE_SEMANTIC,
	// NOVA_CODECACHE_SIMILARITY, NOVA_LLM_EMBEDDING_MODEL,
	// NOVA_CODECACHE_EMBEDDING_TIMEOUT; with it on, the engine calls the
	// model API's embeddings (OPENAI_*), and nothing else of it.
	codecache.SemanticSettings
	llm.Settings
}

func main() {
	var cfg config
	os.Exit(service.Main("graph-engine", &cfg, func(ctx context.Context, env *service.Env) error {
		keep, err := cfg.Keep()
		if err != nil {
			return err
		}
		budget, err := cfg.Budget()
		if err != nil {
			return err
		}
		values, err := valueref.Open(ctx, env.Bus.JetStream(), cfg.ValueThreshold, cfg.StreamReplicas)
		if err != nil {
			return err
		}
		var embedder *llm.Client
		if cfg.SemanticSettings.Enabled {
			if embedder, err = cfg.Settings.Client(bus.AgentGraphEngine, env.Logger, env.Telemetry.MeterProvider, env.Telemetry.TracerProvider); err != nil {
				return err
			}
		}
		return engine.Run(ctx, engine.Deps{
			Bus:            env.Bus,
			Values:         values,
			Logger:         env.Logger,
			TracerProvider: env.Telemetry.TracerProvider,
			MeterProvider:  env.Telemetry.MeterProvider,
			Embedder:       embedder,
			Config: engine.Config{
				DefaultNodeTimeout: cfg.NodeTimeout,
				Workers:            cfg.Workers,
				Replicas:           cfg.StreamReplicas,
				AllowPrompt:        cfg.AllowPrompt,
				MaxAttempts:        cfg.MaxAttempts,
				AnalysisTimeout:    cfg.AnalysisTimeout,
				KeepEnded:          keep,
				CodeCacheTTL:       cfg.CodeCacheTTL,
				CodeCacheMaxBytes:  cfg.CodeCacheMaxBytes,
				Budget:             budget,
				Semantic:           cfg.SemanticSettings,
			},
		})
	}))
}
