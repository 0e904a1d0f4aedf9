package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

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

// runTimed runs def with an empty context to its end, and says how long
// that took from before its start.
func (e *env) runTimed(def *novav1.WorkflowDefinition) (*novav1.WorkflowCompleted, time.Duration) {
	e.t.Helper()
	began := time.Now()
	wc := e.run(def, map[string]any{})
	return wc, time.Since(began)
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
	wc, took := e.runTimed(def)
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
	wc, took := e.runTimed(def)
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

func TestKeptSignals(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: early-approval
signals: {keep: 5, keep_for: 10m}
nodes:
  - {id: start, type: start}
  - {id: prepare, type: sleep, duration: 1s}
  - id: approve
    type: wait
    signal: approve
    schema: {type: object, required: [ok], properties: {ok: {type: boolean}}}
  - {id: end, type: end}
edges:
  - {from: start, to: prepare}
  - {from: prepare, to: approve}
  - {from: approve, to: end}
`)
	exec, err := e.client.Start(e.ctx, def, "", map[string]any{})
	if err != nil {
		t.Fatal(err)
	}
	// Sent while prepare sleeps, about 1 s before the wait node is reached.
	e.waitingFor(exec.ID, "prepare", "sleep")
	evID := e.signalExec(exec.ID, "approve", map[string]any{"ok": true})
	var kept novav1.SignalKept
	if _, err := e.waitMsg(bus.StreamEvents, bus.EventSubject(exec.ID, bus.KindSignalKept), func(m jetstream.Msg) bool {
		return decodeMsg(m, &kept) == nil && kept.SignalEventId == evID
	}); err != nil {
		t.Fatalf("the early signal was not kept: %v", err)
	}
	if kept.Kept != 1 || kept.Signal != "approve" {
		t.Errorf("kept %+v", &kept)
	}
	// A signal no wait node of the workflow waits for is refused, naming why.
	rej := e.rejection(exec.ID, e.signalExec(exec.ID, "nobody", map[string]any{}))
	mustContain(t, "signal nobody waits for", rej.Reason, `no wait node of workflow "early-approval" waits for signal "nobody"`)
	wc, err := exec.Wait(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != "succeeded" || ctxMap(wc.Context)["ok"] != true {
		t.Fatalf("status %q (%s), context %s; want the kept signal's payload taken", wc.Status, wc.Error, wc.Context.GetRaw())
	}
	nodes := e.chain(exec.ID)
	if v := visitOf(nodes, "approve"); v == nil || v.Status != "success" || v.Signal == nil {
		t.Errorf("approve: %+v", v)
	}
}

func TestMapCompletion(t *testing.T) {
	e := startEnv(t)
	host, runs := startRunLog(t)
	items := make([]any, 100)
	for i := range items {
		items[i] = i
	}
	// Each item calls the counter as it starts, then works a moment.
	def := parse(t, fmt.Sprintf(`
name: first-ten
nodes:
  - {id: start, type: start}
  - id: each
    type: map
    items: xs
    concurrency: 4
    complete_when: {succeeded: 10}
    network: true
    allow_hosts: [%[1]q]
    code: |
      import requests, time
      requests.get("http://%[1]s/item/%%d" %% context["index"], timeout=10).raise_for_status()
      time.sleep(0.2)
      context["result"] = context["item"] * 2
  - {id: end, type: end}
edges: [{from: start, to: each}, {from: each, to: end}]
`, host))
	wc := e.run(def, map[string]any{"xs": items})
	got := ctxMap(wc.Context)
	results, _ := got["results"].([]any)
	if wc.Status != "succeeded" || len(results) < 10 {
		t.Fatalf("status %q (%s), %d results; want succeeded with at least 10", wc.Status, wc.Error, len(results))
	}
	started := runs.total("/item/")
	t.Logf("%d items started, %d results, of 100 (complete_when succeeded 10, concurrency 4)", started, len(results))
	if started > 10+4 {
		t.Errorf("%d items started; want at most 14 (10 + the concurrency)", started)
	}
	nodes := e.chain(wc.ExecutionId)
	cancelled := 0
	for _, v := range visits(nodes, "each") {
		if v.Item != nil && v.Status == "cancelled" {
			cancelled++
			mustContain(t, "cancelled item", v.ErrorMessage, `map "each" completed: 10 of its items succeeded (complete_when)`)
		}
	}
	// The engine started results + cancelled items; the programs of some
	// cancelled ones never reached the counter.
	t.Logf("the engine started %d items: %d finished, %d cancelled", len(results)+cancelled, len(results), cancelled)
	if n := len(results) + cancelled; n > 10+4 || n < started {
		t.Errorf("%d results and %d cancelled items, %d runs counted; want at most 14 items, each run one of them", len(results), cancelled, started)
	}
	// complete_when more than the list: the node fails naming both.
	wc = e.run(def, map[string]any{"xs": []any{1, 2, 3}})
	if wc.Status != "failed" || !strings.Contains(wc.Error, `complete_when succeeded: 10 is more than the 3 items of "xs"`) {
		t.Errorf("a short list: %q %q", wc.Status, wc.Error)
	}
}

func TestRecursion(t *testing.T) {
	e := startEnv(t)
	// countdown calls itself until n is 0; each level counts itself on the
	// way back.
	countdown := parse(t, `
name: countdown
nodes:
  - {id: start, type: start}
  - {id: more, type: decision, code: "context['branch_decision'] = 'yes' if context['n'] > 0 else 'no'"}
  - {id: down, type: action, code: "context['n'] = context['n'] - 1"}
  - {id: again, type: workflow, workflow: countdown, max_depth: 5}
  - {id: count, type: action, code: "context['levels'] = context.get('levels', 0) + 1"}
  - {id: end, type: end}
edges:
  - {from: start, to: more}
  - {from: more, to: down, condition: "yes"}
  - {from: more, to: end, condition: "no"}
  - {from: down, to: again}
  - {from: again, to: count}
  - {from: count, to: end}
`)
	if err := e.client.Register(e.ctx, countdown); err != nil {
		t.Fatal(err)
	}
	run := func(name string, initial map[string]any) *novav1.WorkflowCompleted {
		t.Helper()
		exec, err := e.client.Start(e.ctx, nil, name, initial)
		if err != nil {
			t.Fatal(err)
		}
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return wc
	}
	wc := run("countdown", map[string]any{"n": 3})
	if got := ctxMap(wc.Context); wc.Status != "succeeded" || got["levels"] != float64(3) || got["n"] != float64(0) {
		t.Errorf("countdown 3: %q (%s), context %v; want 3 levels", wc.Status, wc.Error, got)
	}
	// Past max_depth: the node that would go deeper fails, naming the chain.
	wc = run("countdown", map[string]any{"n": 8})
	if wc.Status != "failed" {
		t.Fatalf("countdown 8: %q, want failed at max_depth", wc.Status)
	}
	mustContain(t, "too deep", wc.Error, `would run 6 sub-workflow calls deep, past max_depth 5`,
		"countdown -> countdown -> countdown -> countdown -> countdown -> countdown -> countdown")

	// Mutual recursion, registered in either order: ping calls pong (not
	// registered yet), pong calls ping.
	ping := parse(t, `
name: ping
nodes:
  - {id: start, type: start}
  - {id: more, type: decision, code: "context['branch_decision'] = 'yes' if context['n'] > 0 else 'no'"}
  - {id: hit, type: action, code: "context['n'] -= 1\ncontext['trail'] = context.get('trail', '') + 'i'"}
  - {id: other, type: workflow, workflow: pong}
  - {id: end, type: end}
edges:
  - {from: start, to: more}
  - {from: more, to: hit, condition: "yes"}
  - {from: more, to: end, condition: "no"}
  - {from: hit, to: other}
  - {from: other, to: end}
`)
	pong := parse(t, strings.NewReplacer("name: ping", "name: pong", "workflow: pong", "workflow: ping", "+ 'i'", "+ 'o'").Replace(`
name: ping
nodes:
  - {id: start, type: start}
  - {id: more, type: decision, code: "context['branch_decision'] = 'yes' if context['n'] > 0 else 'no'"}
  - {id: hit, type: action, code: "context['n'] -= 1\ncontext['trail'] = context.get('trail', '') + 'i'"}
  - {id: other, type: workflow, workflow: pong}
  - {id: end, type: end}
edges:
  - {from: start, to: more}
  - {from: more, to: hit, condition: "yes"}
  - {from: more, to: end, condition: "no"}
  - {from: hit, to: other}
  - {from: other, to: end}
`))
	for _, def := range []*novav1.WorkflowDefinition{ping, pong} {
		if err := e.client.Register(e.ctx, def); err != nil {
			t.Fatalf("register %s: %v", def.Name, err)
		}
	}
	wc = run("ping", map[string]any{"n": 4})
	if got := ctxMap(wc.Context); wc.Status != "succeeded" || got["trail"] != "ioio" {
		t.Errorf("ping 4: %q (%s), context %v; want trail ioio", wc.Status, wc.Error, got)
	}
}

func TestBoundaryEvents(t *testing.T) {
	e := startEnv(t)
	results := e.sandboxResults()
	t.Run("a timer cancels a slow program and the line goes on", func(t *testing.T) {
		def := parse(t, `
name: boundary-timer
nodes:
  - {id: start, type: start}
  - id: slow
    type: action
    code: "import time\ntime.sleep(10)\ncontext['slow'] = True"
    on: [{after: 1s, goto: too_slow}]
  - {id: too_slow, type: action, code: "context['gave_up'] = True"}
  - {id: end, type: end}
edges:
  - {from: start, to: slow}
  - {from: slow, to: end}
  - {from: too_slow, to: end}
`)
		wc, took := e.runTimed(def)
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" || got["gave_up"] != true || got["slow"] != nil {
			t.Fatalf("status %q (%s), context %v; want the boundary's path", wc.Status, wc.Error, got)
		}
		t.Logf("went on %s after the start (after: 1s; the program sleeps 10 s)", took.Round(time.Millisecond))
		if took >= 8*time.Second {
			t.Errorf("took %s: the program ran to its end", took)
		}
		nodes := e.chain(wc.ExecutionId)
		if v := visitOf(nodes, "slow"); v == nil || v.Status != "cancelled" || !strings.Contains(v.ErrorMessage, `the line goes on at "too_slow" (boundary of node "slow")`) {
			t.Errorf("visit of slow: %+v", v)
		}
		if res := e.resultOf(results, wc.ExecutionId, "slow"); res.ErrorKind != runner.KindCancelled {
			t.Errorf("slow's program: %s %s, want killed", res.Status, res.ErrorKind)
		}
	})
	t.Run("a signal interrupts a sleep", func(t *testing.T) {
		def := parse(t, `
name: boundary-signal
nodes:
  - {id: start, type: start}
  - id: nap
    type: sleep
    duration: 1h
    on: [{signal: stop, goto: stopped}]
  - {id: stopped, type: action, code: "context['stopped'] = context['why']"}
  - {id: end, type: end}
edges:
  - {from: start, to: nap}
  - {from: nap, to: end}
  - {from: stopped, to: end}
`)
		exec, err := e.client.Start(e.ctx, def, "", map[string]any{})
		if err != nil {
			t.Fatal(err)
		}
		e.waitingFor(exec.ID, "nap", "sleep")
		e.signalExec(exec.ID, "stop", map[string]any{"why": "not needed"})
		wc, err := exec.Wait(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		if wc.Status != "succeeded" || ctxMap(wc.Context)["stopped"] != "not needed" {
			t.Fatalf("status %q (%s), context %s", wc.Status, wc.Error, wc.Context.GetRaw())
		}
		if timers := e.subjects(bus.StreamTimers, busname.TimerSubject(wc.ExecutionId, "*")); len(timers) != 0 {
			t.Errorf("timers left: %v", timers)
		}
	})
	t.Run("a non-interrupting timer starts a line beside the node", func(t *testing.T) {
		def := parse(t, `
name: boundary-remind
nodes:
  - {id: start, type: start}
  - id: nap
    type: sleep
    duration: 2s
    on: [{after: 500ms, goto: remind, interrupt: false}]
  - {id: remind, type: action, code: "context['reminded'] = True"}
  - {id: woke, type: action, code: "context['woke'] = True"}
  - {id: end, type: end}
  - {id: reminder_sent, type: end}
edges:
  - {from: start, to: nap}
  - {from: nap, to: woke}
  - {from: woke, to: end}
  - {from: remind, to: reminder_sent}
`)
		wc := e.run(def, map[string]any{})
		got := ctxMap(wc.Context)
		if wc.Status != "succeeded" || got["reminded"] != true || got["woke"] != true {
			t.Fatalf("status %q (%s), context %v; want both the reminder and the node's own way", wc.Status, wc.Error, got)
		}
		nodes := e.chain(wc.ExecutionId)
		if v := visitOf(nodes, "nap"); v == nil || v.Status != "success" {
			t.Errorf("nap: %+v; want it to go on", v)
		}
	})
	t.Run("a workflow node is a region a boundary cancels", func(t *testing.T) {
		child := parse(t, `
name: long-child
nodes:
  - {id: start, type: start}
  - {id: wait_long, type: sleep, duration: 1h}
  - {id: end, type: end}
edges: [{from: start, to: wait_long}, {from: wait_long, to: end}]
`)
		if err := e.client.Register(e.ctx, child); err != nil {
			t.Fatal(err)
		}
		def := parse(t, `
name: region
nodes:
  - {id: start, type: start}
  - id: region
    type: workflow
    workflow: long-child
    on: [{after: 1s, goto: timed_out}]
  - {id: timed_out, type: action, code: "context['timed_out'] = True"}
  - {id: end, type: end}
edges:
  - {from: start, to: region}
  - {from: region, to: end}
  - {from: timed_out, to: end}
`)
		wc := e.run(def, map[string]any{})
		if wc.Status != "succeeded" || ctxMap(wc.Context)["timed_out"] != true {
			t.Fatalf("status %q (%s), context %s", wc.Status, wc.Error, wc.Context.GetRaw())
		}
		nodes := e.chain(wc.ExecutionId)
		if v := visitOf(nodes, "region"); v == nil || v.Status != "cancelled" {
			t.Fatalf("region: %+v", v)
		}
		childID := wc.ExecutionId + "_region_1"
		e.eventually(30*time.Second, "the child "+childID+" is cancelled", func() bool {
			st := e.state(childID)
			return st != nil && st.Status == "cancelled"
		})
	})
}

func TestMapWithoutWaiting(t *testing.T) {
	e := startEnv(t)
	def := parse(t, `
name: fire-and-forget
nodes:
  - {id: start, type: start}
  - id: notify_all
    type: map
    items: xs
    wait: false
    code: "import time\ntime.sleep(0.5)\ncontext['result'] = context['item']"
  - {id: go_on, type: action, code: "context['went_on'] = True"}
  - {id: end, type: end}
edges: [{from: start, to: notify_all}, {from: notify_all, to: go_on}, {from: go_on, to: end}]
`)
	wc := e.run(def, map[string]any{"xs": []any{1, 2, 3}})
	got := ctxMap(wc.Context)
	if wc.Status != "succeeded" || got["went_on"] != true || got["results"] != nil {
		t.Fatalf("status %q (%s), context %v; want went_on, no results", wc.Status, wc.Error, got)
	}
	nodes := e.chain(wc.ExecutionId)
	goOn, each := visitOf(nodes, "go_on"), (*chainstore.NodeDoc)(nil)
	for _, v := range visits(nodes, "notify_all") {
		if v.Item == nil {
			v := v
			each = &v
		}
	}
	if goOn == nil || each == nil || each.Status != "success" {
		t.Fatalf("go_on %+v, notify_all %+v", goOn, each)
	}
	t.Logf("go_on ended %s before the map did", each.CompletedAt.Sub(*goOn.CompletedAt).Round(time.Millisecond))
	if !goOn.CompletedAt.Before(*each.CompletedAt) {
		t.Errorf("go_on ended at %s, after the map (%s): the line waited for the items", goOn.CompletedAt, each.CompletedAt)
	}
}
