// Command benchstore measures what the audit store costs per execution as
// its history grows, on the embedded store (FerretDB on SQLite): it records
// executions the way the audit service does (started, one document per node
// visit and per step, completed) through chainstore.Store, at several history
// sizes on the same data dir, and prints per size the wall time and the CPU
// (of this process, which runs the store) per execution recorded, and the
// time of the reads the gateway and `nova chain` make of one execution
// (Execution, Chain, Counts). History between the sizes is filled with bulk
// inserts of the same documents, not timed.
//
// The set-ups -variants names are measured in the same run, each on its
// own data dir, by default the first four of:
//
//   - "indexed": FerretDB with devstack's _id index and the store reading
//     one execution through its execution index and listing executions
//     by start time (chainstore.ListingCollection), recording one event at
//     a time (the Record methods);
//   - "batched": the same, recording -batch events at a time (RecordAll),
//     as nova dev's audit service records the events waiting for it;
//   - "id only": the _id index, but reads of one execution by queries on
//     execution_id, which FerretDB runs by reading the whole collection,
//     and no listing;
//   - "shipped", the baseline: FerretDB as shipped (devstack.Options.NoIDIndex),
//     whose lookups by _id scan, and reads by queries, as before both (the
//     started event, though, is inserted first now, where it was an upsert
//     that scanned once more);
//   - "unlisted" and "batched unlisted": "indexed" and "batched" without
//     the listing, as before it: what the listing costs the writes.
//
// The ratios compare each to the first.
//
// `make bench-store` runs it; -h lists the knobs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
)

type config struct {
	sizes    []int
	measure  int
	reads    int
	budget   time.Duration
	nodes    int
	batch    int
	variants []variant
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchstore", flag.ExitOnError)
	sizes := fs.String("sizes", "500,2000,5000,20000", "history sizes (executions in the store) to measure at")
	fs.IntVar(&cfg.measure, "measure", 100, "executions recorded and timed at each size")
	fs.IntVar(&cfg.reads, "reads", 10, "executions read back and timed at each size")
	fs.DurationVar(&cfg.budget, "read-budget", 20*time.Second, "time the reads at one size may take; fewer are made when they are slower")
	fs.IntVar(&cfg.nodes, "nodes", 3, "code nodes per execution (each with one step), between start and end")
	fs.IntVar(&cfg.batch, "batch", 20, "events per write of the batched set-up")
	names := fs.String("variants", "indexed,batched,id only,shipped", "set-ups to measure, of "+strings.Join(variantNames(), ","))
	_ = fs.Parse(os.Args[1:])
	for _, name := range strings.Split(*names, ",") {
		i := slices.IndexFunc(allVariants, func(v variant) bool { return v.name == strings.TrimSpace(name) })
		if i < 0 {
			fmt.Fprintf(os.Stderr, "benchstore: -variants %q: want some of %s\n", *names, strings.Join(variantNames(), ","))
			os.Exit(2)
		}
		cfg.variants = append(cfg.variants, allVariants[i])
	}
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 || (len(cfg.sizes) > 0 && n < cfg.sizes[len(cfg.sizes)-1]) {
			fmt.Fprintf(os.Stderr, "benchstore: -sizes %q: want growing numbers\n", *sizes)
			os.Exit(2)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "benchstore:", err)
		os.Exit(1)
	}
}

// variant is one store set-up measured.
type variant struct {
	name           string
	noIDIndex      bool // devstack.Options.NoIDIndex
	executionIndex bool // chainstore.WithExecutionIndex
	listing        bool // chainstore.WithListing
	batched        bool // chainstore.RecordAll
}

var allVariants = []variant{
	{name: "indexed", executionIndex: true, listing: true},
	{name: "batched", executionIndex: true, listing: true, batched: true},
	{name: "id only"},
	{name: "shipped", noIDIndex: true},
	{name: "unlisted", executionIndex: true},
	{name: "batched unlisted", executionIndex: true, batched: true},
}

func variantNames() []string {
	var names []string
	for _, v := range allVariants {
		names = append(names, v.name)
	}
	return names
}

// result is what one variant costs at one history size.
type result struct {
	size                     int
	wall, cpu                time.Duration // per execution recorded
	execution, chain, counts time.Duration // per read
	reads                    int
}

