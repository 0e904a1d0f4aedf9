package service_test

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/services/sandbox/abusesuite"
	"github.com/novaflow/nova/services/sandbox/runner"
	"github.com/novaflow/nova/services/sandbox/service"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats.go v1.55 races in ObjectStore.Put (valueref's large values):
		// its publisher's cleanup can clear the status channel before the
		// goroutine it started reads it, which then waits on a nil channel.
		goleak.IgnoreTopFunction("github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect"),
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
	)
}

// startService starts the sandbox service in process on an embedded NATS,
// its zygotes ready, and returns a client of it: ExecuteCode on
// nova.cmd.sandbox in, CodeExecuted on nova.evt.<exec>.result.sandbox out.
func startService(t *testing.T, cfg runner.Config) *abusesuite.Client {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	ctx, cancel := context.WithCancel(context.Background())
	quiet := slog.New(slog.DiscardHandler)
	b := devstacktest.Bus(ctx, t, "sandbox-abuse-test")
	c := abusesuite.NewClient(t, b)

	work, err := os.MkdirTemp("", "nova-abuse-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(work) })
	if err := os.Chmod(work, 0o711); err != nil {
		t.Fatal(err)
	}
	cfg.WorkDir, cfg.Logger = work, quiet
	r, err := runner.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.WarmReady() < r.WarmSize() {
		if time.Now().After(deadline) {
			t.Fatal("zygotes not ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, service.Deps{Bus: b, Runner: r, Values: c.Values(), Logger: quiet, Workers: abusesuite.Workers})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("service.Run: %v", err)
		}
		r.Close()
	})
	return c
}

// The abuse suite (services/sandbox/abusesuite) against the service in
// this process, in each of the runner's modes. deploy/test/images runs it
// against the sandbox image in a container.
func TestAbuse(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", abusesuite.Secret)
	for _, mode := range abusesuite.Modes {
		t.Run(mode.Name, func(t *testing.T) {
			abusesuite.Run(t, abusesuite.Target{
				Client:       startService(t, mode.Config()),
				Mode:         mode,
				HostLoopback: "127.0.0.1",
				Alive:        abusesuite.HostProcesses,
			})
		})
	}
}
