package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/bus/busname"
	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// Control flow beyond one line: joins that cancel what remains, end nodes
// that terminate the execution, decisions that choose several edges.

// visitOf is the visit of node in nodes (its last), nil when none.
func visitOf(nodes []chainstore.NodeDoc, node string) *chainstore.NodeDoc {
	v := visits(nodes, node)
	if len(v) == 0 {
		return nil
	}
	return &v[len(v)-1]
}

// sandboxResults follows the sandbox's results of one execution.
func (e *env) sandboxResults() *nats.Subscription {
	e.t.Helper()
	sub, err := e.bus.Conn().SubscribeSync(bus.EventFilter(bus.KindSandboxResult))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = sub.Unsubscribe() })
	return sub
}

// resultOf waits for the sandbox's result of node in execution id.
func (e *env) resultOf(sub *nats.Subscription, id, node string) *novav1.CodeExecuted {
	e.t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		m, err := sub.NextMsg(time.Second)
		if err != nil {
			continue
		}
		var res novav1.CodeExecuted
		if ev, err := bus.DecodeNATS(m.Header, m.Data); err == nil && bus.Decode(*ev, &res) == nil && res.ExecutionId == id && res.NodeId == node {
			return &res
		}
	}
	e.t.Fatalf("no sandbox result of node %s of %s", node, id)
	return nil
}

func TestCancellingJoin(t *testing.T) {
	e := startEnv(t)
	results := e.sandboxResults()
	def := parse(t, `
name: race-cancel
nodes:
  - {id: start, type: start}
  - {id: fast, type: action, code: "context['winner'] = 'fast'"}
  - {id: slow_code, type: action, code: "import time\ntime.sleep(10)\ncontext['winner'] = 'slow_code'"}
  - {id: slow_sleep, type: sleep, duration: 10s}
  - {id: first, type: join, wait: any, cancel_remaining: true}
  - {id: end, type: end}
edges:
  - {from: start, to: fast}
  - {from: start, to: slow_code}
  - {from: start, to: slow_sleep}
  - {from: fast, to: first}
  - {from: slow_code, to: first}
  - {from: slow_sleep, to: first}
  - {from: first, to: end}
`)
	began := time.Now()
	wc := e.run(def, map[string]any{})
	took := time.Since(began)
	if wc.Status != "succeeded" || ctxMap(wc.Context)["winner"] != "fast" {
		t.Fatalf("status %q (%s), context %s; want the fast branch's", wc.Status, wc.Error, wc.Context.GetRaw())
	}
	nodes := e.chain(wc.ExecutionId)
	fast := visitOf(nodes, "fast")
	if fast == nil || fast.CompletedAt == nil {
		t.Fatalf("no completed visit of fast: %+v", fast)
	}
	t.Logf("ended %s after its fastest branch (%s from the start; the slowest sleep 10 s)",
		wc.CompletedAt.AsTime().Sub(*fast.CompletedAt).Round(time.Millisecond), took.Round(time.Millisecond))
	if took >= 8*time.Second {
		t.Errorf("took %s: the join waited for the slow branches", took)
	}
	for _, slow := range []string{"slow_code", "slow_sleep"} {
		v := visitOf(nodes, slow)
		if v == nil || v.Status != "cancelled" || !strings.Contains(v.ErrorMessage, `join "first" went on with 1 of its branches`) {
			t.Errorf("visit of %s: %+v; want cancelled by the join", slow, v)
		}
	}
	// The slow program was killed, and the sleep's timer removed.
	if res := e.resultOf(results, wc.ExecutionId, "slow_code"); res.ErrorKind != runner.KindCancelled {
		t.Errorf("slow_code's program: %s %s %q, want killed as cancelled", res.Status, res.ErrorKind, res.Error)
	}
	if timers := e.subjects(bus.StreamTimers, busname.TimerSubject(wc.ExecutionId, "*")); len(timers) != 0 {
		t.Errorf("timers left: %v", timers)
	}
}

