// Command input-analyzer runs NOVA's input analyzer: for each AI node it
// decides whether the data must be analysed before the task code is written.
package main

import (
	"context"
	"os"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/services/input-analyzer/analyzer"
)

type config struct {
	service.Common
	analyzer.Config
}

func main() {
	var cfg config
	os.Exit(service.Main(bus.AgentInputAnalyzer, &cfg, func(ctx context.Context, env *service.Env) error {
		s, err := analyzer.Start(ctx, cfg.Config, env)
		if err != nil {
			return err
		}
		env.Started()
		return s.Run(ctx)
	}))
}
