package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
)

// Settings are the engine's configuration as the graph-engine binary and
// nova dev read it from the environment.
type Settings struct {
	// NodeTimeout applies to a node when neither it nor its workflow sets one.
	NodeTimeout time.Duration `env:"NOVA_NODE_TIMEOUT" default:"30s"`
	// Workers is how many events each of the engine's consumers handles at
	// once; 0: two per CPU the process may use, at least 8.
	Workers int `env:"NOVA_WORKERS" default:"0"`
	// ValueThreshold is the size in bytes over which a context value goes to
	// the value store and travels by reference.
	ValueThreshold int `env:"NOVA_VALUE_REF_THRESHOLD" default:"262144"`
	// AllowPrompt accepts AI (prompt) nodes; turn it off where the AI
	// agents are not deployed, so such workflows fail at validation.
	AllowPrompt bool `env:"NOVA_ALLOW_PROMPT" default:"true"`
	// MaxAttempts bounds the code generation attempts of an AI node.
	MaxAttempts int `env:"NOVA_MAX_ATTEMPTS" default:"3"`
	// MapResultsMaxBytes bounds the results of one map's items, together
	// (a result in the value store counts at its size there); a map whose
	// results pass it fails, naming it. 0: no bound.
	MapResultsMaxBytes int64 `env:"NOVA_MAP_RESULTS_MAX_BYTES" default:"1073741824"`
	// AnalysisTimeout bounds a run of an AI node's data analysis code.
	AnalysisTimeout time.Duration `env:"NOVA_ANALYSIS_TIMEOUT" default:"15s"`
	// CodeCacheTTL is how long a generated code is kept in the cache.
	CodeCacheTTL time.Duration `env:"NOVA_CODECACHE_TTL" default:"720h"`
	// CodeCacheMaxBytes caps the cache's bucket; the oldest entries go first.
	CodeCacheMaxBytes int64 `env:"NOVA_CODECACHE_MAX_BYTES" default:"268435456"`
	// The default budget of every workflow: NOVA_BUDGET_MAX_USD,
	// NOVA_BUDGET_MAX_USD_PER_DAY, NOVA_BUDGET_MAX_MODEL_CALLS.
	workflow.BudgetSettings
	// How long an ended execution's state is kept: NOVA_KEEP_ENDED_STATE.
	KeepSettings
	// The code cache's semantic level: NOVA_CODECACHE_SEMANTIC,
	// NOVA_CODECACHE_SIMILARITY, NOVA_LLM_EMBEDDING_MODEL,
	// NOVA_CODECACHE_EMBEDDING_TIMEOUT; with it on, the engine calls the
	// model API's embeddings (OPENAI_*), and nothing else of it.
	codecache.SemanticSettings
	llm.Settings
}

// RunWorkers is how many events each of the engine's consumers handles at
// once with these settings: Workers, or when that is 0 DefaultWorkers.
func (s Settings) RunWorkers() int {
	if s.Workers > 0 {
		return s.Workers
	}
	return DefaultWorkers()
}

// DefaultSettings are the settings with every default, as the binary reads
// them from an empty environment (a program that embeds the engine sets a
// few of them).
func DefaultSettings() Settings {
	var s Settings
	if err := config.Load(&s, func(string) string { return "" }); err != nil {
		panic(fmt.Sprintf("graph engine: a setting's default does not parse: %v", err))
	}
	return s
}

// Config is the engine's Config from s, or an error naming the setting at
// fault.
func (s Settings) Config(replicas int) (Config, error) {
	keep, err := s.Keep()
	if err != nil {
		return Config{}, err
	}
	budget, err := s.Budget()
	if err != nil {
		return Config{}, err
	}
	if err := s.SemanticSettings.Validate(); err != nil {
		return Config{}, err
	}
	return Config{
		DefaultNodeTimeout: s.NodeTimeout,
		Workers:            s.Workers,
		Replicas:           replicas,
		AllowPrompt:        s.AllowPrompt,
		MaxAttempts:        s.MaxAttempts,
		MapResultsMaxBytes: s.MapResultsMaxBytes,
		AnalysisTimeout:    s.AnalysisTimeout,
		KeepEnded:          keep,
		CodeCacheTTL:       s.CodeCacheTTL,
		CodeCacheMaxBytes:  s.CodeCacheMaxBytes,
		Budget:             budget,
		Semantic:           s.SemanticSettings,
	}, nil
}

// StartOption gives Start what its caller already holds.
type StartOption func(*startOptions)

type startOptions struct{ embedder *llm.Client }

// WithEmbedder compares tasks with c's embeddings instead of a client built
// from the settings' model API (nova dev's scripted server).
func WithEmbedder(c *llm.Client) StartOption { return func(o *startOptions) { o.embedder = c } }

// Start builds the engine from its settings in env: it opens the value
// store, and the model client when the code cache's semantic level is on,
// and declares its streams, buckets and consumers. The graph-engine binary
// and nova dev start it this way.
func Start(ctx context.Context, s Settings, env *service.Env, opts ...StartOption) (*Engine, error) {
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := s.Config(env.Replicas)
	if err != nil {
		return nil, err
	}
	values, err := valueref.Open(ctx, env.Bus.JetStream(), s.ValueThreshold, env.Replicas)
	if err != nil {
		return nil, err
	}
	embedder := o.embedder
	if s.SemanticSettings.Enabled && embedder == nil {
		tel := env.Telemetry
		if embedder, err = s.Settings.Client(bus.AgentGraphEngine, env.Logger, tel.MeterProvider, tel.TracerProvider); err != nil {
			return nil, err
		}
	}
	return New(ctx, Deps{
		Bus:            env.Bus,
		Values:         values,
		Logger:         env.Logger,
		TracerProvider: env.Telemetry.TracerProvider,
		MeterProvider:  env.Telemetry.MeterProvider,
		Embedder:       embedder,
		Config:         cfg,
	})
}
