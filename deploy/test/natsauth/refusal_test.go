package natsauth

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

// durable is a durable consumer a service declares, from the services' code.
type durable struct{ stream, name, owner string }

var agents = []string{userInputAnalyzer, userCodeGenerator, userCodeValidator, userOutputValidator}

func durables() []durable {
	ds := []durable{
		{bus.StreamCommands, bus.ConsumerEngineCommands, userGraphEngine},
		{bus.StreamEvents, bus.ConsumerEngineResults, userGraphEngine},
		{bus.StreamDeadLetters, bus.ConsumerEngineDeadLetters, userGraphEngine},
		{bus.StreamTimers, bus.ConsumerEngineTimers, userGraphEngine},
		{bus.StreamTimers, bus.ConsumerEngineSchedules, userGraphEngine},
		{bus.StreamCommands, sandboxservice.Consumer, userSandbox},
		{bus.StreamEvents, auditservice.Consumer, userAudit},
	}
	for _, a := range agents {
		ds = append(ds, durable{bus.StreamCommands, a, a})
	}
	return ds
}

// filterIn is a literal subject of stream (a published subject has no wildcards).
func filterIn(stream string) string {
	switch stream {
	case bus.StreamCommands:
		return bus.CommandSubject(bus.AgentGraphEngine)
	case bus.StreamDeadLetters:
		return bus.DeadLetterSubject(bus.AgentGraphEngine)
	case bus.StreamTimers:
		return bus.TimerFiredSubject("e1", "t1")
	}
	return bus.EventSubject("e1", bus.KindWorkflowCompleted)
}

// probe is one publish or subscribe of one user and whether the server must
// allow it.
type probe struct {
	user, op, subject string
	allowed           bool
}

func (p probe) String() string {
	verdict := "refused"
	if p.allowed {
		verdict = "allowed"
	}
	return fmt.Sprintf("%s %s %s %s", p.user, p.op, p.subject, verdict)
}

