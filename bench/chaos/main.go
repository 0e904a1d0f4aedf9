// Command chaos runs workflows under load while it kills, in turn, each part
// of NOVA with SIGKILL, and prints per case what came through: workflows
// completed correctly, wrong, lost, duplicated chain-of-work documents,
// redelivered commands, and p50/p99 latency from start to completion.
//
// Cases (each on a fresh data dir, loopback only):
//
//	whole    `nova dev` (NATS, store and every service in one process) is
//	         killed and started again on its data dir
//	sandbox  the sandbox service process is killed and started again
//	engine   the graph engine process is killed and started again
//	audit    the audit service process is killed and started again
//	nats     one server of a 3-server NATS cluster (each its own process,
//	         streams with 3 replicas) is killed and started again: the
//	         leader of NOVA_CMD
//	schedule on the same cluster, a workflow scheduled every second
//	         (catchup all) while the leader of NOVA_TIMERS, whose server
//	         fires the ticks, is killed and started again: each tick must
//	         start exactly one execution (correct counts the ticks, lost
//	         those without one, duplicated those with more)
//	schedule-all, schedule-latest, schedule-none
//	         `nova dev` (its server fires the ticks) is killed 1.5 s after
//	         a tick of a schedule every 2 s with that catchup fell due, and
//	         started again 5 s later: the tick due before the kill and every
//	         tick after the restart start exactly one execution, those due
//	         while it was down run as the catchup says, and every tick is
//	         on the schedule's grid (wrong counts ticks run against the
//	         catchup or off the grid)
//	constructs
//	         40 executions each with a signal kept until its wait node,
//	         a node under one lock they all share and a boundary timer off
//	         a long sleep; `nova dev` is killed once the lock had a few
//	         turns and started again: each must succeed with the signal's
//	         payload, its write and its fallback, and no two visits of the
//	         locked node overlap (duplicated counts overlaps)
//
// `make chaos` builds the binaries and runs it; see -h for the knobs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/workflow"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
)

// The workflow every case runs: three code nodes; c = (2n + 1) * 3.
const chaosWorkflow = `
name: chaos
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: 'context["a"] = context["n"] * 2'}
  - id: add
    type: action
    code: |
      import time
      time.sleep(0.02)
      context["b"] = context["a"] + 1
  - {id: triple, type: action, code: 'context["c"] = context["b"] * 3'}
  - {id: done, type: end}
edges:
  - {from: start, to: double}
  - {from: double, to: add}
  - {from: add, to: triple}
  - {from: triple, to: done}
`

// Audit documents of one execution of chaosWorkflow.
var wantDocs = map[string]int64{"executions": 1, "chain_of_work": 5, "chain_of_work_steps": 3}

var allCases = []string{"whole", "sandbox", "engine", "audit", "nats", "schedule", "schedule-all", "schedule-latest", "schedule-none", "constructs"}

