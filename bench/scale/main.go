// Command benchscale measures how the 3-node code workflow's throughput
// grows with cores and with replicas, says where it stops growing, and
// checks the fast path against another build:
//
//   - cores: one `nova dev` pinned with taskset to k cores (-cores), the
//     load (this program) pinned to the machine's last cores (-load-cores).
//   - production: the NATS server, the store, the audit service, E graph
//     engines and S sandboxes, each a process (-prod E:S,...), each pinned
//     to CPUs of its own (-nats-cores, -engine-cores, -sandbox-cores; the
//     store and the audit service share one). On a machine too small for
//     any pinned shape the first one runs unpinned, for its figures per
//     part.
//   - regression: on every core, unpinned, this build and -base-bin's one
//     after the other, at 1 and 32 in flight.
//
// Each measurement runs -workflows executions after a warm-up and prints
// wf/s, p50/p99, CPU per workflow (each part's processes and their
// programs) and the efficiency against linear from the first shape; the
// pinned part that used the most of its CPUs; where the workflows' time
// went, from their events (the start, the command's wait for the sandbox,
// the program, the result back to the engine); and what the NATS server
// carried: messages/s through it and per workflow by client (production
// shape), messages stored per workflow by stream, and the consumers with
// the most waiting. Shapes that do not fit the machine are listed as
// skipped. -profile DIR writes a CPU profile of each part during the last
// shape of each kind; -before-workers 2 measures each cores shape again
// with the sandbox workers nova dev had before they followed its cores.
//
// `make bench-scale` builds the binaries (and the base commit) and runs it.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/bench/loadgen"
)

type config struct {
	bin, baseBin string
	cores        []int
	prod         []prodShape
	loadCores    int
	natsCores    int
	natsServers  int
	engineCores  int
	sandboxCores int
	workflows    int
	inFlight     int
	keep         bool
	profile      string
	tmp          string
	// beforeWorkers, when set, measures each cores shape again with
	// nova dev's sandbox workers fixed at that number (as before they
	// followed its cores).
	beforeWorkers int
	rounds        int
	// env is settings given to nova dev and every service (the load's
	// own NOVA_ variables are not passed on).
	env []string
}

func main() {
	// The production shape's NATS server and store run as processes of
	// this program.
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "nats":
			os.Exit(natsPart(os.Args[2:]))
		case "store":
			os.Exit(storePart(os.Args[2:]))
		}
	}
	var cfg config
	fs := flag.NewFlagSet("benchscale", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova, graph-engine, sandbox and audit binaries (make build)")
	fs.StringVar(&cfg.baseBin, "base-bin", "", "directory of the nova binary to check the fast path against (none: not checked)")
	coresFlag := fs.String("cores", "1,2,4,8,12", "cores of nova dev, one shape each (none: \"\")")
	prodFlag := fs.String("prod", "1:1,2:2,3:3,4:4", "graph engines:sandboxes of the production shape, one shape each (none: \"\")")
	fs.IntVar(&cfg.loadCores, "load-cores", 2, "cores of the load (the machine's last ones; at most all but one)")
	fs.IntVar(&cfg.natsCores, "nats-cores", 2, "cores of the production shape's NATS server")
	fs.IntVar(&cfg.natsServers, "nats-servers", 1, "NATS servers of the production shape: 1, or 3 or more in a cluster with every stream on 3 (R3); each gets -nats-cores")
	fs.IntVar(&cfg.engineCores, "engine-cores", 1, "cores of each graph engine of the production shape")
	fs.IntVar(&cfg.sandboxCores, "sandbox-cores", 2, "cores of each sandbox of the production shape")
	fs.IntVar(&cfg.workflows, "workflows", 2000, "executions per measurement")
	fs.IntVar(&cfg.inFlight, "in-flight", 64, "executions in flight in the cores and production shapes")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dirs and the processes' logs")
	fs.StringVar(&cfg.profile, "profile", "", "write CPU profiles of the last shape of each kind to `DIR`")
	fs.IntVar(&cfg.beforeWorkers, "before-workers", 0, "also measure each cores shape with nova dev's sandbox workers fixed at `N` (2: as before they followed its cores; 0: not)")
	fs.Func("env", "a `NAME=VALUE` setting for nova dev and every service, e.g. NOVA_WORKERS=16 (repeatable)", func(v string) error {
		if k, _, ok := strings.Cut(v, "="); !ok || k == "" {
			return fmt.Errorf("want NAME=VALUE")
		}
		cfg.env = append(cfg.env, v)
		return nil
	})
	fs.IntVar(&cfg.rounds, "rounds", 4, "rounds of the fast-path check, each build once per round, first in every other round")
	fs.StringVar(&cfg.tmp, "tmp", "", "directory for the data dirs (default: the system's)")
	_ = fs.Parse(os.Args[1:])
	for f := range strings.SplitSeq(*coresFlag, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "benchscale: -cores %q: want whole numbers of 1 or more\n", *coresFlag)
			os.Exit(2)
		}
		cfg.cores = append(cfg.cores, k)
	}
	if strings.TrimSpace(*prodFlag) != "" {
		var err error
		if cfg.prod, err = parseShapes(*prodFlag); err != nil {
			fmt.Fprintf(os.Stderr, "benchscale: %v\n", err)
			os.Exit(2)
		}
	}
	if cfg.rounds < 1 {
		fmt.Fprintf(os.Stderr, "benchscale: -rounds %d: want 1 or more\n", cfg.rounds)
		os.Exit(2)
	}
	if cfg.natsServers == 2 || cfg.natsServers < 1 {
		fmt.Fprintf(os.Stderr, "benchscale: -nats-servers %d: want 1, or 3 or more\n", cfg.natsServers)
		os.Exit(2)
	}
	if cfg.profile != "" {
		if err := os.MkdirAll(cfg.profile, 0o750); err != nil {
			fmt.Fprintf(os.Stderr, "benchscale: -profile: %v\n", err)
			os.Exit(2)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchscale: %v\n", err)
		os.Exit(1)
	}
}

