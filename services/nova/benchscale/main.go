// Command benchscale measures how the 3-node code workflow's throughput
// grows with the cores `nova dev` may use, and checks the fast path
// against another build:
//
//   - cores: one `nova dev` pinned with taskset to k cores (-cores), the
//     load (this program) pinned to the machine's last cores (-load-cores),
//     -workflows executions at -in-flight: wf/s, p50/p99, CPU per workflow
//     of nova dev (its own and its programs'), and the efficiency against
//     linear from the smallest k. Shapes that do not fit the machine (k
//     beyond the cores left to nova dev) are listed as skipped.
//   - regression: on every core, unpinned, this build and -base-bin's one
//     after the other, at 1 and 32 in flight: wf/s, p50 and CPU per
//     workflow.
//
// The production shape (the NATS server and each service as processes,
// sandbox and engine replicas added) needs more cores than a load, a
// server and two services take; it is not run here.
//
// `make bench-scale` builds the binaries (and the base commit) and runs it.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novaflow/nova/services/nova/internal/loadgen"
)

type config struct {
	bin, baseBin string
	cores        []int
	loadCores    int
	workflows    int
	inFlight     int
	keep         bool
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchscale", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	fs.StringVar(&cfg.baseBin, "base-bin", "", "directory of the nova binary to check the fast path against (none: not checked)")
	coresFlag := fs.String("cores", "1,2,4,8,12", "cores of nova dev, one shape each")
	fs.IntVar(&cfg.loadCores, "load-cores", 2, "cores of the load (the machine's last ones; at most all but one)")
	fs.IntVar(&cfg.workflows, "workflows", 2000, "executions per measurement")
	fs.IntVar(&cfg.inFlight, "in-flight", 64, "executions in flight in the cores shapes")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dirs and nova dev's logs")
	_ = fs.Parse(os.Args[1:])
	for f := range strings.SplitSeq(*coresFlag, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "benchscale: -cores %q: want whole numbers of 1 or more\n", *coresFlag)
			os.Exit(2)
		}
		cfg.cores = append(cfg.cores, k)
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
	cores          int
	inFlight       int
	wfs            float64
	p50, p99       time.Duration
	cpuPerWorkflow time.Duration
}

func run(ctx context.Context, cfg config) error {
	ncpu := runtime.NumCPU()
	load := min(cfg.loadCores, ncpu-1)
	fmt.Printf("3-node code workflow on nova dev; this machine has %d CPUs\n\n", ncpu)
	var rows []result
	var skipped []string
	if _, err := exec.LookPath("taskset"); err != nil || load < 1 {
		skipped = append(skipped, "every cores shape (no taskset, or one CPU)")
	} else {
		loadSet := cpuRange(ncpu-load, ncpu-1)
		if err := pinSelf(loadSet); err != nil {
			return fmt.Errorf("pin the load to CPUs %s: %w", loadSet, err)
		}
		fmt.Printf("load pinned to CPUs %s\n", loadSet)
		for _, k := range cfg.cores {
			if k > ncpu-load {
				skipped = append(skipped, fmt.Sprintf("nova dev on %d cores (%d left beside the load)", k, ncpu-load))
				continue
			}
			r, err := measure(ctx, cfg, cfg.bin, cpuRange(0, k-1), cfg.inFlight)
			if err != nil {
				return err
			}
			r.shape, r.cores = fmt.Sprintf("nova dev on %d cores", k), k
			rows = append(rows, r)
		}
		if err := pinSelf(cpuRange(0, ncpu-1)); err != nil {
			return err
		}
	}
	printTable(rows, true)
	for _, s := range skipped {
		fmt.Printf("skipped: %s\n", s)
	}
	fmt.Println("skipped: the production shape (NATS server and services as processes, replicas added): it needs more cores than this machine has beside the load")

	if cfg.baseBin == "" {
		fmt.Println("\n(no -base-bin: the fast path was not checked against another build)")
		return nil
	}
	fmt.Printf("\nfast path on every CPU, unpinned, this build beside %s\n", cfg.baseBin)
	var reg []result
	for _, n := range []int{1, 32} {
		for _, b := range []struct{ label, bin string }{{"this build", cfg.bin}, {"base", cfg.baseBin}} {
			r, err := measure(ctx, cfg, b.bin, "", n)
			if err != nil {
				return err
			}
			r.shape, r.inFlight = b.label, n
			reg = append(reg, r)
		}
	}
	printTable(reg, false)
	return nil
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
func measure(ctx context.Context, cfg config, bin, cpus string, inFlight int) (result, error) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return result{}, err
	}
	dir, err := os.MkdirTemp("", "benchscale-")
	if err != nil {
		return result{}, err
	}
	if cfg.keep {
		fmt.Fprintf(os.Stderr, "benchscale: data and log in %s\n", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	proc, natsPort, _, err := loadgen.NovaDev(bin, dir)
	if err != nil {
		return result{}, err
	}
	if cpus != "" {
		proc.Args = append([]string{"-c", cpus, proc.Path}, proc.Args...)
		proc.Path = "/usr/bin/taskset"
	}
	if err := proc.Start(); err != nil {
		return result{}, err
	}
	defer proc.Stop()
	running, cancel := proc.WhileRunning(ctx)
	defer cancel()
	b, err := loadgen.Connect(running, fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "benchscale")
	if err != nil {
		return result{}, loadgen.ExitedError(ctx, running, err)
	}
	defer b.Close()
	def := loadgen.Workflow(loadgen.Chain(3))
	warm := loadgen.NewLoad(b, def, 200)
	warm.Run(running, max(inFlight, 8))
	// nova dev's CPU and its descendants' (zygotes, programs).
	before, err := loadgen.SampleGroup(proc.Pid())
	if err != nil {
		return result{}, err
	}
	load := loadgen.NewLoad(b, def, cfg.workflows)
	start := time.Now()
	load.Run(running, inFlight)
	elapsed := time.Since(start)
	after, err := loadgen.SampleGroup(proc.Pid())
	if err != nil {
		return result{}, loadgen.ExitedError(ctx, running, err)
	}
	cpu := after.Main + after.Children - before.Main - before.Children
	if n := int(load.Completed.Load()); n != cfg.workflows {
		return result{}, loadgen.ExitedError(ctx, running, fmt.Errorf("%d of %d executions completed", n, cfg.workflows))
	}
	var lat []time.Duration
	for i, o := range load.Outcomes {
		if o != nil {
			lat = append(lat, o.At.Sub(load.Started[i]))
		}
	}
	return result{inFlight: inFlight, wfs: float64(cfg.workflows) / elapsed.Seconds(),
		p50: loadgen.Percentile(lat, 0.5), p99: loadgen.Percentile(lat, 0.99),
		cpuPerWorkflow: cpu / time.Duration(cfg.workflows)}, nil
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
			line += fmt.Sprintf("\t%.2f", (r.wfs/base.wfs)/(float64(r.cores)/float64(base.cores)))
		}
		fmt.Fprintln(w, line)
	}
	w.Flush()
}
