package bus_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
)

// A lost compare-and-set is told apart from other failures whether a single
// server (10071) or a replicated stream (10164) answered, bare or wrapped,
// and a KV Create's ErrKeyExists is one.
func TestLostRace(t *testing.T) {
	for _, tt := range []struct {
		name string
		err  error
		want bool
	}{
		{"single server", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequence}, true},
		{"replicated stream", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}, true},
		{"wrapped", fmt.Errorf("store: %w", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamWrongLastSequenceConstant}), true},
		{"key exists", fmt.Errorf("create: %w", jetstream.ErrKeyExists), true},
		{"another API error", &jetstream.APIError{ErrorCode: jetstream.JSErrCodeStreamNotFound}, false},
		{"not an API error", errors.New("connection closed"), false},
		{"nil", nil, false},
	} {
		if got := bus.LostRace(tt.err); got != tt.want {
			t.Errorf("%s: LostRace(%v) = %v, want %v", tt.name, tt.err, got, tt.want)
		}
	}
}
