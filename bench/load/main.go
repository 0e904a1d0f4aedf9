// Command benchload measures what a workflow costs a running `nova dev`,
// from outside, the way a producer sees it: it starts `nova dev` on a fresh
// data dir, publishes the documented start event from this separate process
// at 1, 8 and 32 workflows in flight (waiting for the completions with one
// consumer of them all, bus.Waits), and prints per run the workflows per
// second, p50/p90/p99 latency from start to completion, the CPU per workflow
// of the nova dev process (Go services and the store) and of its sandbox
// processes, and the PSS of them all (also idle: after the warm-up and, with
// -idle, after the runs). With -history N it then runs N more
// workflows on the same data dir, unmeasured, and measures the 3-node runs
// again: whether the cost per workflow stays flat as the history grows.
// Each of those runs is paired with the same run on a second nova dev,
// started fresh beside the first (-beside), so that the two are measured
// minutes apart rather than a quarter of an hour: this machine's speed
// drifts by more than the history's effect in that time. -history-rounds
// repeats the pairs in ABBA order (fresh, after, after, fresh, ...) and
// prints the ratio of the means, after to fresh, of CPU per workflow and
// p50: one pair alone has differed by 20% between two runs of one build.
// Beside it, in the same run, a baseline: three plain `python3 -c`
// subprocesses per workflow, no engine.
//
// `make bench-load` builds the binaries and runs it; -h lists the knobs.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/nova/client"
)

type config struct {
	bin       string
	workflows int
	inFlight  []int
	long      int
	history   int
	beside    bool
	// rounds is how many pairs of runs, fresh beside and after the
	// history, are measured per number in flight, in ABBA order.
	rounds int
	limit  time.Duration
	pprof  string
	// idle is how long to wait, nothing running, before the idle PSS is
	// taken after the runs (0: not taken); zygoteIdle is nova dev's
	// --zygote-idle (0: its default).
	idle, zygoteIdle time.Duration
	// retention is nova dev's NOVA_AUDIT_RETENTION (0: unset).
	retention time.Duration
	// python: run the baseline of plain python3 subprocesses.
	python bool
	// keep leaves the data dirs and nova dev's logs in place.
	keep bool
	// slowest is how many of each run's slowest workflows to name, with
	// the wall time they started at (0: none).
	slowest int
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchload", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	fs.IntVar(&cfg.workflows, "workflows", 300, "workflows per run")
	inFlight := fs.String("in-flight", "1,8,32", "runs, by workflows in flight")
	fs.IntVar(&cfg.long, "long", 30, "nodes of the long chain run once at 8 in flight (0: skip)")
	fs.IntVar(&cfg.history, "history", 20000, "workflows run (unmeasured, 32 in flight) before the 3-node runs are measured again on the same data dir (0: skip)")
	fs.BoolVar(&cfg.beside, "beside", true, "with -history, measure each run after the history beside the same run on a second nova dev started fresh")
	fs.IntVar(&cfg.rounds, "history-rounds", 2, "with -history and -beside, pairs of runs (fresh beside, after the history) per number in flight, in ABBA order, summed up as ratios of the means")
	fs.DurationVar(&cfg.limit, "run-timeout", 3*time.Minute, "time limit of one run (the history's is scaled to its size)")
	fs.StringVar(&cfg.pprof, "pprof", "", "serve nova dev's Go profiles at `address` (nova dev --pprof)")
	fs.DurationVar(&cfg.idle, "idle", 0, "after the runs, wait this long with nothing running and take the PSS of idle nova dev (0: skip)")
	fs.BoolVar(&cfg.python, "python", true, "end with the baseline: three plain python3 -c subprocesses per workflow")
	fs.DurationVar(&cfg.retention, "retention", 0, "run nova dev with NOVA_AUDIT_RETENTION set to this (0: unset, the chain of work kept for ever)")
	fs.DurationVar(&cfg.zygoteIdle, "zygote-idle", 0, "nova dev --zygote-idle: how long its full zygote may go unused before it stops (0: nova dev's default)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dirs and nova dev's logs (their directory is printed)")
	fs.IntVar(&cfg.slowest, "slowest", 0, "print each run's `n` slowest workflows with the time they started (to find them in nova dev's log and traces)")
	_ = fs.Parse(os.Args[1:])
	for _, f := range strings.Split(*inFlight, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "benchload: -in-flight %q: want positive numbers\n", *inFlight)
			os.Exit(2)
		}
		cfg.inFlight = append(cfg.inFlight, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchload: %v\n", err)
		os.Exit(1)
	}
}

