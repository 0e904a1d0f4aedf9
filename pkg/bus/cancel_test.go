package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/internal/natstest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// cancelBus is a bus on an embedded server with NOVA's streams, closed when
// the test ends.
func cancelBus(t *testing.T) *Bus {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := Connect(ctx, natstest.URL(t), WithName("cancel-test"))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// publishCancelled publishes what the graph engine publishes when it
// cancels execution id: ExecutionCancelled, to the events stream.
func publishCancelled(t testing.TB, b *Bus, id string) {
	t.Helper()
	if err := b.PublishProto(context.Background(), EventSubject(id, KindExecutionCancelled), id+"/cancelled",
		TypeExecutionCancelled, &novav1.ExecutionCancelled{ExecutionId: id, RequestedBy: "test"},
		map[string]string{ExtensionExecutionID: id}); err != nil {
		t.Fatal(err)
	}
}

func cancelledWithin(t *testing.T, ctx context.Context, d time.Duration) {
	t.Helper()
	if ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-time.After(d):
			t.Fatalf("context not cancelled within %s", d)
		}
	}
	if cause := context.Cause(ctx); !errors.Is(cause, ErrExecutionCancelled) {
		t.Fatalf("cause %v, want ErrExecutionCancelled", cause)
	}
}

func notCancelled(t *testing.T, ctx context.Context) {
	t.Helper()
	if ctx.Err() != nil {
		t.Fatalf("context ended: %v", context.Cause(ctx))
	}
}

