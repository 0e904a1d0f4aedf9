package bus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Declaration attempts: each waits at most declareAttemptTimeout, and the
// attempts stop after declareBudget or when the caller's ctx ends.
const (
	declareAttemptTimeout = 5 * time.Second
	declareBudget         = 45 * time.Second
)

// Declare runs a JetStream declaration (a stream, KV bucket or object store
// created or updated), again while the cluster cannot answer it in time.
// Services that start together on a cluster declare the same streams at
// once; the meta leader answers the first and may let the others' requests
// time out, and an election after a server loss does the same. Declarations
// are idempotent, so the next attempt finds what the first created.
func Declare(ctx context.Context, what string, declare func(ctx context.Context) error) error {
	deadline := time.Now().Add(declareBudget)
	wait := 200 * time.Millisecond
	for {
		actx, cancel := context.WithTimeout(ctx, declareAttemptTimeout)
		err := declare(actx)
		cancel()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil || !(retryable(err) || peersForming(err)) || time.Now().Add(wait).After(deadline) {
			return fmt.Errorf("declare %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("declare %s: %w", what, err)
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// jsErrCodeNoPeers is the JetStream API's error code for "no suitable peers
// for placement": answered while a cluster that is forming (or lost a
// server) has too few servers up for the replicas asked.
const jsErrCodeNoPeers jetstream.ErrorCode = 10005

// peersForming tells whether a declaration failed for want of servers:
// one that joins a moment later lets it pass, so it is tried again within
// the declaration's budget.
func peersForming(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jsErrCodeNoPeers
}