// result is what one run measured.
type result struct {
	name          string
	workflows     int
	nodes         int
	wfPerSec      float64
	p50, p90, p99 time.Duration
	cpuMain       time.Duration // per workflow: the nova dev process
	cpuSandbox    time.Duration // per workflow: its child processes
	pssMiB        float64       // peak: nova dev and its descendants
	pssMainMiB    float64       // peak: nova dev alone
	// pair names the runs after the history that this one is paired with
	// (the workflow and how many in flight); fresh tells the side: the
	// nova dev started fresh beside, or the one after the history.
	pair  string
	fresh bool
}

func run(ctx context.Context, cfg config) error {
	dir, err := os.MkdirTemp("", "nova-benchload-")
	if err != nil {
		return err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "benchload: data dirs and logs in %s, kept\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	three, err := workflow.Parse([]byte(loadgen.Chain(3)))
	if err != nil {
		return err
	}
	dev, err := startDev(ctx, cfg, filepath.Join(dir, "first"), cfg.pprof, three)
	if err != nil {
		return err
	}
	defer dev.stop()
	fmt.Printf("benchload: nova dev (pid %d) on a fresh data dir; %d workflows per run\n\n", dev.pid(), cfg.workflows)
	started, err := idlePSS(ctx, dev.pid(), "idle, after the warm-up", 0)
	if err != nil {
		return err
	}
	results, err := runs(ctx, cfg, dev, three, filepath.Join(dir, "beside"))
	results = append([]result{started}, results...)
	// What was measured is printed even when a later run failed.
	if len(results) > 0 {
		err = errors.Join(err, printResults(results))
		printHistoryRatios(results)
	}
	return err
}

// dev is a nova dev that benchload started, and its connection to it.
type dev struct {
	proc *loadgen.Proc
	bus  *bus.Bus
}

func (d *dev) pid() int { return d.proc.Pid() }

func (d *dev) stop() {
	d.bus.Close()
	d.proc.Stop()
}

// startDev starts a nova dev on a fresh data dir under dir, serving its Go
// profiles at pprof (none when empty), connects to it and warms it up with
// a few workflows of def: interpreters, caches and the first streams.
func startDev(ctx context.Context, cfg config, dir, pprof string, def *novav1.WorkflowDefinition) (*dev, error) {
	bin, err := filepath.Abs(cfg.bin)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	proc, natsPort, _, err := loadgen.NovaDev(bin, dir)
	if err != nil {
		return nil, err
	}
	if pprof != "" {
		proc.Args = append(proc.Args, "--pprof", pprof)
	}
	if cfg.zygoteIdle > 0 {
		proc.Args = append(proc.Args, "--zygote-idle", cfg.zygoteIdle.String())
	}
	if cfg.retention > 0 {
		proc.Env = append(proc.Env, "NOVA_AUDIT_RETENTION="+cfg.retention.String())
	}
	if err := proc.Start(); err != nil {
		return nil, err
	}
	// Until it is warm, a nova dev that exits (a port taken, a data dir
	// locked) ends the waiting at once, and the error says so with the
	// last line of its log.
	running, cancel := proc.WhileRunning(ctx)
	defer cancel()
	failed := func(err error) error { return loadgen.ExitedError(ctx, running, err) }
	url := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	b, err := loadgen.Connect(running, url, "benchload")
	if err != nil {
		proc.Stop()
		return nil, failed(err)
	}
	d := &dev{proc: proc, bus: b}
	if _, err := measure(running, cfg, d, "warm-up", def, 3, 20, 4); err != nil {
		d.stop()
		return nil, failed(err)
	}
	if err := quiet(running, d.pid()); err != nil {
		d.stop()
		return nil, failed(err)
	}
	return d, nil
}

// quiet waits until the nova dev process group uses less than 5% of a CPU
// over half a second: its full zygote imports its libraries for seconds
// after start, which the first run would otherwise count. It gives up
// waiting after a minute.
func quiet(ctx context.Context, pid int) error {
	const window = 500 * time.Millisecond
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		before, err := loadgen.SampleGroup(pid)
		if err != nil {
			return err
		}
		select {
		case <-time.After(window):
		case <-ctx.Done():
			return ctx.Err()
		}
		after, err := loadgen.SampleGroup(pid)
		if err != nil {
			return err
		}
		if used := after.Main + after.Children - before.Main - before.Children; used < window/20 {
			return nil
		}
	}
	return nil
}

