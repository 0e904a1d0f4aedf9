package bus

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestRetryable(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("publish: %w", context.DeadlineExceeded), true},
		{nats.ErrNoResponders, true},
		// A clustered JetStream while it elects a meta leader.
		{fmt.Errorf("declare watch: %w", &jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"}), true},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeStreamNotFound, Description: "stream not found"}, false},
		{&jetstream.APIError{Code: 400, ErrorCode: jetstream.JSErrCodeBadRequest, Description: "bad request"}, false},
		{errors.New("invalid subject"), false},
		{context.Canceled, false},
	} {
		if got := retryable(c.err); got != c.want {
			t.Errorf("retryable(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