// result is one measurement.
type result struct {
	shape          string
	units          int // cores, or replica sets, for the efficiency
	inFlight       int
	wfs            float64
	p50, p99       time.Duration
	cpuPerWorkflow time.Duration
	parts          []partCPU
	// natsMsgs is messages/s in and out of the NATS server (production
	// shape); stored, messages stored per workflow by stream.
	natsMsgs float64
	stored   map[string]float64
	// clientMsgs is messages in and out per workflow by client name
	// (production shape).
	clientMsgs map[string]float64
	// backlog is the consumers (stream/durable) with the most waiting on
	// average while the load ran.
	backlog []waiting
	hops    hops
}

type partCPU struct {
	name        string
	n           int
	cores       int // pinned to (0: not pinned)
	perWorkflow time.Duration
}

// busiest is the pinned part that used the most of its cores, and how
// much (1: all of them); "" when no part is pinned.
func (r result) busiest() (string, float64) {
	var name string
	var most float64
	for _, p := range r.parts {
		if p.cores == 0 {
			continue
		}
		if busy := p.perWorkflow.Seconds() * r.wfs / float64(p.cores); busy > most {
			name, most = fmt.Sprintf("%s (%d CPU%s)", p.name, p.cores, plural(p.cores, "s")), busy
		}
	}
	return name, most
}