// runs measures the 3-node workflow at each number in flight, the long
// chain, the same after the history (each after the same run on a nova dev
// started fresh under besideDir, with cfg.beside), and the baseline, and
// returns what it measured before any error.
func runs(ctx context.Context, cfg config, d *dev, three *novav1.WorkflowDefinition, besideDir string) ([]result, error) {
	var results []result
	for _, n := range cfg.inFlight {
		r, err := measure(ctx, cfg, d, fmt.Sprintf("3 nodes, %d in flight", n), three, 3, cfg.workflows, n)
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	if cfg.long > 0 {
		long, err := workflow.Parse([]byte(loadgen.Chain(cfg.long)))
		if err != nil {
			return results, err
		}
		r, err := measure(ctx, cfg, d, fmt.Sprintf("%d nodes, 8 in flight", cfg.long), long, cfg.long, max(cfg.workflows/10, 10), 8)
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	if cfg.history > 0 {
		after, err := afterHistory(ctx, cfg, d, three, besideDir)
		results = append(results, after...)
		if err != nil {
			return results, err
		}
	}
	if cfg.idle > 0 {
		r, err := idlePSS(ctx, d.pid(), fmt.Sprintf("idle, %s after the runs", cfg.idle), cfg.idle)
		if err != nil {
			return results, err
		}
		results = append(results, r)
	}
	if !cfg.python {
		return results, nil
	}
	base, err := baseline(ctx, cfg.workflows)
	if err != nil {
		return results, err
	}
	return append(results, base), nil
}

// afterHistory runs the history on d, then measures the 3-node workflow on
// it at each number in flight; with cfg.beside each of those runs follows
// the same run on a nova dev started fresh under besideDir, stopped before
// it returns.
func afterHistory(ctx context.Context, cfg config, d *dev, three *novav1.WorkflowDefinition, besideDir string) ([]result, error) {
	if err := fill(ctx, cfg, d.bus, three); err != nil {
		return nil, err
	}
	var fresh *dev
	if cfg.beside {
		var err error
		if fresh, err = startDev(ctx, cfg, besideDir, "", three); err != nil {
			return nil, fmt.Errorf("the fresh nova dev beside: %w", err)
		}
		defer fresh.stop()
	}
	var results []result
	for _, n := range cfg.inFlight {
		pair := fmt.Sprintf("3 nodes, %d in flight", n)
		measured := func(on *dev, name string) func() error {
			return func() error {
				r, err := measure(ctx, cfg, on, pair+", "+name, three, 3, cfg.workflows, n)
				if err == nil {
					r.pair, r.fresh = pair, on != d
					results = append(results, r)
				}
				return err
			}
		}
		afterRun := measured(d, fmt.Sprintf("after %d more", cfg.history))
		if fresh == nil {
			if err := afterRun(); err != nil {
				return results, err
			}
			continue
		}
		freshRun := measured(fresh, "fresh nova dev beside")
		for round := range max(cfg.rounds, 1) {
			runs := []func() error{freshRun, afterRun}
			if round%2 == 1 {
				runs[0], runs[1] = runs[1], runs[0]
			}
			for _, run := range runs {
				if err := run(); err != nil {
					return results, err
				}
			}
		}
	}
	return results, nil
}

// printHistoryRatios prints, per number in flight, the means of the runs
// fresh beside and after the history, and their ratios.
func printHistoryRatios(results []result) {
	type sums struct {
		runs     int
		cpu, p50 time.Duration
	}
	var order []string
	fresh, after := map[string]*sums{}, map[string]*sums{}
	for _, r := range results {
		if r.pair == "" {
			continue
		}
		m := after
		if r.fresh {
			m = fresh
		}
		if m[r.pair] == nil {
			m[r.pair] = &sums{}
			if !r.fresh {
				order = append(order, r.pair)
			}
		}
		m[r.pair].runs++
		m[r.pair].cpu += r.cpuMain
		m[r.pair].p50 += r.p50
	}
	printed := false
	for _, head := range order {
		f, a := fresh[head], after[head]
		if f == nil {
			continue
		}
		if !printed {
			fmt.Printf("\nafter the history against fresh beside (means of the runs in ABBA order; CPU of the nova dev process)\n")
			printed = true
		}
		fc, ac := f.cpu/time.Duration(f.runs), a.cpu/time.Duration(a.runs)
		fp, ap := f.p50/time.Duration(f.runs), a.p50/time.Duration(a.runs)
		fmt.Printf("  %s: CPU/wf %.1f -> %.1f ms (%.2fx), p50 %s -> %s (%.2fx), %d runs each\n", head,
			ms(fc), ms(ac), float64(ac)/float64(fc), fp.Round(100*time.Microsecond), ap.Round(100*time.Microsecond),
			float64(ap)/float64(fp), a.runs)
	}
}

// idlePSS waits for wait with nothing running and takes the PSS of nova dev
// and its processes: a row with no workflow.
func idlePSS(ctx context.Context, pid int, name string, wait time.Duration) (result, error) {
	select {
	case <-time.After(wait):
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	s, err := loadgen.SampleGroup(pid)
	if err != nil {
		return result{}, err
	}
	return result{name: name, pssMiB: s.PSSMiB, pssMainMiB: s.PSSMainMiB}, nil
}

func printResults(results []result) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tWORKFLOWS\tWF/S\tP50\tP90\tP99\tCPU/WF NOVA DEV\tCPU/WF SANDBOX PROCS\tCPU/WF TOTAL\tCPU/STEP\tPSS\tPSS NOVA DEV")
	for _, r := range results {
		if r.workflows == 0 {
			fmt.Fprintf(tw, "%s\t-\t-\t-\t-\t-\t-\t-\t-\t-\t%s\t%s\n", r.name, pss(r.pssMiB), pss(r.pssMainMiB))
			continue
		}
		total := r.cpuMain + r.cpuSandbox
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%s\t%s\t%s\t%.1f ms\t%.1f ms\t%.1f ms\t%.2f ms\t%s\t%s\n", r.name, r.workflows, r.wfPerSec,
			r.p50.Round(100*time.Microsecond), r.p90.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond),
			ms(r.cpuMain), ms(r.cpuSandbox), ms(total), ms(total)/float64(r.nodes), pss(r.pssMiB), pss(r.pssMainMiB))
	}
	return tw.Flush()
}

