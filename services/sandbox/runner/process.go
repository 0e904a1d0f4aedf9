package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	defer func() {
		if err := removeTree(dir); err != nil {
			r.cfg.Logger.Warn("sandbox dir not removed", "sandbox_id", j.id, "dir", dir, "err", err)
		}
	}()
	tmp := filepath.Join(dir, "tmp")
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return outcome{}, fmt.Errorf("prepare process: %w", err)
	}
	if r.cred != nil {
		if err := os.Lchown(tmp, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			return outcome{}, fmt.Errorf("prepare process: %w", err)
		}
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