func run(ctx context.Context, cfg config) error {
	ncpu := runtime.NumCPU()
	load := min(cfg.loadCores, ncpu-1)
	fmt.Printf("3-node code workflow; this machine has %d CPUs\n", ncpu)
	_, tasksetErr := exec.LookPath("taskset")
	canPin := tasksetErr == nil && load >= 1
	if canPin {
		loadSet := cpuRange(ncpu-load, ncpu-1)
		if err := pinSelf(loadSet); err != nil {
			return fmt.Errorf("pin the load to CPUs %s: %w", loadSet, err)
		}
		fmt.Printf("load pinned to CPUs %s\n", loadSet)
	}
	free := ncpu - load

	// One nova dev, more cores.
	var rows, before []result
	var skipped []string
	if len(cfg.cores) > 0 && !canPin {
		skipped = append(skipped, "every nova dev cores shape (no taskset, or one CPU)")
	}
	var cores []int
	for _, k := range cfg.cores {
		if !canPin {
			break
		}
		if k > free {
			skipped = append(skipped, fmt.Sprintf("nova dev on %d cores (%d left beside the load)", k, free))
			continue
		}
		cores = append(cores, k)
	}
	for i, k := range cores {
		profile := ""
		if i == len(cores)-1 {
			profile = cfg.profile
		}
		r, err := measure(ctx, cfg, cfg.bin, cpuRange(0, k-1), cfg.inFlight, profile)
		if err != nil {
			return err
		}
		r.shape, r.units = fmt.Sprintf("nova dev on %d core%s", k, plural(k, "s")), k
		rows = append(rows, r)
		if cfg.beforeWorkers > 0 {
			r, err := measure(ctx, cfg, cfg.bin, cpuRange(0, k-1), cfg.inFlight, "", "--sandbox-workers", fmt.Sprint(cfg.beforeWorkers))
			if err != nil {
				return err
			}
			r.shape, r.units = fmt.Sprintf("  the same, %d sandbox workers as before", cfg.beforeWorkers), k
			before = append(before, r)
		}
	}
	if len(rows) > 0 {
		fmt.Printf("\none nova dev, more cores, %d in flight\n", cfg.inFlight)
		printTable(rows, true)
		printDetails(rows)
	}
	if len(before) > 0 {
		fmt.Printf("\nthe same shapes with the sandbox workers nova dev had before they followed its cores (%d)\n", cfg.beforeWorkers)
		printTable(before, false)
	}

	// The production shape, more replicas.
	var prod []result
	var fitting []prodShape
	for _, s := range cfg.prod {
		if l, ok := planLayout(cfg, s, free, true); ok && canPin {
			fitting = append(fitting, s)
		} else {
			skipped = append(skipped, fmt.Sprintf("production shape %v pinned (needs %d CPUs beside the load's %d; this machine has %d)",
				s, l.used, load, ncpu))
		}
	}
	pinned := true
	if len(fitting) == 0 && len(cfg.prod) > 0 {
		// Too small a machine for any pinned shape: the first one
		// unpinned still says what each part costs and what NATS carries.
		fitting, pinned = cfg.prod[:1], false
	}
	for i, s := range fitting {
		l, _ := planLayout(cfg, s, free, pinned)
		dir, remove, err := workDir(cfg)
		if err != nil {
			return err
		}
		sys, err := startProd(ctx, cfg, s, l, dir)
		if err != nil {
			remove()
			return fmt.Errorf("production shape %v: %w", s, err)
		}
		profile := ""
		if i == len(fitting)-1 {
			profile = cfg.profile
		}
		r, err := drive(ctx, cfg, sys, cfg.inFlight, profile)
		sys.stop()
		remove()
		if err != nil {
			return fmt.Errorf("production shape %v: %w", s, err)
		}
		r.shape, r.units = s.String(), min(s.engines, s.sandboxes)
		if cfg.natsServers >= 3 {
			r.shape += fmt.Sprintf(", %d NATS servers (R3)", cfg.natsServers)
		}
		if pinned {
			r.shape += fmt.Sprintf(" (NATS %s, store+audit %s, engines %s, sandboxes %s)", l.nats, l.store,
				strings.Join(l.engines, " "), strings.Join(l.sandboxes, " "))
		} else {
			r.shape += " unpinned"
		}
		prod = append(prod, r)
	}
	if len(prod) > 0 {
		fmt.Printf("\nproduction shape (each part a process), more replicas, %d in flight\n", cfg.inFlight)
		printTable(prod, pinned)
		printDetails(prod)
	}
	fmt.Println()
	for _, s := range skipped {
		fmt.Printf("skipped: %s\n", s)
	}

	if cfg.baseBin == "" {
		fmt.Println("\n(no -base-bin: the fast path was not checked against another build)")
		return nil
	}
	if canPin {
		if err := pinSelf(cpuRange(0, ncpu-1)); err != nil {
			return err
		}
	}
	fmt.Printf("\nfast path on every CPU, unpinned, this build beside %s: %d rounds, each build first in half of them; each run, then the median\n",
		cfg.baseBin, cfg.rounds)
	var reg, each []result
	for _, n := range []int{1, 32} {
		builds := []struct{ label, bin string }{{"this build", cfg.bin}, {"base", cfg.baseBin}}
		runs := map[string][]result{}
		for round := range cfg.rounds {
			// ABBA: this, base, base, this, ...
			for i := range builds {
				b := builds[(i+round)%2]
				r, err := measure(ctx, cfg, b.bin, "", n, "")
				if err != nil {
					return err
				}
				r.shape, r.inFlight = fmt.Sprintf("%s, round %d", b.label, round+1), n
				each = append(each, r)
				runs[b.label] = append(runs[b.label], r)
			}
		}
		for _, b := range builds {
			r := median(runs[b.label])
			r.shape, r.inFlight = b.label, n
			reg = append(reg, r)
		}
	}
	printTable(each, false)
	fmt.Println()
	printTable(reg, false)
	return nil
}

