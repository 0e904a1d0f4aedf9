package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/novaflow/nova/pkg/chainstore"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

// A read of the audit store that does not answer would wait for the
// MongoDB driver's server selection, 30 seconds, before its 503. The
// gateway's reads go through guardedStore instead: a read still running
// after storeSlowRead pings the store, and when the ping finds no server to
// reach (in at most storePingWait) the read ends with errStoreDown; for
// storeDownFor after such a ping, reads fail at once. A slow read of a
// store that answers (a large listing, a busy machine) is left alone: its
// ping reaches the server, however slowly it answers.
const (
	storeSlowRead = 300 * time.Millisecond
	storePingWait = time.Second
	storeDownFor  = time.Second
)

// errStoreDown: the audit store does not answer.
var errStoreDown = errors.New("the audit store does not answer")

// guardedStore is a ChainReader whose reads fail fast while its store is
// down.
type guardedStore struct {
	ChainReader
	ping func(context.Context) error
	// downAt is when a ping last failed (unix nanoseconds), 0 before.
	downAt atomic.Int64
}

// guardStore guards s when it can be pinged.
func guardStore(s ChainReader) ChainReader {
	p, ok := s.(interface{ Ping(context.Context) error })
	if !ok {
		return s
	}
	return &guardedStore{ChainReader: s, ping: p.Ping}
}

// guarded runs read under ctx, ended with errStoreDown when the store stops
// answering.
func guarded[T any](s *guardedStore, ctx context.Context, read func(context.Context) (T, error)) (T, error) {
	var zero T
	if t := s.downAt.Load(); t != 0 && time.Since(time.Unix(0, t)) < storeDownFor {
		return zero, errStoreDown
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	timer := time.AfterFunc(storeSlowRead, func() {
		pctx, done := context.WithTimeout(ctx, storePingWait)
		defer done()
		if err := s.ping(pctx); err != nil && chainstore.NoServer(err) && ctx.Err() == nil {
			s.downAt.Store(time.Now().UnixNano())
			cancel(fmt.Errorf("%w: %v", errStoreDown, err))
		}
	})
	defer timer.Stop()
	v, err := read(ctx)
	if err != nil {
		if cause := context.Cause(ctx); errors.Is(cause, errStoreDown) {
			return zero, cause
		}
	}
	return v, err
}

func (s *guardedStore) Execution(ctx context.Context, id string) (*chainstore.ExecutionDoc, error) {
	return guarded(s, ctx, func(ctx context.Context) (*chainstore.ExecutionDoc, error) { return s.ChainReader.Execution(ctx, id) })
}

func (s *guardedStore) Chain(ctx context.Context, executionID string) ([]chainstore.NodeDoc, error) {
	return guarded(s, ctx, func(ctx context.Context) ([]chainstore.NodeDoc, error) { return s.ChainReader.Chain(ctx, executionID) })
}

func (s *guardedStore) ListExecutions(ctx context.Context, f chainstore.ListFilter) ([]chainstore.ExecutionDoc, error) {
	return guarded(s, ctx, func(ctx context.Context) ([]chainstore.ExecutionDoc, error) {
		return s.ChainReader.ListExecutions(ctx, f)
	})
}

func (s *guardedStore) TotalsOf(ctx context.Context, f chainstore.ListFilter) (chainstore.ListTotals, error) {
	return guarded(s, ctx, func(ctx context.Context) (chainstore.ListTotals, error) { return s.ChainReader.TotalsOf(ctx, f) })
}

func (s *guardedStore) FailedItems(ctx context.Context, ids []string) (map[string]int, error) {
	return guarded(s, ctx, func(ctx context.Context) (map[string]int, error) { return s.ChainReader.FailedItems(ctx, ids) })
}

func (s *guardedStore) Export(ctx context.Context, f chainstore.ExportFilter, emit func(*chainstore.ExecutionChain) error) error {
	_, err := guarded(s, ctx, func(ctx context.Context) (struct{}, error) { return struct{}{}, s.ChainReader.Export(ctx, f, emit) })
	return err
}

func (s *guardedStore) RerunStart(ctx context.Context, id string, req chainstore.RerunRequest) (*novav1.StartWorkflow, error) {
	return guarded(s, ctx, func(ctx context.Context) (*novav1.StartWorkflow, error) {
		return s.ChainReader.RerunStart(ctx, id, req)
	})
}