// probes is the permission matrix of the service users: for every user, the
// subjects of every service, each allowed only to the service that uses it.
func probes() []probe {
	serviceUsers := append([]string{userGraphEngine, userSandbox, userAudit}, agents...)
	serviceUsers = append(serviceUsers, userProducer, userGateway)
	resultSenders := append([]string{userSandbox}, agents...)
	isProducer := func(u string) bool { return u == userProducer || u == userGateway }
	const exec = "e1"

	var ps []probe
	add := func(user, op, subject string, allowed bool) {
		ps = append(ps, probe{user, op, subject, allowed})
	}
	for _, u := range serviceUsers {
		// Commands: producers start workflows and refinements, only the
		// engine commands agents, but for the gateway running code outside
		// any workflow (POST /v1/execute) in the sandbox.
		// The engine too: a sub-workflow's child is started (and
		// cancelled with its parent) by a command to the engine.
		add(u, "pub", bus.CommandSubject(bus.AgentGraphEngine), isProducer(u) || u == userGraphEngine)
		// A child's end, told to its parent, is the engine's own result.
		add(u, "pub", bus.EventSubject(exec, bus.KindChildCompleted), u == userGraphEngine)
		for _, a := range resultSenders {
			add(u, "pub", bus.CommandSubject(a), u == userGraphEngine || u == userGateway && a == userSandbox)
		}
		// Results: each agent answers only as itself, to the engine or as a
		// reply; the engine cannot forge one.
		for _, a := range resultSenders {
			add(u, "pub", bus.EventSubject(exec, bus.ResultKind(a)), u == a)
			add(u, "pub", bus.EventSubject(exec, bus.ReplyKind(a)), u == a)
		}
		// Facts of executions, refinements' included, come from the engine
		// only: no producer can forge a chain of work.
		for _, kind := range []string{bus.KindWorkflowStarted, bus.KindWorkflowCompleted, bus.KindNodeStarted, bus.KindNodeCompleted,
			bus.KindStepCompleted, bus.KindRefinement, bus.KindNodeWaiting, bus.KindExecutionCancelled, bus.KindSignalRejected} {
			add(u, "pub", bus.EventSubject(exec, kind), u == userGraphEngine)
		}
		// Dead letters: a service writes those of its own consumers.
		for _, d := range durables() {
			add(u, "pub", bus.DeadLetterSubject(d.name), u == d.owner)
		}
		// Durable consumers: only the owner declares, pulls and acknowledges.
		// Producers' ordered consumers may read NOVA_EVT, never through a
		// service's durable.
		for _, d := range durables() {
			own := u == d.owner
			add(u, "pub", fmt.Sprintf("$JS.API.CONSUMER.CREATE.%s.%s", d.stream, d.name), own)
			add(u, "pub", fmt.Sprintf("$JS.API.CONSUMER.CREATE.%s.%s.%s", d.stream, d.name, filterIn(d.stream)), false)
			add(u, "pub", fmt.Sprintf("$JS.API.CONSUMER.MSG.NEXT.%s.%s", d.stream, d.name), own)
			add(u, "pub", fmt.Sprintf("$JS.ACK.%s.%s.1.1.1.1.0", d.stream, d.name), own)
			add(u, "pub", fmt.Sprintf("$JS.API.CONSUMER.DELETE.%s.%s", d.stream, d.name), false)
		}
		add(u, "pub", "$JS.API.CONSUMER.CREATE.NOVA_EVT.watcher_1.nova.evt.e1.workflow.completed", isProducer(u))
		// One consumer for the completions (or the sandbox's answers) of
		// every execution a producer waits for (bus.Waits).
		add(u, "pub", "$JS.API.CONSUMER.CREATE.NOVA_EVT.watcher_1.nova.evt.*.workflow.completed", isProducer(u))
		add(u, "pub", "$JS.API.CONSUMER.CREATE.NOVA_EVT.watcher_1.nova.evt.*.reply.sandbox", isProducer(u))
		// Several filters, named in the request's body: the audit service
		// reads the executions' starts and ends to purge the stream, nova
		// signal a signal's outcome, the gateway its executions list
		// stream (never creating a durable's name, above).
		add(u, "pub", "$JS.API.CONSUMER.CREATE.NOVA_EVT.watcher_1", u == userAudit || isProducer(u))
		add(u, "pub", "$JS.API.CONSUMER.MSG.NEXT.NOVA_EVT.watcher_1", isProducer(u) || u == userAudit)
		// A stopped watch deletes its ordered consumer (never a durable, above).
		add(u, "pub", "$JS.API.CONSUMER.DELETE.NOVA_EVT.watcher_1", isProducer(u) || u == userAudit)
		add(u, "pub", "$JS.API.CONSUMER.DELETE.NOVA_DLQ.watcher_1", isProducer(u))
		add(u, "pub", "$JS.API.CONSUMER.DELETE.NOVA_CMD.watcher_1", false)
		add(u, "pub", "$JS.API.CONSUMER.CREATE.NOVA_CMD.watcher_1.nova.cmd.graph-engine", false)
		// Streams: declared by the services, destroyed by no one; the audit
		// service purges the events stream's front of what no one needs
		// (it lists the consumers to know).
		for _, st := range []string{bus.StreamCommands, bus.StreamEvents, bus.StreamDeadLetters, bus.StreamTimers} {
			add(u, "pub", "$JS.API.STREAM.UPDATE."+st, !isProducer(u))
			add(u, "pub", "$JS.API.STREAM.INFO."+st, !isProducer(u) || st != bus.StreamTimers)
			add(u, "pub", "$JS.API.STREAM.DELETE."+st, false)
			add(u, "pub", "$JS.API.STREAM.PURGE."+st, u == userAudit && st == bus.StreamEvents || u == userGraphEngine && st == bus.StreamTimers)
			add(u, "pub", "$JS.API.CONSUMER.LIST."+st, u == userAudit && st == bus.StreamEvents)
			add(u, "pub", "$JS.API.STREAM.MSG.DELETE."+st, false)
		}
		// Whether an ended execution's events are still kept (nova watch,
		// the gateway's event stream).
		add(u, "pub", "$JS.API.STREAM.MSG.GET."+bus.StreamEvents, isProducer(u))
		add(u, "pub", "$JS.API.STREAM.CREATE.ANYTHING", false)
		// Execution state: written by the engine, read by it, the gateway
		// and nova watch (an ended execution whose events are purged).
		add(u, "pub", "$KV.nova_executions."+exec, u == userGraphEngine)
		add(u, "pub", "$JS.API.DIRECT.GET.KV_nova_executions.$KV.nova_executions."+exec,
			u == userGraphEngine || isProducer(u))
		add(u, "pub", "$JS.API.STREAM.PURGE.KV_nova_executions", false)
		// Definitions: registered through the engine, never written directly.
		add(u, "pub", "$KV.nova_workflows.invoice", u == userGraphEngine)
		add(u, "pub", "$JS.API.DIRECT.GET.KV_nova_workflows.$KV.nova_workflows.invoice",
			u == userGraphEngine || isProducer(u))
		// The gateway lists them and their revisions (KV watches).
		add(u, "pub", "$JS.API.CONSUMER.CREATE.KV_nova_workflows.w1.$KV.nova_workflows.>", u == userGateway)
		add(u, "pub", "$JS.API.STREAM.PURGE.KV_nova_workflows", false)
		// Timers and schedules: set by the engine alone (the server fires
		// them), never forged by another; schedules are read by producers
		// and changed through commands to the engine.
		add(u, "pub", bus.TimerSubject(exec, "t1"), u == userGraphEngine)
		add(u, "pub", bus.TimerFiredSubject(exec, "t1"), false)
		add(u, "pub", bus.ScheduleSubject("invoice", "s1"), u == userGraphEngine)
		add(u, "pub", bus.ScheduleTickSubject("invoice", "s1"), false)
		add(u, "pub", "$KV.nova_schedules.invoice.s1", u == userGraphEngine)
		add(u, "pub", "$JS.API.DIRECT.GET.KV_nova_schedules.$KV.nova_schedules.invoice.s1", u == userGraphEngine || isProducer(u))
		add(u, "pub", "$JS.API.STREAM.PURGE.KV_nova_schedules", false)
		add(u, "pub", "$JS.API.STREAM.CREATE.KV_nova_schedules", u == userGraphEngine)
		add(u, "pub", "$JS.API.STREAM.UPDATE.KV_nova_schedules", u == userGraphEngine)
		add(u, "pub", "$JS.API.STREAM.MSG.DELETE.KV_nova_schedules", false)
		// Listing the schedules (the engine's catch-up, GET /v1/schedules,
		// nova schedule list) and waiting for the engine's write: KV watches.
		add(u, "pub", "$JS.API.CONSUMER.CREATE.KV_nova_schedules.w1.$KV.nova_schedules.>", u == userGraphEngine || isProducer(u))
		// Large values: the engine, the sandbox and producers.
		add(u, "pub", "$O.nova_values.C.x", u == userGraphEngine || u == userSandbox || isProducer(u))
		// The runtime description: written by the sandbox, read by the code
		// generator and validator, and by the engine (the code cache's key).
		add(u, "pub", "$O.nova_runtime.C.x", u == userSandbox)
		add(u, "pub", "$JS.API.DIRECT.GET.OBJ_nova_runtime.$O.nova_runtime.M.cHl0aG9u",
			u == userSandbox || u == userCodeGenerator || u == userCodeValidator || u == userGraphEngine)
		// The code cache: the engine's alone.
		add(u, "pub", "$KV.nova_codecache.k1", u == userGraphEngine)
		add(u, "pub", "$JS.API.DIRECT.GET.KV_nova_codecache.$KV.nova_codecache.k1", u == userGraphEngine)
		// The day counters of max_usd_per_day: the engine's alone (agents
		// get their allowance in the command).
		add(u, "pub", "$KV.nova_budget.w.2026-01-02", u == userGraphEngine)
		add(u, "pub", "$JS.API.DIRECT.GET.KV_nova_budget.$KV.nova_budget.w.2026-01-02", u == userGraphEngine)
		add(u, "pub", "$JS.API.STREAM.CREATE.KV_nova_budget", u == userGraphEngine)
		add(u, "pub", "$JS.API.STREAM.PURGE.KV_nova_budget", false)
		// A running map's items' results: the engine's alone, purged by
		// map when it finishes.
		add(u, "pub", "$KV.nova_map_results.e.bm9kZQ.1.0", u == userGraphEngine)
		add(u, "pub", "$JS.API.STREAM.PURGE.KV_nova_map_results", u == userGraphEngine)
		add(u, "pub", "$JS.API.CONSUMER.CREATE.KV_nova_map_results.x", u == userGraphEngine)
		add(u, "pub", "$JS.API.STREAM.UPDATE.OBJ_nova_runtime", u == userSandbox)
		// Programs' results kept until published: the sandbox's alone.
		add(u, "pub", "$KV.nova_sandbox_results.e.c3RlcA", u == userSandbox)
		add(u, "pub", "$JS.API.DIRECT.GET.KV_nova_sandbox_results.$KV.nova_sandbox_results.e.c3RlcA", u == userSandbox)
		add(u, "pub", "$JS.API.STREAM.PURGE.KV_nova_sandbox_results", false)
		// Subscriptions: a user reads only its own inbox; events come
		// through JetStream consumers, never core subscriptions.
		add(u, "sub", inboxPrefix(u)+".reply", true)
		// A cancelled execution: the sandbox and the agents stop its work.
		add(u, "sub", "nova.evt.*.execution.cancelled", u == userSandbox || slices.Contains(agents, u))
		add(u, "sub", bus.EventSubject(exec, bus.KindExecutionCancelled), u == userSandbox || slices.Contains(agents, u))
		add(u, "sub", "nova.evt.*.workflow.completed", false)
		add(u, "sub", "nova.evt.*.*.cancelled", false)
		for _, other := range serviceUsers {
			if other != u {
				add(u, "sub", inboxPrefix(other)+".>", false)
			}
		}
		for _, subject := range []string{"_INBOX.>", ">", "nova.>", "nova.evt.>", "nova.cmd.>", "nova.dlq.>", "nova.timer.>", "nova.schedule.>", "$JS.ACK.>"} {
			add(u, "sub", subject, false)
		}
	}
	return ps
}