type config struct {
	bin       string
	workflows int
	inFlight  int
	killAfter float64
	caseLimit time.Duration
	workDir   string
	keep      bool
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "natsnode" {
		os.Exit(natsNode(os.Args[2:]))
	}
	var cfg config
	fs := flag.NewFlagSet("chaos", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of nova, graph-engine, sandbox and audit (make build)")
	fs.IntVar(&cfg.workflows, "workflows", 300, "workflows per case")
	fs.IntVar(&cfg.inFlight, "in-flight", 50, "workflows in flight at once")
	fs.Float64Var(&cfg.killAfter, "kill-after", 0.3, "kill once this fraction of the workflows has completed")
	fs.DurationVar(&cfg.caseLimit, "case-timeout", 4*time.Minute, "time limit of one case; what has not completed by then counts as lost")
	fs.StringVar(&cfg.workDir, "dir", "", "directory for data dirs and logs (default: a temporary one, removed unless -keep)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep data dirs and logs")
	casesFlag := fs.String("cases", strings.Join(allCases, ","), "cases to run, in order")
	_ = fs.Parse(os.Args[1:])

	cases := strings.Split(*casesFlag, ",")
	for _, c := range cases {
		if !slices.Contains(allCases, c) {
			fmt.Fprintf(os.Stderr, "chaos: unknown case %q (have %s)\n", c, strings.Join(allCases, ", "))
			os.Exit(2)
		}
	}
	bin, err := filepath.Abs(cfg.bin)
	if err == nil {
		for _, b := range []string{"nova", "graph-engine", "sandbox", "audit"} {
			if _, serr := os.Stat(filepath.Join(bin, b)); serr != nil {
				err = fmt.Errorf("%s: %w (run make build)", filepath.Join(bin, b), serr)
				break
			}
		}
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(2)
	}
	cfg.bin = bin
	if cfg.workDir == "" {
		if cfg.workDir, err = os.MkdirTemp("", "nova-chaos-"); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
			os.Exit(1)
		}
		if !cfg.keep {
			defer os.RemoveAll(cfg.workDir)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	fmt.Printf("chaos: %d workflows per case, %d in flight, SIGKILL after %.0f%% completed; logs in %s\n\n",
		cfg.workflows, cfg.inFlight, cfg.killAfter*100, cfg.workDir)
	var reports []report
	failed := false
	for _, name := range cases {
		var r report
		if name == "constructs" {
			r = runConstructsCase(ctx, cfg)
			if r.err != nil || r.wrong > 0 || r.lost > 0 || r.dupDocs > 0 {
				failed = true
			}
		} else if strings.HasPrefix(name, "schedule") {
			if catchup, ok := strings.CutPrefix(name, "schedule-"); ok {
				r = runScheduleKillCase(ctx, cfg, catchup)
			} else {
				r = runScheduleCase(ctx, cfg)
			}
			if r.err != nil || r.wrong > 0 || r.lost > 0 || r.dupDocs > 0 {
				failed = true
			}
		} else {
			r = runCase(ctx, cfg, name)
			if r.err != nil || r.correct != cfg.workflows || r.dupDocs > 0 || r.missingDocs > 0 {
				failed = true
			}
		}
		reports = append(reports, r)
		fmt.Printf("%-15s %s\n", name, r.line())
		if ctx.Err() != nil {
			break
		}
	}
	fmt.Println()
	printTable(os.Stdout, cfg, reports)
	if failed {
		os.Exit(1)
	}
}

// report is what one case measured.
type report struct {
	name        string
	fault       string
	err         error
	correct     int
	wrong       int
	lost        int
	dupDocs     int64
	missingDocs int64
	redelivered int
	// redeliveredEvents counts NOVA_EVT messages per consumer.
	redeliveredEvents int
	p50, p99          time.Duration
	elapsed           time.Duration
	// total is what correct counts out of, when not the workflows per case
	// (the schedule case: its ticks).
	total int
}

func (r report) line() string {
	if r.err != nil {
		return "ERROR: " + r.err.Error()
	}
	return fmt.Sprintf("%d correct, %d wrong, %d lost, %d duplicated documents, %d redelivered commands (%d events), p50 %s, p99 %s (%s)",
		r.correct, r.wrong, r.lost, r.dupDocs, r.redelivered, r.redeliveredEvents, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.fault)
}

func printTable(w io.Writer, cfg config, reports []report) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CASE\tCOMPLETED CORRECTLY\tWRONG\tLOST\tDUPLICATED DOCS\tMISSING DOCS\tREDELIVERED CMDS\tREDELIVERED EVTS\tP50\tP99\tWALL\tFAULT")
	for _, r := range reports {
		if r.err != nil {
			fmt.Fprintf(tw, "%s\terror: %v\n", r.name, r.err)
			continue
		}
		total := cfg.workflows
		if r.total > 0 {
			total = r.total
		}
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", r.name, r.correct, total, r.wrong, r.lost,
			r.dupDocs, r.missingDocs, r.redelivered, r.redeliveredEvents, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond),
			r.elapsed.Round(100*time.Millisecond), r.fault)
	}
	_ = tw.Flush()
}

// target is the part of the system a case kills: kill it, then bring it
// back.
type target struct {
	describe func() string
	kill     func() error
	restart  func(context.Context) error
	downtime time.Duration
}

