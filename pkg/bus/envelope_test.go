package bus_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/internal/natstest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// transition is what the engine publishes as an execution starts: its
// start, the start node's completion, the next node's start, and the
// command that node sends.
func transition(t *testing.T, execution string) []bus.Outgoing {
	t.Helper()
	out := []bus.Outgoing{}
	add := func(id, typ, kind string, msg proto.Message) {
		ev, err := bus.NewEvent(id, typ, "test", msg)
		if err != nil {
			t.Fatal(err)
		}
		subject := bus.CommandSubject(bus.AgentSandbox)
		if kind != "" {
			subject = bus.EventSubject(execution, kind)
		}
		out = append(out, bus.Outgoing{Subject: subject, Event: ev})
	}
	add(execution+"/started", bus.TypeWorkflowStarted, bus.KindWorkflowStarted, &novav1.WorkflowStarted{ExecutionId: execution})
	add(execution+"/start/1/completed", bus.TypeNodeCompleted, bus.KindNodeCompleted, &novav1.NodeCompleted{ExecutionId: execution, NodeId: "start"})
	add(execution+"/step/1/started", bus.TypeNodeStarted, bus.KindNodeStarted, &novav1.NodeStarted{ExecutionId: execution, NodeId: "step"})
	add(execution+"/step/1/cmd", bus.TypeSandboxExecute, "", sample(execution+"/step/1"))
	return out
}

func eventsStream(t *testing.T, b *bus.Bus) jetstream.Stream {
	t.Helper()
	s, err := b.JetStream().Stream(context.Background(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The events of one transition of an execution are stored as one message,
// once however often the transition is published, in the order given, and
// every reader through the bus sees each event on its own subject.
func TestEnvelopeCarriesATransition(t *testing.T) {
	b := connect(t, natstest.URL(t))
	ctx := context.Background()
	out := transition(t, "exec-env")
	for range 2 {
		if err := b.PublishAll(ctx, out); err != nil {
			t.Fatal(err)
		}
	}
	s := eventsStream(t, b)
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(">"))
	if err != nil {
		t.Fatal(err)
	}
	want := bus.EventSubject("exec-env", bus.KindEventsStart)
	if info.State.Msgs != 1 || info.State.Subjects[want] != 1 {
		t.Fatalf("events stream holds %d messages on %v, want one envelope on %s", info.State.Msgs, info.State.Subjects, want)
	}
	raw, err := s.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if !bus.IsEnvelope(raw.Header) || raw.Header.Get("content-type") != bus.EnvelopeContentType {
		t.Errorf("envelope headers %v", raw.Header)
	}
	carried, err := bus.Unpack(raw.Subject, raw.Header, raw.Data)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range carried {
		got = append(got, c.Subject+" "+c.Event.ID())
	}
	wantCarried := []string{
		"nova.evt.exec-env.workflow.started exec-env/started",
		"nova.evt.exec-env.node.completed exec-env/start/1/completed",
		"nova.evt.exec-env.node.started exec-env/step/1/started",
	}
	if !slices.Equal(got, wantCarried) {
		t.Errorf("envelope carries %v\nwant %v", got, wantCarried)
	}
	var ns novav1.NodeStarted
	if err := bus.Decode(*carried[2].Event, &ns); err != nil || ns.NodeId != "step" {
		t.Errorf("node.started data %v (%v)", &ns, err)
	}

	// A watch of the execution sees each event alone, in order, the last
	// closing its envelope.
	type seen struct {
		subject, id string
		index, n    int
	}
	var mu sync.Mutex
	var watched []seen
	stop, err := b.Watch(ctx, "test", bus.StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.ExecutionFilter("exec-env")}},
		func(m jetstream.Msg, ev *event.Event) {
			again, err := bus.EventOf(m)
			if err != nil || again.ID() != ev.ID() {
				t.Errorf("EventOf: %v, %v", again, err)
			}
			i, n := bus.PartOf(m)
			mu.Lock()
			watched = append(watched, seen{m.Subject(), ev.ID(), i, n})
			mu.Unlock()
		})
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	waitFor(t, "three events watched", func() bool { mu.Lock(); defer mu.Unlock(); return len(watched) == 3 })
	mu.Lock()
	for i, w := range watched {
		if w.subject+" "+w.id != wantCarried[i] || w.index != i || w.n != 3 {
			t.Errorf("watched %d: %+v, want %s, part %d of 3", i, w, wantCarried[i], i)
		}
	}
	mu.Unlock()

	// A watch of node starts alone sees that one, and nothing of another
	// kind, though the envelope holds three.
	gotStart := make(chan string, 3)
	stopStarts, err := b.Watch(ctx, "test", bus.StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{bus.EventFilter(bus.KindNodeStarted)}},
		func(m jetstream.Msg, ev *event.Event) { gotStart <- m.Subject() + " " + ev.ID() })
	if err != nil {
		t.Fatal(err)
	}
	defer stopStarts()
	if got := <-gotStart; got != wantCarried[2] {
		t.Errorf("watch of node starts got %s", got)
	}
	// The watch's next message is this one, published after: nothing of
	// the envelope came before it.
	if err := b.PublishAll(ctx, transition(t, "exec-env-2")); err != nil {
		t.Fatal(err)
	}
	if got := <-gotStart; got != "nova.evt.exec-env-2.node.started exec-env-2/step/1/started" {
		t.Errorf("watch of node starts got %s after the first", got)
	}
}

