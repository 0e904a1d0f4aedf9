// Command benchparallel measures branches on `nova dev`, each figure beside
// the same work run another way in the same run:
//
//   - fan-out: -branches nodes of time.sleep(0.5) started at once by one
//     node and joined, wall time from start to completion (median of -runs);
//     baseline: the same nodes one after another.
//   - map: a map of -items trivial items at -concurrency, wall time and
//     nova dev's CPU per item, its RSS before and after; baselines: the same
//     programs sent to the sandbox alone over the bus (as POST /v1/execute
//     does), and as many one-node executions, -concurrency in flight each.
//     The engine's overhead per item is the map's wall time less the
//     sandbox's alone, per item. Then the engine's own
//     time per item: the graph engine's spans (each event it applies) of
//     the map's execution over its items, on an in-process stack; baseline:
//     the spans of the one-node executions, per execution.
//
// nova dev runs with NOVA_SANDBOX_WORKERS=-workers: branches and items run
// at once only as far as the sandbox runs programs at once.
//   - fast path: executions per second of a 3-node sequential workflow
//     (-throughput executions, 8 in flight) on this build and, with
//     -base-bin, on the build of another commit, one after the other.
//
// `make bench-parallel` builds the binaries (and the commit before branches
// for the fast path) and runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

type config struct {
	bin, baseBin string
	branches     int
	runs         int
	items        int
	concurrency  int
	throughput   int
	workers      int
	phases       string
	keep         bool
	cpuProfile   string
	resultBytes  int
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchparallel", flag.ExitOnError)
	fs.StringVar(&cfg.bin, "bin", "bin", "directory of the nova binary (make build)")
	fs.StringVar(&cfg.baseBin, "base-bin", "", "directory of the nova binary of the commit to compare the fast path with (none: not measured)")
	fs.IntVar(&cfg.branches, "branches", 10, "branches of the fan-out")
	fs.IntVar(&cfg.runs, "runs", 5, "runs of the fan-out and of its baseline")
	fs.IntVar(&cfg.items, "items", 1000, "items of the map")
	fs.IntVar(&cfg.concurrency, "concurrency", 16, "items of the map at once")
	fs.IntVar(&cfg.throughput, "throughput", 2000, "executions of the 3-node workflow")
	fs.IntVar(&cfg.workers, "workers", 16, "programs the sandbox runs at once (NOVA_SANDBOX_WORKERS) for the fan-out and the map")
	fs.StringVar(&cfg.phases, "phases", "fanout,map,spans,fastpath", "what to measure, in order (and results: a map of -items items returning -result-bytes each beside small ones)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dirs and nova dev's logs")
	fs.IntVar(&cfg.resultBytes, "result-bytes", 50000, "bytes each item of the results phase's map returns")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the spans phase (its stack runs in this process) to this file")
	_ = fs.Parse(os.Args[1:])
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchparallel: %v\n", err)
		os.Exit(1)
	}
}

// dev is one nova dev and a connection to it.
type dev struct {
	proc    *loadgen.Proc
	b       *bus.Bus
	running context.Context
	close   func()
}

func startDev(ctx context.Context, bin string, keep bool, env ...string) (*dev, error) {
	bin, err := filepath.Abs(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "benchparallel-")
	if err != nil {
		return nil, err
	}
	proc, natsPort, _, err := loadgen.NovaDev(bin, dir)
	if err != nil {
		return nil, err
	}
	proc.Env = append(proc.Env, env...)
	if err := proc.Start(); err != nil {
		return nil, err
	}
	running, cancel := proc.WhileRunning(ctx)
	b, err := loadgen.Connect(running, fmt.Sprintf("nats://127.0.0.1:%d", natsPort), "benchparallel")
	if err != nil {
		cancel()
		proc.Stop()
		return nil, loadgen.ExitedError(ctx, running, err)
	}
	return &dev{proc: proc, b: b, running: running, close: func() {
		b.Close()
		cancel()
		proc.Stop()
		if keep {
			fmt.Fprintf(os.Stderr, "benchparallel: data and log in %s\n", dir)
		} else {
			os.RemoveAll(dir)
		}
	}}, nil
}