func run(ctx context.Context, cfg config) error {
	results := make([][]result, len(cfg.variants))
	for i, v := range cfg.variants {
		fmt.Fprintf(os.Stderr, "benchstore: %s\n", v.name)
		r, err := measureVariant(ctx, cfg, v)
		if err != nil {
			return fmt.Errorf("%s: %w", v.name, err)
		}
		results[i] = r
	}

	fmt.Printf("audit store per execution: %d code nodes + start and end, one step each; %d recorded and up to %d read at each size\n\n",
		cfg.nodes, cfg.measure, cfg.reads)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "store\texecutions\twrite ms\tCPU ms\tCPU vs first size\treads\tExecution ms\tChain ms\tCounts ms\t")
	for i, v := range cfg.variants {
		first := results[i][0].cpu
		for _, r := range results[i] {
			fmt.Fprintf(tw, "%s\t%d\t%.2f\t%.2f\t%.2fx\t%d\t%.2f\t%.2f\t%.2f\t\n", v.name, r.size,
				ms(r.wall), ms(r.cpu), ratio(r.cpu, first), r.reads, ms(r.execution), ms(r.chain), ms(r.counts))
		}
	}
	for i, v := range cfg.variants[1:] {
		fmt.Fprintln(tw, "\t\t\t\t\t\t\t\t\t")
		fmt.Fprintf(tw, "%s / %s\texecutions\twrite\tCPU\t\t\tExecution\tChain\tCounts\t\n", v.name, cfg.variants[0].name)
		for j, r := range results[0] {
			b := results[i+1][j]
			fmt.Fprintf(tw, "\t%d\t%.2fx\t%.2fx\t\t\t%.2fx\t%.2fx\t%.2fx\t\n", r.size,
				ratio(b.wall, r.wall), ratio(b.cpu, r.cpu), ratio(b.execution, r.execution), ratio(b.chain, r.chain), ratio(b.counts, r.counts))
		}
	}
	return tw.Flush()
}

