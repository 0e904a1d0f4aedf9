package e2e

import (
	"os"
	"testing"

	"go.uber.org/goleak"
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
		goleak.Cleanup(func(int) {
			for _, b := range []*binBuild{&novaBuild, &sandboxBuild} {
				if b.dir != "" {
					_ = os.RemoveAll(b.dir)
				}
			}
		}),
	)
}
