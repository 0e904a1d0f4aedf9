package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// Locks: at most one line of any execution at a node with a given lock;
// the others wait their turn, in order, and go on when the holder's visit
// ends, even across a kill -9 of the whole `nova dev`.

const lockedWorkflow = `
name: ledger
nodes:
  - {id: start, type: start}
  - {id: write, type: sleep, duration: %s, lock: ledger}
  - {id: end, type: end}
edges: [{from: start, to: write}, {from: write, to: end}]
`

// nodeEvent waits for the first event of kind (node.started,
// node.completed or node.waiting) of node in execution id.
func nodeEvent(ctx context.Context, js jetstream.JetStream, id, kind, node string) (time.Time, *novav1.NodeWaiting, error) {
	cons, err := bus.NewEventReader(ctx, js, bus.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.EventSubject(id, kind)}})
	if err != nil {
		return time.Time{}, nil, err
	}
	for {
		msg, err := cons.Next(jetstream.FetchMaxWait(time.Second))
		if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) {
			if ctx.Err() != nil {
				return time.Time{}, nil, fmt.Errorf("no %s of %s in %s: %w", kind, node, id, ctx.Err())
			}
			continue
		}
		if err != nil {
			return time.Time{}, nil, err
		}
		md, _ := msg.Metadata()
		switch kind {
		case bus.KindNodeStarted:
			var ns novav1.NodeStarted
			if decodeMsg(msg, &ns) == nil && ns.NodeId == node {
				return md.Timestamp, nil, nil
			}
		case bus.KindNodeCompleted:
			var nc novav1.NodeCompleted
			if decodeMsg(msg, &nc) == nil && nc.NodeId == node {
				return md.Timestamp, nil, nil
			}
		case bus.KindNodeWaiting:
			var w novav1.NodeWaiting
			if decodeMsg(msg, &w) == nil && w.NodeId == node {
				return md.Timestamp, &w, nil
			}
		}
	}
}

// lockTurns starts two executions of ledger, the second once the first
// holds the lock, and checks that the second waits for it; after (when
// given) runs while the first holds it. It returns both ids.
func lockTurns(t *testing.T, ctx context.Context, c *client.Client, js jetstream.JetStream, hold string, after func()) (string, string) {
	t.Helper()
	def := parse(t, fmt.Sprintf(lockedWorkflow, hold))
	a, err := c.Start(ctx, def, "", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nodeEvent(ctx, js, a.ID, bus.KindNodeStarted, "write"); err != nil {
		t.Fatal(err)
	}
	b, err := c.Start(ctx, def, "", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	_, w, err := nodeEvent(ctx, js, b.ID, bus.KindNodeWaiting, "write")
	if err != nil {
		t.Fatal(err)
	}
	if w.Kind != "lock" || w.Description != `waits for lock "ledger"` {
		t.Errorf("the second waits %q (%q), want for the lock", w.Kind, w.Description)
	}
	if after != nil {
		after()
	}
	return a.ID, b.ID
}

// checkTurns checks that execution b's write began after a's ended, both
// having succeeded.
func checkTurns(t *testing.T, ctx context.Context, js jetstream.JetStream, a, b string) {
	t.Helper()
	for _, id := range []string{a, b} {
		var wc novav1.WorkflowCompleted
		if err := firstEvent(ctx, js, bus.EventSubject(id, bus.KindWorkflowCompleted), &wc); err != nil {
			t.Fatal(err)
		}
		if wc.Status != "succeeded" {
			t.Errorf("%s: %s %q", id, wc.Status, wc.Error)
		}
	}
	aEnded, _, err := nodeEvent(ctx, js, a, bus.KindNodeCompleted, "write")
	if err != nil {
		t.Fatal(err)
	}
	bBegan, _, err := nodeEvent(ctx, js, b, bus.KindNodeStarted, "write")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the second's write began %s after the first's ended", bBegan.Sub(aEnded).Round(time.Millisecond))
	if bBegan.Before(aEnded) {
		t.Errorf("the second's write began %s before the first's ended: both held the lock", aEnded.Sub(bBegan))
	}
}

func TestLocks(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	e := startEnv(t, func(o *stack.Options) { o.SpanExporter = spans })
	a, b := lockTurns(t, e.ctx, e.client, e.bus.JetStream(), "1s", nil)
	checkTurns(t, e.ctx, e.bus.JetStream(), a, b)
	// The engine's spans tell the lock's story: asked for twice, granted
	// twice (the second waited), given back twice.
	e.eventually(10*time.Second, "the lock's span events", func() bool {
		n := map[string]int{}
		for _, s := range spans.GetSpans() {
			for _, ev := range s.Events {
				n[ev.Name]++
			}
		}
		return n[bus.TypeLockAcquire] >= 2 && n[bus.TypeLockGranted] >= 2 && n[bus.TypeLockRelease] >= 2
	})
}

func TestLocksSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds nova and kills `nova dev`")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	proc, url := startNovaDev(t)
	b, err := loadgen.Connect(ctx, url, "lock-kill-test")
	if err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	// The first holds the lock for 4 s; nova dev is killed while the
	// second waits, and started again.
	first, second := lockTurns(t, ctx, client.New(b, nil), b.JetStream(), "4s", func() {
		b.Close()
		if err := proc.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := proc.Start(); err != nil {
			t.Fatal(err)
		}
	})
	if b, err = loadgen.Connect(ctx, url, "lock-kill-test-after"); err != nil {
		t.Fatalf("%v\n%s", err, proc.Describe())
	}
	defer b.Close()
	checkTurns(t, ctx, b.JetStream(), first, second)
}