func run(ctx context.Context, cfg config) error {
	d, err := startDev(ctx, cfg.bin, cfg.keep, fmt.Sprintf("NOVA_SANDBOX_WORKERS=%d", cfg.workers))
	if err != nil {
		return err
	}
	fmt.Printf("branches on nova dev (%s), NOVA_SANDBOX_WORKERS=%d\n\n", d.proc.Describe(), cfg.workers)
	on := func(p string) bool { return slices.Contains(strings.Split(cfg.phases, ","), p) }
	if on("fanout") {
		err = benchFanOut(d, cfg)
	}
	if err == nil && on("map") {
		err = benchMap(d, cfg)
	}
	if err == nil && on("results") {
		err = benchResults(d, cfg)
	}
	d.close()
	if err != nil {
		return err
	}
	if on("spans") {
		if err := benchEngineSpans(ctx, cfg); err != nil {
			return err
		}
	}
	if on("fastpath") {
		return benchFastPath(ctx, cfg)
	}
	return nil
}

// runOnce starts def with context and waits for its completion.
func runOnce(ctx context.Context, b *bus.Bus, def *novav1.WorkflowDefinition, contextJSON string) (*novav1.WorkflowCompleted, time.Duration, error) {
	id := uuid.NewString()
	waits := b.CompletionWaits()
	defer waits.Close()
	done := make(chan *novav1.WorkflowCompleted, 1)
	stop, err := waits.Add(ctx, bus.EventSubject(id, bus.KindWorkflowCompleted), func(ev *event.Event) {
		var wc novav1.WorkflowCompleted
		if bus.Decode(*ev, &wc) == nil {
			select {
			case done <- &wc:
			default:
			}
		}
	})
	if err != nil {
		return nil, 0, err
	}
	defer stop()
	initial, err := jsonvalue.ObjectOf(contextJSON)
	if err != nil {
		return nil, 0, err
	}
	start := time.Now()
	err = b.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "start-"+id, bus.TypeWorkflowStart,
		&novav1.StartWorkflow{ExecutionId: id, Definition: def, Context: initial.Proto()}, map[string]string{bus.ExtensionExecutionID: id})
	if err != nil {
		return nil, 0, err
	}
	select {
	case wc := <-done:
		if wc.Status != "succeeded" {
			return wc, 0, fmt.Errorf("%s: %s %s", def.Name, wc.Status, wc.Error)
		}
		return wc, time.Since(start), nil
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
}

// fanOut is n nodes of sleep 0.5 s, at once (joined) or one after another.
func fanOut(n int, parallel bool) string {
	var b strings.Builder
	name := map[bool]string{true: "fan-out", false: "sequence"}[parallel]
	fmt.Fprintf(&b, "name: %s-%d\nnodes:\n  - {id: start, type: start}\n", name, n)
	for i := range n {
		fmt.Fprintf(&b, "  - {id: s%d, type: action, code: \"import time\\ntime.sleep(0.5)\\ncontext['s%d'] = 1\"}\n", i, i)
	}
	if parallel {
		b.WriteString("  - {id: join, type: join}\n")
	}
	b.WriteString("  - {id: done, type: end}\nedges:\n")
	for i := range n {
		if parallel {
			fmt.Fprintf(&b, "  - {from: start, to: s%d}\n  - {from: s%d, to: join}\n", i, i)
		} else if i == 0 {
			b.WriteString("  - {from: start, to: s0}\n")
		} else {
			fmt.Fprintf(&b, "  - {from: s%d, to: s%d}\n", i-1, i)
		}
	}
	if parallel {
		b.WriteString("  - {from: join, to: done}\n")
	} else {
		fmt.Fprintf(&b, "  - {from: s%d, to: done}\n", n-1)
	}
	return b.String()
}

