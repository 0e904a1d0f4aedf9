package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/graph-engine/engine"
)

// nova schedule refuses wrong arguments and schedules the engine could
// not run before it connects to anything, naming the problem.
func TestScheduleArguments(t *testing.T) {
	t.Setenv("NATS_URL", "nats://127.0.0.1:1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{nil, "Usage:"},
		{[]string{"run"}, `unknown command "run"`},
		{[]string{"add"}, "want exactly one WORKFLOW"},
		{[]string{"add", "orders"}, "want --cron EXPR"},
		{[]string{"add", "orders", "--cron", "@daily", "--every", "1h"}, "give --cron or --every, not both"},
		{[]string{"add", "orders", "--cron", "*/5 * * *"},
			`cron "*/5 * * *" has 4 fields; want 5 (minute hour day-of-month month day-of-week)`},
		{[]string{"add", "orders", "--cron", "@dayly"}, `did you mean "@daily"`},
		{[]string{"add", "orders", "--cron", "0 9 * * *", "--timezone", "Mars/Base"}, `timezone "Mars/Base" is not a known time zone`},
		{[]string{"add", "orders", "--every", "500ms"}, "every must be at least 1s"},
		{[]string{"add", "orders", "--every", "soon"}, `--every: must be a number of seconds or a duration`},
		{[]string{"add", "orders", "--every", "1m", "--timezone", "UTC"}, "applies to cron only"},
		{[]string{"add", "orders", "--every", "1m", "--catchup", "lates"}, `did you mean "latest"`},
		{[]string{"add", "orders", "--every", "1m", "--id", "a.b"}, `id "a.b" is not a single token`},
		{[]string{"add", "orders", "--every", "1m", "--id", strings.Repeat("x", 65)}, "longer than 64 characters"},
		{[]string{"add", "orders", "--every", "1m", "--set", "novalue"}, `--set "novalue": want key=value`},
		{[]string{"add", "orders", "--every", "1m", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"pause", "orders"}, "want WORKFLOW and ID"},
		{[]string{"delete", "orders", "a", "b"}, "want WORKFLOW and ID"},
		{[]string{"list", "orders"}, `unexpected argument "orders"`},
	} {
		code, out, errOut := runCLI(t.Context(), cmdSchedule, c.args...)
		if code != exitInvalid || out != "" || !strings.Contains(errOut, c.want) {
			t.Errorf("nova schedule %q: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.args, code, out, errOut, c.want)
		}
	}
}

// scheduleStack is an embedded NATS server with the graph engine running
// on it, which nova schedule reaches through NATS_URL.
func scheduleStack(ctx context.Context, t *testing.T, withEngine bool) *bus.Bus {
	t.Helper()
	b := devstacktest.Bus(ctx, t, "schedule-test")
	t.Setenv("NATS_URL", b.Conn().ConnectedUrl())
	if !withEngine {
		return b
	}
	settings := engine.DefaultSettings()
	settings.AllowPrompt = false
	log := slog.New(slog.DiscardHandler)
	eb := devstacktestConnect(ctx, t, b)
	e, err := engine.Start(ctx, settings, service.NewEnv(eb, nil, log, 1))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = e.Run(runCtx) }()
	t.Cleanup(func() { stop(); <-done })
	return b
}

