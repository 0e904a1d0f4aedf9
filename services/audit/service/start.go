package service

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/service"
)

// Config is the audit service's configuration as its binary and nova dev
// read it from the environment.
type Config struct {
	// MongoURI and Database are the store the chain of work is written to.
	MongoURI string `env:"MONGODB_URI"`
	// Database is the store's database.
	Database string `env:"MONGODB_DATABASE" default:"nova"`
	// Workers is how many events a batch may hold.
	Workers int `env:"NOVA_WORKERS" default:"8"`
	// KeepEnded is how long an ended execution's events stay in NOVA_EVT.
	KeepEnded time.Duration `env:"NOVA_KEEP_ENDED_EVENTS" default:"30s"`
	// Retention is how long an ended execution's chain of work is kept
	// after its end (empty or 0: for ever). On MongoDB TTL indexes delete
	// it, on FerretDB the audit service.
	Retention time.Duration `env:"NOVA_AUDIT_RETENTION"`
}

// StartOption gives Start what its caller already holds.
type StartOption func(*Deps)

// WithStore writes to st instead of opening Config.MongoURI (nova dev
// shares one store among its modules).
func WithStore(st *chainstore.Store) StartOption { return func(d *Deps) { d.Store = st } }

// WithSweepEvery looks for executions past the retention this often
// instead of a tenth of it (tests that wait for a sweep).
func WithSweepEvery(d time.Duration) StartOption { return func(deps *Deps) { deps.SweepEvery = d } }

// WithPurgeEvery purges the events stream this often instead of every
// PurgeEvery (tests that wait for a purge).
func WithPurgeEvery(d time.Duration) StartOption { return func(deps *Deps) { deps.PurgeEvery = d } }

// Service is an audit service whose store is open and whose consumer is
// declared.
type Service struct {
	deps  Deps
	close func()
}

// Start builds the audit service in env from cfg: its store (with its
// indexes) and its consumer of the events stream, declared before it
// returns. The audit binary and nova dev start it this way.
func Start(ctx context.Context, cfg Config, env *service.Env, opts ...StartOption) (*Service, error) {
	if cfg.KeepEnded <= 0 {
		return nil, fmt.Errorf("NOVA_KEEP_ENDED_EVENTS=%v: must be a positive duration (how long an ended execution's events stay)", cfg.KeepEnded)
	}
	if cfg.Retention < 0 {
		return nil, fmt.Errorf("NOVA_AUDIT_RETENTION=%v: must be a positive duration (how long an ended execution's chain of work is kept), or empty to keep it for ever", cfg.Retention)
	}
	s := &Service{deps: Deps{Bus: env.Bus, Logger: env.Logger, Workers: cfg.Workers, KeepEnded: cfg.KeepEnded,
		Retention: cfg.Retention}, close: func() {}}
	for _, opt := range opts {
		opt(&s.deps)
	}
	if s.deps.Store == nil {
		if cfg.MongoURI == "" {
			return nil, errors.New("MONGODB_URI is required: the store the chain of work is written to")
		}
		st, err := chainstore.Open(ctx, cfg.MongoURI, cfg.Database)
		if err != nil {
			return nil, err
		}
		env.AddReadiness("mongodb", st.Ping)
		s.deps.Store = st
		s.close = func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = st.Close(cctx)
		}
	}
	if s.deps.Outage == nil {
		s.deps.Outage = NewOutage(s.deps.Store)
	}
	// While the store does not answer, the service is not ready and says
	// why; it stays alive (a restart would not bring the store back).
	env.AddReadiness("chain-of-work store", func(context.Context) error { return s.deps.Outage.Err() })
	env.AddDegraded("chain-of-work store", s.deps.Outage.Err)
	err := env.Bus.EnsureStreams(ctx)
	if err == nil {
		err = s.deps.Store.EnsureIndexes(ctx)
	}
	if err == nil {
		_, err = env.Bus.DeclareConsumer(ctx, ConsumerSpec(cfg.Workers))
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

// Run records events until ctx ends, then closes the store it opened.
func (s *Service) Run(ctx context.Context) error {
	defer s.close()
	return Run(ctx, s.deps)
}