func median(ds []time.Duration) time.Duration {
	slices.Sort(ds)
	return ds[len(ds)/2]
}

func benchFanOut(d *dev, cfg config) error {
	par, seq := loadgen.Workflow(fanOut(cfg.branches, true)), loadgen.Workflow(fanOut(cfg.branches, false))
	var parT, seqT []time.Duration
	for range cfg.runs {
		_, t, err := runOnce(d.running, d.b, par, "{}")
		if err != nil {
			return err
		}
		parT = append(parT, t)
		_, t, err = runOnce(d.running, d.b, seq, "{}")
		if err != nil {
			return err
		}
		seqT = append(seqT, t)
	}
	fmt.Printf("fan-out: %d nodes of time.sleep(0.5), median of %d runs, start to completion\n", cfg.branches, cfg.runs)
	fmt.Printf("  branches at once, joined   %8s\n", median(parT).Round(time.Millisecond))
	fmt.Printf("  one after another (base)   %8s\n\n", median(seqT).Round(time.Millisecond))
	return nil
}

const itemCode = `context["result"] = context["item"] * 2`

func benchMap(d *dev, cfg config) error {
	def := loadgen.Workflow(fmt.Sprintf(`
name: bench-map
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: %d, output: ys, code: '%s'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, cfg.concurrency, itemCode))
	one := loadgen.Workflow(fmt.Sprintf(`
name: bench-one
nodes:
  - {id: start, type: start}
  - {id: each, type: action, code: '%s'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, strings.ReplaceAll(itemCode, `context["item"]`, `context["n"]`)))
	xs := make([]string, cfg.items)
	for i := range xs {
		xs[i] = strconv.Itoa(i)
	}
	pid := d.proc.Pid()
	rssBefore := rssOf(pid)
	cpu0 := cpuOf(pid)
	wc, mapT, err := runOnce(d.running, d.b, def, `{"xs": [`+strings.Join(xs, ",")+`]}`)
	if err != nil {
		return err
	}
	cpuMap := cpuOf(pid) - cpu0
	rssAfter := rssOf(pid)
	ys, _ := jsonvalue.MustObject(wc.Context).Decoded()
	if l, _ := ys["ys"].([]any); len(l) != cfg.items {
		return fmt.Errorf("map: %d results, want %d", len(l), cfg.items)
	}

	cpu0 = cpuOf(pid)
	sandboxT, err := sandboxAlone(d.running, d.b, cfg)
	if err != nil {
		return err
	}
	cpuSandbox := cpuOf(pid) - cpu0

	cpu0 = cpuOf(pid)
	load := loadgen.NewLoad(d.b, one, cfg.items)
	start := time.Now()
	load.Run(d.running, cfg.concurrency)
	oneT := time.Since(start)
	cpuOne := cpuOf(pid) - cpu0
	if int(load.Completed.Load()) != cfg.items {
		return fmt.Errorf("baseline: %d of %d executions completed", load.Completed.Load(), cfg.items)
	}
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000/float64(cfg.items))
	}
	fmt.Printf("map: %d items of %s, concurrency %d\n", cfg.items, itemCode, cfg.concurrency)
	fmt.Printf("  map node                   %8s wall, %s per item; nova dev CPU %s per item\n",
		mapT.Round(time.Millisecond), per(mapT), per(cpuMap))
	fmt.Printf("  sandbox alone (base)       %8s wall, %s per item; nova dev CPU %s per item\n",
		sandboxT.Round(time.Millisecond), per(sandboxT), per(cpuSandbox))
	fmt.Printf("  engine overhead            %s per item (map less sandbox alone, wall); %s CPU\n", per(mapT-sandboxT), per(cpuMap-cpuSandbox))
	fmt.Printf("  one execution each (base)  %8s wall, %s per item; nova dev CPU %s per item\n",
		oneT.Round(time.Millisecond), per(oneT), per(cpuOne))
	fmt.Printf("  nova dev RSS               %.1f MiB before the map, %.1f MiB after it\n\n", rssBefore, rssAfter)
	return nil
}

