package bus

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/types/known/timestamppb"

	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

const (
	// DeadLetterDataLimit is the largest body a dead letter carries whole;
	// of a larger one it carries the first DeadLetterExcerpt bytes, and the
	// whole message is kept beside it (see DeadLetter.original_sequence).
	DeadLetterDataLimit = 64 << 10
	// DeadLetterExcerpt is how much of a larger body a dead letter carries.
	DeadLetterExcerpt = 8 << 10
	// deadLetterReasonLimit and deadLetterHeaderLimit bound the reason and
	// each header value, so that a dead letter never fails for its size.
	deadLetterReasonLimit = 4 << 10
	deadLetterHeaderLimit = 1 << 10
	deadLetterMaxHeaders  = 64
	// originalSuffix names the subject that keeps whole messages.
	originalSuffix = ".original"
)

// DeadLetterID is the id (and Nats-Msg-Id) of the dead letter of one stream
// message for one consumer: two consumers that give up on the same message
// each get theirs.
func DeadLetterID(consumer, stream string, seq uint64) string {
	return fmt.Sprintf("dlq:%s:%s:%d", consumer, stream, seq)
}

// OriginalSubject is where whole messages too large for their dead letter
// are kept.
func OriginalSubject(consumer string) string { return DeadLetterSubject(consumer) + originalSuffix }

// deadLetter terminates msg and publishes its dead letter on the consumer's
// dead-letter subject. When that fails the message is left in its stream,
// logged with its stream and sequence and counted, and dead-lettered again
// at a later delivery: it never ends nowhere.
func (b *Bus) deadLetter(ctx context.Context, c Consumer, msg jetstream.Msg, md *jetstream.MsgMetadata, cause error) {
	id := DeadLetterID(c.Durable, md.Stream, md.Sequence.Stream)
	if p, ok := msg.(*partMsg); ok {
		// One event of an envelope, dead-lettered alone: its dead letter is
		// the event as it would have been published alone.
		id = fmt.Sprintf("%s#%d", id, p.index)
	}
	dl := &novav1.DeadLetter{
		Consumer:       c.Durable,
		Subject:        msg.Subject(),
		Reason:         cut(cause.Error(), deadLetterReasonLimit),
		Deliveries:     md.NumDelivered,
		Headers:        map[string]string{},
		Data:           msg.Data(),
		FailedAt:       timestamppb.Now(),
		Stream:         md.Stream,
		StreamSequence: md.Sequence.Stream,
		DataSize:       uint64(len(msg.Data())),
	}
	for k, v := range msg.Headers() {
		if len(v) == 0 || k == jetstream.MsgIDHeader || PublishControl(k) {
			continue
		}
		if len(dl.Headers) == deadLetterMaxHeaders {
			dl.Truncated = true
			break
		}
		dl.Headers[k] = cut(v[0], deadLetterHeaderLimit)
		dl.Truncated = dl.Truncated || len(dl.Headers[k]) < len(v[0]) || len(v) > 1
	}
	if len(dl.Data) > DeadLetterDataLimit {
		dl.Data, dl.Truncated = dl.Data[:DeadLetterExcerpt], true
	}
	log := b.log.With("consumer", c.Durable, "subject", msg.Subject(), "stream", md.Stream, "stream_sequence", md.Sequence.Stream)
	if dl.Truncated {
		seq, err := b.keepOriginal(ctx, c, msg, id)
		if err != nil {
			// The dead letter still goes out, with its excerpt and the
			// message's place in its stream.
			log.ErrorContext(ctx, "the whole message could not be kept beside its dead letter; it keeps an excerpt",
				"size", len(msg.Data()), "err", err)
		}
		dl.OriginalSequence = seq
	}
	if err := b.PublishProto(ctx, DeadLetterSubject(c.Durable), id, TypeDeadLetter, dl, nil); err != nil {
		b.metrics.deadLetterFailed.Add(ctx, 1, consumerAttr(c.Durable))
		log.ErrorContext(ctx, "dead-letter publish failed; the message stays in its stream and is dead-lettered again at its next delivery",
			"deliveries", md.NumDelivered, "reason", dl.Reason, "err", err)
		_ = msg.NakWithDelay(c.Backoff[len(c.Backoff)-1])
		return
	}
	b.metrics.deadLettered.Add(ctx, 1, consumerAttr(c.Durable))
	log.WarnContext(ctx, "event dead-lettered", "dead_letter", id, "deliveries", md.NumDelivered, "reason", dl.Reason)
	_ = msg.Term()
}

