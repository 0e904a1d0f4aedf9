// Package isolationtest helps the tests of the sandbox runtimes.
package isolationtest

import (
	"fmt"
	"os"
	"sync/atomic"
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

var markers atomic.Int64

// SleepMarker returns an argument for sleep, seconds and a fraction, that
// only the sleeps the caller starts with it have on their command line: the
// fraction's digits are this test process's pid, seven digits, then a count
// of the markers it gave, six digits (so that no marker is the start of
// another). A test that looks for `sleep <marker>` among the host's
// processes then finds its own only, whatever other tests, or other copies
// of itself, run beside it.
func SleepMarker(seconds int) string {
	return fmt.Sprintf("%d.%07d%06d", seconds, os.Getpid(), markers.Add(1))
}
