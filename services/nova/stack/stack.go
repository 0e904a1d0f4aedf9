// Package stack assembles every NOVA service in one process, the shape of
// `nova dev` and `nova run`: each service is a named module with its own
// bus connection and telemetry, started and stopped on its own, against the
// embedded NATS and FerretDB or external ones.
package stack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/telemetry"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/code-generator/generator"
	"github.com/novaflow/nova/services/code-validator/validator"
	"github.com/novaflow/nova/services/gateway/gateway"
	"github.com/novaflow/nova/services/graph-engine/engine"
	"github.com/novaflow/nova/services/input-analyzer/analyzer"
	"github.com/novaflow/nova/services/output-validator/outputvalidator"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

// Module names.
const (
	GraphEngine     = "graph-engine"
	Sandbox         = "sandbox"
	Audit           = "audit"
	InputAnalyzer   = "input-analyzer"
	CodeGenerator   = "code-generator"
	CodeValidator   = "code-validator"
	OutputValidator = "output-validator"
	// Gateway is the HTTP API; it runs only when asked for (Options.Modules
	// naming it, as `nova dev` does), never by default.
	Gateway = "gateway"
)

// Modules is every module started by default, in start order.
var Modules = []string{Audit, Sandbox, InputAnalyzer, CodeGenerator, CodeValidator, OutputValidator, GraphEngine}

// stopOrder is every module, the last to stop first.
var stopOrder = append(slices.Clone(Modules), Gateway)

// GatewayOptions configure the gateway module.
type GatewayOptions struct {
	// Addr is where it listens (default 127.0.0.1:8080; port 0 picks one).
	Addr string
	// Keys are the accepted API keys; required unless NoAuth.
	Keys *gateway.Keys
	// NoAuth serves every request without a key (the gateway warns).
	NoAuth bool
	Limits gateway.Limits
	// CORSOrigins may call the API from a browser.
	CORSOrigins []string
	// JaegerURL is Jaeger's UI, for the console's trace links.
	JaegerURL string
}

// DefaultGatewayAddr is where `nova dev` serves the HTTP API.
const DefaultGatewayAddr = "127.0.0.1:8080"

func (o LLMOptions) configured() bool {
	return o.APIKey != "" || o.BaseURL != "" || o.ScriptedRules != nil
}

// LLMOptions says which model API the AI agents call.
type LLMOptions struct {
	// APIKey and BaseURL of an OpenAI-compatible API (OPENAI_API_KEY,
	// OPENAI_BASE_URL); APIVersion selects Azure OpenAI.
	APIKey, BaseURL, APIVersion string
	Prices                      llm.PriceTable
	// ScriptedRules answer instead when neither APIKey nor BaseURL is set:
	// the stack starts NOVA's scripted OpenAI-compatible server with them.
	ScriptedRules *scripted.Rules
}

// Options configures a stack.
type Options struct {
	// DataDir holds the embedded servers' data; used when NATSURL or MongoURI is empty.
	DataDir string
	// NATSURL and MongoURI point at external servers instead of embedded ones.
	NATSURL  string
	MongoURI string
	// NATSPort and MongoPort fix the embedded servers' ports (0 = any free port).
	NATSPort, MongoPort int
	// NATSCluster, when 3 or more, runs that many clustered embedded NATS
	// servers instead of one (NATSPort, NATSPort+1, ...).
	NATSCluster int
	// Replicas of every stream, KV bucket and object store the modules
	// declare (default 1, or 3 on an embedded cluster).
	Replicas int
	// SingleEvents makes the modules publish every event alone, none in an
	// envelope (NOVA_EVENT_ENVELOPES=false; see bus.EnvelopeContentType).
	SingleEvents bool
	// Database is the MongoDB database of the chain of work.
	Database string
	// Logger receives every module's logs; nil discards them.
	Logger *slog.Logger
	// SpanExporter, when set, receives every module's spans (tests).
	SpanExporter sdktrace.SpanExporter
	// OTLPEndpoint exports spans over OTLP/HTTP.
	OTLPEndpoint string
	// ValueThreshold is the size over which context values go by reference
	// (default: the engine's setting).
	ValueThreshold int
	// Modules to start (default all).
	Modules []string
	// LLM configures the AI agents.
	LLM LLMOptions
	// Engine configures the graph engine, as the graph-engine binary reads
	// it from the environment (nil: its settings' defaults). AI nodes are
	// refused whatever it says when LLM configures no model; the semantic
	// level's embeddings come from LLM's model API, or the scripted server.
	Engine *engine.Settings
	// Each service's configuration, as its binary reads it from the
	// environment (nil: its defaults; for the sandbox, SandboxDefaults).
	Sandbox         *sandboxservice.Config
	Audit           *auditservice.Config
	InputAnalyzer   *analyzer.Config
	CodeGenerator   *generator.Config
	CodeValidator   *validator.Config
	OutputValidator *outputvalidator.Config
	// Gateway configures the gateway module, when it runs.
	Gateway GatewayOptions
}