// median is the median throughput and CPU per workflow of runs (of an
// even number, the mean of the middle two), with the latencies of the
// run of the median throughput.
func median(runs []result) result {
	mid := func(xs []float64) float64 {
		slices.Sort(xs)
		if len(xs)%2 == 0 {
			return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
		}
		return xs[len(xs)/2]
	}
	wfs := make([]float64, len(runs))
	cpus := make([]float64, len(runs))
	for i, x := range runs {
		wfs[i], cpus[i] = x.wfs, float64(x.cpuPerWorkflow)
	}
	slices.SortFunc(runs, func(a, b result) int { return cmp.Compare(a.wfs, b.wfs) })
	r := runs[len(runs)/2]
	r.wfs, r.cpuPerWorkflow = mid(wfs), time.Duration(mid(cpus))
	return r
}

func cpuRange(from, to int) string {
	if from == to {
		return strconv.Itoa(from)
	}
	return fmt.Sprintf("%d-%d", from, to)
}

// pinSelf sets the CPU affinity of every thread of this process (and so of
// those it starts later) to cpus ("a-b").
func pinSelf(cpus string) error {
	var set unix.CPUSet
	from, to, _ := strings.Cut(cpus, "-")
	a, _ := strconv.Atoi(from)
	b := a
	if to != "" {
		b, _ = strconv.Atoi(to)
	}
	for c := a; c <= b; c++ {
		set.Set(c)
	}
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return err
	}
	for _, t := range tasks {
		tid, err := strconv.Atoi(t.Name())
		if err != nil {
			continue
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			return err
		}
	}
	return nil
}

// measure runs cfg.workflows executions of the 3-node workflow on a fresh
// nova dev from bin (pinned to cpus with taskset unless ""), inFlight at
// once, after a warm-up.
func measure(ctx context.Context, cfg config, bin, cpus string, inFlight int, profile string, devArgs ...string) (result, error) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return result{}, err
	}
	dir, remove, err := workDir(cfg)
	if err != nil {
		return result{}, err
	}
	defer remove()
	proc, natsPort, _, err := loadgen.NovaDev(bin, dir)
	if err != nil {
		return result{}, err
	}
	proc.Args = append(proc.Args, devArgs...)
	proc.Env = append(proc.Env, cfg.env...)
	sys := &system{natsURL: fmt.Sprintf("nats://127.0.0.1:%d", natsPort), pprof: map[string]string{}}
	if profile != "" {
		port, err := loadgen.FreePort()
		if err != nil {
			return result{}, err
		}
		proc.Args = append(proc.Args, "--pprof", fmt.Sprintf("127.0.0.1:%d", port))
		sys.pprof["nova dev"] = fmt.Sprintf("http://127.0.0.1:%d", port)
	}
	pin(proc, cpus)
	if err := proc.Start(); err != nil {
		return result{}, err
	}
	sys.procs = []*loadgen.Proc{proc}
	sys.parts = []sysPart{{name: "nova dev", procs: sys.procs, cores: countCPUs(cpus)}}
	defer sys.stop()
	return drive(ctx, cfg, sys, inFlight, profile)
}

// workDir is a new directory for one shape's data and logs, and what
// removes it once the shape has stopped (nothing with -keep): the disk
// writes of one shape's data do not run on into the next one's.
func workDir(cfg config) (string, func(), error) {
	dir, err := os.MkdirTemp(cfg.tmp, "benchscale-")
	if err != nil {
		return "", nil, err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "benchscale: data and logs in %s\n", dir)
		return dir, func() {}, nil
	}
	return dir, func() { _ = os.RemoveAll(dir) }, nil
}

