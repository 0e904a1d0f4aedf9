package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Durable timers are JetStream message schedules (nats-server 2.12 and
// later): a message published to StreamTimers with a Nats-Schedule header
// is kept by the server, which publishes its body and headers (the
// CloudEvent) to the schedule's target subject when it comes due. The
// server runs a stream's schedules on the stream's leader; when the leader
// is lost, the new leader takes them over from the replicated stream, so a
// timer outlives the loss of any server (and, on one server, a restart: a
// timer due while the server was down fires as soon as it is back).

// ScheduleAt is the headers that make a message published to StreamTimers
// a one-time schedule: at t, its message goes to target. t keeps its
// fraction of a second: the server reads the time as RFC 3339 with any
// fraction.
func ScheduleAt(t time.Time, target string) map[string]string {
	return map[string]string{
		jetstream.ScheduleHeader:       "@at " + t.UTC().Format(time.RFC3339Nano),
		jetstream.ScheduleTargetHeader: target,
	}
}

// ScheduleRepeat is the headers of a repeating schedule: pattern is a
// 6-field cron expression (seconds first), a descriptor (@hourly, ...) or
// "@every <duration>"; zone is the IANA time zone of a cron pattern ("" for
// UTC). A new schedule on the same subject replaces the one before
// (a roll-up of the subject).
func ScheduleRepeat(pattern, zone, target string) map[string]string {
	h := map[string]string{
		jetstream.ScheduleHeader:       pattern,
		jetstream.ScheduleTargetHeader: target,
		jetstream.MsgRollup:            jetstream.MsgRollupSubject,
	}
	if zone != "" {
		h[jetstream.ScheduleTimeZoneHeader] = zone
	}
	return h
}

// CancelSchedule removes the schedule kept on subject (a timer's or a
// workflow schedule's) from StreamTimers, so it does not fire; removing
// one that fired or never was is no error.
func (b *Bus) CancelSchedule(ctx context.Context, subject string) error {
	s, err := b.js.Stream(ctx, StreamTimers)
	if err != nil {
		return fmt.Errorf("cancel schedule %s: %w", subject, err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return fmt.Errorf("cancel schedule %s: %w", subject, err)
	}
	return nil
}