// fill runs cfg.history workflows of def at 32 in flight, unmeasured, and
// says on stderr how it goes, with the throughput of each half minute: how
// it holds as the history grows. It gives up only when the workflows stop
// completing for cfg.limit.
func fill(ctx context.Context, cfg config, b *bus.Bus, def *novav1.WorkflowDefinition) error {
	fmt.Fprintf(os.Stderr, "benchload: running %d more workflows on the same data dir (32 in flight, not measured)\n", cfg.history)
	l := loadgen.NewLoad(b, def, cfg.history)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	done := make(chan struct{})
	go func() { l.Run(rctx, 32); close(done) }()
	const every = 30 * time.Second
	tick := time.NewTicker(every)
	defer tick.Stop()
	var last int64
	lastProgress := time.Now()
	for {
		select {
		case <-done:
			got := int(l.Completed.Load())
			if got != cfg.history {
				return fmt.Errorf("history: %d of %d workflows completed; none for %s", got, cfg.history, cfg.limit)
			}
			fmt.Fprintf(os.Stderr, "benchload: %d workflows in %s (%.1f wf/s)\n", got, time.Since(start).Round(time.Second), float64(got)/time.Since(start).Seconds())
			return nil
		case now := <-tick.C:
			got := l.Completed.Load()
			fmt.Fprintf(os.Stderr, "benchload: %d of %d after %s (%.1f wf/s in the last %s)\n", got, cfg.history,
				time.Since(start).Round(time.Second), float64(got-last)/every.Seconds(), every)
			if got > last {
				last, lastProgress = got, now
			} else if now.Sub(lastProgress) >= cfg.limit {
				cancel()
			}
		}
	}
}

