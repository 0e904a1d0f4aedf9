package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

// A program runs once per delivery of its command that reaches it, counted
// from outside (an HTTP counter the program calls), with the sandbox as the
// process it is in production: while the events stream refuses its result,
// the result is kept and published again, never run again; and a kill -9
// of the sandbox process after a refused publish leaves it kept, so the
// sandbox started after it publishes it on the command's next delivery.

// buildSandbox builds the sandbox binary once per test run.
func buildSandbox(t *testing.T) string {
	t.Helper()
	return sandboxBuild.get(t, "sandbox", filepath.Join("..", "..", "sandbox"))
}

func TestKeptResultSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sandbox and kills it")
	}
	if _, err := exec.LookPath("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	bin := buildSandbox(t)
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	b, err := bus.Connect(ctx, n.URL(), bus.WithName("kept-kill-test"), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	var hits sync.Map // step id -> *atomic.Int64
	counter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := hits.LoadOrStore(r.URL.Query().Get("step"), &atomic.Int64{})
		c.(*atomic.Int64).Add(1)
		fmt.Fprint(w, "counted")
	}))
	defer counter.Close()
	host := strings.TrimPrefix(counter.URL, "http://")
	runs := func(step string) int64 {
		if c, ok := hits.Load(step); ok {
			return c.(*atomic.Int64).Load()
		}
		return 0
	}
	results, err := b.Conn().SubscribeSync(bus.EventFilter(bus.KindSandboxResult))
	if err != nil {
		t.Fatal(err)
	}
	result := func(step string) *novav1.CodeExecuted {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); {
			m, err := results.NextMsg(time.Second)
			if err != nil {
				continue
			}
			var res novav1.CodeExecuted
			if ev, err := bus.DecodeNATS(m.Header, m.Data); err == nil && bus.Decode(*ev, &res) == nil && res.StepId == step {
				return &res
			}
		}
		t.Fatalf("no result of %s", step)
		return nil
	}
	dir := t.TempDir()
	sandbox := &loadgen.Proc{Name: "sandbox", Path: bin, Log: filepath.Join(dir, "sandbox.log"),
		Env: loadgen.BaseEnv("NATS_URL="+n.URL(), "HEALTH_ADDR=127.0.0.1:0", "LOG_LEVEL=info")}
	start := func() {
		t.Helper()
		if err := sandbox.Start(); err != nil {
			t.Fatal(err)
		}
		if err := loadgen.WaitPulling(ctx, b.JetStream(), bus.StreamCommands, sandboxservice.Consumer); err != nil {
			t.Fatalf("%v\n%s", err, sandbox.Describe())
		}
	}
	start()
	t.Cleanup(sandbox.Stop)

	// refuseResults makes the events stream refuse every result (a message
	// larger than 64 bytes), or take them again.
	events, err := b.JetStream().Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	refuseResults := func(refuse bool) {
		t.Helper()
		cfg := events.CachedInfo().Config
		cfg.MaxMsgSize = -1
		if refuse {
			cfg.MaxMsgSize = 64
		}
		if events, err = b.JetStream().UpdateStream(ctx, cfg); err != nil {
			t.Fatal(err)
		}
	}
	kept, err := b.JetStream().KeyValue(ctx, sandboxservice.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	// send publishes a program that calls the counter, and waits until its
	// result is kept: it ran, and its publish is refused.
	var seq atomic.Int64
	send := func() string {
		t.Helper()
		execID := fmt.Sprintf("kept-kill-%d", seq.Add(1))
		step := execID + "/node/1/1"
		code := fmt.Sprintf("import requests\nrequests.get('http://%s/', params={'step': %q}, timeout=10).raise_for_status()\ncontext['ran'] = True", host, step)
		cmd := &novav1.ExecuteCode{ExecutionId: execID, NodeId: "node", StepId: step, Code: code, TimeoutSeconds: 60, Stage: "TASK",
			Network: true, AllowHosts: []string{host}}
		if err := b.PublishProto(ctx, bus.CommandSubject(bus.AgentSandbox), step, bus.TypeSandboxExecute, cmd, nil); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
			keys, err := kept.ListKeysFiltered(ctx, execID+".>")
			if err == nil {
				for range keys.Keys() {
					return step
				}
			} else if !errors.Is(err, jetstream.ErrNoKeysFound) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("the result of %s was not kept\n%s", step, sandbox.Describe())
			}
		}
	}
	// refused waits until the sandbox's publish of a result was refused and
	// its command delivered again: more redeliveries than before.
	redelivered := func() int {
		t.Helper()
		c, err := b.JetStream().Consumer(ctx, bus.StreamCommands, sandboxservice.Consumer)
		if err != nil {
			t.Fatal(err)
		}
		info, err := c.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.NumRedelivered
	}
	// settled waits until the sandbox acknowledged every command so far,
	// so that the redeliveries counted next are the next command's.
	settled := func() {
		t.Helper()
		if err := loadgen.WaitIdle(ctx, b.JetStream(), bus.StreamCommands, sandboxservice.Consumer); err != nil {
			t.Fatal(err)
		}
	}
	refused := func(before int) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); redelivered() <= before; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the result's publish was not refused\n%s", sandbox.Describe())
			}
		}
	}
	check := func(step string) {
		t.Helper()
		res := result(step)
		if res.Status != "success" || !strings.Contains(string(res.ContextUpdates.GetRaw()), `"ran":true`) {
			t.Errorf("result of %s: %s %s %s", step, res.Status, res.Error, res.ContextUpdates.GetRaw())
		}
		if n := runs(step); n != 1 {
			t.Errorf("the program of %s ran %d times, want 1", step, n)
		} else {
			t.Logf("%s: ran once, its result published", step)
		}
	}

	t.Run("publish refused, then taken", func(t *testing.T) {
		settled()
		refuseResults(true)
		before := redelivered()
		step := send()
		refused(before)
		refuseResults(false)
		check(step)
	})

	t.Run("kill -9 after a refused publish", func(t *testing.T) {
		settled()
		refuseResults(true)
		before := redelivered()
		step := send()
		refused(before)
		if err := sandbox.Kill(); err != nil {
			t.Fatal(err)
		}
		if n := runs(step); n != 1 {
			t.Fatalf("the program ran %d times before the kill, want 1", n)
		}
		refuseResults(false)
		start()
		check(step)
	})
}
