// Command benchmessages counts what a workflow costs the bus: it starts
// `nova dev` on a fresh data dir, runs the 3-node code workflow one at a
// time from outside (the documented start event, waiting for each
// completion), and counts every message the NATS server carries for it
// with a subscription to all subjects, by kind: published events and
// commands, consumer deliveries, acknowledgements, key-value operations,
// pull requests and replies (publish acknowledgements, KV answers, pull
// request status). Beside them, the JetStream messages stored per stream,
// and, idle, the messages a second and the CPU of the nova dev process.
// With -base-bin the same is measured on another build in the same run (the
// commit before, built by `make bench-messages`).
//
// With -r3 it then runs the same workflow on an in-process stack, once on
// one NATS server and once on a cluster of three with every stream on three
// (R3), and prints the messages the servers themselves count (in and out,
// routes included) per workflow: the multiple that replication costs.
//
// `make bench-messages` builds the binaries and runs it; -h lists the knobs.
package main

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/services/nova/stack"
)

type config struct {
	bin, baseBin string
	workflows    int
	idle         time.Duration
	r3           bool
	keep         bool
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchmessages", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	fs.StringVar(&cfg.baseBin, "base-bin", "", "directory of another build's nova binary, measured first (none: not measured)")
	fs.IntVar(&cfg.workflows, "workflows", 100, "workflows counted, one at a time, after 10 of warm-up")
	fs.DurationVar(&cfg.idle, "idle", 30*time.Second, "how long idle nova dev is counted (0: not)")
	fs.BoolVar(&cfg.r3, "r3", true, "also count the servers' own messages on one server and on a cluster of three (R3), in process")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dirs and nova dev's logs")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchmessages: %v\n", err)
		os.Exit(1)
	}
}

// count is what one build measured.
type count struct {
	build string
	// perWorkflow are the messages by kind and by detail, per workflow.
	perWorkflow map[string]float64
	// stored are the messages stored per stream, per workflow.
	stored map[string]float64
	// idle are the messages a second by kind with nothing running, and
	// idleCPU the share of a core nova dev (with its children) used.
	idle              map[string]float64
	idleCPU, idleMain float64
}

func run(ctx context.Context, cfg config) error {
	dir, err := os.MkdirTemp("", "nova-benchmessages-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "benchmessages: data dirs and logs in %s, kept\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	var counts []count
	builds := []struct{ name, bin string }{{"before", cfg.baseBin}, {"now", cfg.bin}}
	for _, b := range builds {
		if b.bin == "" {
			continue
		}
		c, err := measure(ctx, cfg, b.name, b.bin, filepath.Join(dir, b.name))
		if err != nil {
			return fmt.Errorf("%s (%s): %w", b.name, b.bin, err)
		}
		counts = append(counts, c)
	}
	printCounts(cfg, counts)
	if cfg.r3 {
		return replicated(ctx, cfg, filepath.Join(dir, "r3"))
	}
	return nil
}

// measure counts the workflows and the idle time of the nova dev in bin.
func measure(ctx context.Context, cfg config, name, bin, dir string) (count, error) {
	c := count{build: name}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return c, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return c, err
	}
	proc, natsPort, _, err := loadgen.NovaDev(bin, dir)
	if err != nil {
		return c, err
	}
	if err := proc.Start(); err != nil {
		return c, err
	}
	defer proc.Stop()
	running, cancel := proc.WhileRunning(ctx)
	defer cancel()
	failed := func(err error) error { return loadgen.ExitedError(ctx, running, err) }
	url := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	load, err := loadgen.Connect(running, url, "benchmessages-load")
	if err != nil {
		return c, failed(err)
	}
	defer load.Close()
	// The probe reads streams and consumers; what it sends and what
	// answers it are not counted.
	probe, err := nats.Connect(url, nats.Name("benchmessages-probe"), nats.CustomInboxPrefix(probeInbox))
	if err != nil {
		return c, failed(err)
	}
	defer probe.Close()
	js, err := jetstream.New(probe)
	if err != nil {
		return c, err
	}
	counter, err := newCounter(url)
	if err != nil {
		return c, failed(err)
	}
	defer counter.close()

	def := loadgen.Workflow(loadgen.Chain(3))
	warm := loadgen.NewLoad(load, def, 10)
	warm.Run(running, 1)
	if got := warm.Completed.Load(); got != 10 {
		return c, failed(fmt.Errorf("warm-up: %d of 10 workflows completed", got))
	}
	if err := settle(running, js); err != nil {
		return c, failed(err)
	}
	before, err := lastSeqs(running, js)
	if err != nil {
		return c, err
	}
	counter.start()
	l := loadgen.NewLoad(load, def, cfg.workflows)
	l.Run(running, 1)
	if got := l.Completed.Load(); got != int64(cfg.workflows) {
		return c, failed(fmt.Errorf("%d of %d workflows completed", got, cfg.workflows))
	}
	if err := settle(running, js); err != nil {
		return c, failed(err)
	}
	counted := counter.stop()
	after, err := lastSeqs(running, js)
	if err != nil {
		return c, err
	}
	n := float64(cfg.workflows)
	c.perWorkflow = scale(counted, 1/n)
	c.stored = map[string]float64{}
	for s, seq := range after {
		if d := seq - before[s]; d > 0 {
			c.stored[s] = float64(d) / n
		}
	}
	if cfg.idle <= 0 {
		return c, nil
	}
	// What the runs left (the store's checkpoints, a collection of the
	// heap) is theirs, not idle's.
	select {
	case <-time.After(idleSettle):
	case <-running.Done():
		return c, failed(running.Err())
	}
	cpu0, err := loadgen.SampleGroup(proc.Pid())
	if err != nil {
		return c, err
	}
	counter.start()
	select {
	case <-time.After(cfg.idle):
	case <-running.Done():
		return c, failed(running.Err())
	}
	c.idle = scale(counter.stop(), 1/cfg.idle.Seconds())
	cpu1, err := loadgen.SampleGroup(proc.Pid())
	if err != nil {
		return c, err
	}
	c.idleCPU = float64(cpu1.Main+cpu1.Children-cpu0.Main-cpu0.Children) / float64(cfg.idle)
	c.idleMain = float64(cpu1.Main-cpu0.Main) / float64(cfg.idle)
	return c, nil
}

