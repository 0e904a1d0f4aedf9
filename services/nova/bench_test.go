package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
	"github.com/novaflow/nova/services/sandbox/runner"
)

// benchWorkflow is the smallest useful code workflow: three trivial nodes, so
// that what a node costs beyond its code is what the benchmark sees.
const benchWorkflow = `
name: bench-3-nodes
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "context['a'] = 1"}
  - {id: b, type: action, code: "context['b'] = 1"}
  - {id: c, type: action, code: "context['c'] = 1"}
  - {id: end, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: end}
`

// benchCode is what every node runs, for the baselines.
const benchCode = "context['a'] = 1"

var benchCodeNodes = []string{"a", "b", "c"}

type benchEnv struct {
	stack  *stack.Stack
	client *client.Client
	def    *novav1.WorkflowDefinition
}

// benchStartStack starts the whole in-process stack (embedded NATS and
// FerretDB, graph engine, sandbox, audit) and a client, and runs one workflow
// so that start-up costs stay out of the timed loop.
func benchStartStack(b *testing.B, warm bool) *benchEnv {
	b.Helper()
	ctx := b.Context()
	def, err := workflow.Parse([]byte(benchWorkflow))
	if err != nil {
		b.Fatal(err)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{}); err != nil {
		b.Fatal(err)
	}
	s, err := stack.Start(ctx, stack.Options{DataDir: b.TempDir(), Sandbox: stack.SandboxConfig(warm)})
	if err != nil {
		b.Fatalf("start stack: %v", err)
	}
	b.Cleanup(func() {
		if err := s.Close(); err != nil {
			b.Errorf("close stack: %v", err)
		}
	})
	conn, err := s.Connect(ctx, "bench-client")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(conn.Close)
	values, err := valueref.Open(ctx, conn.JetStream(), 0, 1)
	if err != nil {
		b.Fatal(err)
	}
	env := &benchEnv{stack: s, client: client.New(conn, values), def: def}
	env.run(b)
	if warm {
		// The zygotes import pandas, fitz and the rest in the background;
		// runs are cold until they are ready.
		time.Sleep(4 * time.Second)
		for range 5 {
			env.run(b)
		}
	}
	return env
}

// run runs one workflow and fails the benchmark unless it succeeded.
func (e *benchEnv) run(b *testing.B) string {
	id, err := e.try(b.Context())
	if err != nil {
		b.Fatal(err)
	}
	return id
}

// try runs one workflow and returns its execution id; it is safe to call from
// any goroutine.
func (e *benchEnv) try(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	wc, err := e.client.Run(ctx, e.def, nil)
	if err != nil {
		return "", fmt.Errorf("run workflow: %w", err)
	}
	if wc.Status != "succeeded" || strings.Join(wc.Path, ",") != "start,a,b,c,end" {
		return "", fmt.Errorf("workflow %s: status %s, path %v, error %q", wc.ExecutionId, wc.Status, wc.Path, wc.Error)
	}
	return wc.ExecutionId, nil
}

// auditCaughtUp waits until the audit consumer has handled every event
// published so far.
func (e *benchEnv) auditCaughtUp(ctx context.Context, b *testing.B) {
	b.Helper()
	if err := e.client.WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
		b.Fatal(err)
	}
}

// benchNodeTimes is what the chain of work says about one code node visit.
type benchNodeTimes struct {
	step  string  // execution/node
	total float64 // ms from the node's dispatch to its result being applied
	code  float64 // ms the sandbox measured around the program (runner.Result.Duration)
}

// chainTimes reads, once the audit consumer has caught up, the node and step
// times of every code node of the given executions. It reads the two
// collections once rather than the chain of each execution: FerretDB on
// SQLite reads a whole collection for every query by execution_id.
func (e *benchEnv) chainTimes(b *testing.B, ids []string) []benchNodeTimes {
	b.Helper()
	ctx, cancel := context.WithTimeout(b.Context(), 2*time.Minute)
	defer cancel()
	e.auditCaughtUp(ctx, b)
	mc, err := mongo.Connect(options.Client().ApplyURI(e.stack.MongoURI()))
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = mc.Disconnect(context.WithoutCancel(ctx)) }()
	db := mc.Database("nova")
	codeNodes := bson.D{{Key: "node_id", Value: bson.D{{Key: "$in", Value: benchCodeNodes}}}}
	var nodes []chainstore.NodeDoc
	var steps []chainstore.StepDoc
	for _, q := range []struct {
		coll string
		out  any
	}{{chainstore.ChainCollection, &nodes}, {chainstore.StepsCollection, &steps}} {
		cur, err := db.Collection(q.coll).Find(ctx, codeNodes)
		if err != nil {
			b.Fatal(err)
		}
		if err := cur.All(ctx, q.out); err != nil {
			b.Fatal(err)
		}
	}
	stepsOf := map[string][]chainstore.StepDoc{}
	for _, st := range steps {
		stepsOf[st.ChainOfWorkID] = append(stepsOf[st.ChainOfWorkID], st)
	}
	nodeByID := map[string]chainstore.NodeDoc{}
	for _, n := range nodes {
		nodeByID[n.ID] = n
	}
	var out []benchNodeTimes
	for _, id := range ids {
		for _, node := range benchCodeNodes {
			key := chainstore.NodeDocID(id, node, 1)
			n, ok := nodeByID[key]
			if !ok || len(stepsOf[key]) != 1 {
				b.Fatalf("chain of work of %s: node visit found %v, %d steps; want it with 1 step", key, ok, len(stepsOf[key]))
			}
			out = append(out, benchNodeTimes{step: id + "/" + node, total: n.ExecutionTime, code: stepsOf[key][0].ExecutionTimeMs})
		}
	}
	return out
}

