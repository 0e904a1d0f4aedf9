// Package isolation holds what the sandbox runtimes (runner for Python, jsrunner
// for JavaScript) share to run a program in bubblewrap: the user the sandbox
// runs as, the per-execution directories on the host, bwrap's arguments for the
// system and the sandbox's own file system, and the sandbox's pid 1 held as a
// pidfd so that no process of a run outlives it.
package isolation

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Nobody is the default uid and gid of the sandbox when the service runs as root.
const Nobody = 65534

// Credential is the user bwrap is started as: uid and gid when the service runs
// as root, so that the sandbox is not host root even inside its user namespace;
// nil (the service's own user) otherwise, or when either is negative.
func Credential(uid, gid int) *syscall.Credential {
	if os.Geteuid() != 0 || uid < 0 || gid < 0 {
		return nil
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}

// CheckWorkDir fails unless dir is a directory in which the sandbox user (cred;
// nil: the service's own) can reach the per-execution directories.
func CheckWorkDir(dir string, cred *syscall.Credential) error {
	if fi, err := os.Stat(dir); err != nil {
		return fmt.Errorf("work dir: %w", err)
	} else if !fi.IsDir() {
		return fmt.Errorf("work dir %q is not a directory", dir)
	}
	if cred == nil {
		return nil
	}
	if err := CheckSearchable(dir, cred); err != nil {
		return fmt.Errorf("work dir: %w", err)
	}
	return nil
}

// CheckSearchable fails when the sandbox user could not reach dir: bwrap runs as
// that user and must find what it mounts.
func CheckSearchable(dir string, cred *syscall.Credential) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return fmt.Errorf("path %q: %w", dir, err)
	}
	for p := abs; ; p = filepath.Dir(p) {
		var st syscall.Stat_t
		if err := syscall.Stat(p, &st); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		perm := st.Mode & 0o777
		ok := perm&0o001 != 0 ||
			(st.Uid == cred.Uid && perm&0o100 != 0) ||
			(st.Gid == cred.Gid && perm&0o010 != 0)
		if !ok {
			return fmt.Errorf("%q: %s (mode %o) is not searchable by sandbox user %d; allow it (chmod o+x) or choose another directory", dir, p, perm, cred.Uid)
		}
		if p == "/" {
			return nil
		}
	}
}

// Chown hands paths to the sandbox user (cred; nil leaves them to the service's
// own), without following symbolic links.
func Chown(cred *syscall.Credential, paths ...string) error {
	if cred == nil {
		return nil
	}
	for _, p := range paths {
		if err := os.Lchown(p, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	return nil
}

// RemoveTree removes dir even when the code left directories without write or
// search permission in it.
func RemoveTree(dir string) error {
	if err := os.RemoveAll(dir); err == nil {
		return nil
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			_ = os.Chmod(p, 0o700)
		}
		return nil
	})
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}
