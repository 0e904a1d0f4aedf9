package engine

import (
	"runtime"
	"testing"

	"github.com/novaflow/nova/pkg/config"
)

// The engine's consumers handle two events at once per CPU the process may
// use, at least 8, unless NOVA_WORKERS says how many; the settings pass
// NOVA_WORKERS on as it is.
func TestWorkersFollowCPUs(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct{ cpus, set, want int }{
		{1, 0, 8}, {4, 0, 8}, {6, 0, 12}, {16, 0, 32}, {16, 3, 3},
	} {
		runtime.GOMAXPROCS(tc.cpus)
		cfg := Config{Workers: tc.set}.withDefaults()
		var commands, results int
		e := &Engine{cfg: cfg}
		for _, c := range e.consumers() {
			switch c.Durable {
			case ConsumerCommands:
				commands = c.Workers
			case ConsumerResults:
				results = c.Workers
			}
		}
		if commands != tc.want || results != tc.want {
			t.Errorf("%d CPUs, NOVA_WORKERS %d: commands %d, results %d workers; want %d", tc.cpus, tc.set, commands, results, tc.want)
		}
	}
	var s Settings
	if err := config.Load(&s, func(k string) string {
		if k == "NOVA_WORKERS" {
			return "5"
		}
		return ""
	}); err != nil {
		t.Fatal(err)
	}
	if cfg, err := s.Config(1); err != nil || cfg.withDefaults().Workers != 5 || s.RunWorkers() != 5 {
		t.Errorf("NOVA_WORKERS=5: %d workers (RunWorkers %d), %v", cfg.withDefaults().Workers, s.RunWorkers(), err)
	}
	if d := DefaultSettings(); d.Workers != 0 || d.RunWorkers() != DefaultWorkers() {
		t.Errorf("NOVA_WORKERS unset: %d (RunWorkers %d), want 0 (two per CPU: %d)", d.Workers, d.RunWorkers(), DefaultWorkers())
	}
}
