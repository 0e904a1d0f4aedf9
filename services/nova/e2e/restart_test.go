package e2e

import (
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/execution"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

const restartableWorkflow = `
name: restartable
nodes:
  - {id: start, type: start}
  - {id: first, type: action, code: 'context["a"] = 1'}
  - id: slow
    type: action
    code: |
      import time
      time.sleep(1.5)
      context["b"] = 2
  - {id: last, type: action, code: 'context["c"] = context["a"] + context["b"]'}
  - {id: done, type: end}
edges:
  - {from: start, to: first}
  - {from: first, to: slow}
  - {from: slow, to: last}
  - {from: last, to: done}
`

// state reads an execution's state from the engine's KV bucket; nil while
// the execution is not stored.
func (e *env) state(id string) *novav1.ExecutionState {
	e.t.Helper()
	kv, err := e.bus.JetStream().KeyValue(e.ctx, bus.BucketExecutions)
	if err != nil {
		e.t.Fatal(err)
	}
	st, err := execution.ReadState(e.ctx, kv, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// waitRunning waits until the execution has dispatched node and the sandbox
// holds that command.
func (e *env) waitRunning(id, node string) {
	e.t.Helper()
	e.eventually(10*time.Second, "node "+node+" runs in the sandbox", func() bool {
		st := e.state(id)
		return st != nil && execution.CurrentNode(st) == node && e.consumerInfo(bus.StreamCommands, bus.AgentSandbox).NumAckPending == 1
	})
}

// checkRestarted asserts that an execution interrupted by a restart finished
// as if nothing happened: every node once, every code node run once.
func (e *env) checkRestarted(def *novav1.WorkflowDefinition, exec *client.Execution) {
	t := e.t
	t.Helper()
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != "succeeded" || ctxMap(wc.Context)["c"] != 3.0 {
		t.Fatalf("status %q, error %q, c = %v; want succeeded with c = 3", wc.Status, wc.Error, ctxMap(wc.Context)["c"])
	}
	if want := []string{"start", "first", "slow", "last", "done"}; !slices.Equal(wc.Path, want) {
		t.Errorf("path = %v, want %v", wc.Path, want)
	}
	for _, n := range wc.Nodes {
		if n.Visits != 1 || n.Status != "succeeded" || (codeOf(def, n.Id) != "" && n.Attempts != 1) {
			t.Errorf("node %s: %d visits, %d attempts, %s; want one visit, one attempt, succeeded", n.Id, n.Visits, n.Attempts, n.Status)
		}
	}
	if got, want := e.counts(wc.ExecutionId), (map[string]int64{"executions": 1, "chain_of_work": 5, "chain_of_work_steps": 3}); !maps.Equal(got, want) {
		t.Errorf("audit documents = %v, want %v (no duplicates)", got, want)
	}
	checkChain(t, def, wc, e.chain(wc.ExecutionId))
}

func TestRestartMidWorkflow(t *testing.T) {
	e := startEnv(t)
	def := parse(t, restartableWorkflow)

	t.Run("graph engine stops while a node runs", func(t *testing.T) {
		exec, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.waitRunning(exec.ID, "slow")
		if err := e.s.StopModule(stack.GraphEngine); err != nil {
			t.Fatalf("stop graph engine: %v", err)
		}
		// The sandbox finishes the node and its result waits for the engine.
		e.eventually(10*time.Second, "the result of slow waits for the stopped engine", func() bool {
			return e.consumerInfo(bus.StreamEvents, bus.ConsumerEngineResults).NumPending == 1
		})
		if st := e.state(exec.ID); st.Status != "running" || execution.CurrentNode(st) != "slow" {
			t.Fatalf("execution %s at %q while the engine is down; want running at slow", st.Status, execution.CurrentNode(st))
		}
		if err := e.s.StartModule(e.ctx, stack.GraphEngine); err != nil {
			t.Fatalf("restart graph engine: %v", err)
		}
		e.checkRestarted(def, exec)
	})

	t.Run("sandbox stops while a node runs", func(t *testing.T) {
		exec, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.waitRunning(exec.ID, "slow")
		// Stopping drains: the program that runs finishes and its result is published.
		if err := e.s.StopModule(stack.Sandbox); err != nil {
			t.Fatalf("stop sandbox: %v", err)
		}
		e.eventually(10*time.Second, "the next command waits for the stopped sandbox", func() bool {
			return e.consumerInfo(bus.StreamCommands, bus.AgentSandbox).NumPending == 1
		})
		if st := e.state(exec.ID); st.Status != "running" || execution.CurrentNode(st) != "last" || ctxMap(st.Context)["b"] != 2.0 {
			t.Fatalf("execution %s at %q with b = %v while the sandbox is down; want running at last with b = 2",
				st.Status, execution.CurrentNode(st), ctxMap(st.Context)["b"])
		}
		if err := e.s.StartModule(e.ctx, stack.Sandbox); err != nil {
			t.Fatalf("restart sandbox: %v", err)
		}
		e.checkRestarted(def, exec)
	})

	t.Run("audit stops while a workflow runs", func(t *testing.T) {
		if err := e.s.StopModule(stack.Audit); err != nil {
			t.Fatalf("stop audit: %v", err)
		}
		exec, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.waitRunning(exec.ID, "slow")
		// The start's transition (started, start's completion, first's
		// start) and first's (its step and completion, slow's start), each
		// one envelope.
		if n := e.consumerInfo(bus.StreamEvents, "audit").NumPending; n < 2 {
			t.Errorf("audit consumer has %d messages pending while stopped, want at least 2 (the start's and first's transitions)", n)
		}
		if err := e.s.StartModule(e.ctx, stack.Audit); err != nil {
			t.Fatalf("restart audit: %v", err)
		}
		e.checkRestarted(def, exec)
	})

	t.Run("NATS server restarts while a node runs", func(t *testing.T) {
		exec, err := e.client.Start(e.ctx, def, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		e.waitRunning(exec.ID, "slow")
		old := e.s.Infra().NATS
		// The modules share the server's process, so they talk to it through
		// pipes (nats-server's in-process connections, no address); once it
		// restarts they reconnect over TCP.
		connz, err := old.Server().Connz(nil)
		if err != nil {
			t.Fatal(err)
		}
		modules := map[string]string{}
		for _, c := range connz.Conns {
			modules[c.Name] = c.IP
		}
		for _, m := range e.s.Modules() {
			if ip, ok := modules[m]; !ok || ip != "" {
				t.Errorf("module %s: connection from %q (present %v), want one in-process (no address); connections: %v", m, ip, ok, modules)
			}
		}
		port := old.Port()
		old.Shutdown()
		restarted, err := devstack.StartNATS(e.ctx, devstack.Options{DataDir: e.opts.DataDir, NATSPort: port})
		if err != nil {
			t.Fatalf("restart NATS: %v", err)
		}
		e.afterClose = append(e.afterClose, restarted.Shutdown)
		e.checkRestarted(def, exec)
	})
}
