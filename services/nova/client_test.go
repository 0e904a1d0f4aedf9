package main

import (
	"context"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/workflow"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// The client waits for all its executions with one consumer of completions
// and one of dead letters, whatever the number it waits for: a consumer per
// wait costs the server about 0.7 ms of CPU each (pkg/bus BenchmarkWaits).
func TestClientWaitsShareTheirConsumers(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	def, err := workflow.Parse([]byte(benchWorkflow))
	if err != nil {
		t.Fatal(err)
	}
	s, err := stack.Start(ctx, stack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Errorf("close stack: %v", err)
		}
	}()
	b, err := s.Connect(ctx, "client-test")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	consumers := func(stream string) int {
		st, err := b.JetStream().Stream(ctx, stream)
		if err != nil {
			t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Consumers
	}
	events, deadLetters := consumers(bus.StreamEvents), consumers(bus.StreamDeadLetters)

	c := client.New(b, nil)
	const n = 8
	var execs []*client.Execution
	for range n {
		e, err := c.Start(ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		execs = append(execs, e)
	}
	// Every execution is still waited for (Wait not called yet).
	if got := consumers(bus.StreamEvents) - events; got != 1 {
		t.Errorf("%d started executions being waited for: %d new consumers of %s, want 1", n, got, bus.StreamEvents)
	}
	if got := consumers(bus.StreamDeadLetters) - deadLetters; got != 1 {
		t.Errorf("%d started executions being waited for: %d new consumers of %s, want 1", n, got, bus.StreamDeadLetters)
	}
	for _, e := range execs {
		wc, err := e.Wait(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.GetStatus() != "succeeded" || wc.GetExecutionId() != e.ID {
			t.Fatalf("execution %s: completion %v", e.ID, wc)
		}
	}

	c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for consumers(bus.StreamEvents) != events || consumers(bus.StreamDeadLetters) != deadLetters {
		if time.Now().After(deadline) {
			t.Fatalf("closed client: consumers of %s %d (want %d), of %s %d (want %d)", bus.StreamEvents,
				consumers(bus.StreamEvents), events, bus.StreamDeadLetters, consumers(bus.StreamDeadLetters), deadLetters)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