// A durable consumer of some enveloped kinds gets those alone, one call
// each, and the envelope is acknowledged once all its events were handled;
// one that failed brings the envelope back whole.
func TestEnvelopeConsumedByKind(t *testing.T) {
	b := connect(t, natstest.URL(t))
	ctx := context.Background()
	var mu sync.Mutex
	var handled []string
	failOnce := map[string]bool{"exec-c/step/1/started": true}
	c := bus.Consumer{
		Stream: bus.StreamEvents, Durable: "kinds",
		Filters:    []string{bus.EventFilter(bus.KindNodeStarted), bus.EventFilter(bus.KindWorkflowStarted)},
		MaxDeliver: 5, Backoff: []time.Duration{10 * time.Millisecond},
	}
	// Declared before it is consumed in the background, so that it can be
	// looked at at once.
	cons, err := b.DeclareConsumer(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if fs := cons.CachedInfo().Config.FilterSubjects; !slices.Contains(fs, "nova.evt.*.events.*") || slices.Contains(fs, "nova.evt.*.events.start") {
		t.Errorf("consumer's filters %v: want the envelopes' nova.evt.*.events.* alone (filters may not overlap)", fs)
	}
	consume(t, b, c, func(ctx context.Context, ev event.Event) error {
		mu.Lock()
		defer mu.Unlock()
		handled = append(handled, bus.Subject(ctx)+" "+ev.ID())
		if failOnce[ev.ID()] {
			failOnce[ev.ID()] = false
			return errors.New("not now")
		}
		return nil
	})
	if err := b.PublishAll(ctx, transition(t, "exec-c")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the envelope acknowledged", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream == 1 && info.NumAckPending == 0
	})
	mu.Lock()
	defer mu.Unlock()
	want := []string{
		"nova.evt.exec-c.workflow.started exec-c/started",
		"nova.evt.exec-c.node.started exec-c/step/1/started",
		"nova.evt.exec-c.workflow.started exec-c/started",
		"nova.evt.exec-c.node.started exec-c/step/1/started",
	}
	if !slices.Equal(handled, want) {
		t.Errorf("handled %v\nwant %v (the envelope again after one failed)", handled, want)
	}
}

// One event of an envelope that fails for good is dead-lettered alone, as
// it would have been published alone; the others are not.
func TestEnvelopePartDeadLettered(t *testing.T) {
	b := connect(t, natstest.URL(t))
	ctx := context.Background()
	dls := deadLetters(t, b, "parts")
	var mu sync.Mutex
	var handled []string
	consume(t, b, bus.Consumer{
		Stream: bus.StreamEvents, Durable: "parts", Filters: []string{bus.ExecutionFilter("exec-d")},
		MaxDeliver: 2, Backoff: []time.Duration{10 * time.Millisecond},
	}, func(ctx context.Context, ev event.Event) error {
		mu.Lock()
		handled = append(handled, ev.ID())
		mu.Unlock()
		if ev.Type() == bus.TypeNodeCompleted {
			return bus.Permanent(errors.New("no such node"))
		}
		return nil
	})
	if err := b.PublishAll(ctx, transition(t, "exec-d")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a dead letter", func() bool { return len(dls()) == 1 })
	dl := dls()[0]
	if dl.Subject != bus.EventSubject("exec-d", bus.KindNodeCompleted) || dl.Headers["ce-id"] != "exec-d/start/1/completed" ||
		dl.Headers["ce-type"] != bus.TypeNodeCompleted || !strings.Contains(dl.Reason, "no such node") {
		t.Errorf("dead letter %v", dl)
	}
	var nc novav1.NodeCompleted
	if ev, err := bus.DecodeNATS(natsHeader(dl.Headers), dl.Data); err != nil || bus.Decode(*ev, &nc) != nil || nc.NodeId != "start" {
		t.Errorf("the dead letter's event does not decode alone: %v", err)
	}
	cons, err := b.JetStream().Consumer(ctx, bus.StreamEvents, "parts")
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the envelope settled", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream == 1 && info.NumAckPending == 0
	})
	mu.Lock()
	defer mu.Unlock()
	if len(handled) != 3 {
		t.Errorf("handled %v, want each event once", handled)
	}
}

func natsHeader(h map[string]string) nats.Header {
	out := nats.Header{}
	for k, v := range h {
		out.Set(k, v)
	}
	return out
}

