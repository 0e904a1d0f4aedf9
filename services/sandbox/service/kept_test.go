package service_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/runner"
	"github.com/novaflow/nova/services/sandbox/service"
)

// keptRig is sandbox replicas on one embedded NATS server, a client that
// sends them programs, and an HTTP counter the programs call: what the
// counter counted is how many times a program ran, seen from outside.
type keptRig struct {
	t       *testing.T
	ctx     context.Context
	url     string
	client  *bus.Bus
	values  *valueref.Store
	results *nats.Subscription
	host    string
	hits    sync.Map // step id -> *atomic.Int64
}

func newKeptRig(t *testing.T) *keptRig {
	t.Helper()
	if _, err := exec.LookPath("/usr/bin/bwrap"); err != nil {
		t.Skip("bubblewrap is not installed")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	t.Cleanup(cancel)
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	k := &keptRig{t: t, ctx: ctx, url: n.URL()}
	counter := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := k.hits.LoadOrStore(r.URL.Query().Get("step"), &atomic.Int64{})
		c.(*atomic.Int64).Add(1)
		fmt.Fprint(w, "counted")
	}))
	t.Cleanup(counter.Close)
	k.host = strings.TrimPrefix(counter.URL, "http://")
	k.client = k.connect("kept-test")
	if err := k.client.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	if k.values, err = valueref.Open(ctx, k.client.JetStream(), 0, 1); err != nil {
		t.Fatal(err)
	}
	if k.results, err = k.client.Conn().SubscribeSync(bus.EventFilter(bus.KindSandboxResult)); err != nil {
		t.Fatal(err)
	}
	return k
}

func (k *keptRig) connect(name string) *bus.Bus {
	k.t.Helper()
	b, err := bus.Connect(k.ctx, k.url, bus.WithName(name), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(b.Close)
	return b
}

// replica starts a sandbox replica on its own connection; stop ends it.
func (k *keptRig) replica(b *bus.Bus) (stop func()) {
	k.t.Helper()
	work, err := os.MkdirTemp("", "nova-kept-")
	if err != nil {
		k.t.Fatal(err)
	}
	if err := os.Chmod(work, 0o711); err != nil {
		k.t.Fatal(err)
	}
	r, err := runner.New(runner.Config{WorkDir: work, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		k.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(k.ctx)
	done := make(chan error, 1)
	go func() {
		done <- service.Run(ctx, service.Deps{Bus: b, Runner: r, Values: k.values, Logger: slog.New(slog.DiscardHandler), Workers: 2})
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			<-done
			r.Close()
			os.RemoveAll(work)
		})
	}
	k.t.Cleanup(stop)
	return stop
}

var keptSeq atomic.Int64

// send publishes code as a command of a new step, which calls the counter
// first, and returns the step id.
func (k *keptRig) send(code string) string {
	k.t.Helper()
	execution := fmt.Sprintf("kept-%d-%d", time.Now().UnixNano(), keptSeq.Add(1))
	step := execution + "/node/1/1"
	code = fmt.Sprintf("import requests\nrequests.get('http://%s/', params={'step': %q}, timeout=10).raise_for_status()\n%s", k.host, step, code)
	cmd := &novav1.ExecuteCode{ExecutionId: execution, NodeId: "node", StepId: step, Code: code, TimeoutSeconds: 60, Stage: "TASK",
		Network: true, AllowHosts: []string{k.host}}
	if err := k.client.PublishProto(k.ctx, bus.CommandSubject(bus.AgentSandbox), step, bus.TypeSandboxExecute, cmd, nil); err != nil {
		k.t.Fatal(err)
	}
	return step
}

// result waits for the result of step.
func (k *keptRig) result(step string) *novav1.CodeExecuted {
	k.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		m, err := k.results.NextMsg(time.Second)
		if err != nil {
			continue
		}
		ev, err := bus.DecodeNATS(m.Header, m.Data)
		if err != nil {
			continue
		}
		var res novav1.CodeExecuted
		if bus.Decode(*ev, &res) == nil && res.StepId == step {
			return &res
		}
	}
	k.t.Fatalf("no result of %s", step)
	return nil
}

