package bus

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus/busname"
)

// An envelope is one message of the events stream that carries several
// events: those of the enveloped kinds (busname.Enveloped: a workflow's
// start, a node's start and completion, a step's completion) that one
// transition of an execution publishes together, on
// nova.evt.<execution>.events.start (when it holds the workflow's start) or
// nova.evt.<execution>.events.run. Its body is the CloudEvents JSON batch
// format (a JSON array of events in the structured JSON format), its
// Content-Type says so, and its Nats-Msg-Id is made of its events' ids, so
// that the transition published again is stored once. A 3-node workflow
// stores 8 messages in the events stream instead of 16, and each reader
// gets, acknowledges and reads it once.
//
// Readers through this package see no envelopes: Consume, ConsumeBatch
// and Watch ask the server for the envelopes their filters need
// (nova.evt.*.node.completed adds nova.evt.*.events.*) and hand each event
// of one on its own, with the subject it has alone, and only those their
// filters match. A reader of the stream's messages unpacks them with
// Unpack. A bus made with WithEnvelopes(false) publishes every event alone.
const EnvelopeContentType = "application/cloudevents-batch+json"

// envelopeIDPrefix begins an envelope's Nats-Msg-Id.
const envelopeIDPrefix = "events:"

// IsEnvelope tells whether a message with header is an envelope.
func IsEnvelope(header nats.Header) bool {
	return header.Get(headerContentType) == EnvelopeContentType
}

// Carried is one event of a message of the events stream, with the subject
// it has alone.
type Carried struct {
	Subject string
	Event   *event.Event
}

// Unpack reads a message of the events stream: its event, or each event of
// an envelope in the order they were published, with the subject each has
// alone.
func Unpack(subject string, header nats.Header, data []byte) ([]Carried, error) {
	if !IsEnvelope(header) {
		ev, err := DecodeNATS(header, data)
		if err != nil {
			return nil, err
		}
		return []Carried{{Subject: subject, Event: ev}}, nil
	}
	execution, kind, ok := ParseEventSubject(subject)
	if !ok || !strings.HasPrefix(kind, KindEvents+".") {
		return nil, fmt.Errorf("%w: an envelope on %s, not on nova.evt.<execution>.%s.<tag>", ErrMalformedEvent, subject, KindEvents)
	}
	var evs []event.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		return nil, fmt.Errorf("%w: envelope on %s: %v", ErrMalformedEvent, subject, err)
	}
	out := make([]Carried, len(evs))
	for i := range evs {
		ev := &evs[i]
		if err := ev.Validate(); err != nil {
			return nil, fmt.Errorf("%w: event %d of the envelope on %s: %v", ErrMalformedEvent, i+1, subject, err)
		}
		kind, ok := busname.EnvelopedKind(ev.Type())
		if !ok {
			return nil, fmt.Errorf("%w: event %d of the envelope on %s: type %q does not travel in envelopes", ErrMalformedEvent, i+1, subject, ev.Type())
		}
		out[i] = Carried{Subject: EventSubject(execution, kind), Event: ev}
	}
	return out, nil
}

// envelopeOf is the message that carries evs, all events of execution (its
// subject token) of enveloped kinds, the traceparent of the first.
func envelopeOf(execution string, evs []event.Event) (*nats.Msg, error) {
	data, err := json.Marshal(evs)
	if err != nil {
		return nil, fmt.Errorf("encode the envelope of %s: %w", evs[0].ID(), err)
	}
	ids := sha256.New()
	for _, ev := range evs {
		ids.Write([]byte(ev.ID()))
		ids.Write([]byte{0})
	}
	kind := KindEventsRun
	for _, ev := range evs {
		if ev.Type() == TypeWorkflowStarted {
			kind = KindEventsStart
		}
	}
	m := nats.NewMsg(EventSubject(execution, kind))
	m.Header.Set(headerContentType, EnvelopeContentType)
	m.Header.Set(jetstream.MsgIDHeader, envelopeIDPrefix+hex.EncodeToString(ids.Sum(nil)[:16]))
	if tp, ok := evs[0].Extensions()[TraceParentExtension].(string); ok {
		m.Header.Set("traceparent", tp)
	}
	m.Data = data
	return m, nil
}

// envelopable tells the execution of an event PublishAll may put in an
// envelope: one of an enveloped kind, on its own subject, without headers
// of its own.
func envelopable(o Outgoing) (execution string, ok bool) {
	if len(o.Headers) > 0 {
		return "", false
	}
	execution, kind, ok := ParseEventSubject(o.Subject)
	if !ok || !busname.Enveloped(kind) {
		return "", false
	}
	if k, ok := busname.EnvelopedKind(o.Event.Type()); !ok || k != kind {
		return "", false
	}
	return execution, true
}

