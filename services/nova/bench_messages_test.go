package main

import (
	"context"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// BenchmarkWorkflow3NodesMessages counts what one 3-node workflow, run one
// at a time on the warm sandbox, sends through the embedded NATS server:
// messages and bytes in (published by the clients: events, commands, pull
// requests, acks, KV reads and writes) and out (delivered to them), from the
// server's own statistics, in all and by connection. Each message costs the
// server's work in-process and a round trip on the wire when the server is a
// process of its own.
func BenchmarkWorkflow3NodesMessages(b *testing.B) {
	env := benchStartStack(b, true)
	srv := env.stack.Infra().NATS.Server()
	settle := func() {
		ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
		defer cancel()
		env.auditCaughtUp(ctx, b)
	}
	settle()
	before, beforeConns := serverCounts(b, srv)
	n := 0
	for b.Loop() {
		env.run(b)
		n++
	}
	settle()
	after, afterConns := serverCounts(b, srv)
	per := func(v int64) float64 { return float64(v) / float64(n) }
	b.ReportMetric(per(after.InMsgs-before.InMsgs), "msgs-in/op")
	b.ReportMetric(per(after.OutMsgs-before.OutMsgs), "msgs-out/op")
	b.ReportMetric(per(after.InBytes-before.InBytes), "bytes-in/op")
	b.ReportMetric(per(after.OutBytes-before.OutBytes), "bytes-out/op")
	for _, name := range slices.Sorted(maps.Keys(afterConns)) {
		a, p := afterConns[name], beforeConns[name]
		b.Logf("%-16s messages in %5.1f, out %5.1f per workflow", name, per(a.InMsgs-p.InMsgs), per(a.OutMsgs-p.OutMsgs))
	}
}

// natsCounts are a server's or a connection's message and byte counters.
type natsCounts struct{ InMsgs, OutMsgs, InBytes, OutBytes int64 }

// serverCounts reads the server's counters, in all and by connection name
// (a name used by several connections sums them).
func serverCounts(b *testing.B, srv *server.Server) (natsCounts, map[string]natsCounts) {
	b.Helper()
	v, err := srv.Varz(nil)
	if err != nil {
		b.Fatal(err)
	}
	cz, err := srv.Connz(&server.ConnzOptions{Limit: 1000})
	if err != nil {
		b.Fatal(err)
	}
	conns := map[string]natsCounts{}
	for _, c := range cz.Conns {
		s := conns[c.Name]
		s.InMsgs += c.InMsgs
		s.OutMsgs += c.OutMsgs
		s.InBytes += c.InBytes
		s.OutBytes += c.OutBytes
		conns[c.Name] = s
	}
	return natsCounts{v.InMsgs, v.OutMsgs, v.InBytes, v.OutBytes}, conns
}