// system is what a case runs: the NATS URL and MongoDB URI it serves, the
// process to kill, and how to stop everything.
type system struct {
	natsURL  string
	mongoURI string
	target   target
	close    func()
	// procs are the processes it started (the NATS servers of a cluster,
	// the services, or nova dev).
	procs []*loadgen.Proc
}

func runCase(ctx context.Context, cfg config, name string) report {
	r := report{name: name}
	// Starting, loading and killing within caseLimit plus a minute, then
	// checking within five more minutes.
	ctx, sys, done, err := startCase(ctx, cfg, name, cfg.caseLimit+6*time.Minute)
	if err != nil {
		r.err = err
		return r
	}
	defer done()
	b, err := connectWhenReady(ctx, sys)
	if err != nil {
		r.err = err
		return r
	}
	defer b.Close()
	redeliveries, stopCounting, err := countRedeliveries(b.Conn())
	if err != nil {
		r.err = err
		return r
	}
	defer stopCounting()

	l, err := runLoadWithFault(ctx, cfg, sys, b, &r)
	if err != nil {
		r.err = err
		return r
	}

	// Outcomes from the events stream itself, not only what the load saw.
	checkStart := time.Now()
	defer func() {
		fmt.Fprintf(os.Stderr, "chaos: %s: checked the outcomes in %s\n", name, time.Since(checkStart).Round(100*time.Millisecond))
	}()
	outcomes, err := loadgen.Completions(ctx, b.JetStream(), time.Time{})
	if err != nil {
		r.err = err
		return r
	}
	countOutcomes(&r, l, outcomes)
	r.redelivered, r.redeliveredEvents = redeliveries()
	if r.dupDocs, r.missingDocs, err = countAuditDocs(ctx, b, sys.mongoURI, l.IDs, outcomes); err != nil {
		r.err = err
	}
	return r
}

