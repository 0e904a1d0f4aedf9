// Command audit persists NOVA's chain of work to MongoDB.
package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/novaflow/nova/pkg/service"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/audit/store"
)

type config struct {
	service.Common
	MongoURI string `env:"MONGODB_URI" required:"true"`
	Database string `env:"MONGODB_DATABASE" default:"nova"`
	Workers  int    `env:"NOVA_WORKERS" default:"8"`
	// KeepEnded is how long an ended execution's events stay in NOVA_EVT.
	KeepEnded time.Duration `env:"NOVA_KEEP_ENDED_EVENTS" default:"30s"`
}

func main() {
	var cfg config
	os.Exit(service.Main("audit", &cfg, func(ctx context.Context, env *service.Env) error {
		if cfg.KeepEnded <= 0 {
			return fmt.Errorf("NOVA_KEEP_ENDED_EVENTS=%v: must be a positive duration (how long an ended execution's events stay)", cfg.KeepEnded)
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
		return auditservice.Run(ctx, auditservice.Deps{Bus: env.Bus, Store: st, Logger: env.Logger, Workers: cfg.Workers,
			KeepEnded: cfg.KeepEnded})
	}))
}
