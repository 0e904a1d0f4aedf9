package loadgen

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A wait tied to processes ends when the first of them exits, with its exit
// and last line of output as the cause; while they run, the wait goes on.
func TestWhileRunningEndsAtExit(t *testing.T) {
	long := &Proc{Name: "running", Path: "/bin/sh", Args: []string{"-c", "echo up; sleep 30"}, Log: filepath.Join(t.TempDir(), "out.log")}
	if err := long.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = long.Kill() }()
	p := &Proc{Name: "failing", Path: "/bin/sh", Args: []string{"-c", "echo starting; echo 'port taken'; sleep 0.2; exit 3"},
		Log: filepath.Join(t.TempDir(), "out.log")}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := WhileAllRunning(t.Context(), long, p)
	defer cancel()
	select {
	case <-ctx.Done():
		t.Fatalf("ended while the processes ran: %v", context.Cause(ctx))
	case <-time.After(50 * time.Millisecond):
	}
	if exited := Exited(long, p); exited != "" {
		t.Errorf("Exited = %q while both run", exited)
	}
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("still waiting 10 s after the process exited")
	}
	cause := ExitedError(t.Context(), ctx, errors.New("no answer")).Error()
	for _, want := range []string{"failing (pid", "exit status 3", `"port taken"`, ": no answer"} {
		if !strings.Contains(cause, want) {
			t.Errorf("error %q lacks %q", cause, want)
		}
	}
	if strings.Contains(cause, "running") {
		t.Errorf("error %q names the process that still runs", cause)
	}
	if err := ExitedError(t.Context(), ctx, nil); err != nil {
		t.Errorf("ExitedError of no error = %v", err)
	}
	exited := Exited(long, p)
	if !strings.Contains(exited, "failing (pid") || !strings.Contains(exited, "exit status 3") || strings.Contains(exited, "running") {
		t.Errorf("Exited = %q, want the failing process alone", exited)
	}

	// A process that keeps running leaves the wait to its own context.
	parent, stop := context.WithCancel(t.Context())
	ctx, cancel = long.WhileRunning(parent)
	defer cancel()
	stop()
	<-ctx.Done()
	if context.Cause(ctx) != context.Canceled {
		t.Errorf("cause %v, want the parent's cancellation", context.Cause(ctx))
	}
	if err := ExitedError(parent, ctx, errors.New("no answer")); err.Error() != "no answer" {
		t.Errorf("with the parent ended, the error is %q, want it as it was", err)
	}
}
