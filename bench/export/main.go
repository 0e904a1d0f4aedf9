// Command benchexport measures the archive export of the chain of work
// (chainstore.Store.Export, what `nova chain export` and GET
// /v1/executions/export run) on the embedded store, FerretDB on SQLite as
// `nova dev` runs it, and shows that its memory does not grow with the
// number of executions exported.
//
// For each size, -baseline (default 1000) and -executions (default
// 100000), it fills a fresh store with that many executions of a 3-node
// code workflow (start, three code nodes with one agent step each, end;
// one a second), recorded as the audit service records them
// (chainstore.Store.RecordAll, -batch executions at a time), stops it,
// starts it again on the same data dir, as `nova chain export --data-dir`
// does, and exports them all, one JSON line each, to io.Discard. It prints
// per size how long the fill and the export took, executions exported per
// second, the Go heap before the export and its peak during it (sampled
// every 10 ms from runtime/metrics: the live heap, as the last GC found it,
// and the heap in use, which grows up to twice that between GCs), and the
// growth of the process's resident memory during the export (its peak,
// VmHWM after /proc/self/clear_refs reset it to the resident memory
// before; sampled every 10 ms where that cannot be reset), then each ratio
// of -executions to -baseline. The embedded store runs in this process, so
// its memory counts too, as for `nova chain export --data-dir`.
//
// `make bench-export` runs it; -h lists the knobs.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

type config struct {
	sizes []int
	batch int
	page  int
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchexport", flag.ExitOnError)
	executions := fs.Int("executions", 100000, "executions in the store exported")
	baseline := fs.Int("baseline", 1000, "executions of the baseline, measured in the same run")
	fs.IntVar(&cfg.batch, "batch", 100, "executions recorded per write (RecordAll) while filling")
	fs.IntVar(&cfg.page, "page", chainstore.DefaultExportPage, "executions the export lists at a time")
	_ = fs.Parse(os.Args[1:])
	if *baseline < 1 || *executions < *baseline || cfg.batch < 1 {
		fmt.Fprintf(os.Stderr, "benchexport: want 1 <= -baseline (%d) <= -executions (%d) and -batch >= 1 (%d)\n", *baseline, *executions, cfg.batch)
		os.Exit(2)
	}
	cfg.sizes = []int{*baseline, *executions}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "benchexport:", err)
		os.Exit(1)
	}
}

// result is one size's measures.
type result struct {
	executions           int
	fill, export         time.Duration
	bytes                int64
	liveBefore, livePeak uint64 // the live heap, as of the last GC
	heapBefore, heapPeak uint64 // the heap in use
	rssGrowth            uint64
	rssFromHighWater     bool // rssGrowth from VmHWM, else from the samples
}

func (r result) perSecond() float64 { return float64(r.executions) / r.export.Seconds() }

func run(ctx context.Context, cfg config) error {
	var results []result
	for _, n := range cfg.sizes {
		r, err := measure(ctx, cfg, n)
		if err != nil {
			return fmt.Errorf("%d executions: %w", n, err)
		}
		results = append(results, r)
	}

	fmt.Printf("export of the chain of work, embedded store (FerretDB on SQLite), %d executions listed at a time;\n", cfg.page)
	fmt.Printf("each execution: a 3-node code workflow, 5 node visits and 3 agent steps; %s, %d CPUs\n\n", runtime.Version(), runtime.NumCPU())
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "executions\tfill s\texport s\texecutions/s\tMB exported\tlive heap before MiB\tpeak live heap MiB\t"+
		"heap in use before MiB\tpeak heap in use MiB\tpeak RSS growth MiB\t")
	for _, r := range results {
		how := ""
		if !r.rssFromHighWater {
			how = " (sampled)"
		}
		fmt.Fprintf(tw, "%d\t%.1f\t%.2f\t%.0f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f\t%.1f%s\t\n", r.executions, r.fill.Seconds(),
			r.export.Seconds(), r.perSecond(), float64(r.bytes)/1e6, mib(r.liveBefore), mib(r.livePeak),
			mib(r.heapBefore), mib(r.heapPeak), mib(r.rssGrowth), how)
	}
	base, big := results[0], results[len(results)-1]
	fmt.Fprintf(tw, "%d / %d\t\t\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t%.2fx\t\n", big.executions, base.executions,
		big.perSecond()/base.perSecond(), float64(big.bytes)/float64(base.bytes), ratio(big.liveBefore, base.liveBefore),
		ratio(big.livePeak, base.livePeak), ratio(big.heapBefore, base.heapBefore), ratio(big.heapPeak, base.heapPeak),
		ratio(big.rssGrowth, base.rssGrowth))
	return tw.Flush()
}

