package devstack

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// NATS is an in-process nats-server with JetStream on a file store.
type NATS struct {
	srv *server.Server
	url string
}

// StartNATS starts nats-server with JetStream storing in opts.DataDir/nats and returns
// once it accepts client connections. Starting again on the same DataDir finds the
// streams, consumers and messages of the previous run.
//
// The file store uses nats-server's default sync interval rather than sync-always:
// a process crash loses nothing (writes are in the OS page cache), only a machine
// crash could, and that trade keeps tests fast.
func StartNATS(ctx context.Context, opts Options) (*NATS, error) {
	dir, err := opts.subDir("nats")
	if err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}

	port := opts.NATSPort
	if port == 0 {
		port = server.RANDOM_PORT
	}

	srv, err := server.NewServer(&server.Options{
		// A readable name in logs and monitoring instead of the generated id.
		ServerName: "nova-devstack",
		Host:       "127.0.0.1",
		Port:       port,
		JetStream:  true,
		StoreDir:   dir,
		// After a kill -9 the server rebuilds each stream's state from
		// the messages written since it last wrote that state down (every
		// 2 minutes or so, hard-coded), reading them: before that first
		// write, every ended execution's state kept a week with its own TTL.
		// Syncing every DefaultNATSSyncInterval instead of the server's 2
		// minutes measured 2.4 times faster restarts (cmd/restartbench).
		SyncInterval: cmp.Or(opts.NATSSyncInterval, DefaultNATSSyncInterval),
		// The embedding process owns signal handling.
		NoSigs: true,
	})
	if err != nil {
		return nil, fmt.Errorf("start nats: %w", err)
	}
	srv.SetLoggerV2(natsLogger{l: opts.quietLogger("nats", slog.LevelWarn)}, false, false, false)

	srv.Start()

	if err := waitNATSReady(ctx, srv); err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, fmt.Errorf("start nats: %w", err)
	}

	return &NATS{srv: srv, url: srv.ClientURL()}, nil
}

// DefaultNATSSyncInterval is how often the embedded NATS server writes its
// streams' state (Options.NATSSyncInterval).
const DefaultNATSSyncInterval = 10 * time.Second

func waitNATSReady(ctx context.Context, srv *server.Server) error {
	ctx, cancel := readyDeadline(ctx)
	defer cancel()

	// ReadyForConnections cannot be cancelled, so poll it in short slices.
	for !srv.ReadyForConnections(50 * time.Millisecond) {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("wait for readiness: %w", err)
		}
	}
	if !srv.JetStreamEnabled() {
		return errors.New("jetstream did not start (see nats logs)")
	}
	return nil
}

// Server is the running nats-server (its monitoring calls: Connz, Jsz, ...).
func (n *NATS) Server() *server.Server { return n.srv }

// URL is the client URL, nats://127.0.0.1:PORT.
func (n *NATS) URL() string { return n.url }

// Port is the client port actually listened on; pass it as Options.NATSPort to restart
// on the same address so that clients reconnect by themselves.
func (n *NATS) Port() int {
	addr, ok := n.srv.Addr().(*net.TCPAddr)
	if !ok {
		return 0
	}
	return addr.Port
}

// Dialer connects clients of this process to the server without a socket:
// Dial hands the server one end of an in-memory pipe (nats-server's
// in-process connection) when asked for the server's own address while it
// runs, and dials over TCP otherwise, so a client whose server restarts (a
// new one on the same port) reconnects to it over TCP. Pass it to
// nats.SetCustomDialer. The pipe saves each message the system calls and
// the loopback network stack of a TCP hop on both sides.
func (n *NATS) Dialer() *InProcessDialer {
	return &InProcessDialer{srv: n.srv, addr: n.srv.Addr().String()}
}

// InProcessDialer is NATS.Dialer's; it has nats.CustomDialer's method.
type InProcessDialer struct {
	srv  *server.Server
	addr string
	tcp  net.Dialer
}

// Dial returns an in-process connection to the server when address is its
// client address and it is running, else a TCP connection to address.
func (d *InProcessDialer) Dial(network, address string) (net.Conn, error) {
	if address == d.addr && d.srv.Running() {
		if c, err := d.srv.InProcessConn(); err == nil {
			return c, nil
		}
	}
	return d.tcp.Dial(network, address)
}

// Shutdown stops the server, closing client connections, and waits until it has
// stopped and flushed the file store.
func (n *NATS) Shutdown() {
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
}

// natsLogger adapts nats-server's printf-style logger to slog.
type natsLogger struct {
	l *slog.Logger
}

func (n natsLogger) log(level slog.Level, format string, v []any) {
	ctx := context.Background()
	// Skip formatting for the notices and debug lines the quiet logger drops anyway.
	if !n.l.Enabled(ctx, level) {
		return
	}
	n.l.Log(ctx, level, fmt.Sprintf(format, v...))
}

func (n natsLogger) Noticef(format string, v ...any) { n.log(slog.LevelInfo, format, v) }
func (n natsLogger) Warnf(format string, v ...any)   { n.log(slog.LevelWarn, format, v) }
func (n natsLogger) Fatalf(format string, v ...any)  { n.log(slog.LevelError, format, v) }
func (n natsLogger) Errorf(format string, v ...any)  { n.log(slog.LevelError, format, v) }
func (n natsLogger) Debugf(format string, v ...any)  { n.log(slog.LevelDebug, format, v) }
func (n natsLogger) Tracef(format string, v ...any)  { n.log(slog.LevelDebug, format, v) }