// TestUsersMayUseOnlyTheirSubjects runs the permission matrix: each probe on
// a fresh connection of its user, then a flush, after which the server has
// answered. A refusal counts only when the server names the probed subject.
func TestUsersMayUseOnlyTheirSubjects(t *testing.T) {
	s := startServer(t)
	ps := probes()
	for _, p := range ps {
		t.Run(p.String(), func(t *testing.T) {
			v := &violations{}
			nc, err := nats.Connect(s.url(), append(clientOptions(p.user, v), nats.NoReconnect())...)
			if err != nil {
				t.Fatalf("connect: %v", err)
			}
			defer nc.Close()
			switch p.op {
			case "pub":
				err = nc.Publish(p.subject, []byte("probe"))
			case "sub":
				_, err = nc.SubscribeSync(p.subject)
			}
			if err != nil {
				t.Fatalf("%s: %v", p.op, err)
			}
			if err := nc.Flush(); err != nil {
				t.Fatalf("flush: %v", err)
			}
			// The server's -ERR precedes its PONG, so LastError is set by now.
			last := nc.LastError()
			switch {
			case p.allowed && last != nil:
				t.Errorf("refused: %v", last)
			case !p.allowed && last == nil:
				t.Errorf("allowed, want a permissions violation")
			case !p.allowed && !refusalNames(last, p):
				t.Errorf("error %q does not name the probed subject", last)
			}
		})
	}

	// The matrix must exercise both verdicts for every user, or it proves
	// nothing about that user.
	for _, u := range []string{userGraphEngine, userSandbox, userAudit, userCodeGenerator, userProducer} {
		var allowed, refused int
		for _, p := range ps {
			if p.user == u && p.allowed {
				allowed++
			} else if p.user == u {
				refused++
			}
		}
		if allowed == 0 || refused == 0 {
			t.Errorf("user %s: %d allowed and %d refused probes", u, allowed, refused)
		}
	}
}

