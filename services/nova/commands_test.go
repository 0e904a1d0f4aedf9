package main

import (
	"strings"
	"testing"
	"time"

	"github.com/novaflow/nova/services/graph-engine/engine"
)

// nova dev takes NOVA_KEEP_ENDED_STATE as the graph-engine binary does, and
// refuses a value that is no positive duration, naming it.
func TestStackOptionsKeepEnded(t *testing.T) {
	t.Setenv("NOVA_KEEP_ENDED_STATE", "36h")
	opts, err := stackOptions(t.TempDir(), "", nil)
	if err != nil {
		t.Fatal(err)
	}
	if opts.Engine.KeepEnded != 36*time.Hour {
		t.Errorf("KeepEnded = %v, want 36h", opts.Engine.KeepEnded)
	}
	// Every setting of the engine is read as its binary reads it.
	t.Setenv("NOVA_MAX_ATTEMPTS", "7")
	if opts, err := stackOptions(t.TempDir(), "", nil); err != nil || opts.Engine.MaxAttempts != 7 {
		t.Errorf("NOVA_MAX_ATTEMPTS=7: %v, %v", opts.Engine, err)
	}
	for _, bad := range []string{"a week", "0s", "-1h"} {
		t.Setenv("NOVA_KEEP_ENDED_STATE", bad)
		_, err := stackOptions(t.TempDir(), "", nil)
		if err == nil || !strings.Contains(err.Error(), "NOVA_KEEP_ENDED_STATE") || !strings.Contains(err.Error(), bad) {
			t.Errorf("NOVA_KEEP_ENDED_STATE=%q: error %v; want one naming the variable and the value", bad, err)
		}
	}
	t.Setenv("NOVA_KEEP_ENDED_STATE", "")
	if opts, err := stackOptions(t.TempDir(), "", nil); err != nil || opts.Engine.KeepEnded != engine.DefaultKeepEnded {
		t.Errorf("unset: KeepEnded = %v, %v; want the engine's default %v", opts.Engine.KeepEnded, err, engine.DefaultKeepEnded)
	}
}