// idleSettle is how long nova dev is left alone after the runs before its
// idle time is counted.
const idleSettle = 10 * time.Second

// probeInbox is the inbox prefix of the probe's connection.
const probeInbox = "_BENCHPROBE"

// settle waits until the consumers that follow a workflow (the audit, the
// engine's results) have handled and acknowledged everything, so that
// what a workflow costs after its completion is counted too.
func settle(ctx context.Context, js jetstream.JetStream) error {
	for _, c := range []struct{ stream, durable string }{
		{bus.StreamEvents, "audit"}, {bus.StreamEvents, "graph-engine-results"}, {bus.StreamCommands, "sandbox"},
	} {
		if err := loadgen.WaitIdle(ctx, js, c.stream, c.durable); err != nil {
			return err
		}
	}
	return nil
}

// lastSeqs are the last sequences of every stream.
func lastSeqs(ctx context.Context, js jetstream.JetStream) (map[string]uint64, error) {
	out := map[string]uint64{}
	names := js.StreamNames(ctx)
	for name := range names.Name() {
		s, err := js.Stream(ctx, name)
		if err != nil {
			return nil, err
		}
		out[name] = s.CachedInfo().State.LastSeq
	}
	return out, names.Err()
}

// counter counts the messages of every subject, by kind, while on.
type counter struct {
	nc     *nats.Conn
	mu     sync.Mutex
	on     bool
	counts map[string]int
}

func newCounter(url string) (*counter, error) {
	nc, err := nats.Connect(url, nats.Name("benchmessages-counter"))
	if err != nil {
		return nil, err
	}
	c := &counter{nc: nc, counts: map[string]int{}}
	if _, err := nc.Subscribe(">", func(m *nats.Msg) {
		kind := classify(m)
		if kind == "" {
			return
		}
		c.mu.Lock()
		if c.on {
			c.counts[kind]++
		}
		c.mu.Unlock()
	}); err != nil {
		nc.Close()
		return nil, err
	}
	return c, nc.Flush()
}

func (c *counter) start() {
	c.mu.Lock()
	c.on, c.counts = true, map[string]int{}
	c.mu.Unlock()
}

func (c *counter) stop() map[string]int {
	// What was sent before now has reached the subscription once a
	// round trip after it has.
	_ = c.nc.Flush()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	return c.counts
}

func (c *counter) close() { c.nc.Close() }