// Without envelopes, or with an event of another kind between them, the
// events go alone and in order; an envelope too large for the server is
// not made.
func TestEnvelopeLeftOut(t *testing.T) {
	url := natstest.URL(t)
	ctx := context.Background()
	subjects := func(b *bus.Bus, execution string) []string {
		s := eventsStream(t, b)
		var got []string
		for seq := uint64(1); ; seq++ {
			m, err := s.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				return got
			}
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(m.Subject, "nova.evt."+execution+".") {
				got = append(got, strings.TrimPrefix(m.Subject, "nova.evt."+execution+"."))
			}
		}
	}
	off := connect(t, url, bus.WithEnvelopes(false))
	if err := off.PublishAll(ctx, transition(t, "exec-off")); err != nil {
		t.Fatal(err)
	}
	if got := subjects(off, "exec-off"); !slices.Equal(got, []string{"workflow.started", "node.completed", "node.started"}) {
		t.Errorf("without envelopes: %v", got)
	}

	b := connect(t, url)
	out := transition(t, "exec-mixed")
	waiting, err := bus.NewEvent("exec-mixed/w", bus.TypeNodeWaiting, "test", &novav1.NodeWaiting{ExecutionId: "exec-mixed"})
	if err != nil {
		t.Fatal(err)
	}
	other, err := bus.NewEvent("exec-other/started", bus.TypeWorkflowStarted, "test", &novav1.WorkflowStarted{ExecutionId: "exec-other"})
	if err != nil {
		t.Fatal(err)
	}
	// started, completed | waiting | started (another execution's between) ... started
	mixed := []bus.Outgoing{out[0], out[1], {Subject: bus.EventSubject("exec-mixed", bus.KindNodeWaiting), Event: waiting},
		{Subject: bus.EventSubject("exec-other", bus.KindWorkflowStarted), Event: other}, out[2], out[3]}
	if err := b.PublishAll(ctx, mixed); err != nil {
		t.Fatal(err)
	}
	if got := subjects(b, "exec-mixed"); !slices.Equal(got, []string{bus.KindEventsStart, bus.KindNodeWaiting, bus.KindNodeStarted}) {
		t.Errorf("with an event of another kind between: %v, want an envelope, the wait, the node's start alone", got)
	}
	if got := subjects(b, "exec-other"); !slices.Equal(got, []string{bus.KindWorkflowStarted}) {
		t.Errorf("another execution's one event: %v", got)
	}

	big := transition(t, "exec-big")
	large := strings.Repeat("x", int(b.MaxPayload())/2)
	for i := range 2 {
		ev, err := bus.NewEvent(fmt.Sprintf("exec-big/n%d/completed", i), bus.TypeNodeCompleted, "test",
			&novav1.NodeCompleted{ExecutionId: "exec-big", ErrorMessage: large})
		if err != nil {
			t.Fatal(err)
		}
		big[i+1] = bus.Outgoing{Subject: bus.EventSubject("exec-big", bus.KindNodeCompleted), Event: ev}
	}
	if err := b.PublishAll(ctx, big[:3]); err != nil {
		t.Fatal(err)
	}
	if got := subjects(b, "exec-big"); !slices.Equal(got, []string{"workflow.started", "node.completed", "node.completed"}) {
		t.Errorf("an envelope larger than the server takes: %v, want each alone", got)
	}
}

// A malformed envelope is an error that names it, and a consumer
// dead-letters it whole.
func TestEnvelopeMalformed(t *testing.T) {
	h := nats.Header{}
	h.Set("content-type", bus.EnvelopeContentType)
	for _, c := range []struct{ subject, data, want string }{
		{"nova.evt.x.events.run", `{`, "envelope on nova.evt.x.events.run"},
		{"nova.evt.x.node.completed", `[]`, "not on nova.evt.<execution>.events"},
		{"nova.evt.x.events.run", `[{"specversion":"1.0","id":"a","source":"s","type":"io.nova.sandbox.executed.v1"}]`, "does not travel in envelopes"},
		{"nova.evt.x.events.run", `[{"specversion":"1.0","id":"","source":"s","type":"io.nova.node.started.v1"}]`, "event 1 of the envelope"},
	} {
		_, err := bus.Unpack(c.subject, h, []byte(c.data))
		if !errors.Is(err, bus.ErrMalformedEvent) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Unpack(%s, %s): %v, want a malformed event naming %q", c.subject, c.data, err, c.want)
		}
	}
	b := connect(t, natstest.URL(t))
	dls := deadLetters(t, b, "malformed")
	consume(t, b, bus.Consumer{Stream: bus.StreamEvents, Durable: "malformed", Filters: []string{bus.EventFilter(bus.KindNodeStarted)},
		MaxDeliver: 2, Backoff: []time.Duration{10 * time.Millisecond}},
		func(context.Context, event.Event) error { t.Error("a malformed envelope was handled"); return nil })
	m := nats.NewMsg("nova.evt.x.events.run")
	m.Header = h
	m.Data = []byte(`[{"not": "an event"}]`)
	if _, err := b.JetStream().PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the envelope dead-lettered", func() bool { return len(dls()) == 1 })
	if dl := dls()[0]; dl.Subject != "nova.evt.x.events.run" || !strings.Contains(dl.Reason, "envelope") {
		t.Errorf("dead letter %v", dl)
	}
}