// Stack is a running set of modules.
type Stack struct {
	opts     Options
	infra    *devstack.Stack
	natsURL  string
	mongoURI string
	registry *prometheus.Registry
	Store    *chainstore.Store

	// scripted is the offline model server, when the stack runs one.
	scripted     *scripted.Server
	stopScripted func() error

	mu         sync.Mutex
	running    map[string]*module
	gatewayURL string
}

type module struct {
	cancel context.CancelFunc
	done   chan error
}

// Start brings up the infrastructure (embedded unless URLs are given) and the modules.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.Database == "" {
		opts.Database = "nova"
	}
	if err := opts.fillDefaults(); err != nil {
		return nil, err
	}
	if opts.ValueThreshold <= 0 {
		opts.ValueThreshold = opts.Engine.ValueThreshold
	}
	if len(opts.Modules) == 0 {
		opts.Modules = DefaultModules(opts.LLM)
	}
	if opts.Replicas <= 0 {
		opts.Replicas = 1
		if opts.NATSCluster >= 3 && opts.NATSURL == "" {
			opts.Replicas = 3
		}
	}
	s := &Stack{opts: opts, natsURL: opts.NATSURL, mongoURI: opts.MongoURI, running: map[string]*module{},
		registry: prometheus.NewRegistry()}
	if s.natsURL == "" || s.mongoURI == "" {
		infra, err := devstack.Start(ctx, devstack.Options{
			DataDir: opts.DataDir, NATSPort: opts.NATSPort, MongoPort: opts.MongoPort, Logger: opts.Logger,
			NATSCluster: opts.NATSCluster,
		})
		if err != nil {
			return nil, err
		}
		s.infra = infra
		if s.natsURL == "" {
			s.natsURL = infra.NATSURL
		}
		if s.mongoURI == "" {
			s.mongoURI = infra.MongoURI
		}
	}
	st, err := chainstore.Open(ctx, s.mongoURI, opts.Database)
	if err != nil {
		s.closeInfra()
		return nil, err
	}
	s.Store = st
	if opts.LLM.APIKey == "" && opts.LLM.BaseURL == "" && opts.LLM.ScriptedRules != nil {
		srv, err := scripted.New(*opts.LLM.ScriptedRules, scripted.WithLogger(opts.Logger))
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("scripted model server: %w", err)
		}
		if _, s.stopScripted, err = srv.Start(ctx, ""); err != nil {
			s.Close()
			return nil, fmt.Errorf("scripted model server: %w", err)
		}
		s.scripted = srv
	}
	for _, name := range opts.Modules {
		if err := s.StartModule(ctx, name); err != nil {
			s.Close()
			return nil, err
		}
	}
	return s, nil
}

// DefaultModules are the modules a stack runs when Options.Modules is
// empty: every one of Modules, except that without a model the AI agents
// cannot work, so they are left out (and the engine refuses prompt nodes
// with a clear error).
func DefaultModules(llm LLMOptions) []string {
	if llm.configured() {
		return slices.Clone(Modules)
	}
	return slices.DeleteFunc(slices.Clone(Modules), func(m string) bool {
		return m == InputAnalyzer || m == CodeGenerator || m == OutputValidator
	})
}