func refusalNames(err error, p probe) bool {
	msg := strings.ToLower(err.Error())
	kind := map[string]string{"pub": "publish", "sub": "subscription"}[p.op]
	return strings.Contains(msg, "permissions violation") && strings.Contains(msg, kind) &&
		strings.Contains(err.Error(), fmt.Sprintf("%q", p.subject))
}

// TestNamedRefusals are the refusals an operator asks about first, through
// the same API the services use.
func TestNamedRefusals(t *testing.T) {
	s := startServer(t)
	admin, adminViolations := s.connectBus(t, t.Context(), userAdmin)
	if err := admin.EnsureStreams(t.Context()); err != nil {
		t.Fatalf("admin declares the streams: %v", err)
	}

	t.Run("sandbox cannot take the graph engine's commands", func(t *testing.T) {
		b, v := s.connectBus(t, t.Context(), userSandbox)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		_, err := b.DeclareConsumer(ctx, bus.Consumer{Stream: bus.StreamCommands, Durable: bus.ConsumerEngineCommands,
			Filters: []string{bus.CommandSubject(bus.AgentGraphEngine)}})
		if err == nil {
			t.Fatal("the sandbox declared the graph engine's consumer")
		}
		wantViolation(t, v, "$JS.API.CONSUMER.CREATE.NOVA_CMD.graph-engine")
	})
	t.Run("sandbox cannot start workflows", func(t *testing.T) {
		b, v := s.connectBus(t, t.Context(), userSandbox)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		ev, err := bus.NewEvent("probe-1", bus.TypeWorkflowStart, "probe", &novav1.StartWorkflow{WorkflowName: "probe"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(ctx, bus.CommandSubject(bus.AgentGraphEngine), ev); err == nil {
			t.Fatal("published a start command as the sandbox")
		}
		wantViolation(t, v, "nova.cmd.graph-engine")
	})
	t.Run("audit publishes nothing", func(t *testing.T) {
		b, v := s.connectBus(t, t.Context(), userAudit)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		ev, err := bus.NewEvent("probe-2", bus.TypeWorkflowCompleted, "probe", &novav1.WorkflowCompleted{ExecutionId: "e1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Publish(ctx, bus.EventSubject("e1", bus.KindWorkflowCompleted), ev); err == nil {
			t.Fatal("published a completion as the audit service")
		}
		wantViolation(t, v, "nova.evt.e1.workflow.completed")
	})
	t.Run("code-generator cannot listen to events", func(t *testing.T) {
		b, v := s.connectBus(t, t.Context(), userCodeGenerator)
		if _, err := b.Conn().SubscribeSync("nova.evt.>"); err != nil {
			t.Fatal(err)
		}
		_ = b.Conn().Flush()
		wantViolation(t, v, "nova.evt.>")
	})
	t.Run("producers cannot drain the audit consumer", func(t *testing.T) {
		b, v := s.connectBus(t, t.Context(), userProducer)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		cons, err := b.JetStream().Consumer(ctx, bus.StreamEvents, auditservice.Consumer)
		if err != nil {
			// The audit consumer does not exist here; pulling by name is what matters.
			_ = b.Conn().PublishRequest("$JS.API.CONSUMER.MSG.NEXT.NOVA_EVT.audit", inboxPrefix(userProducer)+".x", []byte(`{"batch":1}`))
			_ = b.Conn().Flush()
		} else {
			_, _ = cons.Fetch(1)
		}
		wantViolation(t, v, "$JS.API.CONSUMER.MSG.NEXT.NOVA_EVT.audit")
	})
	t.Run("sandbox cannot set a timer", func(t *testing.T) {
		b, v := s.connectBus(t, t.Context(), userSandbox)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		ev, err := bus.NewEvent("probe-3", bus.TypeTimerFired, "probe", &novav1.TimerFired{ExecutionId: "e1", TimerId: "t1"})
		if err != nil {
			t.Fatal(err)
		}
		err = b.PublishAll(ctx, []bus.Outgoing{{Subject: bus.TimerSubject("e1", "t1"), Event: ev,
			Headers: bus.ScheduleAt(time.Now().Add(time.Hour), bus.TimerFiredSubject("e1", "t1"))}})
		if err == nil {
			t.Fatal("set a timer as the sandbox")
		}
		wantViolation(t, v, bus.TimerSubject("e1", "t1"))
	})
	t.Run("only the graph engine cancels a timer", func(t *testing.T) {
		b, v := s.connectBus(t, t.Context(), userSandbox)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		if err := b.CancelSchedule(ctx, bus.TimerSubject("e1", "t1")); err == nil {
			t.Fatal("purged a timer as the sandbox")
		}
		wantViolation(t, v, "$JS.API.STREAM.PURGE.NOVA_TIMERS")
	})
	t.Run("gateway reads schedules but cannot write one", func(t *testing.T) {
		if _, err := admin.JetStream().CreateKeyValue(t.Context(), jetstream.KeyValueConfig{Bucket: bus.BucketSchedules}); err != nil {
			t.Fatal(err)
		}
		b, v := s.connectBus(t, t.Context(), userGateway)
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
		defer cancel()
		kv, err := b.JetStream().KeyValue(ctx, bus.BucketSchedules)
		if err != nil {
			t.Fatalf("open the schedules: %v (refused: %v)", err, v.list())
		}
		if _, err := kv.Get(ctx, "invoice.s1"); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Fatalf("read a schedule: %v (refused: %v)", err, v.list())
		}
		if _, err := kv.Put(ctx, "invoice.s1", []byte("forged")); err == nil {
			t.Fatal("wrote a schedule as the gateway")
		}
		wantViolation(t, v, "$KV.nova_schedules.invoice.s1")
	})
	if got := adminViolations.list(); len(got) > 0 {
		t.Errorf("admin was refused: %v", got)
	}
}

// wantViolation waits briefly for the asynchronous permissions violation
// naming subject.
func wantViolation(t *testing.T, v *violations, subject string) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for {
		if slices.ContainsFunc(v.list(), func(e string) bool { return strings.Contains(e, fmt.Sprintf("%q", subject)) }) {
			return
		}
		select {
		case <-deadline:
			t.Fatalf("no permissions violation for %q; got %v", subject, v.list())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
