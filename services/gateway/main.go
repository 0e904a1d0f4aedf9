// Command gateway is NOVA's HTTP API: it starts workflows and reads
// executions and their chain of work (see package gateway).
package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/services/audit/store"
	"github.com/novaflow/nova/services/gateway/gateway"
)

type config struct {
	service.Common
	Addr           string `env:"GATEWAY_ADDR" default:":8000"`
	MongoURI       string `env:"MONGODB_URI" required:"true"`
	Database       string `env:"MONGODB_DATABASE" default:"nova"`
	KeysFile       string `env:"NOVA_GATEWAY_KEYS_FILE"`
	NoAuth         bool   `env:"NOVA_GATEWAY_NO_AUTH"`
	ValueThreshold int    `env:"NOVA_VALUE_REF_THRESHOLD" default:"262144"`
	gateway.Settings
}

func main() {
	var cfg config
	os.Exit(service.Main("gateway", &cfg, func(ctx context.Context, env *service.Env) error {
		return run(ctx, env, cfg)
	}))
}

func run(ctx context.Context, env *service.Env, cfg config) error {
	log := env.Logger
	var keys *gateway.Keys
	switch {
	case cfg.NoAuth:
		// gateway.New warns that authentication is off.
	case cfg.KeysFile == "":
		return errors.New("NOVA_GATEWAY_KEYS_FILE is required (or NOVA_GATEWAY_NO_AUTH=true for local development)")
	default:
		var err error
		if keys, err = gateway.LoadKeys(cfg.KeysFile); err != nil {
			return err
		}
		log.Info("API keys loaded", "keys", keys.Len())
	}
	// The gateway is a producer: it declares no stream (its NATS user may
	// not), and opens the value store as it is, never changing its replicas.
	values, err := valueref.Open(ctx, env.Bus.JetStream(), cfg.ValueThreshold, 0)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.MongoURI, cfg.Database)
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = st.Close(cctx)
	}()
	env.AddReadiness("mongodb", st.Ping)

	gw, err := gateway.New(gateway.Deps{
		Bus: env.Bus, Store: st, Values: values, Keys: keys, NoAuth: cfg.NoAuth, Logger: log,
		TracerProvider: env.Telemetry.TracerProvider, MeterProvider: env.Telemetry.MeterProvider,
		Limits: cfg.Limits(), CORSOrigins: cfg.Origins(), JaegerURL: cfg.JaegerURL,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	srv := gw.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	log.Info("serving the HTTP API", "addr", ln.Addr().String())

	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Let requests in hand finish (a wait included), then stop.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.MaxWait+5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return ctx.Err()
}