// measure fills a fresh store with n executions, then starts the store
// again on its data dir, as `nova chain export --data-dir` does, and
// exports them.
func measure(ctx context.Context, cfg config, n int) (result, error) {
	r := result{executions: n}
	dir, err := os.MkdirTemp("", "benchexport-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	if r.fill, err = fillStore(ctx, dir, n, cfg.batch); err != nil {
		return r, fmt.Errorf("fill: %w", err)
	}
	fmt.Fprintf(os.Stderr, "benchexport: %d executions recorded in %.1f s\n", n, r.fill.Seconds())

	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		return r, err
	}
	defer m.Close()
	st, err := chainstore.Open(ctx, m.URI(), chainstore.DefaultDatabase)
	if err != nil {
		return r, err
	}
	defer st.Close(context.WithoutCancel(ctx))

	runtime.GC()
	debug.FreeOSMemory()
	r.heapBefore, r.liveBefore = heapInUse(), liveHeap()
	rssBefore := rss()
	r.rssFromHighWater = resetHighWater()
	stopSampling, peaks := sample(10 * time.Millisecond)

	out := &countingDiscard{}
	exported := 0
	began := time.Now()
	err = st.Export(ctx, chainstore.ExportFilter{PageSize: cfg.page}, func(c *chainstore.ExecutionChain) error {
		exported++
		return c.WriteLine(out)
	})
	r.export = time.Since(began)
	stopSampling()
	if err != nil {
		return r, fmt.Errorf("export: %w", err)
	}
	if exported != n {
		return r, fmt.Errorf("exported %d executions of %d", exported, n)
	}
	r.bytes = out.n
	r.heapPeak, r.livePeak = max(peaks.heap, heapInUse()), max(peaks.live, liveHeap())
	peakRSS := max(peaks.rss, rss())
	if r.rssFromHighWater {
		if hwm, ok := highWater(); ok {
			peakRSS = max(peakRSS, hwm)
		} else {
			r.rssFromHighWater = false
		}
	}
	if peakRSS > rssBefore {
		r.rssGrowth = peakRSS - rssBefore
	}
	fmt.Fprintf(os.Stderr, "benchexport: %d executions exported in %.2f s, peak live heap %.1f MiB\n", n, r.export.Seconds(), mib(r.livePeak))
	return r, nil
}

// fillStore records n executions in a fresh embedded store in dir, and
// stops it.
func fillStore(ctx context.Context, dir string, n, batch int) (time.Duration, error) {
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		return 0, err
	}
	defer m.Close()
	st, err := chainstore.Open(ctx, m.URI(), chainstore.DefaultDatabase)
	if err != nil {
		return 0, err
	}
	defer st.Close(context.WithoutCancel(ctx))
	if err := st.EnsureIndexes(ctx); err != nil {
		return 0, err
	}
	if err := m.IndexIDs(ctx); err != nil { // now rather than within a second
		return 0, err
	}
	began := time.Now()
	err = fill(ctx, st, n, batch)
	return time.Since(began), err
}

// fill records n executions, batch at a time.
func fill(ctx context.Context, st *chainstore.Store, n, batch int) error {
	t0 := time.Now().Add(-time.Duration(n+60) * time.Second).Truncate(time.Second)
	var events []proto.Message
	for i := range n {
		events = append(events, runEvents(i, t0.Add(time.Duration(i)*time.Second))...)
		if (i+1)%batch != 0 && i != n-1 {
			continue
		}
		if err := errors.Join(st.RecordAll(ctx, events)...); err != nil {
			return err
		}
		events = events[:0]
		if step := max(n/10, 1); (i+1)%step == 0 {
			fmt.Fprintf(os.Stderr, "benchexport: %d of %d executions recorded\n", i+1, n)
		}
	}
	return nil
}

