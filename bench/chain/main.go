// Command benchchain measures what one workflow costs the audit store: the
// chain of work's document bytes per execution (BSON, by collection) and
// the embedded store's disk bytes per execution, for a 3-node code
// workflow and for examples/ai-orders.yaml (its AI nodes answered by the
// scripted model, from the code cache after the first run), on a fresh
// `nova dev` each. With -baseline-bin, the same on the nova binary there
// (another commit's, built beside), in the same run:
//
//	make bench-chain BENCH_CHAIN_FLAGS='-baseline-bin /tmp/prev/bin'
//
// Each case runs one workflow, stops nova dev (its store checkpoints), takes
// the store's size on disk, starts it again, runs -workflows more at 8 in
// flight, waits for the audit service to have recorded them, sums the
// BSON size of every document of each collection, stops it, and takes the
// size on disk again.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"text/tabwriter"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
)

const threeNodes = `name: chain-3
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "context['a'] = context['n'] + 1"}
  - {id: b, type: action, code: "context['b'] = context['a'] * 2"}
  - {id: c, type: action, code: "context['c'] = str(context['b'])"}
  - {id: done, type: end}
edges:
  - {from: start, to: a}
  - {from: a, to: b}
  - {from: b, to: c}
  - {from: c, to: done}
`

// collections are those measured, in the order printed.
var collections = []string{chainstore.ExecutionsCollection, chainstore.ChainCollection, chainstore.StepsCollection,
	chainstore.IndexCollection, chainstore.ListingCollection}

type workload struct {
	name    string
	def     *novav1.WorkflowDefinition
	context func(i int) string
}

type result struct {
	workload, build string
	bson            map[string]float64 // bytes per execution, by collection
	disk            float64            // bytes per execution
}

func main() {
	bin := flag.String("bin", "bin", "directory of the nova binary measured")
	baseline := flag.String("baseline-bin", "", "directory of a nova binary to measure beside it (another commit's)")
	examples := flag.String("examples", "examples", "directory of ai-orders.yaml")
	n := flag.Int("workflows", 200, "workflows run per case")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *bin, *baseline, *examples, *n); err != nil {
		fmt.Fprintf(os.Stderr, "benchchain: %v\n", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, baseline, examples string, n int) error {
	three, err := workflow.Parse([]byte(threeNodes))
	if err != nil {
		return err
	}
	orders, err := os.ReadFile(filepath.Join(examples, "ai-orders.yaml"))
	if err != nil {
		return err
	}
	ai, err := workflow.Parse(orders)
	if err != nil {
		return err
	}
	workloads := []workload{
		{"3-node code", three, func(i int) string { return fmt.Sprintf(`{"n": %d}`, i) }},
		{"ai-orders", ai, func(i int) string { return fmt.Sprintf(`{"total": %d}`, 500+i*10) }},
	}
	builds := []struct{ name, bin string }{{"this commit", bin}}
	if baseline != "" {
		builds = append([]struct{ name, bin string }{{"baseline", baseline}}, builds...)
	}
	var results []result
	for _, w := range workloads {
		for _, b := range builds {
			r, err := measure(ctx, b.bin, w, n)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", w.name, b.name, err)
			}
			r.build = b.name
			results = append(results, r)
		}
	}
	fmt.Printf("chain of work per execution, %d workflows a case (bytes)\n", n)
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "workflow\tbuild\t")
	for _, c := range collections {
		fmt.Fprintf(tw, "%s\t", c)
	}
	fmt.Fprint(tw, "BSON total\tdisk\t\n")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%s\t", r.workload, r.build)
		total := 0.0
		for _, c := range collections {
			fmt.Fprintf(tw, "%.0f\t", r.bson[c])
			total += r.bson[c]
		}
		fmt.Fprintf(tw, "%.0f\t%.0f\t\n", total, r.disk)
	}
	return tw.Flush()
}

// measure runs one case on a fresh nova dev of bin.
func measure(ctx context.Context, bin string, w workload, n int) (result, error) {
	r := result{workload: w.name, bson: map[string]float64{}}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return r, err
	}
	dir, err := os.MkdirTemp("", "benchchain-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	proc, natsPort, mongoPort, err := loadgen.NovaDev(abs, dir)
	if err != nil {
		return r, err
	}
	defer proc.Stop()
	natsURL := fmt.Sprintf("nats://127.0.0.1:%d", natsPort)
	if err := runWorkflows(ctx, proc, natsURL, w, 1); err != nil {
		return r, fmt.Errorf("the first workflow: %w", err)
	}
	proc.Stop()
	store := filepath.Join(dir, "data", "ferretdb")
	before, err := du(store)
	if err != nil {
		return r, err
	}
	if err := runWorkflows(ctx, proc, natsURL, w, n); err != nil {
		return r, err
	}
	client, err := mongo.Connect(options.Client().ApplyURI(fmt.Sprintf("mongodb://127.0.0.1:%d", mongoPort)))
	if err != nil {
		return r, err
	}
	defer func() { _ = client.Disconnect(context.Background()) }()
	db := client.Database(chainstore.DefaultDatabase)
	for _, c := range collections {
		size, err := bsonBytes(ctx, db.Collection(c))
		if err != nil {
			return r, err
		}
		r.bson[c] = float64(size) / float64(n+1)
	}
	proc.Stop()
	after, err := du(store)
	if err != nil {
		return r, err
	}
	r.disk = float64(after-before) / float64(n)
	return r, nil
}

// runWorkflows starts proc, runs n workflows of w at 8 in flight and waits
// until the audit service has recorded them; proc keeps running.
func runWorkflows(ctx context.Context, proc *loadgen.Proc, url string, w workload, n int) error {
	if err := proc.Start(); err != nil {
		return err
	}
	running, cancel := proc.WhileRunning(ctx)
	defer cancel()
	fail := func(err error) error { return loadgen.ExitedError(ctx, running, err) }
	b, err := loadgen.Connect(running, url, "benchchain")
	if err != nil {
		return fail(err)
	}
	defer b.Close()
	rctx, rcancel := context.WithTimeout(running, 5*time.Minute)
	defer rcancel()
	l := loadgen.NewLoad(b, w.def, n)
	l.Context = w.context
	l.Run(rctx, 8)
	for i, o := range l.Outcomes {
		if o == nil || o.Completion.Status != execution.StatusSucceeded {
			return fail(fmt.Errorf("workflow %s did not succeed (%v)", l.IDs[i], o))
		}
	}
	// Recorded: the audit consumer has every event acknowledged, the
	// started events it holds (up to auditservice.HoldFor) included.
	if err := loadgen.WaitIdle(running, b.JetStream(), bus.StreamEvents, auditservice.Consumer); err != nil {
		return fail(err)
	}
	return nil
}

// bsonBytes sums the BSON size of every document of coll.
func bsonBytes(ctx context.Context, coll *mongo.Collection) (int64, error) {
	cur, err := coll.Find(ctx, bson.D{})
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", coll.Name(), err)
	}
	defer cur.Close(ctx)
	var total int64
	for cur.Next(ctx) {
		total += int64(len(cur.Current))
	}
	return total, cur.Err()
}

// du is the size on disk of the files under dir.
func du(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			return err
		}
		total += st.Blocks * 512
		return nil
	})
	return total, err
}
