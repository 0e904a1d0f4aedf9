package abusesuite_test

import (
	"reflect"
	"strings"
	"testing"

	"github.com/novaflow/nova/pkg/config"
	"github.com/novaflow/nova/services/sandbox/abusesuite"
	"github.com/novaflow/nova/services/sandbox/service"
)

// Each mode's environment is its runner configuration as the sandbox
// service reads it.
func TestModeEnvIsItsConfig(t *testing.T) {
	settings := map[string]bool{}
	typ := reflect.TypeFor[service.Config]()
	for i := range typ.NumField() {
		settings[typ.Field(i).Tag.Get("env")] = true
	}
	for _, m := range abusesuite.Modes {
		env := map[string]string{}
		for _, kv := range m.Env() {
			k, v, _ := strings.Cut(kv, "=")
			if k != "OPENAI_API_KEY" && !settings[k] {
				t.Errorf("%s: %s is no setting of the sandbox service", m.Name, k)
			}
			env[k] = v
		}
		if env["OPENAI_API_KEY"] != abusesuite.Secret {
			t.Errorf("%s: OPENAI_API_KEY=%q, want the secret", m.Name, env["OPENAI_API_KEY"])
		}
		var cfg service.Config
		if err := config.Load(&cfg, func(k string) string { return env[k] }); err != nil {
			t.Fatal(err)
		}
		want := m.Config()
		// The service runs cold unless Warm; its LightZygotes counts light
		// zygotes beside the full ones, 0 for none.
		zygotes, light := 0, 0
		if cfg.Warm {
			zygotes, light = cfg.Zygotes, cfg.LightZygotes
		}
		for _, c := range []struct {
			name      string
			got, want int64
		}{
			{"memory", cfg.MemoryBytes, want.MemoryBytes},
			{"disk", cfg.DiskBytes, want.DiskBytes},
			{"processes", cfg.MaxProcesses, want.MaxProcesses},
			{"output kept", cfg.MaxOutputBytes, want.MaxOutputBytes},
			{"output limit", cfg.OutputLimitBytes, want.OutputLimitBytes},
			{"workers", int64(cfg.RunWorkers()), abusesuite.Workers},
			{"full zygotes", int64(zygotes), int64(want.Zygotes)},
			{"all zygotes", int64(zygotes + light), int64(m.ZygoteCount())},
		} {
			if c.got != c.want {
				t.Errorf("%s: %s %d, want %d", m.Name, c.name, c.got, c.want)
			}
		}
	}
}