func TestWatchCancellations(t *testing.T) {
	b := cancelBus(t)
	got := make(chan string, 8)
	stop, err := b.WatchCancellations(context.Background(), func(id string) { got <- id })
	if err != nil {
		t.Fatal(err)
	}
	publishCancelled(t, b, "exec-1")
	// Another kind of the same execution is not a cancellation.
	if err := b.PublishProto(context.Background(), EventSubject("exec-2", KindWorkflowCompleted), "exec-2/completed",
		TypeWorkflowCompleted, &novav1.WorkflowCompleted{ExecutionId: "exec-2"}, nil); err != nil {
		t.Fatal(err)
	}
	publishCancelled(t, b, "exec.3")
	for _, want := range []string{"exec-1", "exec_3"} {
		select {
		case id := <-got:
			if id != want {
				t.Fatalf("got %q, want %q", id, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no cancellation of %s", want)
		}
	}
	stop()
	stop() // twice is fine
	publishCancelled(t, b, "exec-4")
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-got:
		t.Fatalf("got %q after stop", id)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestWatchCancellationsEndsWithItsContext(t *testing.T) {
	b := cancelBus(t)
	got := make(chan string, 8)
	ctx, cancel := context.WithCancel(context.Background())
	before := b.Conn().NumSubscriptions()
	stop, err := b.WatchCancellations(ctx, func(id string) { got <- id })
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	// One for cancelled executions, one for stopped ones.
	if n := b.Conn().NumSubscriptions(); n != before+2 {
		t.Fatalf("%d subscriptions, want %d", n, before+2)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for b.Conn().NumSubscriptions() > before {
		if time.Now().After(deadline) {
			t.Fatal("the subscription outlived its context")
		}
		time.Sleep(5 * time.Millisecond)
	}
	publishCancelled(t, b, "exec-1")
	select {
	case id := <-got:
		t.Fatalf("got %q after the context ended", id)
	case <-time.After(100 * time.Millisecond):
	}
}

func TestCancelsEndTheWorkOfACancelledExecution(t *testing.T) {
	b := cancelBus(t)
	c, err := b.NewCancels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	one, releaseOne := c.Start("exec-1", context.Background())
	defer releaseOne()
	oneAgain, releaseOneAgain := c.Start("exec-1", context.Background())
	defer releaseOneAgain()
	other, releaseOther := c.Start("exec-2", context.Background())
	defer releaseOther()
	dotted, releaseDotted := c.Start("exec.3", context.Background())
	defer releaseDotted()
	if n := c.Running(); n != 4 {
		t.Fatalf("running %d, want 4", n)
	}

	start := time.Now()
	publishCancelled(t, b, "exec-1")
	cancelledWithin(t, one, time.Second)
	cancelledWithin(t, oneAgain, time.Second)
	t.Logf("cancelled %s after the publish", time.Since(start))
	notCancelled(t, other)
	notCancelled(t, dotted)
	if !c.Cancelled("exec-1") || c.Cancelled("exec-2") {
		t.Fatalf("cancelled: exec-1 %v, exec-2 %v", c.Cancelled("exec-1"), c.Cancelled("exec-2"))
	}

	publishCancelled(t, b, "exec.3")
	cancelledWithin(t, dotted, time.Second)
	notCancelled(t, other)

	// Work that starts after its execution's cancellation starts cancelled.
	late, releaseLate := c.Start("exec-1", context.Background())
	defer releaseLate()
	if late.Err() == nil {
		t.Fatal("work of a cancelled execution started")
	}
	cancelledWithin(t, late, 0)

	releaseOther()
	if n := c.Running(); n != 0 {
		t.Fatalf("running %d after the work ended, want 0", n)
	}
	if !errors.Is(context.Cause(other), context.Canceled) || errors.Is(context.Cause(other), ErrExecutionCancelled) {
		t.Fatalf("released work: cause %v, want context.Canceled", context.Cause(other))
	}

	// Closed, it hears nothing more.
	c.Close()
	after, releaseAfter := c.Start("exec-5", context.Background())
	defer releaseAfter()
	publishCancelled(t, b, "exec-5")
	if err := b.Conn().Flush(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	notCancelled(t, after)
}

func TestCancelsKeepTheParentsEnd(t *testing.T) {
	var c Cancels
	parent, cancel := context.WithCancelCause(context.Background())
	ctx, release := c.Start("exec-1", parent)
	defer release()
	stop := errors.New("shutting down")
	cancel(stop)
	<-ctx.Done()
	if cause := context.Cause(ctx); !errors.Is(cause, stop) {
		t.Fatalf("cause %v, want the parent's", cause)
	}
	// An empty execution is never cancelled.
	c.Cancel("")
	none, releaseNone := c.Start("", context.Background())
	defer releaseNone()
	notCancelled(t, none)
}

func TestCancelsForget(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	c := &Cancels{now: func() time.Time { return now }}

	c.Cancel("old")
	now = now.Add(CancelsRememberFor - time.Second)
	if !c.Cancelled("old") {
		t.Fatal("forgot a cancellation before its time")
	}
	now = now.Add(time.Second)
	if c.Cancelled("old") {
		t.Fatal("remembered a cancellation past its time")
	}
	ctx, release := c.Start("old", context.Background())
	notCancelled(t, ctx)
	release()

	for i := range CancelsRemembered + 1 {
		c.Cancel(fmt.Sprint("exec-", i))
	}
	if c.Cancelled("exec-0") {
		t.Fatal("remembered more than CancelsRemembered")
	}
	for _, id := range []string{"exec-1", fmt.Sprint("exec-", CancelsRemembered)} {
		if !c.Cancelled(id) {
			t.Fatalf("forgot %s", id)
		}
	}
	c.mu.Lock()
	n, m := len(c.order), len(c.recent)
	c.mu.Unlock()
	if n > CancelsRemembered || m > CancelsRemembered {
		t.Fatalf("memory holds %d entries (%d ids), want at most %d", n, m, CancelsRemembered)
	}
}

// An execution that ended while some of its lines still ran work
// (ExecutionStopped) ends that work as a cancel does.
func TestCancelsHearStoppedExecutions(t *testing.T) {
	b := cancelBus(t)
	c, err := b.NewCancels(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, release := c.Start("exec-stopped", context.Background())
	defer release()
	other, releaseOther := c.Start("exec-other", context.Background())
	defer releaseOther()
	if err := b.PublishProto(context.Background(), EventSubject("exec-stopped", KindExecutionStopped), "exec-stopped/stopped",
		TypeExecutionStopped, &novav1.ExecutionStopped{ExecutionId: "exec-stopped", Reason: "node \"a\" failed"},
		map[string]string{ExtensionExecutionID: "exec-stopped"}); err != nil {
		t.Fatal(err)
	}
	cancelledWithin(t, ctx, 5*time.Second)
	notCancelled(t, other)
}