// anyEnvelope is the kind of a filter that matches every envelope. One that
// holds a workflow's start is on events.start, the others on events.run, so
// that a reader of starts alone (the executions' list, retention) reads no
// other.
const anyEnvelope = KindEvents + ".*"

// withEnvelopes is filters with the envelopes' subjects that the filters of
// enveloped kinds need: nova.evt.X.events.start for nova.evt.X.workflow.started,
// nova.evt.X.events.* for the others.
func withEnvelopes(filters []string) []string {
	// A consumer's filters may not overlap: one execution token gets
	// events.* when any of its kinds but the start needs it. (The token may
	// be a wildcard, which EventSubject would not keep.)
	need := map[string]string{}
	var order []string
	for _, f := range filters {
		execution, kind, ok := ParseEventSubject(f)
		if !ok || !busname.Enveloped(kind) {
			continue
		}
		env := anyEnvelope
		if kind == KindWorkflowStarted {
			env = KindEventsStart
		}
		switch had, seen := need[execution]; {
		case !seen:
			order = append(order, execution)
			need[execution] = env
		case had != env:
			need[execution] = anyEnvelope
		}
	}
	out := filters
	for _, execution := range order {
		env := "nova.evt." + execution + "." + need[execution]
		if matchesAny(out, env) || (need[execution] == anyEnvelope && matchesAny(out, "nova.evt."+execution+"."+KindEventsRun)) {
			continue
		}
		if len(out) == len(filters) {
			out = append([]string(nil), filters...)
		}
		out = append(out, env)
	}
	return out
}

// matchesAny tells whether subject matches one of filters (none: every
// subject matches).
func matchesAny(filters []string, subject string) bool {
	if len(filters) == 0 {
		return true
	}
	for _, f := range filters {
		if subjectMatches(f, subject) {
			return true
		}
	}
	return false
}

// subjectMatches tells whether subject matches filter, NATS's way: "*"
// matches one token, a last ">" one or more.
func subjectMatches(filter, subject string) bool {
	for {
		ft, frest, fmore := strings.Cut(filter, ".")
		st, srest, smore := strings.Cut(subject, ".")
		switch {
		case ft == ">" && !fmore:
			return true
		case ft != "*" && ft != st:
			return false
		case !fmore || !smore:
			return fmore == smore
		}
		filter, subject = frest, srest
	}
}

// unpacked is what a message of the events stream holds for a reader whose
// filters are filters: the message and its event, or, for an envelope,
// each event the filters match as a message of its own (a part), whose
// settling settles the envelope once every part is settled.
func unpacked(ctx context.Context, msg jetstream.Msg, filters []string) ([]jetstream.Msg, []*event.Event, error) {
	if !IsEnvelope(msg.Headers()) {
		ev, err := fromNATS(ctx, msg.Headers(), msg.Data())
		if err != nil {
			return nil, nil, err
		}
		return []jetstream.Msg{msg}, []*event.Event{ev}, nil
	}
	carried, err := Unpack(msg.Subject(), msg.Headers(), msg.Data())
	if err != nil {
		return nil, nil, err
	}
	var msgs []jetstream.Msg
	var evs []*event.Event
	var ps *parts
	for i, c := range carried {
		if !matchesAny(filters, c.Subject) {
			continue
		}
		if ps == nil {
			ps = &parts{msg: msg}
		}
		msgs = append(msgs, &partMsg{Msg: msg, subject: c.Subject, ev: c.Event, index: i, count: len(carried), parts: ps})
		evs = append(evs, c.Event)
	}
	if ps != nil {
		ps.left = len(msgs)
	}
	return msgs, evs, nil
}

// partHeader is the header the event of p has alone (binary mode, its
// trace, its id), made when first asked for: a handler that reads the
// event never needs it.
func (p *partMsg) partHeader() nats.Header {
	if p.header != nil {
		return p.header
	}
	m, err := toNATS(context.Background(), p.subject, *p.ev)
	if err != nil {
		// Encoded once already (it was decoded from its envelope): only an
		// extension the SDK cannot format fails, and then the envelope's
		// headers stand in.
		return p.Msg.Headers()
	}
	if tp := p.traceparent(); tp != "" {
		m.Header.Set("traceparent", tp)
	}
	m.Header.Set(jetstream.MsgIDHeader, p.ev.ID())
	p.header = m.Header
	return p.header
}

// traceparent is the W3C trace context the event of p carries.
func (p *partMsg) traceparent() string {
	tp, _ := p.ev.Extensions()[TraceParentExtension].(string)
	return tp
}

