package bus

import (
	"errors"

	"github.com/nats-io/nats.go/jetstream"
)

// permanentError marks an error that retrying cannot fix: the message is
// terminated and dead-lettered at once.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent wraps err so that the consumer terminates the message and
// dead-letters it instead of redelivering it.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err (or an error it wraps) was marked Permanent
// or is a malformed event.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p) || errors.Is(err, ErrMalformedEvent)
}

// LostRace reports whether err is JetStream refusing a compare-and-set
// because another writer got there first: a KV Create of a key that exists,
// or an Update, Delete or publish whose expected last (subject) sequence was
// passed. A replicated stream answers with another code (10164) than a
// single server (10071), and only some of the client's calls map both to
// its sentinel errors, so both codes are looked for here. The caller reads
// again and retries.
func LostRace(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) {
		return true
	}
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}
