package chainstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/x/mongo/driver/topology"
)

// NoServer tells an outage (no server to select, the client gone) from a
// store that answers slowly (a timeout), which Unreachable counts too.
func TestNoServer(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"no server to select", fmt.Errorf("ping audit store: %w", topology.ServerSelectionError{Wrapped: context.DeadlineExceeded}), true},
		{"client disconnected", mongo.ErrClientDisconnected, true},
		{"a slow answer", fmt.Errorf("ping audit store: %w", context.DeadlineExceeded), false},
		{"a refused write", errors.New("E11000 duplicate key"), false},
		{"none", nil, false},
	} {
		if got := NoServer(c.err); got != c.want {
			t.Errorf("%s: NoServer = %v, want %v", c.name, got, c.want)
		}
	}
	if !Unreachable(fmt.Errorf("x: %w", context.DeadlineExceeded)) {
		t.Error("Unreachable counts a timeout: a writer keeps what it could not write")
	}
}