// EventOf is the event of a message a Watch handed on: an envelope's part's
// own, else the message's.
func EventOf(m jetstream.Msg) (*event.Event, error) {
	if p, ok := m.(*partMsg); ok {
		return p.ev, nil
	}
	return DecodeNATS(m.Headers(), m.Data())
}

// PartOf tells where the message a Watch handed on stands in its envelope:
// the index of its event among the envelope's count; 0 of 1 for an event
// that came alone. A follower that resumes from a stream sequence has seen
// an envelope once it has seen its last part.
func PartOf(m jetstream.Msg) (index, count int) {
	if p, ok := m.(*partMsg); ok {
		return p.index, p.count
	}
	return 0, 1
}

// partMsg is one event of an envelope, as a message of its own: its subject,
// headers and body are the event's alone; Ack, Nak and Term settle it
// among its envelope's parts, and the envelope is settled once every part
// is (acknowledged, or redelivered whole when one part was not).
type partMsg struct {
	jetstream.Msg
	subject      string
	header       nats.Header
	ev           *event.Event
	index, count int
	parts        *parts
}

func (m *partMsg) Subject() string      { return m.subject }
func (m *partMsg) Headers() nats.Header { return m.partHeader() }
func (m *partMsg) Data() []byte         { return m.ev.Data() }
func (m *partMsg) Ack() error           { return m.parts.done(false, 0) }
func (m *partMsg) DoubleAck(context.Context) error {
	return m.parts.done(false, 0)
}
func (m *partMsg) Nak() error                             { return m.parts.done(true, 0) }
func (m *partMsg) NakWithDelay(delay time.Duration) error { return m.parts.done(true, delay) }

// Term settles a part that was dead-lettered on its own: the envelope's
// other parts are not given up with it.
func (m *partMsg) Term() error                 { return m.parts.done(false, 0) }
func (m *partMsg) TermWithReason(string) error { return m.parts.done(false, 0) }

// parts settles an envelope once each of its parts is.
type parts struct {
	msg   jetstream.Msg
	mu    sync.Mutex
	left  int
	nak   bool
	delay time.Duration
}

func (p *parts) done(nak bool, delay time.Duration) error {
	p.mu.Lock()
	p.left--
	if nak {
		p.nak, p.delay = true, max(p.delay, delay)
	}
	left, nak, delay := p.left, p.nak, p.delay
	p.mu.Unlock()
	switch {
	case left != 0:
		return nil
	case nak && delay > 0:
		return p.msg.NakWithDelay(delay)
	case nak:
		return p.msg.Nak()
	}
	return p.msg.Ack()
}

// FiltersWithEnvelopes is filters with the subjects of the envelopes that
// may carry the events they match, for a reader of the events stream's
// messages that unpacks them with Parts.
func FiltersWithEnvelopes(filters []string) []string { return withEnvelopes(filters) }

// Parts is what a reader of the events stream's messages whose filters
// are filters reads of m: m, or each event of an envelope that filters
// match as a message of its own (see EventOf, PartOf); none for a message
// that holds no event.
func Parts(ctx context.Context, m jetstream.Msg, filters []string) []jetstream.Msg {
	if !IsEnvelope(m.Headers()) {
		return []jetstream.Msg{m}
	}
	msgs, _, err := unpacked(ctx, m, filters)
	if err != nil {
		return nil
	}
	return msgs
}

// EventReader reads an ordered consumer of a stream one message at a
// time, as jetstream.Consumer's Next does, but hands each event of an
// envelope that its filters match on its own (see Parts): for a reader that
// pulls the events stream's messages itself.
type EventReader struct {
	ctx     context.Context
	cons    jetstream.Consumer
	filters []string
	pending []jetstream.Msg
}

// NewEventReader makes the ordered consumer of stream from cfg, its
// filters with the envelopes' they need.
func NewEventReader(ctx context.Context, js jetstream.JetStream, stream string, cfg jetstream.OrderedConsumerConfig) (*EventReader, error) {
	filters := cfg.FilterSubjects
	cfg.FilterSubjects = withEnvelopes(filters)
	cons, err := js.OrderedConsumer(ctx, stream, cfg)
	if err != nil {
		return nil, err
	}
	return &EventReader{ctx: ctx, cons: cons, filters: filters}, nil
}

// Next is the next event, with Next's errors (jetstream.ErrNoMessages or
// nats.ErrTimeout when none came in time).
func (r *EventReader) Next(opts ...jetstream.FetchOpt) (jetstream.Msg, error) {
	for len(r.pending) == 0 {
		m, err := r.cons.Next(opts...)
		if err != nil {
			return nil, err
		}
		r.pending = Parts(r.ctx, m, r.filters)
	}
	m := r.pending[0]
	r.pending = r.pending[1:]
	return m, nil
}
