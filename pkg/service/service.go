// Package service is the start-up and shutdown shared by every NOVA service
// binary: typed config from the environment, telemetry, the bus connection,
// health endpoints, and a run function that ends on SIGINT/SIGTERM.
package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
	"golang.org/x/sync/errgroup"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/pkg/health"
	"github.com/novaflow/nova/pkg/telemetry"
)

// Common is the configuration every service shares. Embed it in a service's
// config struct.
type Common struct {
	// NATSURL is the NATS server (or servers, comma-separated) to connect to.
	NATSURL string `env:"NATS_URL" default:"nats://127.0.0.1:4222"`
	// NATSCreds is a credentials file (user JWT and NKey seed).
	NATSCreds string `env:"NATS_CREDS"`
	// NATSNKeySeed is a file holding the user's NKey seed.
	NATSNKeySeed string `env:"NATS_NKEY_SEED_FILE"`
	// NATSUser and NATSPassword authenticate with a user and password.
	NATSUser     string `env:"NATS_USER"`
	NATSPassword string `env:"NATS_PASSWORD" secret:"true"`
	// NATSCAFile verifies the server's TLS certificate; NATSCertFile and
	// NATSKeyFile are the client's certificate for mutual TLS.
	NATSCAFile   string `env:"NATS_TLS_CA"`
	NATSCertFile string `env:"NATS_TLS_CERT"`
	NATSKeyFile  string `env:"NATS_TLS_KEY"`
	// NATSInboxPrefix is where replies come back; with per-service users each
	// may read only its own inbox (_INBOX.<user>).
	NATSInboxPrefix string `env:"NATS_INBOX_PREFIX"`
	// StreamReplicas of the streams, buckets and object stores the service
	// declares (3 on a production cluster).
	StreamReplicas int `env:"NOVA_STREAM_REPLICAS" default:"1"`
	// EventEnvelopes puts the events of a workflow's start, a node's start
	// and completion and a step's completion that one transition publishes
	// in one message of the events stream (nova.evt.<id>.events.start or
	// .run, a CloudEvents JSON batch); false publishes each alone, for
	// readers of the stream that do not unpack envelopes.
	EventEnvelopes bool `env:"NOVA_EVENT_ENVELOPES" default:"true"`
	// HealthAddr serves /healthz, /readyz and /metrics.
	HealthAddr string `env:"HEALTH_ADDR" default:":8080"`
	// OTLPEndpoint receives traces over OTLP/HTTP; unset: none are exported.
	OTLPEndpoint string `env:"OTEL_EXPORTER_OTLP_ENDPOINT"`
	// LogLevel is debug, info, warn or error; LogFormat json or text.
	LogLevel  string `env:"LOG_LEVEL" default:"info"`
	LogFormat string `env:"LOG_FORMAT" default:"json"`
	// Pprof serves Go's profiles on the health port (/debug/pprof/).
	Pprof bool `env:"NOVA_PPROF"`
}

// NATSOptions turns the credentials in the config into connection options.
func (c *Common) NATSOptions() ([]nats.Option, error) {
	var opts []nats.Option
	if c.NATSCreds != "" {
		opts = append(opts, nats.UserCredentials(c.NATSCreds))
	}
	if c.NATSNKeySeed != "" {
		o, err := nats.NkeyOptionFromSeed(c.NATSNKeySeed)
		if err != nil {
			return nil, fmt.Errorf("NATS_NKEY_SEED_FILE: %w", err)
		}
		opts = append(opts, o)
	}
	if c.NATSUser != "" {
		opts = append(opts, nats.UserInfo(c.NATSUser, c.NATSPassword))
	}
	if c.NATSCAFile != "" {
		opts = append(opts, nats.RootCAs(c.NATSCAFile))
	}
	if c.NATSCertFile != "" {
		opts = append(opts, nats.ClientCert(c.NATSCertFile, c.NATSKeyFile))
	}
	if c.NATSInboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(c.NATSInboxPrefix))
	}
	return opts, nil
}

func (c *Common) common() *Common { return c }

// Config is a service config struct that embeds Common.
type Config interface{ common() *Common }

// Env is what a service's constructor gets besides its own config: the bus
// connection, telemetry and logger of the process or module it runs in.
type Env struct {
	Bus       *bus.Bus
	Telemetry *telemetry.Telemetry
	Logger    *slog.Logger
	// Replicas of the streams, buckets and object stores the service
	// declares (NOVA_STREAM_REPLICAS).
	Replicas int

	mu       sync.Mutex
	checks   []health.Check
	degraded []health.Check
	started  atomic.Bool
}

// Started says the service has started: its consumers are declared and
// what it checks at start has passed. Until then /readyz answers 503
// "starting", so that no probe calls ready a service that may still
// refuse to start.
func (e *Env) Started() { e.started.Store(true) }

// setupTelemetry builds the service's logger, traces and metrics from the
// common settings.
func setupTelemetry(ctx context.Context, name string, c *Common) (*telemetry.Telemetry, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return nil, fmt.Errorf("LOG_LEVEL %q: %w", c.LogLevel, err)
	}
	return telemetry.Setup(ctx, name,
		telemetry.WithOTLPEndpoint(c.OTLPEndpoint),
		telemetry.WithLog(os.Stderr, level, !strings.EqualFold(c.LogFormat, "text")))
}

