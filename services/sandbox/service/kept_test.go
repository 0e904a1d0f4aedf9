package service_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
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
	"github.com/nats-io/nats.go/jetstream"

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
	step := k.nextStep()
	k.sendStep(step, code)
	return step
}

// nextStep is the id of a step of a new execution.
func (k *keptRig) nextStep() string {
	return fmt.Sprintf("kept-%d-%d/node/1/1", time.Now().UnixNano(), keptSeq.Add(1))
}

// sendStep publishes code as the command of step, which calls the counter
// first.
func (k *keptRig) sendStep(step, code string) {
	k.t.Helper()
	execution, _, _ := strings.Cut(step, "/")
	code = fmt.Sprintf("import requests\nrequests.get('http://%s/', params={'step': %q}, timeout=10).raise_for_status()\n%s", k.host, step, code)
	cmd := &novav1.ExecuteCode{ExecutionId: execution, NodeId: "node", StepId: step, Code: code, TimeoutSeconds: 60, Stage: "TASK",
		Network: true, AllowHosts: []string{k.host}}
	if err := k.client.PublishProto(k.ctx, bus.CommandSubject(bus.AgentSandbox), step, bus.TypeSandboxExecute, cmd, nil); err != nil {
		k.t.Fatal(err)
	}
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

// TestProgramRunsOncePerDelivery: a result whose publish fails is kept,
// and the command's next delivery publishes it without running the program
// again; a result published at once is not kept.
func TestProgramRunsOncePerDelivery(t *testing.T) {
	k := newKeptRig(t)
	var refused atomic.Value // the step whose first publish is refused
	refused.Store("")
	var refusals atomic.Int64
	defer service.SetRefusePublish(func(_ context.Context, cmd *novav1.ExecuteCode) error {
		if cmd.StepId == refused.Load().(string) && refusals.Add(1) == 1 {
			return errors.New("the events stream refused the result (test)")
		}
		return nil
	})()
	k.replica(k.connect("sandbox"))

	plain := k.send(`context["ran"] = True`)
	if res := k.result(plain); res.Status != "success" {
		t.Fatalf("result: %s %s", res.Status, res.Error)
	}
	kept, err := k.client.JetStream().KeyValue(k.ctx, service.BucketResults)
	if err != nil {
		t.Fatal(err)
	}
	// A result is kept before its publish returns, or not at all.
	if _, err := kept.Get(k.ctx, keptKey(plain)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Errorf("a result published at once is kept (%v); want none kept", err)
	}

	step := k.nextStep()
	refused.Store(step)
	k.sendStep(step, `context["ran"] = True`)
	res := k.result(step)
	if res.Status != "success" || !strings.Contains(string(res.ContextUpdates.GetRaw()), `"ran":true`) {
		t.Errorf("result: %s %s %s", res.Status, res.Error, res.ContextUpdates.GetRaw())
	}
	if n := refusals.Load(); n != 1 {
		t.Errorf("the result's publish was refused %d times, want once", n)
	}
	if n := k.runs(step); n != 1 {
		t.Errorf("the program ran %d times, want 1: its kept result is published on the command's next delivery", n)
	}
	if _, err := kept.Get(k.ctx, keptKey(step)); err != nil {
		t.Errorf("the result whose publish failed is not kept: %v", err)
	}
}

// keptKey is where the sandbox keeps the result of step.
func keptKey(step string) string {
	execution, _, _ := strings.Cut(step, "/")
	return execution + "." + base64.RawURLEncoding.EncodeToString([]byte(step))
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
