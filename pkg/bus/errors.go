package bus

import "errors"

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