// printSlowest names the n slowest of a run's workflows on stderr: when
// each started, how long it took, its execution id.
func printSlowest(run string, ids []string, started []time.Time, lat []time.Duration, n int) {
	order := make([]int, len(lat))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(lat[b], lat[a]) })
	for _, i := range order[:min(n, len(order))] {
		fmt.Fprintf(os.Stderr, "benchload: %s: slow: started %s, took %s, execution %s\n",
			run, started[i].UTC().Format("15:04:05.000"), lat[i].Round(100*time.Microsecond), ids[i])
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func pss(mib float64) string {
	if mib == 0 {
		return "-"
	}
	return fmt.Sprintf("%.0f MiB", mib)
}

// measure runs n workflows of def at inFlight and samples the CPU of the
// nova dev process group around it.
func measure(ctx context.Context, cfg config, d *dev, name string, def *novav1.WorkflowDefinition, nodes, n, inFlight int) (result, error) {
	b, pid := d.bus, d.pid()
	r := result{name: name, workflows: n, nodes: nodes}
	if err := settled(ctx, b.JetStream(), name+": before"); err != nil {
		return r, err
	}
	before, err := loadgen.SampleGroup(pid)
	if err != nil {
		return r, err
	}
	l := loadgen.NewLoad(b, def, n)
	rctx, cancel := context.WithTimeout(ctx, cfg.limit)
	defer cancel()
	start := time.Now()
	peak, peakMain := 0.0, 0.0
	done := make(chan struct{})
	go func() { l.Run(rctx, inFlight); close(done) }()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case <-done:
			break wait
		case <-tick.C:
			if s, err := loadgen.SampleGroup(pid); err == nil {
				peak, peakMain = max(peak, s.PSSMiB), max(peakMain, s.PSSMainMiB)
			}
		}
	}
	elapsed := time.Since(start)
	if err := settled(ctx, b.JetStream(), name); err != nil {
		return r, err
	}
	after, err := loadgen.SampleGroup(pid)
	if err != nil {
		return r, err
	}
	if got := int(l.Completed.Load()); got != n {
		return r, fmt.Errorf("%s: %d of %d workflows completed within %s", name, got, n, cfg.limit)
	}
	// The completions as they were delivered: a run longer than
	// NOVA_KEEP_ENDED_EVENTS has its first ones purged from the stream.
	var lat []time.Duration
	for i, id := range l.IDs {
		o := l.Outcomes[i]
		if o == nil || o.Completion.Status != execution.StatusSucceeded {
			return r, fmt.Errorf("%s: workflow %s did not succeed (%v)", name, id, o)
		}
		lat = append(lat, o.At.Sub(l.Started[i]))
	}
	if cfg.slowest > 0 {
		printSlowest(name, l.IDs, l.Started, lat, cfg.slowest)
	}
	r.wfPerSec = float64(n) / elapsed.Seconds()
	r.p50, r.p90, r.p99 = loadgen.Percentile(lat, 0.50), loadgen.Percentile(lat, 0.90), loadgen.Percentile(lat, 0.99)
	r.cpuMain = (after.Main - before.Main) / time.Duration(n)
	r.cpuSandbox = (after.Children - before.Children) / time.Duration(n)
	r.pssMiB, r.pssMainMiB = max(peak, after.PSSMiB), max(peakMain, after.PSSMainMiB)
	return r, nil
}

// settled waits until no durable consumer of NOVA's streams has a message
// pending or unacknowledged: the work of the workflows that completed (the
// audit's writes among it) is done. A run's CPU is taken between two such
// moments, so that it counts what its own workflows cost and nothing the
// previous run (or the history) left behind. A wait longer than a second is
// said on stderr: how far behind the services were.
func settled(ctx context.Context, js jetstream.JetStream, what string) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		busy, err := client.Backlog(ctx, js, bus.StreamCommands, bus.StreamEvents, bus.StreamDeadLetters)
		switch {
		case err != nil:
			return fmt.Errorf("%s: consumers: %w", what, err)
		case busy == "":
			if waited := time.Since(start); waited > time.Second {
				fmt.Fprintf(os.Stderr, "benchload: %s: the consumers took %s to catch up\n", what, waited.Round(100*time.Millisecond))
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: consumers still busy after %s: %s", what, time.Since(start).Round(time.Second), busy)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// baseline runs three `python3 -c` subprocesses per workflow, one workflow
// at a time, each passing the context on as JSON: no engine, no isolation.
func baseline(ctx context.Context, n int) (result, error) {
	r := result{name: "baseline: 3 × python3 -c, 1 at a time", workflows: n, nodes: 3}
	var before, after syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before); err != nil {
		return r, err
	}
	code := `import json,sys; c=json.loads(sys.argv[1]); c['x']=1; print(json.dumps(c))`
	var lat []time.Duration
	start := time.Now()
	for range n {
		t := time.Now()
		ctxJSON := `{"n": 1}`
		for range 3 {
			out, err := exec.CommandContext(ctx, "/usr/bin/python3", "-c", code, ctxJSON).Output()
			if err != nil {
				return r, fmt.Errorf("baseline: %w", err)
			}
			ctxJSON = strings.TrimSpace(string(out))
		}
		lat = append(lat, time.Since(t))
	}
	elapsed := time.Since(start)
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after); err != nil {
		return r, err
	}
	cpu := time.Duration(after.Utime.Nano()+after.Stime.Nano()-before.Utime.Nano()-before.Stime.Nano()) * time.Nanosecond
	r.wfPerSec = float64(n) / elapsed.Seconds()
	r.p50, r.p90, r.p99 = loadgen.Percentile(lat, 0.50), loadgen.Percentile(lat, 0.90), loadgen.Percentile(lat, 0.99)
	r.cpuSandbox = cpu / time.Duration(n)
	return r, nil
}
