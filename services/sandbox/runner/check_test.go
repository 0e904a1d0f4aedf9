package runner

import (
	"strings"
	"testing"
)

// Where bubblewrap builds sandboxes (this machine: make deps-check says
// so) the check passes; the process backend has nothing to check. (A
// container that refuses a sandbox: make images-test.)
func TestCheckIsolation(t *testing.T) {
	if err := newTestRunner(t, Config{}).CheckIsolation(t.Context()); err != nil {
		t.Fatalf("on a host whose bubblewrap works: %v", err)
	}
	if err := newTestRunner(t, Config{Backend: BackendProcess}).CheckIsolation(t.Context()); err != nil {
		t.Errorf("the process backend has nothing to check: %v", err)
	}
}

// Each message bubblewrap gives when a container or host refuses what it
// needs names what to allow.
func TestIsolationHint(t *testing.T) {
	for msg, want := range map[string]string{
		"bwrap: Can't mount proc on /newroot/proc: Operation not permitted":                                                        "procMount: Unmasked",
		"bwrap: No permissions to creating new namespace, likely because the kernel does not allow non-privileged user namespaces": "user.max_user_namespaces",
		"bwrap: Creating new namespace failed: Operation not permitted":                                                            "seccomp and AppArmor",
		"bwrap: setting up uid map: Permission denied":                                                                             "unprivileged user namespaces",
		"bwrap: Can't set hostname to nova-sandbox: Operation not permitted":                                                       "seccomp=unconfined",
		"bwrap: something else": "sandbox-privileges.md",
	} {
		if got := isolationHint(msg); !strings.Contains(got, want) {
			t.Errorf("%q: %q, want it to say %q", msg, got, want)
		}
	}
}
