package runner

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	now := time.Unix(1000, 0)
	b := newBreaker(3, time.Minute)
	b.now = func() time.Time { return now }
	allowed := func() bool {
		probe, why := b.allow()
		if why != "" {
			return false
		}
		_ = probe
		return true
	}
	for i := range 2 {
		if !allowed() {
			t.Fatalf("refused after %d faults", i)
		}
		if b.fault(false, "bwrap failed") {
			t.Fatalf("opened after %d faults", i+1)
		}
	}
	if !allowed() {
		t.Fatal("refused before the threshold")
	}
	b.success(false)
	for range 2 {
		b.fault(false, "bwrap failed")
	}
	if !allowed() {
		t.Fatal("a success did not reset the count")
	}
	if !b.fault(false, "bwrap failed") {
		t.Fatal("not opened at the threshold")
	}
	if _, why := b.allow(); !strings.Contains(why, "3 consecutive faults (last: bwrap failed)") {
		t.Fatalf("open breaker allowed a run or gave no reason: %q", why)
	}

	now = now.Add(time.Minute)
	probe, why := b.allow()
	if why != "" || !probe {
		t.Fatalf("after the cool-down: probe %v, refusal %q", probe, why)
	}
	if _, why := b.allow(); why == "" {
		t.Fatal("a second run went through while probing")
	}
	if !b.fault(true, "still failing") {
		t.Fatal("a failed probe did not open the breaker again")
	}
	if _, why := b.allow(); why == "" {
		t.Fatal("open again but allowed")
	}
	now = now.Add(time.Minute)
	probe, _ = b.allow()
	b.done(probe) // a cancelled probe proves nothing
	probe, why = b.allow()
	if why != "" || !probe {
		t.Fatalf("after a cancelled probe: probe %v, refusal %q", probe, why)
	}
	b.success(probe)
	if !allowed() || !allowed() {
		t.Fatal("a successful probe did not close the breaker")
	}
}

// Through Run: a bubblewrap that cannot start gives sandbox faults, then the
// breaker answers runtime_unavailable at once; once it works again, the probe
// after the cool-down closes the breaker.
func TestRunBreaker(t *testing.T) {
	// Reachable by the unprivileged user bwrap runs as under root.
	dir, err := os.MkdirTemp("", "nova-breaker-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	healthy := filepath.Join(dir, "healthy")
	fakeBwrap := filepath.Join(dir, "bwrap")
	script := "#!/bin/sh\nif [ -e " + healthy + " ]; then exec /usr/bin/bwrap \"$@\"; fi\necho 'bwrap: simulated failure' >&2\nexit 1\n"
	if err := os.WriteFile(fakeBwrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	r := newTestRunner(t, Config{Bwrap: fakeBwrap, BreakerThreshold: 3, BreakerCoolDown: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := context.Background()
	req := Request{Code: "context['x'] = 1"}

	var res Result
	for i := range 3 {
		res, err = r.Run(ctx, req)
		if err == nil || res.ErrorKind != KindSandboxFault {
			t.Fatalf("run %d: err %v, kind %q", i, err, res.ErrorKind)
		}
	}
	if !strings.Contains(logs.String(), "circuit breaker open") {
		t.Errorf("opening the breaker was not logged: %s", logs.String())
	}
	res, err = r.Run(ctx, req)
	if err != nil || res.ErrorKind != KindRuntimeUnavailable || !strings.Contains(res.Error, "simulated failure") {
		t.Fatalf("open breaker: err %v, %s: %s", err, res.ErrorKind, res.Error)
	}
	if res.Duration > 50*time.Millisecond {
		t.Errorf("an open breaker took %s to answer", res.Duration)
	}

	if err := os.WriteFile(healthy, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	time.Sleep(350 * time.Millisecond)
	wantSuccess(t, run(t, r, req), `{"x": 1}`)
	wantSuccess(t, run(t, r, req), `{"x": 1}`)
}

// A python that disappeared is the runtime missing, not a passing fault.
func TestRunPythonMissing(t *testing.T) {
	r := newTestRunner(t, Config{})
	r.cfg.Python = "/usr/bin/python3-vanished"
	res, err := r.Run(context.Background(), Request{Code: "context['x'] = 1"})
	if err == nil || res.ErrorKind != KindRuntimeUnavailable || !strings.Contains(res.Error, "python is not available") {
		t.Fatalf("err %v, %s: %s", err, res.ErrorKind, res.Error)
	}
}
