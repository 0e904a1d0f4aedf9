// Package isolationtest helps the tests of the sandbox runtimes.
package isolationtest

import (
	"os"
	"testing"
)

// WorkDir returns a private work dir for a runtime's per-execution directories,
// searchable by the unprivileged sandbox user bwrap runs as under root. When the
// test ends it fails the test for every per-execution directory left behind,
// then removes the work dir.
func WorkDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "nova-sandbox-test-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		left, _ := os.ReadDir(dir)
		for _, e := range left {
			t.Errorf("per-execution dir left behind: %s", e.Name())
		}
		_ = os.RemoveAll(dir)
	})
	return dir
}