// runs is how many times step's program called the counter.
func (k *keptRig) runs(step string) int64 {
	c, ok := k.hits.Load(step)
	if !ok {
		return 0
	}
	return c.(*atomic.Int64).Load()
}

// TestProgramRunsOncePerDelivery: a replica that stops between a program's
// run and its result's publish leaves the result kept; the command's next
// delivery publishes it, and the program does not run again.
func TestProgramRunsOncePerDelivery(t *testing.T) {
	k := newKeptRig(t)
	first := k.connect("sandbox-1")
	var stopped atomic.Bool
	defer service.SetAfterKeep(func(_ context.Context, cmd *novav1.ExecuteCode) {
		// The replica stops as a kill -9 stops it: its connection goes, the
		// command it holds unacknowledged, its result unpublished.
		if stopped.CompareAndSwap(false, true) {
			first.Conn().Close()
		}
	})()
	k.replica(first)
	step := k.send(`context["ran"] = True`)
	for deadline := time.Now().Add(time.Minute); !stopped.Load(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the program did not run")
		}
	}
	if n := k.runs(step); n != 1 {
		t.Fatalf("the program ran %d times before the replica stopped, want 1", n)
	}
	// Another replica gets the command again once its ack wait is over.
	k.replica(k.connect("sandbox-2"))
	res := k.result(step)
	if res.Status != "success" || !strings.Contains(string(res.ContextUpdates.GetRaw()), `"ran":true`) {
		t.Errorf("result: %s %s %s", res.Status, res.Error, res.ContextUpdates.GetRaw())
	}
	if n := k.runs(step); n != 1 {
		t.Errorf("the program ran %d times, want 1: its kept result is published on the command's next delivery", n)
	}
}

// TestResultLargerThanAMessage: a result whose values are each small but
// add up to more than a message goes by reference, from one run; one that
// cannot fit fails once, naming its size, the limit and what to do.
func TestResultLargerThanAMessage(t *testing.T) {
	k := newKeptRig(t)
	k.replica(k.connect("sandbox"))

	step := k.send("for i in range(50):\n    context[f'part{i}'] = 'x' * 25000\n")
	res := k.result(step)
	if res.Status != "success" {
		t.Fatalf("50 values of 25 KB: %s %s %s", res.Status, res.ErrorKind, res.Error)
	}
	updates, err := jsonvalue.FromProto(res.ContextUpdates)
	if err != nil {
		t.Fatal(err)
	}
	refs := 0
	for k2, raw := range updates {
		ref, ok := valueref.RawRef(raw)
		if !ok {
			continue
		}
		refs++
		v, err := k.values.Get(k.ctx, ref)
		var s string
		if err != nil || json.Unmarshal(v, &s) != nil || len(s) != 25000 {
			t.Errorf("%s: the stored value is not the program's (%v)", k2, err)
		}
	}
	if len(updates) != 50 || refs == 0 {
		t.Errorf("%d updates, %d by reference; want 50, some by reference", len(updates), refs)
	}
	if n := k.runs(step); n != 1 {
		t.Errorf("the program ran %d times, want 1", n)
	}

	step = k.send("for i in range(120000):\n    context[f'k{i}'] = i\n")
	res = k.result(step)
	if res.Status != "error" || res.ErrorKind != runner.KindLimit || res.Limit != service.LimitResultSize {
		t.Fatalf("120,000 keys: %s %s %s %s; want a failed run, limit result_size", res.Status, res.ErrorKind, res.Limit, res.Error)
	}
	for _, want := range []string{"bytes, more than the", "one message on the bus", "120000 context keys", "under one key"} {
		if !strings.Contains(res.Error, want) {
			t.Errorf("error %q does not say %q", res.Error, want)
		}
	}
	if n := k.runs(step); n != 1 {
		t.Errorf("the program ran %d times, want 1", n)
	}
}