// connectWhenReady connects to sys's bus once its services are ready.
func connectWhenReady(ctx context.Context, sys *system) (*bus.Bus, error) {
	// Until the services are ready, a process that exits ends the wait
	// and is named.
	running, stopRunning := loadgen.WhileAllRunning(ctx, sys.procs...)
	defer stopRunning()
	if err := loadgen.WaitDial(running, sys.natsURL); err != nil {
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	b, err := bus.Connect(ctx, sys.natsURL, bus.WithName("chaos"), bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	if err := loadgen.WaitServices(running, b.JetStream()); err != nil {
		b.Close()
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	return b, nil
}

// runLoadWithFault runs cfg.workflows of chaosWorkflow on sys, cfg.inFlight
// at a time for at most cfg.caseLimit, with the case's fault in the middle,
// and records the fault and the wall time in r. A process of sys that
// exited and stayed down is an error.
func runLoadWithFault(ctx context.Context, cfg config, sys *system, b *bus.Bus, r *report) (*loadgen.Load, error) {
	def, err := workflow.Parse([]byte(chaosWorkflow))
	if err != nil {
		return nil, err
	}
	start := time.Now()
	l := loadgen.NewLoad(b, def, cfg.workflows)
	loadCtx, stopLoad := context.WithTimeout(ctx, cfg.caseLimit)
	defer stopLoad()
	loadDone := make(chan struct{})
	go func() { l.Run(loadCtx, cfg.inFlight); close(loadDone) }()

	// The fault: once enough workflows have completed, kill; after the
	// downtime, restart.
	killAt := int64(float64(cfg.workflows) * cfg.killAfter)
	for l.Completed.Load() < killAt && loadCtx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
	if loadCtx.Err() == nil {
		what := sys.target.describe()
		at := l.Completed.Load()
		if err := sys.target.kill(); err != nil {
			return nil, fmt.Errorf("kill %s: %w", what, err)
		}
		killed := time.Now()
		time.Sleep(sys.target.downtime)
		if err := sys.target.restart(ctx); err != nil {
			return nil, fmt.Errorf("restart %s: %w", what, err)
		}
		r.fault = fmt.Sprintf("SIGKILL %s after %d completed, back after %s", what, at, time.Since(killed).Round(100*time.Millisecond))
	}
	<-loadDone
	r.elapsed = time.Since(start)
	if exited := loadgen.Exited(sys.procs...); exited != "" {
		return nil, fmt.Errorf("%d of %d workflows completed: %s", l.Completed.Load(), cfg.workflows, exited)
	}
	return l, nil
}

// countOutcomes sorts l's workflows into correct, wrong (a failure or
// another c than (2n + 1) * 3) and lost by the completions in outcomes, and
// records them in r with the latencies of those that completed.
func countOutcomes(r *report, l *loadgen.Load, outcomes map[string]loadgen.Outcome) {
	var latencies []time.Duration
	for i, id := range l.IDs {
		wc, ok := outcomes[id]
		switch {
		case !ok || l.Started[i].IsZero():
			r.lost++
			continue
		case wc.Completion.Status != execution.StatusSucceeded || string(jsonvalue.MustObject(wc.Completion.Context)["c"]) != strconv.Itoa((2*i+1)*3):
			r.wrong++
		default:
			r.correct++
		}
		latencies = append(latencies, wc.At.Sub(l.Started[i]))
	}
	r.p50, r.p99 = loadgen.Percentile(latencies, 0.50), loadgen.Percentile(latencies, 0.99)
}

// countAuditDocs counts, once the audit service has caught up, the audit
// documents of each completed workflow of ids above and below wantDocs.
func countAuditDocs(ctx context.Context, b *bus.Bus, mongoURI string, ids []string, outcomes map[string]loadgen.Outcome) (dup, missing int64, err error) {
	if err := loadgen.WaitIdle(ctx, b.JetStream(), bus.StreamEvents, auditservice.Consumer); err != nil {
		return 0, 0, err
	}
	st, err := chainstore.Open(ctx, mongoURI, "nova")
	if err != nil {
		return 0, 0, err
	}
	defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
	counts, err := st.AllCounts(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, id := range ids {
		if _, ok := outcomes[id]; !ok {
			continue
		}
		got := counts[id]
		for coll, want := range wantDocs {
			if got[coll] > want {
				dup += got[coll] - want
			}
			if got[coll] < want {
				missing += want - got[coll]
			}
		}
	}
	return dup, missing, nil
}

// countRedeliveries counts the NOVA_CMD messages (commands) and NOVA_EVT
// messages (results and facts, per consumer) acknowledged, refused or held
// on a delivery after the first, from the acknowledgements' reply subjects,
// which carry the delivery count.
func countRedeliveries(nc *nats.Conn) (func() (commands, events int), func(), error) {
	var mu sync.Mutex
	seen := map[string]string{}
	sub, err := nc.Subscribe("$JS.ACK.>", func(m *nats.Msg) {
		stream, consumer, delivered, seq, ok := parseAckSubject(m.Subject)
		if !ok || delivered < 2 || (stream != bus.StreamCommands && stream != bus.StreamEvents) {
			return
		}
		mu.Lock()
		seen[stream+"/"+consumer+"/"+seq] = stream
		mu.Unlock()
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watch acknowledgements: %w", err)
	}
	count := func() (commands, events int) {
		mu.Lock()
		defer mu.Unlock()
		for _, stream := range seen {
			if stream == bus.StreamCommands {
				commands++
			} else {
				events++
			}
		}
		return commands, events
	}
	return count, func() { _ = sub.Unsubscribe() }, nil
}

// parseAckSubject reads an acknowledgement subject in either form:
// $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<time>.<pending> or
// $JS.ACK.<domain>.<account>.<stream>.<consumer>.<delivered>.<sseq>...
func parseAckSubject(subject string) (stream, consumer string, delivered int, seq string, ok bool) {
	t := strings.Split(subject, ".")
	i := 2
	switch {
	case len(t) == 9:
	case len(t) >= 11:
		i = 4
	default:
		return "", "", 0, "", false
	}
	d, err := strconv.Atoi(t[i+2])
	if err != nil {
		return "", "", 0, "", false
	}
	return t[i], t[i+1], d, t[i+3], true
}

// startCase starts the system of case name on a directory of its own under
// the work dir, within limit; done stops it.
func startCase(ctx context.Context, cfg config, name string, limit time.Duration) (context.Context, *system, func(), error) {
	dir := filepath.Join(cfg.workDir, name)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return ctx, nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, limit)
	sys, err := startSystem(ctx, cfg, name, dir)
	if err != nil {
		cancel()
		return ctx, nil, nil, fmt.Errorf("start: %w", err)
	}
	return ctx, sys, func() { sys.close(); cancel() }, nil
}

func startSystem(ctx context.Context, cfg config, name, dir string) (*system, error) {
	switch name {
	case "whole", "schedule-all", "schedule-latest", "schedule-none", "constructs":
		return startWhole(ctx, cfg, dir)
	case "nats", "schedule":
		return startServices(ctx, cfg, dir, name, 3)
	default:
		return startServices(ctx, cfg, dir, name, 1)
	}
}

// startWhole runs `nova dev` on fixed ports, so that after a restart the
// clients find it where it was.
func startWhole(ctx context.Context, cfg config, dir string) (*system, error) {
	p, natsPort, mongoPort, err := loadgen.NovaDev(cfg.bin, dir)
	if err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return &system{
		natsURL:  fmt.Sprintf("nats://127.0.0.1:%d", natsPort),
		mongoURI: fmt.Sprintf("mongodb://127.0.0.1:%d/", mongoPort),
		target: target{describe: p.Describe, kill: p.Kill, downtime: 0,
			restart: func(context.Context) error { return p.Start() }},
		close: p.Stop,
		procs: []*loadgen.Proc{p},
	}, nil
}

// startServices runs the store in this process, NATS in this process (one
// server) or as natsServers processes (a cluster), and the graph engine,
// sandbox and audit service as processes.
func startServices(ctx context.Context, cfg config, dir, victim string, natsServers int) (*system, error) {
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	sys := &system{close: closeAll}
	mongo, err := devstack.StartMongo(ctx, devstack.Options{DataDir: filepath.Join(dir, "data")})
	if err != nil {
		return nil, err
	}
	closers = append(closers, func() { _ = mongo.Close() })
	sys.mongoURI = mongo.URI()

	var nodes []*loadgen.Proc
	if natsServers == 1 {
		n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: filepath.Join(dir, "data")})
		if err != nil {
			closeAll()
			return nil, err
		}
		closers = append(closers, n.Shutdown)
		sys.natsURL = n.URL()
	} else {
		if nodes, sys.natsURL, err = startNATSCluster(ctx, dir, natsServers); err != nil {
			closeAll()
			return nil, err
		}
		for _, p := range nodes {
			closers = append(closers, p.Stop)
		}
		sys.procs = append(sys.procs, nodes...)
	}

	services, err := startServiceProcs(cfg.bin, dir, sys.natsURL, sys.mongoURI, natsServers)
	if err != nil {
		closeAll()
		return nil, err
	}
	for _, p := range services {
		closers = append(closers, p.Stop)
	}
	sys.procs = append(sys.procs, services...)
	sys.target = victimTarget(ctx, victim, sys.natsURL, nodes, services)
	return sys, nil
}

// startNATSCluster starts a cluster of n NATS servers, each a process of
// this program (chaos natsnode), and waits until it answers JetStream
// requests. It returns the servers and the cluster's URL; on error it
// stops the servers it started.
func startNATSCluster(ctx context.Context, dir string, n int) ([]*loadgen.Proc, string, error) {
	spec, err := devstack.NewClusterSpec(filepath.Join(dir, "data"), 0, n)
	if err != nil {
		return nil, "", err
	}
	specJSON, err := json.Marshal(spec)
	if err != nil {
		return nil, "", err
	}
	self, err := os.Executable()
	if err != nil {
		return nil, "", err
	}
	var nodes []*loadgen.Proc
	for i := range n {
		p := &loadgen.Proc{Name: "NATS server " + spec.Name(i), Path: self, Log: filepath.Join(dir, spec.Name(i)+".log"),
			Args: []string{"natsnode", "-spec", string(specJSON), "-i", fmt.Sprint(i)}, Env: loadgen.BaseEnv()}
		if err := p.Start(); err != nil {
			stopLastFirst(nodes)
			return nil, "", err
		}
		nodes = append(nodes, p)
	}
	running, stopRunning := loadgen.WhileAllRunning(ctx, nodes...)
	err = waitReadyFiles(running, spec)
	if err == nil {
		err = loadgen.WaitJetStream(running, spec.URL())
	}
	err = loadgen.ExitedError(ctx, running, err)
	stopRunning()
	if err != nil {
		stopLastFirst(nodes)
		return nil, "", err
	}
	return nodes, spec.URL(), nil
}

// startServiceProcs starts the audit service, the sandbox and the graph
// engine, in that order, as processes from bin on natsURL and mongoURI with
// replicas replicas of every stream. On error it stops those it started.
func startServiceProcs(bin, dir, natsURL, mongoURI string, replicas int) ([]*loadgen.Proc, error) {
	var procs []*loadgen.Proc
	for _, svc := range []string{"audit", "sandbox", "graph-engine"} {
		// The health listener on a port of the kernel's choosing: a port
		// found free a moment before was taken by another test's process
		// once, and the case failed to start.
		p := &loadgen.Proc{Name: svc, Path: filepath.Join(bin, svc), Log: filepath.Join(dir, svc+".log"),
			Env: loadgen.BaseEnv("NATS_URL="+natsURL, "MONGODB_URI="+mongoURI, "HEALTH_ADDR=127.0.0.1:0",
				"LOG_LEVEL=warn", fmt.Sprintf("NOVA_STREAM_REPLICAS=%d", replicas))}
		if err := p.Start(); err != nil {
			stopLastFirst(procs)
			return nil, err
		}
		procs = append(procs, p)
	}
	return procs, nil
}

// stopLastFirst stops procs in the reverse of the order they started.
func stopLastFirst(procs []*loadgen.Proc) {
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].Stop()
	}
}

