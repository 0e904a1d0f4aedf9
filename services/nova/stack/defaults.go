package stack

import (
	_ "embed"
	"os"
	"path/filepath"

	"github.com/novaflow/nova/pkg/llm/scripted"
)

// defaultRules are the scripted model's rules built into nova (also at
// examples/scripted-llm.yaml), so that a nova binary installed anywhere
// answers AI nodes offline, labelled SCRIPTED, when no model is configured.
//
//go:embed scripted-llm.yaml
var defaultRules []byte

// DefaultRules parses the built-in scripted model rules.
func DefaultRules() (scripted.Rules, error) { return scripted.ParseRules(defaultRules) }

// NodeModulesEnv names a node_modules directory holding the JavaScript
// runtime's packages (axios, cheerio), as for the sandbox service.
const NodeModulesEnv = "NOVA_SANDBOX_NODE_MODULES"

// FindNodeModules locates the JavaScript runtime's packages: $NOVA_SANDBOX_NODE_MODULES,
// else next to the nova binary (node_modules or ../lib/nova/node_modules),
// else services/sandbox/jsrunner/runtime/node_modules from the working
// directory upwards (a checkout after make deps). "" when none is found.
func FindNodeModules() string {
	if p := os.Getenv(NodeModulesEnv); p != "" {
		return p
	}
	var candidates []string
	if exe, err := os.Executable(); err == nil {
		if exe, err = filepath.EvalSymlinks(exe); err == nil {
			dir := filepath.Dir(exe)
			candidates = append(candidates, filepath.Join(dir, "node_modules"), filepath.Join(dir, "..", "lib", "nova", "node_modules"))
		}
	}
	if dir, err := os.Getwd(); err == nil {
		for range 6 {
			candidates = append(candidates, filepath.Join(dir, "services", "sandbox", "jsrunner", "runtime", "node_modules"))
			dir = filepath.Dir(dir)
		}
	}
	for _, p := range candidates {
		if st, err := os.Stat(filepath.Join(p, "axios")); err == nil && st.IsDir() {
			return p
		}
	}
	return ""
}