func TestTerminateEnd(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: terminate
nodes:
  - {id: start, type: start}
  - {id: quick, type: action, code: "context['quick'] = True"}
  - {id: done, type: end, terminate: true}
  - {id: long, type: sleep, duration: 10s}
  - {id: after_long, type: action, code: "context['long'] = True"}
  - {id: end, type: end}
edges:
  - {from: start, to: quick}
  - {from: start, to: long}
  - {from: quick, to: done}
  - {from: long, to: after_long}
  - {from: after_long, to: end}
`)
	began := time.Now()
	wc := e.run(def, map[string]any{})
	took := time.Since(began)
	got := ctxMap(wc.Context)
	if wc.Status != "succeeded" || got["quick"] != true || got["long"] != nil {
		t.Fatalf("status %q (%s), context %v; want succeeded with the terminating line's context", wc.Status, wc.Error, got)
	}
	t.Logf("terminated %s after the start (the other branch sleeps 10 s)", took.Round(time.Millisecond))
	if took >= 8*time.Second {
		t.Errorf("took %s: the other branch ran on", took)
	}
	nodes := e.chain(wc.ExecutionId)
	if v := visitOf(nodes, "long"); v == nil || v.Status != "cancelled" || !strings.Contains(v.ErrorMessage, `end node "done" terminated it`) {
		t.Errorf("visit of long: %+v; want cancelled by the terminate end", v)
	}
	if v := visitOf(nodes, "after_long"); v != nil {
		t.Errorf("after_long ran: %+v", v)
	}
}

func TestMultiChoice(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: notify
nodes:
  - {id: start, type: start}
  - id: how
    type: decision
    choose: many
    code: "context['branch_decision'] = context['channels']"
  - {id: email, type: action, code: "context['email'] = 'sent'"}
  - {id: sms, type: action, code: "context['sms'] = 'sent'"}
  - {id: post, type: action, code: "context['post'] = 'sent'"}
  - {id: all_sent, type: join}
  - {id: done, type: action, code: "context['done'] = sorted(k for k in ('email', 'sms', 'post') if k in context)"}
  - {id: end, type: end}
edges:
  - {from: start, to: how}
  - {from: how, to: email, condition: email}
  - {from: how, to: sms, condition: sms}
  - {from: how, to: post, condition: post}
  - {from: email, to: all_sent}
  - {from: sms, to: all_sent}
  - {from: post, to: all_sent}
  - {from: all_sent, to: done}
  - {from: done, to: end}
`)
	for _, tc := range []struct {
		channels []any
		want     []any
	}{
		{[]any{"email", "sms"}, []any{"email", "sms"}},
		{[]any{"post"}, []any{"post"}},
		{[]any{"email", "sms", "post", "sms"}, []any{"email", "post", "sms"}},
	} {
		wc := e.run(def, map[string]any{"channels": tc.channels})
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" || !equalJSON(got["done"], tc.want) {
			t.Errorf("channels %v: status %q (%s), done %v; want %v", tc.channels, wc.Status, wc.Error, got["done"], tc.want)
			continue
		}
		// The join went on once, with exactly what was chosen.
		nodes := e.chain(wc.ExecutionId)
		if j := visits(nodes, "all_sent"); len(j) != 1 {
			t.Errorf("channels %v: join visits %d, want 1", tc.channels, len(j))
		}
	}
	// An empty list is an error naming the node.
	wc := e.run(def, map[string]any{"channels": []any{}})
	if wc.Status != "failed" || !strings.Contains(wc.Error, `decision node "how": branch_decision is an empty list`) {
		t.Errorf("empty list: %q %q", wc.Status, wc.Error)
	}
}

func equalJSON(a, b any) bool {
	as, aok := a.([]any)
	bs, bok := b.([]any)
	if !aok || !bok || len(as) != len(bs) {
		return false
	}
	for i := range as {
		if as[i] != bs[i] {
			return false
		}
	}
	return true
}
