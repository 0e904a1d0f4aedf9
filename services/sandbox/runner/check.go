package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/novaflow/nova/services/sandbox/isolation"
)

// ErrIsolation means bubblewrap cannot build a program's sandbox where the
// service runs: no program could run, so the service does not start.
var ErrIsolation = errors.New("the sandbox cannot isolate programs here")

// CheckIsolation starts Python once in a sandbox as every program gets one
// (new namespaces of every kind, a fresh /proc, no capabilities, the
// system read-only) and fails with ErrIsolation, bubblewrap's own message
// and what the host or container must allow, when it cannot. A backend
// other than bubblewrap has nothing to check.
func (r *Runner) CheckIsolation(ctx context.Context) error {
	if r.cfg.Backend != BackendBwrap {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	// /usr stands in for the program's directory: any the sandbox user
	// can read is mounted the same way.
	args := isolation.Sandbox{System: r.mounts, InfoFD: -1, In: "/usr", DiskBytes: 1 << 20}.Args()
	args = append(args, "--", r.cfg.Python, "-S", "-c", "")
	cmd := exec.CommandContext(ctx, r.cfg.Bwrap, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: r.cred, Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(out.String())
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("%w: %s --unshare-all --proc /proc ... %s: %s%s", ErrIsolation, r.cfg.Bwrap, r.cfg.Python, msg, isolationHint(msg))
	}
	return nil
}

// isolationHint says, for bubblewrap's message, what the host or the
// container must allow (docs/operations/sandbox-privileges.md).
func isolationHint(msg string) string {
	switch {
	case strings.Contains(msg, "Can't mount proc"):
		return " (the container's /proc is masked, and bubblewrap mounts a fresh one for each program: " +
			"on Kubernetes set procMount: Unmasked with hostUsers: false; with podman or docker run with " +
			"--security-opt unmask=ALL, or systempaths=unconfined)"
	case strings.Contains(msg, "Can't set hostname"):
		return " (the container's seccomp profile refuses sethostname, which bubblewrap calls in each " +
			"program's own UTS namespace (and unshare and mount): on Kubernetes seccompProfile Unconfined, or a " +
			"Localhost profile that allows them; with podman or docker --security-opt seccomp=unconfined)"
	case strings.Contains(msg, "No permissions to creat"), strings.Contains(msg, "Creating new namespace failed"),
		strings.Contains(msg, "setting up uid map"), strings.Contains(msg, "unshare"):
		return " (new user namespaces are refused: the host must allow unprivileged user namespaces " +
			"(user.max_user_namespaces > 0; on Ubuntu 24.04 kernel.apparmor_restrict_unprivileged_userns=0) and the " +
			"container's seccomp and AppArmor profiles must allow unshare and mount (Unconfined, or a Localhost profile that adds them))"
	default:
		return " (see docs/operations/sandbox-privileges.md)"
	}
}