// victimTarget is what case victim kills: the NATS server of nodes that
// leads NOVA_CMD when it is kill time, or the process of services that
// runs that service.
func victimTarget(ctx context.Context, victim, natsURL string, nodes, services []*loadgen.Proc) target {
	switch victim {
	case "nats", "schedule":
		// The leader of NOVA_CMD: every command goes through it; of
		// NOVA_TIMERS: its server fires the schedules.
		stream := bus.StreamCommands
		if victim == "schedule" {
			stream = bus.StreamTimers
		}
		var victimIdx int
		return target{downtime: 2 * time.Second,
			describe: func() string { return nodes[victimIdx].Describe() + " (leader of " + stream + ")" },
			kill: func() error {
				i, err := streamLeader(ctx, natsURL, stream)
				if err != nil {
					return err
				}
				victimIdx = i
				return nodes[i].Kill()
			},
			restart: func(context.Context) error { return nodes[victimIdx].Start() }}
	default:
		service := victim
		if victim == "engine" {
			service = "graph-engine"
		}
		var p *loadgen.Proc
		for _, s := range services {
			if s.Name == service {
				p = s
			}
		}
		return target{describe: p.Describe, kill: p.Kill, downtime: time.Second,
			restart: func(context.Context) error { return p.Start() }}
	}
}

