package service_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

// outageFor is how long the store is down: a quarter of an hour in
// production terms, shortened by configuration: the consumer's retries
// (10 deliveries, 50 ms apart, each failing after the store's 300 ms
// server selection) are spent in under 4 s, a quarter of it.
const outageFor = 15 * time.Second

// A store that does not answer for longer than every retry of the audit
// consumer: the consumer pauses, says so (readiness, /healthz, a metric,
// the consumer's state on the server), keeps what it holds, and the purge
// of the events stream stops at the first event not recorded. When the
// store answers again every execution's chain of work is complete and
// nothing was dead-lettered or delivered twice.
func TestStoreOutageLongerThanRetries(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	ns, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Shutdown)
	store, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(store.URI())
	if err != nil {
		t.Fatal(err)
	}
	reader := sdkmetric.NewManualReader()
	b, err := bus.Connect(ctx, ns.URL(), bus.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	q := u.Query()
	q.Set("serverSelectionTimeoutMS", "300")
	u.RawQuery = q.Encode()
	st, err := chainstore.Open(ctx, u.String(), "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close(context.Background()) })

	if err := b.EnsureStreams(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.DeclareConsumer(ctx, auditservice.ConsumerSpec(0)); err != nil {
		t.Fatal(err)
	}
	outage := &bus.Outage{Probe: st.Ping, Every: 200 * time.Millisecond}
	e := auditEnv{b: b, st: st}
	e.run(ctx, t, auditservice.Deps{Outage: outage, Backoff: []time.Duration{50 * time.Millisecond},
		KeepEnded: time.Second, PurgeEvery: 200 * time.Millisecond, HoldFor: 100 * time.Millisecond})
	js := b.JetStream()
	cons, err := js.Consumer(ctx, bus.StreamEvents, auditservice.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: not within the test's time", what)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	recorded := func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 0 && info.NumAckPending == 0
	}

	const before, during = 5, 25
	for i := range before {
		publishExecution(ctx, t, b, fmt.Sprintf("outage-%02d", i))
	}
	waitFor("the executions before the outage recorded", recorded)

	if err := store.Close(); err != nil {
		t.Fatal(err)
	}
	down := time.Now()
	var firstDuring uint64
	for i := before; i < before+during; i++ {
		seq := publishExecution(ctx, t, b, fmt.Sprintf("outage-%02d", i))
		if firstDuring == 0 {
			firstDuring = seq
		}
	}
	waitFor("the outage seen", func() bool { return outage.State().Down })
	waitFor("the consumer paused on the server", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.Paused
	})
	if err := outage.Err(); err == nil || !strings.Contains(err.Error(), "unreachable since") {
		t.Errorf("readiness while the store is down: %v", err)
	}
	if got := sinkDown(ctx, t, reader); got != 1 {
		t.Errorf("nova.consumer.sink_down = %d while the store is down, want 1", got)
	}
	// The purge runs (the events before the outage go) and stops at the
	// first event the store has not recorded.
	events, err := js.Stream(ctx, bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	waitFor("the events recorded before the outage purged", func() bool {
		info, err := events.Info(ctx)
		return err == nil && info.State.FirstSeq >= firstDuring
	})
	time.Sleep(time.Until(down.Add(outageFor))) // the outage goes on
	if info, err := events.Info(ctx); err != nil || info.State.FirstSeq != firstDuring {
		t.Fatalf("events stream after %v of outage: %+v (%v); want its first message at %d, the first not recorded", outageFor, info.State, err, firstDuring)
	}

	restarted, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir, MongoPort: port(t, u)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = restarted.Close() })
	waitFor("every event recorded after the outage", func() bool { return !outage.State().Down && recorded() })

	for i := range before + during {
		id := fmt.Sprintf("outage-%02d", i)
		x, err := st.Execution(ctx, id)
		if err != nil || x.Status != "succeeded" {
			t.Errorf("%s: %+v (%v), want its execution succeeded", id, x, err)
			continue
		}
		nodes, err := st.Chain(ctx, id)
		if err != nil || len(nodes) != 2 || len(nodes[1].Steps) != 1 {
			t.Errorf("%s: chain of work %+v (%v), want nodes start and work, with work's step", id, nodes, err)
		}
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumRedelivered != 0 || info.Paused {
		t.Errorf("audit consumer after the outage: %d redelivered, paused %v; want each event delivered once, and running", info.NumRedelivered, info.Paused)
	}
	if dlq, err := js.Stream(ctx, bus.StreamDeadLetters); err == nil {
		if _, err := dlq.GetLastMsgForSubject(ctx, bus.DeadLetterSubject(auditservice.Consumer)); !errors.Is(err, jetstream.ErrMsgNotFound) {
			t.Errorf("an event was dead-lettered for the outage (%v)", err)
		}
	}
	if s := outage.State(); s.Outages != 1 {
		t.Errorf("%d outages counted, want 1", s.Outages)
	}
	if got := sinkDown(ctx, t, reader); got != 0 {
		t.Errorf("nova.consumer.sink_down = %d once the store answers, want 0", got)
	}
	t.Logf("store down %v: %d executions recorded, 0 dead letters, 0 redeliveries", time.Since(down).Round(time.Second), before+during)
}

// publishExecution publishes the facts of one two-node execution that
// starts now, as the engine would, and returns the stream sequence of the
// first.
func publishExecution(ctx context.Context, t *testing.T, b *bus.Bus, id string) uint64 {
	t.Helper()
	t0 := time.Now()
	return publishAged(ctx, t, b, id, t0, t0.Add(time.Millisecond))
}

// sinkDown reads the nova.consumer.sink_down metric of the audit consumer.
func sinkDown(ctx context.Context, t *testing.T, reader *sdkmetric.ManualReader) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		t.Fatal(err)
	}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if sum, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == "nova.consumer.sink_down" {
				for _, dp := range sum.DataPoints {
					if c, _ := dp.Attributes.Value("consumer"); c.AsString() == auditservice.Consumer {
						return dp.Value
					}
				}
			}
		}
	}
	return 0
}

// port is the port of a store's URI.
func port(t *testing.T, u *url.URL) int {
	t.Helper()
	var p int
	if _, err := fmt.Sscan(u.Port(), &p); err != nil {
		t.Fatal(err)
	}
	return p
}
