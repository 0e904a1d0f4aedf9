package gateway

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
)

// Config is the gateway's configuration as the gateway binary and nova dev
// read it from the environment.
type Config struct {
	// Addr is where the HTTP API listens (port 0 picks a free one).
	Addr string `env:"GATEWAY_ADDR" default:":8000"`
	// MongoURI and Database are the audit store whose chain of work the
	// gateway reads.
	MongoURI string `env:"MONGODB_URI"`
	// Database is the store's database.
	Database string `env:"MONGODB_DATABASE" default:"nova"`
	// KeysFile lists the accepted API keys by their SHA-256.
	KeysFile string `env:"NOVA_GATEWAY_KEYS_FILE"`
	// NoAuth serves every request without a key, for local development.
	NoAuth bool `env:"NOVA_GATEWAY_NO_AUTH"`
	// ValueThreshold is the size in bytes over which an initial context
	// value goes to the value store and travels by reference.
	ValueThreshold int `env:"NOVA_VALUE_REF_THRESHOLD" default:"262144"`
	Settings
}

// StartOption gives Start what its caller already holds.
type StartOption func(*startOptions)

type startOptions struct {
	store  ChainReader
	keys   *Keys
	limits *Limits
}

// WithStore reads the chain of work from r instead of opening
// Config.MongoURI (nova dev shares one store among its modules).
func WithStore(r ChainReader) StartOption { return func(o *startOptions) { o.store = r } }

// WithKeys accepts keys instead of those of Config.KeysFile.
func WithKeys(k *Keys) StartOption { return func(o *startOptions) { o.keys = k } }

// WithLimits sets every limit, those the settings do not name included
// (Limits.Timeout, Limits.StreamTimeout); zero ones take their defaults.
func WithLimits(l Limits) StartOption { return func(o *startOptions) { o.limits = &l } }

// Service is a gateway listening on its address.
type Service struct {
	gw    *Gateway
	ln    net.Listener
	srv   *http.Server
	wait  time.Duration
	close func()
}

// Start builds the gateway in env from cfg and listens: the API answers at
// URL as soon as Run is called. The gateway binary and nova dev start it
// this way. The gateway is a producer: it declares no stream (its NATS user
// may not) and opens the value store as it is.
func Start(ctx context.Context, cfg Config, env *service.Env, opts ...StartOption) (*Service, error) {
	var o startOptions
	for _, opt := range opts {
		opt(&o)
	}
	keys := o.keys
	switch {
	case keys != nil || cfg.NoAuth:
		// New warns that authentication is off.
	case cfg.KeysFile == "":
		return nil, errors.New("NOVA_GATEWAY_KEYS_FILE is required (or NOVA_GATEWAY_NO_AUTH=true for local development)")
	default:
		var err error
		if keys, err = LoadKeys(cfg.KeysFile); err != nil {
			return nil, err
		}
		env.Logger.Info("API keys loaded", "keys", keys.Len())
	}
	values, err := valueref.Open(ctx, env.Bus.JetStream(), cfg.ValueThreshold, 0)
	if err != nil {
		return nil, err
	}
	limits := cfg.Limits()
	if o.limits != nil {
		limits = *o.limits
	}
	s := &Service{close: func() {}, wait: cmp.Or(limits.MaxWait, DefaultMaxWait)}
	chain := o.store
	if chain == nil {
		if cfg.MongoURI == "" {
			return nil, errors.New("MONGODB_URI is required: the audit store whose chain of work the gateway reads")
		}
		st, err := chainstore.Open(ctx, cfg.MongoURI, cfg.Database)
		if err != nil {
			return nil, err
		}
		env.AddReadiness("mongodb", st.Ping)
		chain = st
		s.close = func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = st.Close(cctx)
		}
	}
	tel := env.Telemetry
	s.gw, err = New(Deps{
		Bus: env.Bus, Store: chain, Values: values, Keys: keys, NoAuth: cfg.NoAuth && o.keys == nil, Logger: env.Logger,
		TracerProvider: tel.TracerProvider, MeterProvider: tel.MeterProvider,
		Limits: limits, CORSOrigins: cfg.Origins(), JaegerURL: cfg.JaegerURL,
	})
	if err != nil {
		s.close()
		return nil, err
	}
	if s.ln, err = net.Listen("tcp", cfg.Addr); err != nil {
		s.close()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	s.srv = s.gw.Server()
	env.Logger.Info("serving the HTTP API", "addr", s.ln.Addr().String())
	return s, nil
}

// URL is where the API answers.
func (s *Service) URL() string { return "http://" + s.ln.Addr().String() }

// Run serves until ctx ends, then lets the requests in hand finish (a wait
// included, bounded) and closes.
func (s *Service) Run(ctx context.Context) error {
	defer s.close()
	served := make(chan error, 1)
	go func() { served <- s.srv.Serve(s.ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.wait+5*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(sctx); err != nil {
		_ = s.srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ctx.Err()
}
