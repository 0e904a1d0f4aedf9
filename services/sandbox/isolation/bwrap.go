package isolation

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// SystemMounts mounts /usr and what lives beside it read-only. On merged-/usr
// systems /bin, /lib... are symlinks and are recreated as such. Of /etc only the
// public parts are mounted (no passwd, shadow or private keys): those every
// runtime needs and etc, the files a runtime needs besides, each if it exists.
func SystemMounts(etc ...string) ([]string, error) {
	args := []string{"--ro-bind", "/usr", "/usr"}
	for _, p := range []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"} {
		fi, err := os.Lstat(p)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("inspect %s: %w", p, err)
		case fi.Mode()&os.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return nil, fmt.Errorf("read link %s: %w", p, err)
			}
			args = append(args, "--symlink", target, p)
		case fi.IsDir():
			args = append(args, "--ro-bind", p, p)
		}
	}
	public := []string{
		"/etc/alternatives",
		"/etc/ssl/certs",
		"/etc/ssl/openssl.cnf",
		"/etc/ca-certificates",
		"/etc/localtime",
		"/etc/ld.so.cache",
	}
	for _, p := range append(public, etc...) {
		args = append(args, "--ro-bind-try", p, p)
	}
	return args, nil
}

// Sandbox is the bubblewrap sandbox of one execution.
type Sandbox struct {
	// InfoFD is the descriptor on which bwrap reports the sandbox's pid 1 (see
	// PID1.ReadInfo); -1: none.
	InfoFD int
	// System holds the mounts of the system (SystemMounts).
	System []string
	// In is the host directory mounted read-only at /nova: the runner, the code
	// and its context.
	In string
	// Binds are more bwrap mount arguments, applied after /nova.
	Binds []string
	// DiskBytes is the size of the private /tmp (a tmpfs), the working directory.
	DiskBytes int64
	// Env is the whole environment of the program.
	Env []string
}

// Args are bwrap's arguments up to the "--" before the program: new namespaces
// of every kind, no capabilities, the sandbox dying with the service, and the
// file system and environment of s.
func (s Sandbox) Args() []string {
	args := []string{
		"--unshare-all",
		"--die-with-parent",
		"--new-session",
		"--cap-drop", "ALL",
		"--hostname", "nova-sandbox",
	}
	if s.InfoFD >= 0 {
		args = append(args, "--info-fd", strconv.Itoa(s.InfoFD))
	}
	args = append(args, s.System...)
	args = append(args,
		"--proc", "/proc",
		"--dev", "/dev",
		"--ro-bind", s.In, "/nova",
	)
	args = append(args, s.Binds...)
	args = append(args,
		"--size", strconv.FormatInt(s.DiskBytes, 10), "--tmpfs", "/tmp",
		"--chdir", "/tmp",
	)
	return append(args, EnvArgs(s.Env)...)
}

// EnvArgs are bwrap's arguments that make env ("KEY=value" entries) the whole
// environment of the program.
func EnvArgs(env []string) []string {
	args := []string{"--clearenv"}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		args = append(args, "--setenv", k, v)
	}
	return args
}
