package abusesuite

import (
	"fmt"

	"github.com/novaflow/nova/services/sandbox/runner"
)

// Secret is the value of OPENAI_API_KEY in the sandbox service's
// environment: no program may see it, and no result may carry it.
const Secret = "sk-test-abuse-4f1c9e"

// Workers is how many programs the service runs at once; "two executions
// at once" needs two.
const Workers = 2

// Limits are the runner's limits the cases expect.
func Limits() runner.Config {
	return runner.Config{
		MemoryBytes:      256 << 20,
		DiskBytes:        16 << 20,
		MaxProcesses:     64,
		MaxOutputBytes:   64 << 10,
		OutputLimitBytes: 8 << 20,
	}
}

// Mode is one way the runner runs programs.
type Mode struct {
	Name string
	// Zygotes and LightZygotes as runner.Config has them: 0 zygotes is
	// cold; 0 light zygotes beside full ones is the default (one), <0 none.
	Zygotes, LightZygotes int
}

// Modes: "cold" starts a bubblewrap per program; "warm" runs what imports
// only standard modules (most of the abuse) on its light zygote, the rest
// on full ones; "warm-full" everything on full ones.
var (
	ColdMode     = Mode{"cold", 0, 0}
	WarmMode     = Mode{"warm", 2, 0}
	WarmFullMode = Mode{"warm-full", 2, -1}
	Modes        = []Mode{ColdMode, WarmMode, WarmFullMode}
)

// Warm says programs run on zygotes.
func (m Mode) Warm() bool { return m.Zygotes > 0 }

// ZygoteCount is how many zygotes, full and light, the runner keeps.
func (m Mode) ZygoteCount() int {
	switch {
	case m.Zygotes == 0:
		return 0
	case m.LightZygotes == 0:
		return m.Zygotes + 1
	default:
		return m.Zygotes + max(m.LightZygotes, 0)
	}
}

// Config is the runner's configuration in this mode with Limits.
func (m Mode) Config() runner.Config {
	cfg := Limits()
	cfg.Zygotes, cfg.LightZygotes = m.Zygotes, m.LightZygotes
	return cfg
}

// Env is the sandbox service's environment (services/sandbox/service.Config)
// for this mode: Limits, Workers and Secret.
func (m Mode) Env() []string {
	l := Limits()
	env := []string{
		"OPENAI_API_KEY=" + Secret,
		fmt.Sprint("NOVA_SANDBOX_WORKERS=", Workers),
		fmt.Sprint("NOVA_SANDBOX_MEMORY_BYTES=", l.MemoryBytes),
		fmt.Sprint("NOVA_SANDBOX_DISK_BYTES=", l.DiskBytes),
		fmt.Sprint("NOVA_SANDBOX_MAX_PROCESSES=", l.MaxProcesses),
		fmt.Sprint("NOVA_SANDBOX_MAX_OUTPUT_BYTES=", l.MaxOutputBytes),
		fmt.Sprint("NOVA_SANDBOX_OUTPUT_LIMIT_BYTES=", l.OutputLimitBytes),
	}
	if !m.Warm() {
		return append(env, "NOVA_SANDBOX_WARM=false")
	}
	// The service's setting counts light zygotes from 0 (none), the
	// runner's from -1.
	return append(env, "NOVA_SANDBOX_WARM=true", fmt.Sprint("NOVA_SANDBOX_ZYGOTES=", m.Zygotes),
		fmt.Sprint("NOVA_SANDBOX_LIGHT_ZYGOTES=", m.ZygoteCount()-m.Zygotes))
}