// benchBaselines are the two things a node cannot be cheaper than: the sandbox
// alone (runner.Run, no bus, engine or audit) and a bare `python3 -c` without
// any isolation.
type benchBaselines struct {
	sandboxWall, sandboxDuration, python []float64 // ms
}

// benchMeasureBaselines takes n samples of each baseline, in the same process
// and right after the workflows, so that both ran on the same machine state.
func benchMeasureBaselines(b *testing.B, n int) benchBaselines {
	b.Helper()
	r, err := runner.New(runner.Config{MaxOutputBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	var bl benchBaselines
	for range n {
		start := time.Now()
		res, err := r.Run(b.Context(), runner.Request{Code: benchCode, Context: jsonvalue.Object{}})
		if err != nil || res.Status != runner.StatusSuccess {
			b.Fatalf("sandbox run: %v %s %s", err, res.Status, res.Error)
		}
		bl.sandboxWall = append(bl.sandboxWall, benchMS(time.Since(start)))
		bl.sandboxDuration = append(bl.sandboxDuration, benchMS(res.Duration))

		start = time.Now()
		if out, err := exec.CommandContext(b.Context(), benchPython, "-c", "context = {}\n"+benchCode).CombinedOutput(); err != nil {
			b.Fatalf("python3 -c: %v: %s", err, out)
		}
		bl.python = append(bl.python, benchMS(time.Since(start)))
	}
	return bl
}

// benchPython is the interpreter the sandbox runs, so the baseline starts the same one.
const benchPython = "/usr/bin/python3"

// benchBaselineRuns is how many baseline samples each workflow benchmark takes.
const benchBaselineRuns = 20

// benchCPU is the CPU time this process has used: the whole Go stack (NATS,
// FerretDB, engine, sandbox service, audit, client). The sandboxed programs
// are not in it, nor can they be measured from here: RUSAGE_CHILDREN misses
// the processes inside bubblewrap's pid namespace.
func benchCPU(b *testing.B) time.Duration {
	b.Helper()
	var r syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &r); err != nil {
		b.Fatal(err)
	}
	return time.Duration(r.Utime.Nano() + r.Stime.Nano())
}

func benchMS(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func benchMedian(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func benchPercentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// benchReport turns the workflows' chain of work and the baselines into metrics
// and a table with ratios against the baselines. The table stays under ten
// lines, the most the testing package prints of a benchmark's log.
func benchReport(b *testing.B, label string, elapsed, cpu time.Duration, workflows int, times []benchNodeTimes, bl benchBaselines) {
	b.Helper()
	var total, code, overhead []float64
	for _, t := range times {
		total = append(total, t.total)
		code = append(code, t.code)
		overhead = append(overhead, t.total-t.code)
	}
	perSec := float64(workflows) / elapsed.Seconds()
	medOverhead := benchMedian(overhead)
	b.ReportMetric(perSec, "executions/s")
	b.ReportMetric(medOverhead, "overhead-ms/node")
	b.ReportMetric(benchMedian(total), "node-ms")
	b.ReportMetric(benchMedian(code), "code-ms")
	b.ReportMetric(benchMS(cpu)/float64(workflows), "go-cpu-ms/op")

	sandbox, python := benchMedian(bl.sandboxWall), benchMedian(bl.python)
	var t strings.Builder
	fmt.Fprintf(&t, "%s: %d workflows of 3 code nodes in %v, medians in ms\n", label, workflows, elapsed.Round(time.Millisecond))
	row := func(name string, v float64, note string, args ...any) {
		fmt.Fprintf(&t, "  %-44s %8.2f  %s\n", name, v, fmt.Sprintf(note, args...))
	}
	row("workflows/s", perSec, "(%.1f ms per workflow)", benchMS(elapsed)/float64(workflows))
	row("node total (dispatch -> result applied)", benchMedian(total), "p90 %.2f; %.2fx sandbox direct", benchPercentile(total, 0.9), benchMedian(total)/sandbox)
	row("code run time (runner.Result.Duration)", benchMedian(code), "p90 %.2f", benchPercentile(code, 0.9))
	row("overhead (engine+bus+KV+audit)", medOverhead, "p90 %.2f; target <= 5", benchPercentile(overhead, 0.9))
	row("sandbox direct (runner.Run, wall)", sandbox, "Duration %.2f; %.2fx python3 -c", benchMedian(bl.sandboxDuration), sandbox/python)
	row("python3 -c (no isolation)", python, "")
	row("CPU of the Go stack per workflow", benchMS(cpu)/float64(workflows), "(of %d cores; sandboxed programs not included)", runtime.NumCPU())
	b.Log(strings.TrimSuffix(t.String(), "\n"))
}

// BenchmarkWorkflow3Nodes runs three-node code workflows one after the other
// through the real in-process stack and reports workflows per second and the
// median per-node overhead outside the code's own run time.
func BenchmarkWorkflow3Nodes(b *testing.B) {
	benchSequential(b, false, "sequential")
}

// BenchmarkWorkflow3NodesWarm is the same with the sandbox's warm
// interpreters (as nova dev and a deployment run it).
func BenchmarkWorkflow3NodesWarm(b *testing.B) {
	benchSequential(b, true, "sequential, warm sandbox")
}

func benchSequential(b *testing.B, warm bool, label string) {
	env := benchStartStack(b, warm)
	var ids []string
	cpu, start := benchCPU(b), time.Now()
	for b.Loop() {
		ids = append(ids, env.run(b))
	}
	elapsed, cpu := time.Since(start), benchCPU(b)-cpu
	benchReport(b, label, elapsed, cpu, len(ids), env.chainTimes(b, ids), benchMeasureBaselines(b, benchBaselineRuns))
}

// BenchmarkWorkflow3NodesParallel keeps a fixed number of workflows running
// at once, for throughput. With more workflows than the sandbox's two workers,
// node times include waiting for a free worker, which the overhead column
// then counts too.
func BenchmarkWorkflow3NodesParallel(b *testing.B) {
	for _, concurrent := range []int{2, 8} {
		b.Run(fmt.Sprintf("workflows=%d", concurrent), func(b *testing.B) {
			env := benchStartStack(b, false)
			slots := make(chan struct{}, concurrent)
			var (
				wg     sync.WaitGroup
				mu     sync.Mutex
				ids    []string
				runErr error
			)
			b.ResetTimer()
			cpu, start := benchCPU(b), time.Now()
			for range b.N {
				slots <- struct{}{}
				wg.Go(func() {
					defer func() { <-slots }()
					id, err := env.try(b.Context())
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						runErr = errors.Join(runErr, err)
						return
					}
					ids = append(ids, id)
				})
			}
			wg.Wait()
			elapsed, cpu := time.Since(start), benchCPU(b)-cpu
			b.StopTimer()
			if runErr != nil {
				b.Fatal(runErr)
			}
			if b.N == 1 {
				return // the testing package's probe run; the real one follows
			}
			benchReport(b, fmt.Sprintf("%d at once", concurrent), elapsed, cpu, len(ids), env.chainTimes(b, ids), benchMeasureBaselines(b, benchBaselineRuns))
		})
	}
}

// BenchmarkSandboxDirect is the sandbox alone: runner.Run of the node's code,
// no bus, engine or audit.
func BenchmarkSandboxDirect(b *testing.B) {
	r, err := runner.New(runner.Config{MaxOutputBytes: 64 << 10})
	if err != nil {
		b.Fatal(err)
	}
	var durations []float64
	for b.Loop() {
		res, err := r.Run(b.Context(), runner.Request{Code: benchCode, Context: jsonvalue.Object{}})
		if err != nil || res.Status != runner.StatusSuccess {
			b.Fatalf("sandbox run: %v %s %s", err, res.Status, res.Error)
		}
		durations = append(durations, benchMS(res.Duration))
	}
	b.ReportMetric(benchMedian(durations), "duration-ms")
}

// BenchmarkPython3 is a bare interpreter start without isolation: the floor
// under every sandbox run.
func BenchmarkPython3(b *testing.B) {
	for b.Loop() {
		if out, err := exec.CommandContext(b.Context(), benchPython, "-c", "context = {}\n"+benchCode).CombinedOutput(); err != nil {
			b.Fatalf("python3 -c: %v: %s", err, out)
		}
	}
}