// connect opens the service's bus connection with its credentials.
func connect(ctx context.Context, name string, c *Common, tel *telemetry.Telemetry) (*bus.Bus, error) {
	natsOpts, err := c.NATSOptions()
	if err != nil {
		return nil, err
	}
	return bus.Connect(ctx, c.NATSURL,
		bus.WithName(name),
		bus.WithLogger(tel.Logger),
		bus.WithTracerProvider(tel.TracerProvider),
		bus.WithMeterProvider(tel.MeterProvider),
		bus.WithNATSOptions(natsOpts...),
		bus.WithStreamOptions(bus.StreamOptions{Replicas: c.StreamReplicas}),
		bus.WithEnvelopes(c.EventEnvelopes))
}

// serveHealth listens on the health address: /healthz, /readyz (env's
// checks, read per request, as the service adds them while it starts) and
// /metrics, with Go's profiles when asked for.
func serveHealth(c *Common, env *Env) (*health.Server, error) {
	hs, err := health.Listen(c.HealthAddr, env.Telemetry.Registry, health.Check{Name: "service", Func: func(ctx context.Context) error {
		if failed := env.failing(ctx, &env.checks, true); len(failed) > 0 {
			return failed[0]
		}
		return nil
	}})
	if err != nil {
		return nil, err
	}
	hs.Degraded(func(ctx context.Context) []string {
		var out []string
		for _, err := range env.failing(ctx, &env.degraded, false) {
			out = append(out, err.Error())
		}
		return out
	})
	env.Logger.Info("serving health and metrics", "addr", hs.Addr())
	if c.Pprof {
		hs.ServePprof()
		env.Logger.Warn("serving Go's profiles on the health port (/debug/pprof/); keep the port private", "addr", hs.Addr())
	}
	return hs, nil
}

// failing runs the checks of list, read under the lock (the service adds
// them while it starts), and returns each failure named after its check;
// with first, it stops at the first.
func (e *Env) failing(ctx context.Context, list *[]health.Check, first bool) []error {
	e.mu.Lock()
	checks := slices.Clone(*list)
	e.mu.Unlock()
	var failed []error
	for _, ch := range checks {
		if err := ch.Func(ctx); err != nil {
			failed = append(failed, fmt.Errorf("%s: %w", ch.Name, err))
			if first {
				break
			}
		}
	}
	return failed
}

// NewEnv is the Env of a service that runs inside another program (nova
// dev's modules, tests); a nil logger is slog's default, a nil telemetry
// one that exports nothing.
func NewEnv(b *bus.Bus, tel *telemetry.Telemetry, log *slog.Logger, replicas int) *Env {
	if log == nil {
		log = slog.Default()
	}
	if tel == nil {
		tel = &telemetry.Telemetry{TracerProvider: tracenoop.NewTracerProvider(), MeterProvider: metricnoop.NewMeterProvider(), Logger: log}
	}
	return &Env{Bus: b, Telemetry: tel, Logger: log, Replicas: max(replicas, 1)}
}

// AddDegraded adds a condition /healthz reports while it fails, still
// answering 200: the process is alive and a restart would not help (what
// it writes to is down, say), but it does not do all it should.
func (e *Env) AddDegraded(name string, fn func() error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.degraded = append(e.degraded, health.Check{Name: name, Func: func(context.Context) error { return fn() }})
}

// AddReadiness adds a condition to /readyz (the bus connection is one already).
func (e *Env) AddReadiness(name string, fn func(context.Context) error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.checks = append(e.checks, health.Check{Name: name, Func: fn})
}

// Main loads cfg, sets everything up, calls run, and returns the process exit
// code. setup runs before the health server starts so it can add readiness
// checks; run blocks until ctx ends. With the one argument HealthcheckArg it
// asks the running service's /healthz instead (a container's HEALTHCHECK).
func Main(name string, cfg Config, run func(ctx context.Context, env *Env) error) int {
	if len(os.Args) == 2 && os.Args[1] == HealthcheckArg {
		return runHealthcheck(name)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := Run(ctx, name, cfg, run); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// Run is Main without the process concerns, for tests.
func Run(ctx context.Context, name string, cfg Config, run func(ctx context.Context, env *Env) error) error {
	if err := config.Load(cfg, nil); err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	c := cfg.common()
	tel, err := setupTelemetry(ctx, name, c)
	if err != nil {
		return err
	}
	defer func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(sctx)
	}()
	log := tel.Logger
	log.Info("starting", config.Attrs(cfg)...)
	b, err := connect(ctx, name, c, tel)
	if err != nil {
		return err
	}
	defer b.Close()
	env := &Env{Bus: b, Telemetry: tel, Logger: log, Replicas: max(c.StreamReplicas, 1)}
	env.AddReadiness("nats", func(context.Context) error {
		if !b.Conn().IsConnected() {
			return errors.New("not connected")
		}
		return nil
	})
	env.AddReadiness("start", func(context.Context) error {
		if !env.started.Load() {
			return errors.New("starting")
		}
		return nil
	})
	hs, err := serveHealth(c, env)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return hs.Run(gctx) })
	g.Go(func() error {
		err := run(gctx, env)
		if err == nil && gctx.Err() == nil {
			err = errors.New("stopped unexpectedly")
		}
		return err
	})
	err = g.Wait()
	log.Info("stopped", "err", err)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}