// Scripted is the offline model server the stack runs (nil when a real API
// is configured).
func (s *Stack) Scripted() *scripted.Server { return s.scripted }

// Metrics gathers the metrics every module records (what /metrics serves).
func (s *Stack) Metrics() prometheus.Gatherer { return s.registry }

// Modules lists the modules this stack runs.
func (s *Stack) Modules() []string { return slices.Clone(s.opts.Modules) }

// Replicas is how many replicas the modules give what they declare.
func (s *Stack) Replicas() int { return s.opts.Replicas }

// NATSURL is the URL of the NATS server the modules use.
func (s *Stack) NATSURL() string { return s.natsURL }

// MongoURI is the URI of the audit store.
func (s *Stack) MongoURI() string { return s.mongoURI }

// GatewayURL is the base URL of the gateway module ("" when it does not run).
func (s *Stack) GatewayURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gatewayURL
}

// Infra is the embedded infrastructure, nil when external servers are used.
func (s *Stack) Infra() *devstack.Stack { return s.infra }

// StartModule starts one module; it returns once the module's consumers are
// declared, so events published afterwards are kept for it.
func (s *Stack) StartModule(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.running[name]; ok {
		return fmt.Errorf("module %s already running", name)
	}
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	run, err := s.build(mctx, name)
	if err != nil {
		cancel()
		return fmt.Errorf("start %s: %w", name, err)
	}
	m := &module{cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- run(mctx) }()
	s.running[name] = m
	return nil
}

// StopModule stops one module and waits for it: its consumers stop pulling
// and finish what they hold.
func (s *Stack) StopModule(name string) error {
	s.mu.Lock()
	m, ok := s.running[name]
	delete(s.running, name)
	s.mu.Unlock()
	if !ok {
		return fmt.Errorf("module %s not running", name)
	}
	m.cancel()
	return <-m.done
}

// Close stops every module and the embedded infrastructure.
func (s *Stack) Close() error {
	var errs []error
	for _, name := range slices.Backward(stopOrder) {
		s.mu.Lock()
		_, ok := s.running[name]
		s.mu.Unlock()
		if ok {
			errs = append(errs, s.StopModule(name))
		}
	}
	if s.Store != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, s.Store.Close(ctx))
		cancel()
	}
	if s.stopScripted != nil {
		errs = append(errs, s.stopScripted())
	}
	errs = append(errs, s.closeInfra())
	return errors.Join(errs...)
}

func (s *Stack) closeInfra() error {
	if s.infra == nil {
		return nil
	}
	return s.infra.Close()
}

// Connect opens a bus connection to the stack's NATS (for clients).
func (s *Stack) Connect(ctx context.Context, name string, opts ...bus.Option) (*bus.Bus, error) {
	return bus.Connect(ctx, s.natsURL, append([]bus.Option{bus.WithName(name), bus.WithLogger(s.opts.Logger), s.inProcess()}, opts...)...)
}

// inProcess connects a module to the embedded NATS server through memory
// instead of a loopback socket (devstack.NATS.Dialer); with an external
// server or an embedded cluster it changes nothing.
func (s *Stack) inProcess() bus.Option {
	if s.infra == nil || s.infra.NATS == nil || s.opts.NATSURL != "" {
		return bus.WithNATSOptions()
	}
	return bus.WithNATSOptions(nats.SetCustomDialer(s.infra.NATS.Dialer()))
}

// llmClient builds an agent's model client: the configured API, or the
// stack's scripted server.
func (s *Stack) llmClient(agentName string, tel *telemetry.Telemetry) (*llm.Client, error) {
	cfg := llm.Config{APIKey: s.opts.LLM.APIKey, BaseURL: s.opts.LLM.BaseURL, AzureAPIVersion: s.opts.LLM.APIVersion,
		Agent: agentName, Prices: s.opts.LLM.Prices, Logger: s.opts.Logger.With("service", agentName), MeterProvider: tel.MeterProvider,
		TracerProvider: tel.TracerProvider}
	if cfg.APIKey == "" && cfg.BaseURL == "" {
		if s.scripted == nil {
			return nil, fmt.Errorf("%s needs a model: set OPENAI_API_KEY or OPENAI_BASE_URL, or give scripted rules", agentName)
		}
		cfg.BaseURL, cfg.APIKey = s.scripted.BaseURL(), "scripted"
	}
	return llm.New(cfg)
}