// streamLeader is the index of the server (nova-<i>) leading stream.
func streamLeader(ctx context.Context, url, stream string) (int, error) {
	nc, err := nats.Connect(url)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	s, err := js.Stream(ctx, stream)
	if err != nil {
		return 0, err
	}
	info := s.CachedInfo()
	if info.Cluster == nil || !strings.HasPrefix(info.Cluster.Leader, "nova-") {
		return 0, fmt.Errorf("stream %s has no leader", stream)
	}
	return strconv.Atoi(strings.TrimPrefix(info.Cluster.Leader, "nova-"))
}

// natsNode runs one server of a cluster until it is killed (the chaos
// program starts each server of the nats case this way).
func natsNode(args []string) int {
	fs := flag.NewFlagSet("natsnode", flag.ExitOnError)
	specJSON := fs.String("spec", "", "devstack.ClusterSpec as JSON")
	i := fs.Int("i", 0, "index of this server")
	_ = fs.Parse(args)
	var spec devstack.ClusterSpec
	if err := json.Unmarshal([]byte(*specJSON), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "natsnode: -spec: %v\n", err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	n, err := devstack.StartClusterNode(spec, *i, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "natsnode: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := n.WaitCurrent(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "natsnode: %v\n", err)
		n.Shutdown()
		return 1
	}
	if err := os.WriteFile(readyFile(spec, *i), nil, 0o640); err != nil {
		fmt.Fprintf(os.Stderr, "natsnode: %v\n", err)
	}
	<-ctx.Done()
	n.Shutdown()
	return 0
}

// readyFile is written by server i once it is current with the cluster.
func readyFile(spec devstack.ClusterSpec, i int) string {
	return filepath.Join(spec.DataDir, spec.Name(i)+".ready")
}

// waitReadyFiles waits until every server of spec is current.
func waitReadyFiles(ctx context.Context, spec devstack.ClusterSpec) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for i := range spec.Size() {
		for {
			if _, err := os.Stat(readyFile(spec, i)); err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("%s did not join the cluster: %w", spec.Name(i), ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// The workflow of the schedule case: started every second by its schedule.
const scheduledWorkflow = `
name: chaos-scheduled
schedules:
  - {id: every-second, every: 1s, catchup: all, context: {n: 1}}
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: 'context["a"] = context["n"] * 2'}
  - {id: done, type: end}
edges: [{from: start, to: double}, {from: double, to: done}]
`

// runScheduleCase runs the schedule case: the workflow's schedule ticks for
// about 8 s, the leader of NOVA_TIMERS is killed, and the ticks go on for
// 12 s more. Every tick from the first to the last must have started one
// execution, which succeeded: correct counts them, wrong those that
// failed, lost the ticks without one, dupDocs the ticks with more.
func runScheduleCase(ctx context.Context, cfg config) report {
	r := report{name: "schedule"}
	ctx, sys, done, err := startCase(ctx, cfg, r.name, cfg.caseLimit+time.Minute)
	if err != nil {
		r.err = err
		return r
	}
	defer done()
	b, err := connectWhenReady(ctx, sys)
	if err != nil {
		r.err = err
		return r
	}
	defer b.Close()
	def, err := workflow.Parse([]byte(scheduledWorkflow))
	if err != nil {
		r.err = err
		return r
	}
	start := time.Now()
	if err := client.New(b, nil).Register(ctx, def); err != nil {
		r.err = fmt.Errorf("register: %w", err)
		return r
	}
	time.Sleep(8 * time.Second)
	what := sys.target.describe()
	if err := sys.target.kill(); err != nil {
		r.err = fmt.Errorf("kill %s: %w", what, err)
		return r
	}
	killed := time.Now()
	time.Sleep(sys.target.downtime)
	if err := sys.target.restart(ctx); err != nil {
		r.err = fmt.Errorf("restart %s: %w", what, err)
		return r
	}
	r.fault = fmt.Sprintf("SIGKILL %s 8 s after the schedule began, back after %s", what, time.Since(killed).Round(100*time.Millisecond))
	time.Sleep(12 * time.Second)
	// Unregistering stops the ticks: a definition without the schedule.
	def.Schedules = nil
	if err := client.New(b, nil).Register(ctx, def); err != nil {
		r.err = fmt.Errorf("register without the schedule: %w", err)
		return r
	}
	r.elapsed = time.Since(start)
	outcomes, err := loadgen.Completions(ctx, b.JetStream(), time.Time{})
	if err != nil {
		r.err = err
		return r
	}
	// Each tick's execution id names the tick (execution.TickID):
	// its time, in whole seconds, and the ticks the server fired each
	// second after the first.
	ticks := map[int64][]string{}
	prefix := execution.TickPrefix("chaos-scheduled", "every-second")
	var first, last int64
	for id, o := range outcomes {
		at, ok := strings.CutPrefix(id, prefix)
		if !ok {
			continue
		}
		t, err := execution.ParseTick(at)
		if err != nil {
			r.err = fmt.Errorf("execution %s: %v", id, err)
			return r
		}
		sec := t.Unix()
		ticks[sec] = append(ticks[sec], id)
		if first == 0 || sec < first {
			first = sec
		}
		last = max(last, sec)
		if o.Completion.GetStatus() == execution.StatusSucceeded {
			r.correct++
		} else {
			r.wrong++
		}
	}
	if len(ticks) == 0 {
		r.err = errors.New("the schedule started no execution")
		return r
	}
	for sec := first; sec <= last; sec++ {
		switch n := len(ticks[sec]); {
		case n == 0:
			r.lost++
		case n > 1:
			r.dupDocs += int64(n - 1)
		}
	}
	r.total = int(last - first + 1)
	return r
}

// runScheduleKillCase runs case schedule-<catchup>: a workflow scheduled
// every 2 s with that catchup, `nova dev` killed 1.5 s after a tick fell
// due and back 5 s later (loadgen.ScheduleKill). Correct counts the ticks
// that ran, or were skipped, as the catchup says, wrong those run against it or off the
// schedule's grid, lost those it runs that did not, duplicated those run
// twice.
func runScheduleKillCase(ctx context.Context, cfg config, catchup string) report {
	r := report{name: "schedule-" + catchup}
	ctx, sys, done, err := startCase(ctx, cfg, r.name, cfg.caseLimit+time.Minute)
	if err != nil {
		r.err = err
		return r
	}
	defer done()
	def, err := workflow.Parse([]byte(fmt.Sprintf(scheduleKillWorkflow, catchup)))
	if err != nil {
		r.err = err
		return r
	}
	start := time.Now()
	res, err := loadgen.ScheduleKill{URL: sys.natsURL, Def: def, Kill: sys.target.kill,
		Restart: func() error { return sys.target.restart(ctx) }, Down: 5 * time.Second}.Run(ctx)
	r.elapsed = time.Since(start)
	if err != nil {
		r.err = err
		return r
	}
	c := res.Checks["every-2s"]
	k := res.Around
	r.total = c.Ticks
	r.correct = c.Ticks - len(c.Lost) - len(c.Twice) - len(c.Extra) // ran, or skipped, as the catchup says
	r.wrong = len(c.Extra) + len(c.OffGrid) + len(res.Failed)
	r.lost = len(c.Lost)
	r.dupDocs = int64(len(c.Twice))
	r.fault = fmt.Sprintf("SIGKILL %s %s after a tick fell due, back after %s, taking ticks %s later; catchup %s: %d of %d ticks ran",
		sys.target.describe(), k.Killed.Sub(res.Due).Round(100*time.Millisecond), k.Restarted.Sub(k.Killed).Round(100*time.Millisecond),
		k.Ready.Sub(k.Restarted).Round(100*time.Millisecond), catchup, c.Ran, c.Ticks)
	for _, f := range res.Failed {
		fmt.Fprintf(os.Stderr, "%s: execution %s\n", r.name, f)
	}
	for what, ts := range map[string][]time.Time{"lost": c.Lost, "run twice": c.Twice, "run against the catchup": c.Extra, "off the grid": c.OffGrid} {
		for _, t := range ts {
			fmt.Fprintf(os.Stderr, "%s: tick %s %s\n", r.name, t.Format(time.TimeOnly), what)
		}
	}
	return r
}

// The workflow of the schedule-<catchup> cases (%s: the catchup).
const scheduleKillWorkflow = `
name: chaos-schedule-kill
schedules:
  - {id: every-2s, every: 2s, catchup: %s, context: {n: 1}}
nodes:
  - {id: start, type: start}
  - {id: double, type: action, code: 'context["a"] = context["n"] * 2'}
  - {id: done, type: end}
edges: [{from: start, to: double}, {from: double, to: done}]
`