// devstacktestConnect is a second connection to b's server, the engine's
// own.
func devstacktestConnect(ctx context.Context, t *testing.T, b *bus.Bus) *bus.Bus {
	t.Helper()
	eb, err := bus.Connect(ctx, b.Conn().ConnectedUrl(), bus.WithName("graph-engine"), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(eb.Close)
	return eb
}

// registerForSchedules registers a definition with the engine and waits
// until it is stored.
func registerForSchedules(ctx context.Context, t *testing.T, b *bus.Bus, yamlText string) {
	t.Helper()
	def, err := workflow.Parse([]byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "register-"+def.Name, bus.TypeWorkflowRegister,
		&novav1.RegisterWorkflow{Definition: def}, nil); err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(def)
	for ctx.Err() == nil {
		if kv, err := b.JetStream().KeyValue(ctx, bus.BucketWorkflows); err == nil {
			if e, err := kv.Get(ctx, def.Name); err == nil && bytes.Equal(e.Value(), want) {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("workflow %s not registered", def.Name)
}

const scheduledWorkflow = `name: orders
nodes:
  - {id: start, type: start}
  - {id: done, type: end}
edges:
  - {from: start, to: done}
schedules:
  - {id: nightly, cron: '0 2 * * *'}
`

// nova schedule adds, lists, pauses, resumes and deletes schedules as the
// graph engine stores them, and refuses what it cannot take.
func TestScheduleWithTheEngine(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	b := scheduleStack(ctx, t, true)
	registerForSchedules(ctx, t, b, scheduledWorkflow)

	var res scheduleResult
	runJSON := func(want int, args ...string) string {
		t.Helper()
		res = scheduleResult{}
		code, out, errOut := runCLI(ctx, cmdSchedule, args...)
		if code != want {
			t.Fatalf("nova schedule %q: exit %d, want %d; stdout %s, stderr %s", args, code, want, out, errOut)
		}
		if strings.Contains(strings.Join(args, " "), "--json") && out != "" {
			if err := json.Unmarshal([]byte(out), &res); err != nil {
				t.Fatalf("nova schedule %q --json: %v: %s", args, err, out)
			}
		}
		return out + errOut
	}

	runJSON(exitOK, "add", "orders", "--cron", "0 9 * * 1-5", "--timezone", "Europe/Madrid", "--id", "weekdays",
		"--set", "amount=9007199254740993", "--set", "rate=1.50", "--catchup", "latest", "--json")
	madrid, _ := time.LoadLocation("Europe/Madrid")
	if res.Outcome != scheduleCreated || res.Workflow != "orders" || res.ID != "weekdays" || res.Cron != "0 9 * * 1-5" ||
		res.Catchup != "latest" || res.CreatedAt == nil || len(res.NextTicks) != 3 || res.NextTicks[0].In(madrid).Hour() != 9 ||
		string(jsonvalue.Compact(res.Context)) != `{"amount":9007199254740993,"rate":1.50}` {
		t.Errorf("added %+v", res)
	}
	if out := runJSON(exitOK, "add", "orders", "--cron", "0 9 * * 1-5", "--timezone", "Europe/Madrid", "--id", "weekdays",
		"--set", "amount=9007199254740993", "--set", "rate=1.50", "--catchup", "latest"); !strings.Contains(out, "nothing was sent") {
		t.Errorf("the same again: %s", out)
	}
	out := runJSON(exitOK, "add", "orders", "--every", "90s", "--paused")
	if !strings.Contains(out, "created") || !strings.Contains(out, "every 1m30s") || !strings.Contains(out, "paused") {
		t.Errorf("an every schedule without id: %s", out)
	}

	var list []scheduleView
	_, listed, _ := runCLI(ctx, cmdSchedule, "list", "--workflow", "orders", "--json")
	if err := json.Unmarshal([]byte(listed), &list); err != nil || len(list) != 3 {
		t.Fatalf("list: %v: %s", err, listed)
	}
	if list[0].ID != "nightly" && list[1].ID != "nightly" || !list[1].FromDefinition && !list[0].FromDefinition {
		t.Errorf("list %s: want the definition's nightly among them", listed)
	}
	if _, table, _ := runCLI(ctx, cmdSchedule, "list"); !strings.Contains(table, "WORKFLOW") ||
		!strings.Contains(table, `cron "0 9 * * 1-5" Europe/Madrid`) || !strings.Contains(table, "definition") {
		t.Errorf("list table:\n%s", table)
	}

	runJSON(exitOK, "pause", "orders", "weekdays", "--json")
	if res.Outcome != schedulePaused || !res.Paused || len(res.NextTicks) != 0 {
		t.Errorf("paused %+v", res)
	}
	runJSON(exitOK, "pause", "orders", "weekdays", "--json")
	if res.Outcome != scheduleUnchanged {
		t.Errorf("paused again %+v", res)
	}
	runJSON(exitOK, "resume", "orders", "weekdays", "--json")
	if res.Outcome != scheduleResumed || res.Paused || len(res.NextTicks) != 3 {
		t.Errorf("resumed %+v", res)
	}
	runJSON(exitOK, "delete", "orders", "weekdays", "--json")
	if res.Outcome != scheduleDeleted || res.ID != "weekdays" {
		t.Errorf("deleted %+v", res)
	}
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketSchedules)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(ctx, "orders.weekdays"); err == nil {
		t.Error("the deleted schedule is still stored")
	}

	// Refused before anything is sent.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"pause", "orders", "weekdays"}, `workflow "orders" has no schedule "weekdays" (its schedules: `},
		{[]string{"add", "invoices", "--every", "1h"}, `workflow "invoices" is not registered`},
		{[]string{"add", "orders", "--every", "1h", "--id", "nightly"}, "declared in its definition"},
	} {
		if out := runJSON(exitInvalid, c.args...); !strings.Contains(out, c.want) {
			t.Errorf("nova schedule %q: %s; want %q", c.args, out, c.want)
		}
	}
	// A schedule of the definition is paused and deleted here too.
	runJSON(exitOK, "pause", "orders", "nightly", "--json")
	if res.Outcome != schedulePaused {
		t.Errorf("the definition's schedule paused: %+v", res)
	}
}

// A change the engine does not store within the wait fails (exit 1),
// saying it was sent.
func TestScheduleNotStored(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	b := scheduleStack(ctx, t, false)
	js := b.JetStream()
	for _, bucket := range []string{bus.BucketWorkflows, bus.BucketSchedules} {
		if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket}); err != nil {
			t.Fatal(err)
		}
	}
	kv, _ := js.KeyValue(ctx, bus.BucketWorkflows)
	def, _ := proto.Marshal(&novav1.WorkflowDefinition{Name: "orders"})
	if _, err := kv.Put(ctx, "orders", def); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(ctx, cmdSchedule, "add", "orders", "--every", "1h", "--id", "hourly", "--timeout", "300ms")
	if code != exitFailed || !strings.Contains(out, "the command was sent; the engine had not stored it within 300ms") {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The command is on the bus as the engine reads it.
	st, err := js.Stream(ctx, bus.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := st.GetLastMsgForSubject(ctx, bus.CommandSubject(bus.AgentGraphEngine))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := bus.DecodeNATS(raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	var put novav1.PutSchedule
	if err := bus.Decode(*ev, &put); err != nil || ev.Type() != bus.TypeSchedulePut || put.Workflow != "orders" ||
		put.Schedule.GetId() != "hourly" || put.Schedule.GetEverySeconds() != 3600 {
		t.Errorf("command %s: %v (%v)", ev.Type(), &put, err)
	}
	code, out, _ = runCLI(ctx, cmdSchedule, "add", "orders", "--every", "1h", "--id", "hourly2", "--timeout", "0", "--json")
	var res scheduleResult
	if code != exitOK || json.Unmarshal([]byte(out), &res) != nil || res.Outcome != scheduleSent || res.Error != "" {
		t.Errorf("--timeout 0: exit %d, %s", code, out)
	}
}