// build wires one module: its telemetry (named after the service, so
// traces show which service did what), its bus connection and its Run.
func (s *Stack) build(ctx context.Context, name string) (func(context.Context) error, error) {
	topts := []telemetry.Option{telemetry.WithOTLPEndpoint(s.opts.OTLPEndpoint), telemetry.WithRegistry(s.registry)}
	if s.opts.SpanExporter != nil {
		topts = append(topts, telemetry.WithSpanExporter(s.opts.SpanExporter))
	}
	tel, err := telemetry.Setup(ctx, name, topts...)
	if err != nil {
		return nil, err
	}
	log := s.opts.Logger.With("service", name)
	b, err := bus.Connect(ctx, s.natsURL, bus.WithName(name), bus.WithLogger(log),
		bus.WithTracerProvider(tel.TracerProvider), bus.WithMeterProvider(tel.MeterProvider),
		bus.WithStreamOptions(bus.StreamOptions{Replicas: s.opts.Replicas}), s.inProcess(),
		bus.WithEnvelopes(!s.opts.SingleEvents))
	if err != nil {
		return nil, err
	}
	cleanup := func() {
		b.Close()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}
	run, stop, err := s.start(ctx, name, service.NewEnv(b, tel, log, s.opts.Replicas))
	if err != nil {
		cleanup()
		return nil, err
	}
	if stop != nil {
		closeBus := cleanup
		cleanup = func() { stop(); closeBus() }
	}
	return func(ctx context.Context) error {
		defer cleanup()
		return run(ctx)
	}, nil
}

// start starts module name in env with the constructor its binary calls,
// from its configuration in the options and what the stack shares: the
// audit store, the model client (the scripted server's when no API is
// configured). stop, when not nil, releases what the module holds once
// its run has returned.
func (s *Stack) start(ctx context.Context, name string, env *service.Env) (run func(context.Context) error, stop func(), err error) {
	o := s.opts
	switch name {
	case GraphEngine:
		es := *o.Engine
		es.AllowPrompt = es.AllowPrompt && o.LLM.configured()
		es.ValueThreshold = o.ValueThreshold
		var opts []engine.StartOption
		if es.SemanticSettings.Enabled {
			embedder, err := s.llmClient(name, env.Telemetry)
			if err != nil {
				return nil, nil, err
			}
			opts = append(opts, engine.WithEmbedder(embedder))
		}
		e, err := engine.Start(ctx, es, env, opts...)
		if err != nil {
			return nil, nil, err
		}
		return e.Run, nil, nil
	case Sandbox:
		cfg := *o.Sandbox
		cfg.ValueThreshold = o.ValueThreshold
		sb, err := sandboxservice.Start(ctx, cfg, env, sandboxservice.OptionalJavaScript())
		if err != nil {
			return nil, nil, err
		}
		return sb.Run, func() { _ = sb.Close() }, nil
	case Audit:
		a, err := auditservice.Start(ctx, *o.Audit, env, auditservice.WithStore(s.Store))
		if err != nil {
			return nil, nil, err
		}
		return a.Run, nil, nil
	case CodeValidator:
		// The sandbox starts beside it and publishes its runtime within a
		// second: looked for often until then, so that the first verdicts
		// are complete ones a cache hit can reuse.
		runtime := runtimeinfo.NewCache(env.Bus.JetStream())
		runtime.RetryMissing = 100 * time.Millisecond
		v, err := validator.Start(ctx, *o.CodeValidator, env, validator.WithRuntime(runtime))
		if err != nil {
			return nil, nil, err
		}
		return v.Run, nil, nil
	case InputAnalyzer, CodeGenerator, OutputValidator:
		client, err := s.llmClient(name, env.Telemetry)
		if err != nil {
			return nil, nil, err
		}
		var a *agent.Service
		switch name {
		case InputAnalyzer:
			a, err = analyzer.Start(ctx, *o.InputAnalyzer, env, agent.WithLLM(client))
		case CodeGenerator:
			a, err = generator.Start(ctx, *o.CodeGenerator, env, agent.WithLLM(client))
		default:
			a, err = outputvalidator.Start(ctx, *o.OutputValidator, env, agent.WithLLM(client))
		}
		if err != nil {
			return nil, nil, err
		}
		return a.Run, nil, nil
	case Gateway:
		run, err := s.gateway(ctx, env)
		return run, nil, err
	default:
		return nil, nil, fmt.Errorf("unknown module %q", name)
	}
}