// drive runs the load against a started system: a warm-up, then
// cfg.workflows executions, inFlight at once, sampling each part's CPU
// (its processes and their descendants), the NATS server's statistics and
// its consumers' backlogs; then reads where each workflow's time went. With
// profile set it writes a CPU profile of each part that serves one there.
func drive(ctx context.Context, cfg config, sys *system, inFlight int, profile string) (result, error) {
	running, cancel := loadgen.WhileAllRunning(ctx, sys.procs...)
	defer cancel()
	b, err := loadgen.Connect(running, sys.natsURL, "benchscale")
	if err != nil {
		return result{}, loadgen.ExitedError(ctx, running, err)
	}
	defer b.Close()
	js := b.JetStream()
	def := loadgen.Workflow(loadgen.Chain(3))
	warm := loadgen.NewLoad(b, def, 200)
	warm.Run(running, max(inFlight, 8))

	sample := func() ([]time.Duration, error) {
		out := make([]time.Duration, len(sys.parts))
		for i, p := range sys.parts {
			for _, proc := range p.procs {
				g, err := loadgen.SampleGroup(proc.Pid())
				if err != nil {
					return nil, err
				}
				out[i] += g.Main + g.Children
			}
		}
		return out, nil
	}
	v0, c0, err := readServers(ctx, sys.monitors)
	if err != nil {
		return result{}, err
	}
	seq0, err := streamSeqs(ctx, js)
	if err != nil {
		return result{}, err
	}
	before, err := sample()
	if err != nil {
		return result{}, loadgen.ExitedError(ctx, running, err)
	}
	load := loadgen.NewLoad(b, def, cfg.workflows)
	bctx, stopBacklog := context.WithCancel(running)
	var bl backlog
	backlogDone := make(chan struct{})
	go func() { bl.run(bctx, js); close(backlogDone) }()
	profiled := make(chan error, 1)
	if profile != "" {
		go func() { profiled <- profileParts(bctx, sys, profile) }()
	} else {
		profiled <- nil
	}
	start := time.Now()
	load.Run(running, inFlight)
	elapsed := time.Since(start)
	after, err := sample()
	if err != nil {
		stopBacklog()
		return result{}, loadgen.ExitedError(ctx, running, err)
	}
	stopBacklog()
	<-backlogDone
	if err := <-profiled; err != nil {
		fmt.Fprintf(os.Stderr, "benchscale: profiles: %v\n", err)
	}
	if n := int(load.Completed.Load()); n != cfg.workflows {
		return result{}, loadgen.ExitedError(ctx, running, fmt.Errorf("%d of %d executions completed", n, cfg.workflows))
	}
	r := result{inFlight: inFlight, wfs: float64(cfg.workflows) / elapsed.Seconds()}
	var lat []time.Duration
	for i, o := range load.Outcomes {
		if o != nil {
			lat = append(lat, o.At.Sub(load.Started[i]))
		}
	}
	r.p50, r.p99 = loadgen.Percentile(lat, 0.5), loadgen.Percentile(lat, 0.99)
	for i, p := range sys.parts {
		cpu := (after[i] - before[i]) / time.Duration(cfg.workflows)
		r.parts = append(r.parts, partCPU{name: p.name, n: len(p.procs), cores: p.cores, perWorkflow: cpu})
		r.cpuPerWorkflow += cpu
	}
	if len(sys.monitors) > 0 {
		v1, c1, err := readServers(ctx, sys.monitors)
		if err != nil {
			return result{}, err
		}
		r.natsMsgs = float64((v1.InMsgs-v0.InMsgs)+(v1.OutMsgs-v0.OutMsgs)) / elapsed.Seconds()
		r.clientMsgs = map[string]float64{}
		for name, n := range c1 {
			if d := n - c0[name]; d > 0 {
				r.clientMsgs[name] = float64(d) / float64(cfg.workflows)
			}
		}
	}
	seq1, err := streamSeqs(ctx, js)
	if err != nil {
		return result{}, err
	}
	r.stored = map[string]float64{}
	for name, s := range seq1 {
		if d := s - seq0[name]; d > 0 {
			r.stored[name] = float64(d) / float64(cfg.workflows)
		}
	}
	r.backlog = bl.top(3)
	if r.hops, err = readHops(ctx, js, load, start); err != nil {
		return result{}, err
	}
	return r, nil
}

