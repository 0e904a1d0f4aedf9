package engine

import (
	"testing"

	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/runtimeinfo"
)

// The fingerprint the engine keys the code cache with follows the runtime
// description it is given: hashed once per description, never stale.
func TestFingerprintFollowsTheRuntimeDescription(t *testing.T) {
	c := &codeCache{}
	old := &runtimeinfo.Info{Python: "3.11.2", Modules: []string{"json"}}
	upgraded := &runtimeinfo.Info{Python: "3.11.2", Modules: []string{"json", "numpy"}}
	for i, info := range []*runtimeinfo.Info{old, old, upgraded, upgraded, old} {
		got, want := c.fingerprintOf(info), codecache.RuntimeFingerprint(info)
		if got != want || got == "" {
			t.Fatalf("call %d: fingerprint %q, want %q", i, got, want)
		}
	}
	if c.fingerprintOf(old) == c.fingerprintOf(upgraded) {
		t.Fatal("two runtimes with different modules share a fingerprint")
	}
}