// runEvents are the events of execution i, started at start, in the order
// the engine publishes them: start -> a -> b -> c -> end, each code node
// setting a key of a context of a dozen keys.
func runEvents(i int, start time.Time) []proto.Message {
	id := "export-" + strconv.Itoa(i)
	def := &novav1.WorkflowDefinition{Name: "bench-export", Nodes: []*novav1.Node{{Id: "start", Type: novav1.NodeType_NODE_TYPE_START}}}
	ctx := map[string]any{"invoice": fmt.Sprintf("INV-2026-%06d", i), "customer": "ACME Corporation", "currency": "EUR", "total": 1000.5}
	for k := range 8 {
		ctx["field_"+strconv.Itoa(k)] = k * 1000
	}
	at := func(ms int) *timestamppb.Timestamp {
		return timestamppb.New(start.Add(time.Duration(ms) * time.Millisecond))
	}
	path := []string{"start", "a", "b", "c", "end"}
	for k, nid := range path[1:4] {
		def.Nodes = append(def.Nodes, &novav1.Node{Id: nid, Type: novav1.NodeType_NODE_TYPE_ACTION, Code: fmt.Sprintf("context['%s'] = %d", nid, k+1)})
	}
	def.Nodes = append(def.Nodes, &novav1.Node{Id: "end", Type: novav1.NodeType_NODE_TYPE_END})
	for k := range len(path) - 1 {
		def.Edges = append(def.Edges, &novav1.Edge{From: path[k], To: path[k+1]})
	}
	events := []proto.Message{&novav1.WorkflowStarted{ExecutionId: id, WorkflowName: def.Name, Definition: def,
		Context: contextOf(ctx), StartedAt: at(0)}}
	var summary []*novav1.NodeSummary
	for seq, nid := range path {
		in := contextOf(ctx)
		typ := "action"
		if nid == "start" || nid == "end" {
			typ = nid
		} else {
			code := fmt.Sprintf("context['%s'] = %d", nid, seq)
			ctx[nid] = seq
			events = append(events, &novav1.StepCompleted{ExecutionId: id, NodeId: nid, Visit: 1, StepId: id + "/" + nid + "/1/1",
				StepNumber: 1, StepName: "execute", AgentName: "sandbox", AttemptNumber: 1, Status: "success",
				GeneratedCode: code, ExecutionTimeMs: 12, Timestamp: at(10*seq + 5)})
		}
		events = append(events, &novav1.NodeCompleted{ExecutionId: id, NodeId: nid, NodeType: typ, Visit: 1, Sequence: int32(seq + 1),
			Status: "success", InputContext: in, OutputResult: contextOf(ctx), StartedAt: at(10 * seq), CompletedAt: at(10*seq + 9),
			ExecutionTimeMs: 9, CodeExecuted: def.Nodes[seq].GetCode()})
		summary = append(summary, &novav1.NodeSummary{Id: nid, Status: "success", Attempts: 1, Visits: 1})
	}
	return append(events, &novav1.WorkflowCompleted{ExecutionId: id, WorkflowName: def.Name, Status: "succeeded",
		Context: contextOf(ctx), Path: path, Nodes: summary, StartedAt: at(0), CompletedAt: at(10 * len(path))})
}

func contextOf(m map[string]any) *novav1.JSONValue {
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		panic(err) // only plain values above
	}
	return o.Proto()
}

// countingDiscard counts what is written to it.
type countingDiscard struct{ n int64 }

func (c *countingDiscard) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return io.Discard.Write(p)
}

// peaks are the highest live heap, heap in use and resident memory
// sampled.
type peaks struct{ live, heap, rss uint64 }

// sample reads the heap in use and the resident memory every interval
// until stop, which returns once the sampling ended; the peaks are then
// complete.
func sample(interval time.Duration) (stop func(), p *peaks) {
	p = &peaks{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			p.live, p.heap, p.rss = max(p.live, liveHeap()), max(p.heap, heapInUse()), max(p.rss, rss())
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	return func() { close(done); wg.Wait() }, p
}

// heapMetrics sum to the heap in use (runtime.MemStats.HeapInuse): the
// spans holding objects, live or not yet swept, and their free slots.
var heapMetrics = []string{"/memory/classes/heap/objects:bytes", "/memory/classes/heap/unused:bytes"}

func heapInUse() uint64 { return readMetrics(heapMetrics...) }

// liveHeap is the heap the last GC found live: what the process holds,
// whereas the heap in use grows up to twice that (GOGC=100) between GCs.
func liveHeap() uint64 { return readMetrics("/gc/heap/live:bytes") }

// readMetrics is the sum of the named runtime/metrics.
func readMetrics(names ...string) uint64 {
	samples := make([]metrics.Sample, len(names))
	for i, name := range names {
		samples[i].Name = name
	}
	metrics.Read(samples)
	var sum uint64
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			sum += s.Value.Uint64()
		}
	}
	return sum
}

// rss is the process's resident memory (/proc/self/statm), 0 where there
// is none.
func rss() uint64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0
	}
	pages, err := strconv.ParseUint(f[1], 10, 64)
	if err != nil {
		return 0
	}
	return pages * uint64(os.Getpagesize())
}

// resetHighWater sets the process's peak resident memory (VmHWM) to its
// resident memory now (Linux 4.0 and later).
func resetHighWater() bool {
	return os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
}

// highWater is the process's peak resident memory, VmHWM.
func highWater() (uint64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			f := strings.Fields(v) // "123456 kB"
			if len(f) == 2 && f[1] == "kB" {
				if kb, err := strconv.ParseUint(f[0], 10, 64); err == nil {
					return kb << 10, true
				}
			}
		}
	}
	return 0, false
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }

func ratio(a, b uint64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