// keepOriginal copies msg, headers and body as they are, onto the
// consumer's .original subject and returns its sequence in the dead-letter
// stream. The copy is no larger than the message was (its Nats-Msg-Id aside).
func (b *Bus) keepOriginal(ctx context.Context, c Consumer, msg jetstream.Msg, id string) (uint64, error) {
	m := nats.NewMsg(OriginalSubject(c.Durable))
	for k, v := range msg.Headers() {
		if k == jetstream.MsgIDHeader || PublishControl(k) {
			continue
		}
		m.Header[k] = v
	}
	m.Header.Set(jetstream.MsgIDHeader, id+":original")
	m.Data = msg.Data()
	ack, err := b.js.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// PublishControl tells a header that directs how the server stores the
// publish it comes with (Nats-Expected-..., an atomic batch's
// Nats-Batch-...): the server keeps it with the message, and a copy of the
// message published again (a dead letter, its replay) must leave it out.
func PublishControl(header string) bool {
	return strings.HasPrefix(header, "Nats-Expected-") || strings.HasPrefix(header, "Nats-Batch-")
}

// Original is a dead-lettered message as it was published.
type Original struct {
	Subject string
	Header  nats.Header
	Data    []byte
}

// ErrOriginalGone is returned by DeadLetterOriginal when only an excerpt of
// the message is left.
var ErrOriginalGone = errors.New("only an excerpt of the message is left")

// DeadLetterOriginal returns the whole message of a dead letter: from the
// dead letter itself when nothing was cut, else from its copy in the
// dead-letter stream, else from the stream it was read from when that keeps
// it.
func (b *Bus) DeadLetterOriginal(ctx context.Context, dl *novav1.DeadLetter) (*Original, error) {
	if !dl.GetTruncated() {
		h := nats.Header{}
		for k, v := range dl.GetHeaders() {
			h.Set(k, v)
		}
		return &Original{Subject: dl.GetSubject(), Header: h, Data: dl.GetData()}, nil
	}
	if seq := dl.GetOriginalSequence(); seq > 0 {
		raw, err := b.getMsg(ctx, StreamDeadLetters, seq)
		if err != nil {
			return nil, fmt.Errorf("read the kept message at %s sequence %d: %w", StreamDeadLetters, seq, err)
		}
		return &Original{Subject: dl.GetSubject(), Header: raw.Header, Data: raw.Data}, nil
	}
	raw, err := b.getMsg(ctx, dl.GetStream(), dl.GetStreamSequence())
	if err == nil && raw.Subject == dl.GetSubject() {
		return &Original{Subject: raw.Subject, Header: raw.Header, Data: raw.Data}, nil
	}
	return nil, fmt.Errorf("%w: %d of %d bytes; the message is no longer in %s at sequence %d",
		ErrOriginalGone, len(dl.GetData()), dl.GetDataSize(), dl.GetStream(), dl.GetStreamSequence())
}

func (b *Bus) getMsg(ctx context.Context, stream string, seq uint64) (*jetstream.RawStreamMsg, error) {
	s, err := b.js.Stream(ctx, stream)
	if err != nil {
		return nil, err
	}
	return s.GetMsg(ctx, seq)
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const mark = " …[cut]"
	i := n - len(mark)
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + mark
}
