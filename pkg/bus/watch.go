package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
)

// watchInactive is how long the server keeps a watch's consumer that its
// stop could not delete (the connection was gone).
const watchInactive = 10 * time.Second

// watchDeleteWait bounds the deletion of a stopped watch's consumer.
const watchDeleteWait = 2 * time.Second

// Watch calls each with every message of an ordered consumer of stream
// made from cfg, decoded as a CloudEvent (messages that are not one are
// skipped; each event of an envelope that cfg's filters match comes as a
// message of its own, see EventOf and PartOf), until stop is called. The consumer is created with bounded
// attempts (see Declare): on a cluster whose stream leader just went away,
// a consumer request can go unanswered. Stop deletes the consumer in the
// background (one request, at most watchDeleteWait; at once an error when
// the connection is closed): a consumer left to expire holds, for its whole
// inactive threshold, about 28 KB of the server's heap and three goroutines
// (BenchmarkConsumerLeftBehind), which a process that waits for every
// execution it starts (the gateway, a load of producers) multiplies by the
// executions of that time.
func (b *Bus) Watch(ctx context.Context, what, stream string, cfg jetstream.OrderedConsumerConfig,
	each func(jetstream.Msg, *event.Event)) (stop func(), err error) {
	if cfg.InactiveThreshold == 0 {
		// A consumer that stop could not delete stays on the server until it
		// has been inactive this long (nats.go's default is 5 minutes): a
		// process watching many executions would otherwise reach the server's
		// limit of consumers. A live watch keeps its consumer active with its
		// pull requests, and an ordered consumer that loses its consumer
		// makes a new one where it was.
		cfg.InactiveThreshold = watchInactive
	}
	filters := cfg.FilterSubjects
	cfg.FilterSubjects = withEnvelopes(filters)
	var cons jetstream.Consumer
	err = Declare(ctx, what, func(ctx context.Context) (err error) {
		cons, err = b.js.OrderedConsumer(ctx, stream, cfg)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	cc, err := cons.Consume(func(m jetstream.Msg) {
		if m.Headers().Get(ReplayForHeader) != "" {
			return // the same event again, for the consumer that dead-lettered it
		}
		msgs, evs, err := unpacked(ctx, m, filters)
		if err != nil {
			return
		}
		for i, m := range msgs {
			each(m, evs[i])
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return func() {
		cc.Stop()
		// The ordered consumer's current one: it makes a new consumer
		// after a gap, and deletes the one it leaves. The caller does not
		// wait for the deletion (a round trip to the stream's leader).
		if info := cons.CachedInfo(); info != nil {
			go func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), watchDeleteWait)
				defer cancel()
				_ = b.js.DeleteConsumer(ctx, stream, info.Name)
			}()
		}
	}, nil
}

// CompletionKept tells whether the events stream still holds the
// completion of execution executionID. An ended execution's events go a
// while after its end (the audit service purges the stream's front); a
// follower then reads it from the audit store or the engine's state.
func (b *Bus) CompletionKept(ctx context.Context, executionID string) (bool, error) {
	return b.EventKept(ctx, executionID, KindWorkflowCompleted)
}

// EventKept reports whether the events stream still holds the last event
// of kind of the execution.
func (b *Bus) EventKept(ctx context.Context, executionID, kind string) (bool, error) {
	seq, err := b.LastEventSeq(ctx, executionID, kind)
	return seq > 0, err
}

// LastEventSeq is the stream sequence of the last event of kind of the
// execution the events stream holds, 0 when it holds none: a follower that
// has seen it has seen the execution's end.
func (b *Bus) LastEventSeq(ctx context.Context, executionID, kind string) (uint64, error) {
	s, err := b.js.Stream(ctx, StreamEvents)
	if err != nil {
		return 0, err
	}
	m, err := s.GetLastMsgForSubject(ctx, EventSubject(executionID, kind))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, nil
	case err != nil:
		return 0, err
	}
	return m.Sequence, nil
}

// First watches subject of the events stream for its first event that
// decodes as M, one stored before the call included; the channel gets it
// once. The stream keeps its events, so the watch may begin after what
// leads to the event is published. Call stop when done.
func First[M any, PM interface {
	*M
	proto.Message
}](ctx context.Context, b *Bus, subject string) (<-chan PM, func(), error) {
	got := make(chan PM, 1)
	stop, err := b.Watch(ctx, "watch "+subject, StreamEvents,
		jetstream.OrderedConsumerConfig{FilterSubjects: []string{subject}},
		func(_ jetstream.Msg, ev *event.Event) { offer(got, ev) })
	if err != nil {
		return nil, nil, err
	}
	return got, stop, nil
}

// offer decodes ev as M and gives it to got unless got already holds one.
func offer[M any, PM interface {
	*M
	proto.Message
}](got chan PM, ev *event.Event) {
	msg := PM(new(M))
	if Decode(*ev, msg) == nil {
		select {
		case got <- msg:
		default:
		}
	}
}
