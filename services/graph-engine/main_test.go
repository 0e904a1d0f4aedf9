package main

import (
	"testing"

	envconfig "github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/services/graph-engine/engine"
)

// The binary's default for NOVA_KEEP_ENDED_STATE (a struct tag, which
// cannot name the constant) is the engine's DefaultKeepEnded, which nova dev
// uses and the README gives.
func TestKeepEndedDefault(t *testing.T) {
	var cfg config
	if err := envconfig.Load(&cfg, func(string) string { return "" }); err != nil {
		t.Fatal(err)
	}
	if cfg.KeepEnded != engine.DefaultKeepEnded {
		t.Errorf("NOVA_KEEP_ENDED_STATE defaults to %v, the engine's DefaultKeepEnded is %v", cfg.KeepEnded, engine.DefaultKeepEnded)
	}
}