// sandboxAlone runs the item's program cfg.items times on the sandbox
// alone, over the bus as POST /v1/execute does, cfg.concurrency at once;
// it returns the wall time.
func sandboxAlone(ctx context.Context, b *bus.Bus, cfg config) (time.Duration, error) {
	replies := b.NewWaits(bus.StreamEvents, bus.EventFilter(bus.ReplyKind(bus.AgentSandbox)), bus.SubjectKey)
	defer replies.Close()
	next := make(chan int)
	errs := make(chan error, cfg.concurrency)
	start := time.Now()
	for range cfg.concurrency {
		go func() {
			for i := range next {
				id := "bench-" + uuid.NewString()
				cmd := &novav1.ExecuteCode{ExecutionId: id, NodeId: "each", StepId: id + "/each/1/1", Visit: 1, Attempt: 1, StepNumber: 1,
					Language: "python", Code: itemCode, Context: &novav1.JSONValue{Raw: []byte(fmt.Sprintf(`{"item": %d}`, i))},
					TimeoutSeconds: 30, Stage: "TASK", ReplyKind: bus.ReplyKind(bus.AgentSandbox)}
				done, stop, err := bus.WaitFirst[novav1.CodeExecuted](ctx, replies, bus.EventSubject(id, cmd.ReplyKind))
				if err == nil {
					err = b.PublishProto(ctx, bus.CommandSubject(bus.AgentSandbox), cmd.StepId+"/cmd", bus.TypeSandboxExecute, cmd,
						map[string]string{bus.ExtensionExecutionID: id})
				}
				if err == nil {
					select {
					case r := <-done:
						if r.Status != "success" {
							err = fmt.Errorf("sandbox alone: %s %s", r.Status, r.Error)
						}
					case <-ctx.Done():
						err = ctx.Err()
					}
				}
				if stop != nil {
					stop()
				}
				if err != nil {
					errs <- err
					for range next {
					}
					return
				}
			}
			errs <- nil
		}()
	}
	for i := range cfg.items {
		next <- i
	}
	close(next)
	for range cfg.concurrency {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

func benchFastPath(ctx context.Context, cfg config) error {
	def := loadgen.Workflow(loadgen.Chain(3))
	fmt.Printf("fast path: %d executions of a 3-node sequential workflow, 8 in flight\n", cfg.throughput)
	measure := func(label, bin string) error {
		d, err := startDev(ctx, bin, cfg.keep)
		if err != nil {
			return err
		}
		defer d.close()
		// Warm up: the first executions start the sandbox's pool.
		warm := loadgen.NewLoad(d.b, def, 100)
		warm.Run(d.running, 8)
		load := loadgen.NewLoad(d.b, def, cfg.throughput)
		start := time.Now()
		load.Run(d.running, 8)
		el := time.Since(start)
		if int(load.Completed.Load()) != cfg.throughput {
			return fmt.Errorf("%s: %d of %d executions completed", label, load.Completed.Load(), cfg.throughput)
		}
		fmt.Printf("  %-26s %8.0f executions/s\n", label, float64(cfg.throughput)/el.Seconds())
		return nil
	}
	if err := measure("this build", cfg.bin); err != nil {
		return err
	}
	if cfg.baseBin == "" {
		fmt.Println("  (no -base-bin: the build before branches was not measured)")
		return nil
	}
	return measure("before branches (base)", cfg.baseBin)
}

// cpuOf is the CPU time process pid has used itself (user and system).
func cpuOf(pid int) time.Duration {
	s, _ := loadgen.SampleGroup(pid)
	return s.Main
}

// rssOf is process pid's resident set, in MiB.
func rssOf(pid int) float64 {
	_, kib, _ := loadgen.Usage(pid)
	return float64(kib) / 1024
}