// gateway builds the HTTP API module: it listens at once, so the URL it
// reports answers as soon as the module has started, and on stop lets the
// requests in hand finish (bounded) before it closes.
func (s *Stack) gateway(ctx context.Context, env *service.Env) (func(context.Context) error, error) {
	o := s.opts.Gateway
	cfg := gateway.Config{Addr: cmp.Or(o.Addr, DefaultGatewayAddr), NoAuth: o.NoAuth, ValueThreshold: s.opts.ValueThreshold,
		Settings: gateway.Settings{JaegerURL: o.JaegerURL, CORSOrigins: strings.Join(o.CORSOrigins, ",")}}
	opts := []gateway.StartOption{gateway.WithStore(s.Store), gateway.WithLimits(o.Limits)}
	if o.Keys != nil {
		opts = append(opts, gateway.WithKeys(o.Keys))
	}
	gw, err := gateway.Start(ctx, cfg, env, opts...)
	if err != nil {
		return nil, err
	}
	s.gatewayURL = gw.URL() // StartModule holds s.mu
	return func(ctx context.Context) error {
		if err := gw.Run(ctx); !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}, nil
}

// fillDefaults gives each service whose configuration the options leave
// nil its defaults.
func (o *Options) fillDefaults() error {
	if o.Engine == nil {
		es := engine.DefaultSettings()
		o.Engine = &es
	}
	if o.Sandbox == nil {
		sb := SandboxDefaults()
		o.Sandbox = &sb
	}
	return errors.Join(orDefaults(&o.Audit), orDefaults(&o.InputAnalyzer), orDefaults(&o.CodeGenerator),
		orDefaults(&o.CodeValidator), orDefaults(&o.OutputValidator))
}

// orDefaults sets *cfg, when nil, to a configuration with its defaults.
func orDefaults[T any](cfg **T) error {
	if *cfg != nil {
		return nil
	}
	v := new(T)
	if err := defaults(v); err != nil {
		return fmt.Errorf("%T: %w", v, err)
	}
	*cfg = v
	return nil
}

// Default is a service's configuration T with every default, for a stack
// that sets a few of them.
func Default[T any]() *T {
	v := new(T)
	if err := defaults(v); err != nil {
		panic(fmt.Sprintf("%T: a setting's default does not parse: %v", v, err))
	}
	return v
}

// SandboxConfig is SandboxDefaults with warm zygotes on or off.
func SandboxConfig(warm bool) *sandboxservice.Config {
	cfg := SandboxDefaults()
	cfg.Warm = warm
	return &cfg
}

// SandboxDefaults are the sandbox's defaults for a stack: its binary's,
// except that zygotes stay off (a one-shot run or a test does not want
// them; nova dev turns them on), with the JavaScript packages found beside
// the nova binary or in the checkout.
func SandboxDefaults() sandboxservice.Config {
	cfg := sandboxservice.DefaultConfig()
	cfg.Warm = false
	cfg.NodeModules = FindNodeModules()
	return cfg
}

// defaults fills cfg, a settings struct, with its tags' defaults: a stack
// reads no environment itself (nova dev loads the settings it is given).
func defaults(cfg any) error {
	return config.Load(cfg, func(string) string { return "" })
}
