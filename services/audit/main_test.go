package main

import (
	"testing"

	envconfig "github.com/novaflow/nova/pkg/config"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

// The audit binary's default for NOVA_KEEP_ENDED_EVENTS (a struct tag,
// which cannot name the constant) is the service's KeepEnded, which nova dev
// uses and docs/reference/configuration.md gives.
func TestKeepEndedDefault(t *testing.T) {
	var cfg config
	err := envconfig.Load(&cfg, func(name string) string {
		if name == "MONGODB_URI" {
			return "mongodb://127.0.0.1:27017"
		}
		return ""
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KeepEnded != auditservice.KeepEnded {
		t.Errorf("NOVA_KEEP_ENDED_EVENTS defaults to %v, the service's KeepEnded is %v", cfg.KeepEnded, auditservice.KeepEnded)
	}
}
