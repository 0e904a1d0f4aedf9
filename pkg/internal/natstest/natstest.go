// Package natstest starts an embedded NATS JetStream server for one test of
// the pkg module, whose packages cannot use pkg/devstack (a module built on
// this one).
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// URL starts a JetStream server on a free loopback port with its store in a
// temporary directory, stops it when the test ends, and returns its URL.
func URL(tb testing.TB) string {
	tb.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server not ready")
	}
	tb.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s.ClientURL()
}

// JetStream starts a server as URL does and returns a JetStream client of
// a connection closed when the test ends.
func JetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(URL(tb))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatal(err)
	}
	return js
}
