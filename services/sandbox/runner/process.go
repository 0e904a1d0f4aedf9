package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/novaflow/nova/services/sandbox/isolation"
)

// runProcess runs the program as a plain python3 subprocess of the service:
// the same runner.py, protocol and rlimits, but NO ISOLATION - no namespaces,
// the host's file system and network, the service's user. It exists for
// machines without user namespaces and is chosen only by Config.Backend.
func (r *Runner) runProcess(ctx context.Context, j *job) (outcome, error) {
	dir, err := r.prepare(j)
	if err != nil {
		return outcome{}, fmt.Errorf("prepare process: %w", err)
	}
	defer r.removeDir(j.id, dir)
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return outcome{}, fmt.Errorf("prepare process: %w", err)
	}
	if err := isolation.Chown(r.cred, tmp); err != nil {
		return outcome{}, fmt.Errorf("prepare process: %w", err)
	}
	in := filepath.Join(dir, "in")
	config := j.limits.config(j.id, j.broker != nil)
	config["code"], config["context"] = filepath.Join(in, "code.py"), filepath.Join(in, "context.json")
	text, err := json.Marshal(config)
	if err != nil {
		return outcome{}, err
	}
	return r.execute(ctx, j, r.cfg.Python, []string{filepath.Join(in, "runner.py"), "run", string(text)}, tmp, false)
}
