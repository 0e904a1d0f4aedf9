// Package devstack starts NOVA's embedded infrastructure in-process: a NATS server with
// JetStream on a file store, and FerretDB on SQLite speaking the MongoDB wire protocol.
// It backs `nova dev`, the offline demo and integration tests, so that none of them need
// Docker or a mock; production points the same clients at real NATS and MongoDB.
//
// It is its own module so that service images never link FerretDB or nats-server.
package devstack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// ErrNoDataDir is returned when Options.DataDir is empty: the stack keeps state on
// disk so that a restart (of `nova dev`, or in a crash test) finds its data again.
var ErrNoDataDir = errors.New("devstack: data dir is required")

// startTimeout bounds readiness waits when the caller's ctx has no deadline, so a broken
// environment fails start-up instead of hanging it.
const startTimeout = 30 * time.Second

// Options configures the embedded stack.
type Options struct {
	// DataDir holds all state: the NATS file store in DataDir/nats and the SQLite
	// files in DataDir/ferretdb. Required.
	DataDir string
	// NATSPort is the client port on 127.0.0.1; 0 or -1 picks a free port.
	// A cluster's servers listen on NATSPort, NATSPort+1, ...
	NATSPort int
	// NATSCluster, when 3 or more, runs that many clustered NATS servers
	// (StartCluster) instead of one; 0 or 1 runs one.
	NATSCluster int
	// MongoPort is the MongoDB wire port on 127.0.0.1; 0 picks a free port.
	MongoPort int
	// MongoHost is the address FerretDB listens on instead of 127.0.0.1,
	// e.g. "0.0.0.0" for a store that other machines or containers reach
	// (cmd/nova-store).
	MongoHost string
	// NATSSyncInterval is how often the NATS server writes each stream's
	// state (its index, and the expiry of messages with a TTL) and syncs it
	// to disk: after a kill -9 it scans what was written since (0:
	// DefaultNATSSyncInterval; see StartNATS).
	NATSSyncInterval time.Duration
	// NoIDIndex leaves out the index that lets FerretDB find a document by
	// _id without scanning its collection (see Mongo.IndexIDs), for measuring
	// what it saves. A data dir that has it keeps it.
	NoIDIndex bool
	// Logger receives NATS warnings and errors and FerretDB errors only; both are
	// chatty below that. Nil discards them.
	Logger *slog.Logger
}

// Stack is a running NATS (one server or a cluster) and FerretDB pair.
type Stack struct {
	// NATSURL is the client URL; for a cluster, every server's, comma-separated.
	NATSURL  string
	MongoURI string

	// NATS is the server, or nil when Cluster runs instead.
	NATS    *NATS
	Cluster *Cluster
	Mongo   *Mongo

	lock *DataDirLock
}

// Start locks the data dir, starts NATS and then FerretDB and returns once
// both accept connections. On error nothing is left running.
func Start(ctx context.Context, opts Options) (*Stack, error) {
	if opts.NATSCluster == 2 {
		return nil, fmt.Errorf("devstack: a NATS cluster of 2 survives no loss; run 1 server, or 3 or more")
	}
	lock, err := LockDataDir(opts.DataDir)
	if err != nil {
		return nil, err
	}
	s := &Stack{lock: lock}
	if opts.NATSCluster >= 3 {
		c, err := StartCluster(ctx, opts, opts.NATSCluster)
		if err != nil {
			lock.Release()
			return nil, err
		}
		s.Cluster, s.NATSURL = c, c.URL()
	} else {
		n, err := StartNATS(ctx, opts)
		if err != nil {
			lock.Release()
			return nil, err
		}
		s.NATS, s.NATSURL = n, n.URL()
	}

	m, err := StartMongo(ctx, opts)
	if err != nil {
		s.stopNATS()
		lock.Release()
		return nil, err
	}
	s.Mongo, s.MongoURI = m, m.URI()
	return s, nil
}

func (s *Stack) stopNATS() {
	if s.Cluster != nil {
		s.Cluster.Shutdown()
	}
	if s.NATS != nil {
		s.NATS.Shutdown()
	}
}

// Close stops FerretDB and NATS, waits for both and releases the data dir.
func (s *Stack) Close() error {
	// Neither depends on the other; NATS is stopped even if FerretDB fails to.
	err := s.Mongo.Close()
	s.stopNATS()
	s.lock.Release()
	if err != nil {
		return fmt.Errorf("close devstack: %w", err)
	}
	return nil
}

// subDir returns DataDir/name as an absolute path, creating it.
func (o Options) subDir(name string) (string, error) {
	if o.DataDir == "" {
		return "", ErrNoDataDir
	}
	dir, err := filepath.Abs(filepath.Join(o.DataDir, name))
	if err != nil {
		return "", fmt.Errorf("resolve data dir: %w", err)
	}
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return "", fmt.Errorf("create data dir %q: %w", dir, err)
	}
	return dir, nil
}

// quietLogger returns a logger that passes records at min level and above to the
// caller's logger, or discards everything when there is none.
func (o Options) quietLogger(component string, min slog.Level) *slog.Logger {
	if o.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return slog.New(minLevelHandler{min: min, next: o.Logger.Handler()}).
		With(slog.String("component", component))
}

// minLevelHandler drops records below min regardless of what the wrapped handler
// accepts. It applies With and WithGroup to the wrapped handler only when a record
// reaches it: a text or JSON handler formats attributes as they are added, and the
// loggers derived here (FerretDB derives one per query, with its SQL) seldom log a
// record at min.
type minLevelHandler struct {
	min  slog.Level
	next slog.Handler
	ops  []func(slog.Handler) slog.Handler // not yet applied to next, in order
}

func (h minLevelHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.min && h.next.Enabled(ctx, l)
}

func (h minLevelHandler) Handle(ctx context.Context, r slog.Record) error {
	next := h.next
	for _, op := range h.ops {
		next = op(next)
	}
	return next.Handle(ctx, r)
}

func (h minLevelHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	return h.with(func(next slog.Handler) slog.Handler { return next.WithAttrs(attrs) })
}

func (h minLevelHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return h.with(func(next slog.Handler) slog.Handler { return next.WithGroup(name) })
}

func (h minLevelHandler) with(op func(slog.Handler) slog.Handler) minLevelHandler {
	h.ops = append(slices.Clip(h.ops), op)
	return h
}

// readyDeadline returns ctx bounded by startTimeout unless it already has a deadline.
func readyDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, startTimeout)
}
