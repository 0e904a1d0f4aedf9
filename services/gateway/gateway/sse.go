package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
)

// keepAlive is how often an idle stream sends a comment, so proxies and
// clients can tell a quiet stream from a dead connection.
const keepAlive = 15 * time.Second

// sseWriter writes Server-Sent Events: the event streams of executions and
// the refinement's messages.
type sseWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	gone    bool
}

func startSSE(w http.ResponseWriter, timeout time.Duration) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, rc: http.NewResponseController(w), timeout: timeout}
}

// write sends b unless the client has gone; each write has its own deadline,
// as a stream outlives the server's write timeout, so a client that stops
// reading is let go.
func (s *sseWriter) write(b []byte) {
	if s.gone {
		return
	}
	_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout))
	if _, err := s.w.Write(b); err != nil {
		s.gone = true
		return
	}
	if s.rc.Flush() != nil {
		s.gone = true
	}
}

// send is one message: `data: {"type": ...}`.
func (s *sseWriter) send(msg any) {
	body, err := marshalCompact(msg)
	if err != nil {
		return
	}
	s.write(fmt.Appendf(nil, "data: %s\n\n", body))
}

func (s *sseWriter) keepAlive() { s.write([]byte(": keep-alive\n\n")) }

// eventFrame is one bus event as an SSE event: its stream sequence as the
// id (what Last-Event-ID sends back), its kind as the name, data as one
// line of JSON.
func eventFrame(seq uint64, kind string, data any) ([]byte, error) {
	body, err := marshalCompact(data)
	if err != nil {
		return nil, err
	}
	if seq == 0 {
		// An event of an envelope before its last: the stream resumes after
		// the envelope once its last event was seen, so only that one names
		// the envelope's sequence.
		return fmt.Appendf(nil, "event: %s\ndata: %s\n\n", kind, body), nil
	}
	return fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", seq, kind, body), nil
}

// marshalCompact is v as one line of JSON (an SSE data line), numbers as
// they are, without HTML escaping.
func marshalCompact(v any) ([]byte, error) {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return []byte(strings.TrimSuffix(b.String(), "\n")), nil
}

// lastEventID is the Last-Event-ID header a reconnecting client sends: the
// stream sequence of the last event it got; 0 without one.
func lastEventID(r *http.Request) (uint64, *Problem) {
	v := r.Header.Get("Last-Event-ID")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, invalid("Last-Event-ID must be the id of an event of this stream",
			FieldError{Field: "Last-Event-ID", Detail: fmt.Sprintf("%q is not an event id (a positive integer)", v)})
	}
	return n, nil
}

// beginStream reads a stream request's Last-Event-ID (0 without one) and
// takes one of the API key's stream slots, which release gives back.
func (g *Gateway) beginStream(r *http.Request) (after uint64, release func(), p *Problem) {
	if after, p = lastEventID(r); p != nil {
		return 0, nil, p
	}
	if release, p = g.streams.acquire(keyName(r)); p != nil {
		return 0, nil, p
	}
	return after, release, nil
}

// followEvents reads the events stream through an ordered consumer made
// from cfg. A goroutine hands its messages over one at a time on next
// (closed when it stops), so the consumer never waits for a handler's
// select; stop ends it and waits for it.
func (g *Gateway) followEvents(ctx context.Context, cfg jetstream.OrderedConsumerConfig) (next <-chan jetstream.Msg, stop func(), err error) {
	filters := cfg.FilterSubjects
	cfg.FilterSubjects = bus.FiltersWithEnvelopes(filters)
	cons, err := g.bus.JetStream().OrderedConsumer(ctx, bus.StreamEvents, cfg)
	if err != nil {
		return nil, nil, err
	}
	msgs, err := cons.Messages()
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	out := make(chan jetstream.Msg)
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(out)
		for {
			m, err := msgs.Next()
			if err != nil {
				return // stopped
			}
			if m.Headers().Get(bus.ReplayForHeader) != "" {
				continue // an event again, for the consumer that dead-lettered it
			}
			for _, m := range bus.Parts(ctx, m, filters) {
				select {
				case out <- m:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, func() {
		cancel()
		msgs.Stop()
		<-done
	}, nil
}

// relay answers 200 with an event stream of first (when not nil) and each
// message of next as frame makes them (nil: not streamed), with a
// keep-alive comment while idle, until frame says it made the last one,
// the client goes away, next closes or ctx ends.
func (g *Gateway) relay(ctx context.Context, w http.ResponseWriter, first jetstream.Msg, next <-chan jetstream.Msg,
	frame func(jetstream.Msg) (b []byte, last bool)) {
	sse := startSSE(w, g.limits.Timeout)
	// retry tells EventSource clients how soon to reconnect.
	sse.write([]byte("retry: 2000\n\n"))
	tick := time.NewTicker(keepAlive)
	defer tick.Stop()
	m := first
	for !sse.gone {
		if m != nil {
			b, last := frame(m)
			if b != nil {
				sse.write(b)
			}
			if last {
				return
			}
		}
		m = nil
		select {
		case m = <-next:
			if m == nil {
				return
			}
		case <-tick.C:
			sse.keepAlive()
		case <-ctx.Done():
			return
		}
	}
}