func measureVariant(ctx context.Context, cfg config, v variant) ([]result, error) {
	dir, err := os.MkdirTemp("", "benchstore-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir, NoIDIndex: v.noIDIndex})
	if err != nil {
		return nil, err
	}
	defer m.Close()
	st, err := chainstore.Open(ctx, m.URI(), chainstore.DefaultDatabase, chainstore.WithExecutionIndex(v.executionIndex), chainstore.WithListing(v.listing))
	if err != nil {
		return nil, err
	}
	defer st.Close(context.WithoutCancel(ctx))
	if err := st.EnsureIndexes(ctx); err != nil {
		return nil, err
	}
	if !v.noIDIndex {
		if err := m.IndexIDs(ctx); err != nil { // now rather than within a second
			return nil, err
		}
	}
	client, err := mongo.Connect(options.Client().ApplyURI(m.URI()))
	if err != nil {
		return nil, err
	}
	defer client.Disconnect(context.WithoutCancel(ctx))
	db := client.Database(chainstore.DefaultDatabase)

	var out []result
	have := 0
	for _, size := range cfg.sizes {
		if err := fill(ctx, db, cfg.nodes, have, size, v.executionIndex); err != nil {
			return nil, fmt.Errorf("fill to %d: %w", size, err)
		}
		have = size
		r := result{size: size}
		runs := make([]execution, cfg.measure)
		for i := range runs {
			runs[i] = newRun(fmt.Sprintf("measured-%d-%d", size, i), cfg.nodes)
		}
		start, cpu0 := time.Now(), cpuTime()
		if v.batched {
			err = recordBatched(ctx, st, runs, cfg.batch)
		} else {
			err = recordEach(ctx, st, runs)
		}
		if err != nil {
			return nil, err
		}
		r.wall = time.Since(start) / time.Duration(cfg.measure)
		r.cpu = (cpuTime() - cpu0) / time.Duration(cfg.measure)
		if err := readBack(ctx, st, cfg.reads, cfg.budget, size, &r); err != nil {
			return nil, err
		}
		fmt.Fprintf(os.Stderr, "benchstore: %s at %d: write %.2f ms, CPU %.2f ms, chain %.2f ms\n",
			v.name, size, ms(r.wall), ms(r.cpu), ms(r.chain))
		out = append(out, r)
	}
	return out, nil
}

// readBack times the reads of one execution for n executions spread over
// the history, or as many as budget allows (at least one). A scan that
// stops at the first match costs less for older executions: the middle of
// each nth is read.
func readBack(ctx context.Context, st *chainstore.Store, n int, budget time.Duration, size int, r *result) error {
	if n < 1 || size < 1 {
		return nil
	}
	began := time.Now()
	for i := range n {
		if i > 0 && time.Since(began) > budget {
			n = i
			break
		}
		id := historyID((2*i + 1) * size / (2 * n)) // the middle of each nth of the history
		t := time.Now()
		if _, err := st.Execution(ctx, id); err != nil {
			return err
		}
		r.execution += time.Since(t)
		t = time.Now()
		nodes, err := st.Chain(ctx, id)
		if err != nil {
			return err
		}
		if len(nodes) == 0 {
			return fmt.Errorf("chain of %s: empty", id)
		}
		r.chain += time.Since(t)
		t = time.Now()
		if _, err := st.Counts(ctx, id); err != nil {
			return err
		}
		r.counts += time.Since(t)
	}
	r.reads = n
	r.execution /= time.Duration(n)
	r.chain /= time.Duration(n)
	r.counts /= time.Duration(n)
	return nil
}

func historyID(i int) string { return "history-" + strconv.Itoa(i) }

// execution is the events of one run, as the audit service receives them.
type execution struct {
	started   *novav1.WorkflowStarted
	nodes     []*novav1.NodeCompleted
	steps     []*novav1.StepCompleted
	completed *novav1.WorkflowCompleted
}

// newRun is a run of start -> n0 -> ... -> end, each code node setting a
// key of a context of a dozen keys.
func newRun(id string, n int) execution {
	def := &novav1.WorkflowDefinition{Name: "bench-store", Nodes: []*novav1.Node{{Id: "start", Type: novav1.NodeType_NODE_TYPE_START}}}
	ctx := map[string]any{"invoice": "INV-2025-0001", "customer": "ACME Corporation", "currency": "EUR"}
	for k := range 9 {
		ctx[fmt.Sprintf("field_%d", k)] = k * 1000
	}
	path := []string{"start"}
	prev := "start"
	for i := range n {
		nid := fmt.Sprintf("n%d", i)
		def.Nodes = append(def.Nodes, &novav1.Node{Id: nid, Type: novav1.NodeType_NODE_TYPE_ACTION, Code: fmt.Sprintf("context['x%d'] = %d", i, i)})
		def.Edges = append(def.Edges, &novav1.Edge{From: prev, To: nid})
		path, prev = append(path, nid), nid
	}
	def.Nodes = append(def.Nodes, &novav1.Node{Id: "end", Type: novav1.NodeType_NODE_TYPE_END})
	def.Edges = append(def.Edges, &novav1.Edge{From: prev, To: "end"})
	path = append(path, "end")

	t0 := time.Now()
	at := func(ms int) *timestamppb.Timestamp {
		return timestamppb.New(t0.Add(time.Duration(ms) * time.Millisecond))
	}
	e := execution{started: &novav1.WorkflowStarted{
		ExecutionId: id, WorkflowName: def.Name, Definition: def, Context: contextOf(ctx), StartedAt: at(0),
	}}
	var summary []*novav1.NodeSummary
	for seq, nid := range path {
		in := contextOf(ctx)
		if seq > 0 && seq < len(path)-1 {
			ctx[fmt.Sprintf("x%d", seq-1)] = seq - 1
			e.steps = append(e.steps, &novav1.StepCompleted{
				ExecutionId: id, NodeId: nid, Visit: 1, StepId: fmt.Sprintf("%s/%s/1/1", id, nid), StepNumber: 1,
				StepName: "execute", AgentName: "sandbox", AttemptNumber: 1, Status: "success",
				GeneratedCode: fmt.Sprintf("context['x%d'] = %d", seq-1, seq-1), ExecutionTimeMs: 12, Timestamp: at(10*seq + 5),
			})
		}
		e.nodes = append(e.nodes, &novav1.NodeCompleted{
			ExecutionId: id, NodeId: nid, NodeType: "action", Visit: 1, Sequence: int32(seq + 1), Status: "success",
			InputContext: in, OutputResult: contextOf(ctx), StartedAt: at(10 * seq), CompletedAt: at(10*seq + 9), ExecutionTimeMs: 9,
		})
		summary = append(summary, &novav1.NodeSummary{Id: nid, Status: "success", Attempts: 1, Visits: 1})
	}
	e.completed = &novav1.WorkflowCompleted{
		ExecutionId: id, WorkflowName: def.Name, Status: "completed", Context: contextOf(ctx), Path: path, Nodes: summary,
		StartedAt: at(0), CompletedAt: at(10 * len(path)),
	}
	return e
}

func contextOf(m map[string]any) *novav1.JSONValue {
	o, err := jsonvalue.ObjectOf(m)
	if err != nil {
		panic(err) // only plain values above
	}
	return o.Proto()
}

// recordEach writes runs event by event.
func recordEach(ctx context.Context, st *chainstore.Store, runs []execution) error {
	for _, e := range runs {
		if err := record(ctx, st, e); err != nil {
			return err
		}
	}
	return nil
}

// recordBatched writes the events of runs, in the order record writes them,
// batch at a time.
func recordBatched(ctx context.Context, st *chainstore.Store, runs []execution, batch int) error {
	var events []proto.Message
	for _, e := range runs {
		events = append(events, e.started)
		for i, n := range e.nodes {
			if i > 0 && i <= len(e.steps) {
				events = append(events, e.steps[i-1])
			}
			events = append(events, n)
		}
		events = append(events, e.completed)
	}
	for chunk := range slices.Chunk(events, max(batch, 1)) {
		if err := errors.Join(st.RecordAll(ctx, chunk)...); err != nil {
			return err
		}
	}
	return nil
}

// record writes a run event by event.
func record(ctx context.Context, st *chainstore.Store, e execution) error {
	if err := st.RecordWorkflowStarted(ctx, e.started); err != nil {
		return err
	}
	for i, n := range e.nodes {
		if i > 0 && i <= len(e.steps) {
			if err := st.RecordStep(ctx, e.steps[i-1]); err != nil {
				return err
			}
		}
		if err := st.RecordNode(ctx, n); err != nil {
			return err
		}
	}
	return st.RecordWorkflowCompleted(ctx, e.completed)
}

// fill inserts the documents of the runs from..to-1 in bulk and, when
// indexed, lists them in the execution index as its documentation says
// (chainstore.IndexCollection).
func fill(ctx context.Context, db *mongo.Database, nodes, from, to int, indexed bool) error {
	const batch = 500
	for lo := from; lo < to; lo += batch {
		var execs, chain, steps, index []any
		for i := lo; i < min(lo+batch, to); i++ {
			e := newRun(historyID(i), nodes)
			doc, err := executionDoc(e)
			if err != nil {
				return err
			}
			execs = append(execs, doc)
			var listed bson.A
			list := func(coll, id string) {
				listed = append(listed, bson.D{{Key: "collection", Value: coll}, {Key: "doc_id", Value: id}})
			}
			for _, n := range e.nodes {
				d := chainstore.NodeDocOf(n)
				chain = append(chain, d)
				list(chainstore.ChainCollection, d.ID)
			}
			for _, s := range e.steps {
				d := chainstore.StepDocOf(s)
				steps = append(steps, d)
				list(chainstore.StepsCollection, d.ID)
			}
			// One entry per execution, as the audit service's batches list a
			// workflow recorded at once.
			index = append(index, bson.D{{Key: "_id", Value: historyID(i) + "#1"}, {Key: "docs", Value: listed}})
		}
		writes := []struct {
			coll string
			docs []any
		}{{chainstore.ExecutionsCollection, execs}, {chainstore.ChainCollection, chain}, {chainstore.StepsCollection, steps}}
		if indexed {
			writes = append(writes, struct {
				coll string
				docs []any
			}{chainstore.IndexCollection, index})
		}
		for _, w := range writes {
			if _, err := db.Collection(w.coll).InsertMany(ctx, w.docs); err != nil {
				return fmt.Errorf("insert %s: %w", w.coll, err)
			}
		}
	}
	return nil
}

// executionDoc is the executions document a completed run leaves, as
// RecordWorkflowStarted and RecordWorkflowCompleted write it.
func executionDoc(e execution) (bson.D, error) {
	raw, err := protojson.MarshalOptions{UseProtoNames: true}.Marshal(e.started.GetDefinition())
	if err != nil {
		return nil, err
	}
	var def map[string]any
	if err := json.Unmarshal(raw, &def); err != nil {
		return nil, err
	}
	var nodes []bson.D
	for _, n := range e.completed.GetNodes() {
		nodes = append(nodes, bson.D{{Key: "id", Value: n.GetId()}, {Key: "status", Value: n.GetStatus()},
			{Key: "attempts", Value: n.GetAttempts()}, {Key: "error", Value: ""}, {Key: "visits", Value: n.GetVisits()}})
	}
	started, completed := e.started.GetStartedAt().AsTime(), e.completed.GetCompletedAt().AsTime()
	return bson.D{
		{Key: "_id", Value: e.started.GetExecutionId()},
		{Key: "execution_id", Value: e.started.GetExecutionId()},
		{Key: "initial_context", Value: jsonvalue.Map(e.started.GetContext())},
		{Key: "definition", Value: def},
		{Key: "workflow_name", Value: e.started.GetWorkflowName()},
		{Key: "started_at", Value: started},
		{Key: "status", Value: e.completed.GetStatus()},
		{Key: "final_context", Value: jsonvalue.Map(e.completed.GetContext())},
		{Key: "path", Value: e.completed.GetPath()},
		{Key: "nodes", Value: nodes},
		{Key: "error", Value: ""},
		{Key: "completed_at", Value: completed},
		{Key: "duration_ms", Value: completed.Sub(started).Milliseconds()},
	}, nil
}

// cpuTime is the user and system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
