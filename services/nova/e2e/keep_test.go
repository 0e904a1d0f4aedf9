package e2e

import (
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/stack"
)

// stateTTL is the Nats-TTL the execution's stored state carries ("" for
// none); it fails the test when the state is not stored.
func (e *env) stateTTL(id string) string {
	e.t.Helper()
	stream, err := e.bus.JetStream().Stream(e.ctx, "KV_"+bus.BucketExecutions)
	if err != nil {
		e.t.Fatal(err)
	}
	msg, err := stream.GetLastMsgForSubject(e.ctx, execution.StateSubject(id))
	if err != nil {
		e.t.Fatalf("state of %s: %v", id, err)
	}
	return msg.Header.Get(jetstream.MsgTTLHeader)
}

// An ended execution's state goes KeepEnded after the end, so the bucket
// does not grow with every execution; a running one's is kept. Within the
// keep a repeated start runs nothing (TestRegisteredWorkflows repeats one
// past the duplicate window).
func TestEndedStateExpires(t *testing.T) {
	t.Parallel() // its own servers and services; it waits for an expiry
	const keep = 2 * time.Second
	e := startEnv(t, func(o *stack.Options) { engineOf(o).KeepEnded = keep })
	def := parse(t, restartableWorkflow)

	exec, err := e.client.Start(e.ctx, def, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	e.waitRunning(exec.ID, "slow")
	if ttl := e.stateTTL(exec.ID); ttl != "" {
		t.Errorf("a running execution's state expires after %s; want it kept while it runs", ttl)
	}
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != "succeeded" {
		t.Fatalf("status %q (%s), want succeeded", wc.Status, wc.Error)
	}
	e.eventually(5*time.Second, "the ended state is stored", func() bool {
		st := e.state(exec.ID)
		return st != nil && st.Status == "succeeded"
	})
	if ttl := e.stateTTL(exec.ID); ttl != keep.String() {
		t.Errorf("the ended execution's state expires after %q, want %s", ttl, keep)
	}

	// Past the keep the key is gone, and so is the server's per-subject state
	// of it (the marker the server leaves goes a second later).
	e.eventually(keep+10*time.Second, "the ended execution's state expires", func() bool {
		return e.state(exec.ID) == nil
	})
	kv, err := e.bus.JetStream().KeyValue(e.ctx, bus.BucketExecutions)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := execution.ReadState(e.ctx, kv, exec.ID); err != nil || st != nil {
		t.Errorf("ReadState after the keep = %v, %v; want none", st, err)
	}
	e.eventually(5*time.Second, "the bucket holds no subject of the execution", func() bool {
		return len(e.subjects("KV_"+bus.BucketExecutions, execution.StateSubject(exec.ID))) == 0
	})
	// What the audit store recorded stays: it is the record.
	if got := e.counts(exec.ID); got["executions"] != 1 || got["chain_of_work"] != 5 {
		t.Errorf("audit documents after the state expired: %v", got)
	}
	if _, err := kv.Get(e.ctx, exec.ID); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("Get after the keep: %v, want key not found", err)
	}
}

// A workflow without code ends in the transition that starts it: its state
// is created ended, and expires as any ended one.
func TestEndedAtStartExpires(t *testing.T) {
	const keep = 2 * time.Second
	e := startEnv(t, func(o *stack.Options) { engineOf(o).KeepEnded = keep })
	def := parse(t, `
name: no-code
nodes:
  - {id: start, type: start}
  - {id: done, type: end}
edges:
  - {from: start, to: done}
`)
	wc, err := e.client.Run(e.ctx, def, nil)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != "succeeded" {
		t.Fatalf("status %q (%s), want succeeded", wc.Status, wc.Error)
	}
	var st *novav1.ExecutionState
	e.eventually(5*time.Second, "the state is stored", func() bool {
		st = e.state(wc.ExecutionId)
		return st != nil && st.Status != "running"
	})
	if ttl := e.stateTTL(wc.ExecutionId); ttl != keep.String() {
		t.Errorf("state %s expires after %q, want %s", st.Status, ttl, keep)
	}
}
