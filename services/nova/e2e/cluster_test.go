package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/stack"
)

const clusterWorkflow = `
name: clustered
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: 'context["a"] = context["n"] * 2'}
  - id: add
    type: action
    code: |
      import time
      time.sleep(0.05)
      context["b"] = context["a"] + 1
  - {id: triple, type: action, code: 'context["c"] = context["b"] * 3'}
  - {id: done, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: add}
  - {from: add, to: triple}
  - {from: triple, to: done}
`

// TestClusteredBusSurvivesLosingItsLeaders runs every service on three
// clustered NATS servers with three replicas of every stream, KV bucket and
// object store, and stops the JetStream meta leader and then a stream's
// leader while workflows run: each workflow ends exactly as it would
// without the fault, and the audit store holds each document once.
func TestClusteredBusSurvivesLosingItsLeaders(t *testing.T) {
	t.Parallel() // its own servers and services; it waits on elections
	if testing.Short() {
		t.Skip("three NATS servers and every service under load")
	}
	e := startEnv(t, func(o *stack.Options) { o.NATSCluster = 3 })
	cluster := e.s.Infra().Cluster
	if cluster == nil {
		t.Fatal("the stack runs no NATS cluster")
	}
	def := parse(t, clusterWorkflow)

	const workflows = 60
	var completed atomic.Int32
	type outcome struct {
		n  int
		wc *novav1.WorkflowCompleted
		id string
	}
	results := make(chan outcome, workflows)
	var wg sync.WaitGroup
	// A producer keeps 20 workflows in flight.
	inFlight := make(chan struct{}, 20)
	wg.Go(func() {
		for n := range workflows {
			inFlight <- struct{}{}
			exec, err := e.client.Start(e.ctx, def, "", fmt.Sprintf(`{"n": %d}`, n))
			if err != nil {
				t.Errorf("start workflow %d: %v", n, err)
				<-inFlight
				continue
			}
			wg.Go(func() {
				defer func() { <-inFlight }()
				wc, err := exec.Wait(e.ctx)
				if err != nil {
					t.Errorf("workflow %d (%s): %v", n, exec.ID, err)
					return
				}
				completed.Add(1)
				results <- outcome{n: n, wc: wc, id: exec.ID}
			})
		}
	})

	// Mid-load: stop the meta leader, bring it back, then the leader of the
	// command stream, and bring that back.
	for _, kill := range []struct {
		what   string
		after  int32
		leader func() int
	}{
		{"meta leader", workflows / 4, cluster.MetaLeader},
		{"leader of " + bus.StreamCommands, workflows / 2, func() int { return cluster.StreamLeader(bus.StreamCommands) }},
	} {
		e.eventually(2*time.Minute, fmt.Sprintf("%d workflows complete", kill.after), func() bool { return completed.Load() >= kill.after })
		var i int
		e.eventually(20*time.Second, "a "+kill.what, func() bool { i = kill.leader(); return i >= 0 })
		t.Logf("stopping %s, the %s, after %d workflows", cluster.Name(i), kill.what, completed.Load())
		cluster.StopNode(i)
		time.Sleep(2 * time.Second)
		if err := cluster.StartNode(e.ctx, i); err != nil {
			t.Fatalf("start %s again: %v", cluster.Name(i), err)
		}
	}
	wg.Wait()
	close(results)

	got := 0
	for r := range results {
		got++
		want := (r.n*2 + 1) * 3
		if r.wc.Status != "succeeded" || ctxMap(r.wc.Context)["c"] != float64(want) {
			t.Errorf("workflow %d: status %q, error %q, c = %v; want succeeded with c = %d", r.n, r.wc.Status, r.wc.Error, ctxMap(r.wc.Context)["c"], want)
			continue
		}
		if wantPath := []string{"start", "double", "add", "triple", "done"}; !slices.Equal(r.wc.Path, wantPath) {
			t.Errorf("workflow %d: path %v, want %v", r.n, r.wc.Path, wantPath)
		}
		for _, node := range r.wc.Nodes {
			if node.Visits != 1 || node.Status != "succeeded" {
				t.Errorf("workflow %d node %s: %d visits, %s; want one visit, succeeded", r.n, node.Id, node.Visits, node.Status)
			}
		}
	}
	if got != workflows {
		t.Fatalf("%d of %d workflows completed", got, workflows)
	}

	// The audit store has every document once.
	e.auditIdle()
	kv, err := e.bus.JetStream().KeyValue(e.ctx, bus.BucketExecutions)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := kv.ListKeys(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for id := range keys.Keys() {
		if got, want := e.counts(id), (map[string]int64{"executions": 1, "chain_of_work": 5, "chain_of_work_steps": 3}); !maps.Equal(got, want) {
			t.Errorf("execution %s: audit documents %v, want %v", id, got, want)
		}
	}

	// Everything NOVA declared has three replicas; the client's own opening
	// of the object store did not lower it.
	js := e.bus.JetStream()
	for _, name := range []string{bus.StreamCommands, bus.StreamEvents, bus.StreamDeadLetters,
		"KV_" + bus.BucketExecutions, "KV_" + bus.BucketWorkflows, "OBJ_" + valueref.Bucket} {
		s, err := js.Stream(e.ctx, name)
		if err != nil {
			t.Errorf("stream %s: %v", name, err)
			continue
		}
		if r := s.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want 3", name, r)
		}
	}
	for _, c := range []struct{ stream, durable string }{
		{bus.StreamCommands, bus.AgentSandbox}, {bus.StreamEvents, bus.ConsumerEngineResults},
	} {
		info := e.consumerInfo(c.stream, c.durable)
		if info.Cluster == nil || len(info.Cluster.Replicas) != 2 {
			t.Errorf("consumer %s on %s: cluster %+v, want a leader and two replicas", c.durable, c.stream, info.Cluster)
		}
	}
}

// TestServicesDeclareTogetherOnACluster: services that start at once on a
// cluster declare the same streams and stores at once; the meta leader
// lets all but the first request time out, and each service declares again
// instead of failing its start.
func TestServicesDeclareTogetherOnACluster(t *testing.T) {
	t.Parallel() // its own cluster
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := devstack.StartCluster(ctx, devstack.Options{DataDir: t.TempDir()}, 3)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Go(func() {
			b, err := bus.Connect(ctx, c.URL(), bus.WithName(fmt.Sprint("service-", i)), bus.WithLogger(slog.New(slog.DiscardHandler)),
				bus.WithStreamOptions(bus.StreamOptions{Replicas: 3}))
			if err != nil {
				t.Error(err)
				return
			}
			defer b.Close()
			if err := b.EnsureStreams(ctx); err != nil {
				t.Errorf("service %d: %v", i, err)
			}
			if _, err := valueref.Open(ctx, b.JetStream(), 0, 3); err != nil {
				t.Errorf("service %d: %v", i, err)
			}
		})
	}
	wg.Wait()
}
