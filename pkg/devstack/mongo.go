package devstack

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/FerretDB/FerretDB/ferretdb"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// Mongo is an in-process FerretDB on SQLite: the MongoDB wire protocol backed by files
// in opts.DataDir/ferretdb, one per database, each collection indexed by _id
// the way FerretDB looks documents up (see IndexIDs).
type Mongo struct {
	uri   string
	dir   string
	close func() error
}

// sqlitePragmas tune FerretDB's SQLite connections for the audit store's
// writes:
//
//   - temp_store(memory): a statement's journal (kept while one INSERT of a
//     transaction runs, so that it can be undone alone) stays in memory in small
//     chunks. By default it spills to a temporary file past 64 KiB, which a
//     document with its indexes and overflow pages passes: every insert then
//     opened, wrote and dropped a file, and mapped and unmapped the 64 KiB
//     buffer before it.
//   - synchronous(normal): in WAL mode a commit is written to the log but the
//     log is synced at checkpoints, not at every commit. A killed process loses
//     nothing (the writes are in the kernel); a power cut may lose the last
//     commits, never the database's integrity, the same bound as the embedded
//     NATS file store, which syncs on an interval too.
const sqlitePragmas = "_pragma=temp_store(memory)&_pragma=synchronous(normal)"

// StartMongo starts FerretDB with its SQLite handler and returns once it answers a
// MongoDB ping.
func StartMongo(ctx context.Context, opts Options) (*Mongo, error) {
	dir, err := opts.subDir("ferretdb")
	if err != nil {
		return nil, fmt.Errorf("start ferretdb: %w", err)
	}

	port := max(opts.MongoPort, 0) // FerretDB binds in New, so port 0 resolves there.
	host := opts.MongoHost
	if host == "" {
		host = "127.0.0.1"
	}

	f, err := ferretdb.New(&ferretdb.Config{
		Listener: ferretdb.ListenerConfig{
			TCP: net.JoinHostPort(host, strconv.Itoa(port)),
		},
		// FerretDB logs every failed command (a duplicate key, the driver's endSessions it
		// does not implement) as a warning with a full message dump; the client gets
		// those errors anyway, so only its own errors are passed on.
		Logger:  opts.quietLogger("ferretdb", slog.LevelError),
		Handler: "sqlite",
		// FerretDB requires a directory URI ending in "/"; building it as a URL escapes
		// characters such as spaces or '#' in the path. FerretDB adds its own pragmas
		// (WAL, busy timeout) to these.
		SQLiteURL: (&url.URL{Scheme: "file", Path: dir + "/", OmitHost: true, RawQuery: sqlitePragmas}).String(),
	})
	if err != nil {
		return nil, fmt.Errorf("start ferretdb: %w", err)
	}

	// Run must not inherit ctx: ctx bounds start-up only, Close ends the run.
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	done := make(chan error, 1)
	go func() {
		done <- f.Run(runCtx)
	}()
	var watching sync.WaitGroup
	m := &Mongo{
		uri: f.MongoDBURI(),
		dir: dir,
		close: sync.OnceValue(func() error {
			cancel()
			watching.Wait()
			return <-done
		}),
	}

	if err := pingMongo(ctx, m.uri); err != nil {
		_ = m.Close()
		return nil, fmt.Errorf("start ferretdb: %w", err)
	}
	if !opts.NoIDIndex {
		// Before the first client: an existing data dir may hold large collections.
		if err := m.IndexIDs(ctx); err != nil {
			_ = m.Close()
			return nil, fmt.Errorf("start ferretdb: %w", err)
		}
		watching.Go(func() { m.watchIDs(runCtx, opts.quietLogger("ferretdb", slog.LevelError)) })
	}
	return m, nil
}

// pingMongo proves the server speaks the wire protocol, the way every client will use it.
func pingMongo(ctx context.Context, uri string) error {
	ctx, cancel := readyDeadline(ctx)
	defer cancel()

	client, err := mongo.Connect(options.Client().ApplyURI(uri).SetServerSelectionTimeout(5 * time.Second))
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer func() { _ = client.Disconnect(context.WithoutCancel(ctx)) }()

	if err := client.Ping(ctx, nil); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// URI is the connection string, mongodb://HOST:PORT/ (127.0.0.1 unless
// Options.MongoHost says otherwise).
func (m *Mongo) URI() string { return m.uri }

// Close stops FerretDB and waits until its listener, connections and SQLite handles are
// closed. Clients still connected are given up to three seconds (FerretDB's own grace
// period) before their connections are cut, so disconnect them first for a fast close.
// Calling it again returns the first result.
func (m *Mongo) Close() error {
	if err := m.close(); err != nil {
		return fmt.Errorf("stop ferretdb: %w", err)
	}
	return nil
}