// classify names the kind of a message and its detail, "kind: detail"; ""
// for the probe's own.
func classify(m *nats.Msg) string {
	s, tokens := m.Subject, strings.Split(m.Subject, ".")
	switch {
	case strings.HasPrefix(s, probeInbox) || strings.HasPrefix(m.Reply, probeInbox):
		return ""
	case strings.HasPrefix(m.Reply, "$JS.ACK."):
		// A consumer's delivery: $JS.ACK.<stream>.<consumer>....
		r := strings.Split(m.Reply, ".")
		return "deliveries: " + r[2] + " to " + consumerName(r[3])
	case strings.HasPrefix(s, "$JS.ACK."):
		kind := "ack"
		switch d := string(m.Data); {
		case strings.HasPrefix(d, "+WPI"):
			kind = "in progress"
		case strings.HasPrefix(d, "-NAK"):
			kind = "nak"
		case strings.HasPrefix(d, "+TERM"):
			kind = "term"
		}
		return "acks: " + kind + " by " + consumerName(tokens[3])
	case strings.HasPrefix(s, "$JS.API.CONSUMER.MSG.NEXT."):
		return "pull requests: " + tokens[5] + " by " + consumerName(tokens[6])
	case strings.HasPrefix(s, "$KV."):
		return "kv: write " + tokens[1]
	case strings.HasPrefix(s, "$JS.API.DIRECT.GET."):
		return "kv: read " + strings.TrimPrefix(tokens[4], "KV_")
	case strings.HasPrefix(s, "$JS.API."):
		return "api: " + strings.Join(tokens[2:min(len(tokens), 4)], ".")
	case strings.HasPrefix(s, "_INBOX."):
		if st := m.Header.Get("Status"); st != "" {
			return "replies: status " + st + " " + m.Header.Get("Description")
		}
		return "replies: answers"
	case strings.HasPrefix(s, "nova.evt.") && len(tokens) > 3:
		return "published: event " + strings.Join(tokens[3:], ".")
	case strings.HasPrefix(s, "nova.cmd.") && len(tokens) > 2:
		return "published: command to " + tokens[2]
	default:
		return "other: " + strings.Join(tokens[:min(2, len(tokens))], ".")
	}
}

// consumerName names an ordered consumer (a generated name) as such.
func consumerName(name string) string {
	if len(name) >= 22 && !strings.Contains(name, "-") {
		return "an ordered consumer"
	}
	return name
}

func scale(counts map[string]int, f float64) map[string]float64 {
	out := make(map[string]float64, len(counts))
	for k, v := range counts {
		out[k] = float64(v) * f
	}
	return out
}

// kinds sums counts by kind (what precedes ": ").
func kinds(counts map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range counts {
		kind, _, _ := strings.Cut(k, ": ")
		out[kind] += v
	}
	return out
}

func total(counts map[string]float64) float64 {
	t := 0.0
	for _, v := range counts {
		t += v
	}
	return t
}