// profileParts writes a 5 s CPU profile of every part that serves one to
// dir/<shape part>.pprof, a second into the load.
func profileParts(ctx context.Context, sys *system, dir string) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(time.Second):
	}
	var wg sync.WaitGroup
	errs := make([]error, 0, len(sys.pprof))
	var mu sync.Mutex
	for part, base := range sys.pprof {
		wg.Go(func() {
			path := filepath.Join(dir, strings.ReplaceAll(part, " ", "-")+".pprof")
			err := fetchFile(ctx, base+"/debug/pprof/profile?seconds=5", path)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", part, err))
				return
			}
			fmt.Fprintf(os.Stderr, "benchscale: CPU profile of %s: %s\n", part, path)
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func fetchFile(ctx context.Context, url, path string) error {
	body, err := get(ctx, url)
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func printTable(rows []result, efficiency bool) {
	if len(rows) == 0 {
		return
	}
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	head := "shape\tin flight\twf/s\tp50\tp99\tCPU per workflow"
	if efficiency {
		head += "\tagainst linear"
	}
	fmt.Fprintln(w, head)
	base := rows[0]
	for _, r := range rows {
		line := fmt.Sprintf("%s\t%d\t%.1f\t%s\t%s\t%.1f ms", r.shape, r.inFlight, r.wfs, r.p50.Round(time.Millisecond),
			r.p99.Round(time.Millisecond), float64(r.cpuPerWorkflow.Microseconds())/1000)
		if efficiency {
			line += fmt.Sprintf("\t%.2f", (r.wfs/base.wfs)/(float64(r.units)/float64(base.units)))
		}
		fmt.Fprintln(w, line)
	}
	w.Flush()
}

// printDetails prints, per shape, the CPU per workflow of each part, where
// the workflows' time went (mean per workflow), and what NATS carried.
func printDetails(rows []result) {
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "shape\tCPU per workflow by part\tbusiest part\tstart\tto sandbox\tprogram\tback to engine")
	for _, r := range rows {
		var parts []string
		for _, p := range r.parts {
			label := p.name
			if p.n > 1 {
				label = fmt.Sprintf("%s (%d)", p.name, p.n)
			}
			parts = append(parts, fmt.Sprintf("%s %.1f ms", label, ms(p.perWorkflow)))
		}
		h := r.hops
		busiest := "-"
		if name, busy := r.busiest(); name != "" {
			busiest = fmt.Sprintf("%s %.0f%%", name, 100*busy)
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%.1f ms\t%.1f ms\t%.1f ms\t%.1f ms\n", short(r.shape), strings.Join(parts, ", "), busiest,
			ms(mean(h.start)), ms(mean(h.toSandbox)), ms(mean(h.program)), ms(mean(h.back)))
	}
	w.Flush()
	w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "shape\tNATS msgs/s (per workflow, by client)\tstored per workflow by stream\tconsumers with the most waiting (mean, most)")
	for _, r := range rows {
		msgs := "-"
		if r.natsMsgs > 0 {
			msgs = fmt.Sprintf("%.0f (%.0f: %s)", r.natsMsgs, r.natsMsgs/r.wfs, byName(r.clientMsgs, "%.0f"))
		}
		stored := byName(r.stored, "%.1f")
		var waits []string
		for _, b := range r.backlog {
			waits = append(waits, fmt.Sprintf("%s %.1f, %d", b.name, b.mean, b.most))
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", short(r.shape), msgs, stored, strings.Join(waits, "; "))
	}
	w.Flush()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// short is a shape's name without its CPU layout.
func short(shape string) string {
	s, _, _ := strings.Cut(shape, " (")
	return s
}

// byName is m as "name value, ...", by name.
func byName(m map[string]float64, format string) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	var out []string
	for _, n := range names {
		out = append(out, n+" "+fmt.Sprintf(format, m[n]))
	}
	return strings.Join(out, ", ")
}
