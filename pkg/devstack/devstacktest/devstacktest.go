// Package devstacktest gives tests a bus on an embedded NATS JetStream server,
// the way each service's tests talk to the real bus instead of a fake.
package devstacktest

import (
	"context"
	"log/slog"
	"testing"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
)

// Bus starts an embedded NATS server in a temporary directory, connects to it
// as name with NOVA's streams declared, and stops both when the test ends.
func Bus(ctx context.Context, t testing.TB, name string) *bus.Bus {
	t.Helper()
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	b, err := bus.Connect(ctx, n.URL(), bus.WithName(name), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	return b
}
