// Command audit persists NOVA's chain of work to MongoDB.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/service"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

type config struct {
	service.Common
	auditservice.Config
}

func main() {
	var cfg config
	os.Exit(service.Main("audit", &cfg, func(ctx context.Context, env *service.Env) error {
		s, err := auditservice.Start(ctx, cfg.Config, env)
		if err != nil {
			return err
		}
		env.Started()
		return s.Run(ctx)
	}))
}
