package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/devstack"
)

// TestClusterKeepsAReplicatedStreamThroughLosingEachLeader: a stream with
// three replicas keeps accepting and serving messages while the meta
// leader, and then the stream's leader, is stopped; a stopped server comes
// back on its store and catches up.
func TestClusterKeepsAReplicatedStreamThroughLosingEachLeader(t *testing.T) {
	ctx := testContext(t)
	c, err := devstack.StartCluster(ctx, devstack.Options{DataDir: t.TempDir()}, 3)
	if err != nil {
		t.Fatalf("StartCluster: %v", err)
	}
	defer c.Shutdown()
	if n := strings.Count(c.URL(), ","); n != 2 {
		t.Fatalf("URL %q: want three client URLs", c.URL())
	}

	nc, err := nats.Connect(c.URL(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3}); err != nil {
		t.Fatalf("create stream: %v", err)
	}

	published := 0
	publish := func(n int) {
		t.Helper()
		for range n {
			// A publish during an election may time out; the retry with the
			// same id is stored once.
			id := fmt.Sprint(published)
			var err error
			for try := 0; try < 50; try++ {
				pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				_, err = js.Publish(pctx, "r3.msg", []byte(id), jetstream.WithMsgID(id))
				cancel()
				if err == nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil {
				t.Fatalf("publish %s: %v", id, err)
			}
			published++
		}
	}
	publish(10)

	for _, kill := range []struct {
		what   string
		leader func() int
	}{
		{"meta leader", c.MetaLeader},
		{"stream leader", func() int { return c.StreamLeader("R3") }},
	} {
		i := waitIndex(t, kill.leader)
		c.StopNode(i)
		publish(10)
		if err := c.StartNode(ctx, i); err != nil {
			t.Fatalf("restart %s (%s): %v", c.Name(i), kill.what, err)
		}
		if got := waitIndex(t, kill.leader); got < 0 {
			t.Fatalf("no %s after the restart", kill.what)
		}
	}

	// Every message is there once, in order.
	cons, err := js.CreateOrUpdateConsumer(ctx, "R3", jetstream.ConsumerConfig{Durable: "reader", Replicas: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Right after the restarts the new consumer may still be electing its
	// leader (under load, a fetch then ends empty): fetch until every message
	// came or a minute passed, acknowledging each so none comes twice.
	var got []string
	for deadline := time.Now().Add(time.Minute); len(got) < published && time.Now().Before(deadline); {
		batch, err := cons.Fetch(published-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		for m := range batch.Messages() {
			got = append(got, string(m.Data()))
			if err := m.Ack(); err != nil {
				t.Fatalf("ack %s: %v", m.Data(), err)
			}
		}
	}
	if len(got) != published {
		t.Fatalf("read %d messages, want %d: %v", len(got), published, got)
	}
	for i, g := range got {
		if g != fmt.Sprint(i) {
			t.Fatalf("message %d is %q: %v", i, g, got)
		}
	}
}

// waitIndex waits for f to name a server.
func waitIndex(t *testing.T, f func() int) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if i := f(); i >= 0 {
			return i
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("no leader within 20s")
	return -1
}

func TestStartRefusesAClusterOfTwo(t *testing.T) {
	_, err := devstack.Start(testContext(t), devstack.Options{DataDir: t.TempDir(), NATSCluster: 2})
	if err == nil || !strings.Contains(err.Error(), "cluster of 2") {
		t.Fatalf("Start with 2 servers: %v, want a refusal naming the size", err)
	}
}

// TestDataDirLock: a second stack on a data dir in use is refused with the
// holder named; once the first is closed the dir can be used again.
func TestDataDirLock(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	first, err := devstack.Start(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	_, err = devstack.Start(ctx, devstack.Options{DataDir: dir})
	if !errors.Is(err, devstack.ErrDataDirInUse) || !strings.Contains(err.Error(), fmt.Sprintf("process %d serves %s", os.Getpid(), dir)) {
		t.Errorf("second Start on %s: %v, want ErrDataDirInUse naming this process", dir, err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	again, err := devstack.Start(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := again.Close(); err != nil {
		t.Fatal(err)
	}
}
