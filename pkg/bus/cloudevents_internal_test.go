package bus

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// TestToNATSWritesWhatTheBindingWrites: the direct encoding of a 1.0 event
// gives the headers and data the SDK's binding gives, for NOVA's own events
// and for random ones (blank and missing attributes, a zero time, extensions
// of every kind the SDK formats), and what it gives decodes to the event.
func TestToNATSWritesWhatTheBindingWrites(t *testing.T) {
	ctx := context.Background()
	nova, err := NewEvent("exec-1:node-2:1:1", TypeNodeCompleted, "nova/graph-engine", &novav1.NodeCompleted{ExecutionId: "exec-1"})
	if err != nil {
		t.Fatal(err)
	}
	nova.SetExtension(TraceParentExtension, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	nova.SetExtension("executionid", "exec-1")
	events := []event.Event{nova}

	r := rand.New(rand.NewPCG(1, 2))
	pick := func(vals ...string) string { return vals[r.IntN(len(vals))] }
	for i := range 300 {
		ev := event.New(event.CloudEventsVersionV1)
		ev.SetID(pick(fmt.Sprint("id-", i), "a:b:c", "ü-é"))
		ev.SetType(pick(TypeWorkflowStart, TypeSandboxExecuted, "x.y"))
		ev.SetSource(pick("nova/sandbox", "https://example.org/src?q=1", "urn:x"))
		if s := pick("", "sub", "a b"); s != "" || r.IntN(2) == 0 {
			ev.SetSubject(s)
		}
		switch r.IntN(3) {
		case 0:
			ev.SetTime(time.Unix(r.Int64N(2e9), r.Int64N(1e9)).In(time.FixedZone("x", 3600)))
		case 1:
			ev.SetTime(time.Time{})
		}
		if r.IntN(2) == 0 {
			ev.SetDataSchema(pick("proto:nova.v1.CodeExecuted", "https://example.org/s.json"))
		}
		if r.IntN(2) == 0 {
			ev.SetDataContentType(pick(DataContentType, "text/plain", ""))
		}
		for j := range r.IntN(4) {
			name := fmt.Sprint(pick("ext", "traceparent", "executionid", "n"), j)
			switch r.IntN(5) {
			case 0:
				ev.SetExtension(name, pick("v", "", "00-ab"))
			case 1:
				ev.SetExtension(name, int32(r.Int32N(1000)-500))
			case 2:
				ev.SetExtension(name, r.IntN(2) == 0)
			case 3:
				ev.SetExtension(name, time.Unix(r.Int64N(2e9), 0))
			case 4:
				ev.SetExtension(name, []byte{1, 2, byte(j)})
			}
		}
		if r.IntN(3) > 0 {
			ev.DataEncoded = []byte(pick(`{"a":1}`, `x`, `{"big":9007199254740993}`))
		}
		events = append(events, ev)
	}
	for _, ev := range events {
		got, err := toNATS(ctx, "nova.evt.x.node.completed", ev)
		if err != nil {
			t.Fatalf("toNATS(%s): %v", ev.ID(), err)
		}
		want, err := toNATSBinding(ctx, "nova.evt.x.node.completed", ev)
		if err != nil {
			t.Fatalf("binding(%s): %v", ev.ID(), err)
		}
		if !reflect.DeepEqual(got.Header, want.Header) || !bytes.Equal(got.Data, want.Data) || got.Subject != want.Subject {
			t.Fatalf("event %s:\ndirect  %v %q\nbinding %v %q", ev.ID(), got.Header, got.Data, want.Header, want.Data)
		}
		back, err := fromNATS(ctx, got.Header, got.Data)
		if err != nil {
			t.Fatalf("decode %s: %v", ev.ID(), err)
		}
		if back.ID() != ev.ID() || back.Type() != ev.Type() || !bytes.Equal(back.Data(), ev.Data()) {
			t.Errorf("event %s decodes to %v", ev.ID(), back)
		}
	}
}

// TestFromNATSKeepsTheBody: a decoded event's data is the message's body, not
// a copy of it.
func TestFromNATSKeepsTheBody(t *testing.T) {
	ev, err := NewEvent("id-1", TypeWorkflowStarted, "nova/test", &novav1.WorkflowStarted{ExecutionId: "e"})
	if err != nil {
		t.Fatal(err)
	}
	m, err := toNATS(context.Background(), "nova.evt.e.workflow.started", ev)
	if err != nil {
		t.Fatal(err)
	}
	back, err := fromNATS(context.Background(), m.Header, m.Data)
	if err != nil {
		t.Fatal(err)
	}
	if len(back.Data()) == 0 || &back.Data()[0] != &m.Data[0] || len(back.Data()) != len(m.Data) {
		t.Errorf("decoded data %q is a copy of the body %q", back.Data(), m.Data)
	}
}