func printCounts(cfg config, counts []count) {
	if len(counts) == 0 {
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := func(title string) {
		fmt.Fprintf(w, "%s\t", title)
		for _, c := range counts {
			fmt.Fprintf(w, "%s\t", c.build)
		}
		fmt.Fprintln(w)
	}
	row := func(name string, get func(count) float64, format string) {
		fmt.Fprintf(w, "%s\t", name)
		for _, c := range counts {
			fmt.Fprintf(w, format+"\t", get(c))
		}
		fmt.Fprintln(w)
	}
	keys := func(get func(count) map[string]float64) []string {
		set := map[string]bool{}
		for _, c := range counts {
			for k := range get(c) {
				set[k] = true
			}
		}
		return slices.Sorted(maps.Keys(set))
	}
	fmt.Printf("benchmessages: the 3-node code workflow, %d one at a time on nova dev (R1), counted by a subscription to every subject\n\n", cfg.workflows)
	header("messages per workflow, by kind")
	for _, k := range keys(func(c count) map[string]float64 { return kinds(c.perWorkflow) }) {
		row(k, func(c count) float64 { return kinds(c.perWorkflow)[k] }, "%.1f")
	}
	row("all", func(c count) float64 { return total(c.perWorkflow) }, "%.1f")
	fmt.Fprintln(w)
	header("stored per workflow, by stream")
	for _, k := range keys(func(c count) map[string]float64 { return c.stored }) {
		row(k, func(c count) float64 { return c.stored[k] }, "%.1f")
	}
	row("all", func(c count) float64 { return total(c.stored) }, "%.1f")
	if cfg.idle > 0 {
		fmt.Fprintln(w)
		header(fmt.Sprintf("idle, over %s", cfg.idle))
		row("messages a second", func(c count) float64 { return total(c.idle) }, "%.1f")
		row("CPU, % of a core", func(c count) float64 { return 100 * c.idleCPU }, "%.2f")
		row("of which nova dev's own process", func(c count) float64 { return 100 * c.idleMain }, "%.2f")
	}
	fmt.Fprintln(w)
	header("messages per workflow, in detail")
	for _, k := range keys(func(c count) map[string]float64 { return c.perWorkflow }) {
		row(k, func(c count) float64 { return c.perWorkflow[k] }, "%.2f")
	}
	if cfg.idle > 0 {
		fmt.Fprintln(w)
		header("idle messages a second, in detail")
		for _, k := range keys(func(c count) map[string]float64 { return c.idle }) {
			row(k, func(c count) float64 { return c.idle[k] }, "%.2f")
		}
	}
	_ = w.Flush()
}

// replicated runs the workflow on an in-process stack on one NATS server
// and on three with every stream on three, and prints the messages in and
// out of the servers per workflow, routes included.
func replicated(ctx context.Context, cfg config, dir string) error {
	fmt.Printf("\nbenchmessages: the servers' own counters (messages in + out, routes included), in process, %d workflows one at a time\n\n", cfg.workflows)
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "servers\tmessages per workflow\tmultiple\tCPU per workflow (the whole process)\t")
	var one float64
	for _, size := range []int{1, 3} {
		per, cpu, err := serverMessages(ctx, cfg, filepath.Join(dir, fmt.Sprint(size)), size)
		if err != nil {
			return fmt.Errorf("%d servers: %w", size, err)
		}
		if size == 1 {
			one = per
		}
		name := "1 (R1)"
		if size == 3 {
			name = "3 (R3)"
		}
		fmt.Fprintf(w, "%s\t%.0f\t%.1fx\t%.1f ms\t\n", name, per, per/one, float64(cpu)/float64(time.Millisecond))
	}
	return w.Flush()
}

// serverMessages returns the messages in and out of the servers per
// workflow, and the CPU this process (servers, services and all) used per
// workflow.
func serverMessages(ctx context.Context, cfg config, dir string, size int) (float64, time.Duration, error) {
	opts := stack.Options{DataDir: dir, Sandbox: stack.SandboxConfig(true)}
	if size > 1 {
		opts.NATSCluster = size
	}
	s, err := stack.Start(ctx, opts)
	if err != nil {
		return 0, 0, err
	}
	defer s.Close()
	b, err := s.Connect(ctx, "benchmessages-load")
	if err != nil {
		return 0, 0, err
	}
	defer b.Close()
	def := loadgen.Workflow(loadgen.Chain(3))
	warm := loadgen.NewLoad(b, def, 10)
	warm.Run(ctx, 1)
	if err := settle(ctx, b.JetStream()); err != nil {
		return 0, 0, err
	}
	before, err := serverTotal(s, size)
	if err != nil {
		return 0, 0, err
	}
	cpu0 := processCPU()
	l := loadgen.NewLoad(b, def, cfg.workflows)
	l.Run(ctx, 1)
	if got := l.Completed.Load(); got != int64(cfg.workflows) {
		return 0, 0, fmt.Errorf("%d of %d workflows completed", got, cfg.workflows)
	}
	if err := settle(ctx, b.JetStream()); err != nil {
		return 0, 0, err
	}
	cpu := processCPU() - cpu0
	after, err := serverTotal(s, size)
	if err != nil {
		return 0, 0, err
	}
	return float64(after-before) / float64(cfg.workflows), cpu / time.Duration(cfg.workflows), nil
}

// serverTotal sums the messages in and out of the stack's NATS servers.
func serverTotal(s *stack.Stack, size int) (int64, error) {
	infra := s.Infra()
	var t int64
	for i := range size {
		var srv *server.Server
		if infra.Cluster != nil {
			srv = infra.Cluster.Server(i)
		} else {
			srv = infra.NATS.Server()
		}
		v, err := srv.Varz(nil)
		if err != nil {
			return 0, err
		}
		t += v.InMsgs + v.OutMsgs
	}
	return t, nil
}

// processCPU is the CPU this process used so far, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
