// Command benchconsole measures how long the console's pages take to show
// their first paint as the history grows: it stores executions in the
// embedded audit store (FerretDB on SQLite, as nova dev runs it), registers
// their 4 workflows, serves the gateway over them, and at each history size
// times
//
//   - the API: GET /v1/executions?limit=50 (the executions list's read),
//     and the same with ?status=failed (few match) and ?id= (an id's first 8
//     characters);
//   - the browser, where Chromium is installed: #/executions opened in
//     headless Chromium, from the start of the navigation to its 50 rows
//     drawn, and #/workflows to every workflow's row drawn with its last run
//     (the page, its scripts, its reads and the drawing).
//
// With -baseline REV it builds the gateway of that git revision (from a
// worktree of it, the console it embeds included), serves it over the same
// store and bus, and times it beside this build's in the same run: the table
// has both, and this build's time over the baseline's. It prints the median
// and the 90th percentile of each. The history is recorded through the
// store as the audit service records it (an execution of a 5-node workflow
// with its definition, contexts and node summaries, its started and
// completed events in one batch, as nova dev's audit service writes a
// workflow that runs alone), so that it holds what the audit service
// leaves, the store's listing of the executions included; not timed.
//
//	go run ./benchconsole -sizes 100,10000 -runs 5 -baseline 6d5d177
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
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

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/jsonvalue"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/gateway/gateway"
)

type config struct {
	sizes []int
	runs  int
	// chromium is the browser's path; "" measures the API only.
	chromium string
	// baseline is the git revision whose gateway is measured beside this
	// build's; "" measures this build alone.
	baseline string
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchconsole", flag.ExitOnError)
	sizes := fs.String("sizes", "100,10000", "history sizes (executions stored) to measure at, growing")
	fs.IntVar(&cfg.runs, "runs", 5, "reads (and page loads) timed per query and size")
	noBrowser := fs.Bool("no-browser", false, "time the API only")
	fs.StringVar(&cfg.baseline, "baseline", "", "a git revision whose gateway to build and time beside this build's (\"\": none)")
	_ = fs.Parse(os.Args[1:])
	for _, f := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < rows || (len(cfg.sizes) > 0 && n <= cfg.sizes[len(cfg.sizes)-1]) {
			fmt.Fprintf(os.Stderr, "benchconsole: -sizes %q: want growing numbers from %d\n", *sizes, rows)
			os.Exit(2)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	if !*noBrowser {
		cfg.chromium = chromiumPath()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintln(os.Stderr, "benchconsole:", err)
		os.Exit(1)
	}
}

// chromiumPath is $NOVA_CHROMIUM, else Debian's chromium.
func chromiumPath() string {
	if p := os.Getenv("NOVA_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// query is one read the executions list makes, timed.
type query struct {
	name  string
	query string // after ?limit=50
}

// timing is what one query or page took at one size.
type timing struct {
	p50, p90 time.Duration
}

// server is one gateway measured: this build's, or the baseline's.
type server struct {
	name string
	base string
}

// pages are the console pages timed to their first paint.
var pages = []struct{ name, route string }{
	{"browser: executions list, 50 rows drawn", "#/executions"},
	{"browser: workflows page, every last run drawn", "#/workflows"},
}

func run(ctx context.Context, cfg config) error {
	dir, err := os.MkdirTemp("", "benchconsole-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	var baselineBin string
	if cfg.baseline != "" {
		fmt.Fprintf(os.Stderr, "benchconsole: building the gateway of %s\n", cfg.baseline)
		bin, cleanup, err := buildBaseline(ctx, cfg.baseline, dir)
		if err != nil {
			return fmt.Errorf("baseline %s: %w", cfg.baseline, err)
		}
		defer cleanup()
		baselineBin = bin
	}
	infra, err := devstack.Start(ctx, devstack.Options{DataDir: filepath.Join(dir, "data"), Logger: quiet})
	if err != nil {
		return err
	}
	defer infra.Close()
	b, st, base, stop, err := serveGateway(ctx, infra, quiet)
	if err != nil {
		return err
	}
	defer stop()
	if err := registerWorkflows(ctx, b); err != nil {
		return err
	}
	servers := []server{{"this build", base}}
	if baselineBin != "" {
		old, stopOld, err := serveBaseline(ctx, baselineBin, infra)
		if err != nil {
			return fmt.Errorf("baseline %s: %w", cfg.baseline, err)
		}
		defer stopOld()
		servers = append([]server{{"baseline " + cfg.baseline, old}}, servers...)
	}
	var br *browser
	if cfg.chromium != "" {
		if br, err = newBrowser(ctx, cfg.chromium); err != nil {
			return err
		}
		defer br.close()
	}
	r, err := measure(ctx, cfg, infra, st, servers, br)
	if err != nil {
		return err
	}
	return r.print(cfg, servers, br != nil)
}

// serveGateway serves the HTTP API on a loopback port over infra, with the
// bus and store it uses; stop shuts all down.
func serveGateway(ctx context.Context, infra *devstack.Stack, quiet *slog.Logger) (b *bus.Bus, st *chainstore.Store, base string, stop func(), err error) {
	b, err = bus.Connect(ctx, infra.NATSURL, bus.WithName("benchconsole"), bus.WithLogger(quiet))
	if err != nil {
		return nil, nil, "", nil, err
	}
	// The page follows GET /v1/executions/events: its stream must exist.
	if err := b.EnsureStreams(ctx); err != nil {
		b.Close()
		return nil, nil, "", nil, err
	}
	if st, err = chainstore.Open(ctx, infra.MongoURI, chainstore.DefaultDatabase); err != nil {
		b.Close()
		return nil, nil, "", nil, err
	}
	closeAll := func() { _ = st.Close(context.WithoutCancel(ctx)); b.Close() }
	if err := st.EnsureIndexes(ctx); err != nil {
		closeAll()
		return nil, nil, "", nil, err
	}
	g, err := gateway.New(gateway.Deps{Bus: b, Store: st, NoAuth: true, Logger: quiet})
	if err != nil {
		closeAll()
		return nil, nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeAll()
		return nil, nil, "", nil, err
	}
	srv := g.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return b, st, "http://" + ln.Addr().String(), func() {
		_ = srv.Shutdown(context.WithoutCancel(ctx))
		<-served
		closeAll()
	}, nil
}

// registerWorkflows stores the history's workflows as the engine registers
// them (the workflows page lists its registry).
func registerWorkflows(ctx context.Context, b *bus.Bus) error {
	kv, err := b.JetStream().CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket: bus.BucketWorkflows, History: 5, Storage: jetstream.FileStorage,
	})
	if err != nil {
		return fmt.Errorf("the workflows bucket: %w", err)
	}
	for i := range workflows {
		started, _, err := executionEvents(i, time.Now())
		if err != nil {
			return err
		}
		def, err := proto.Marshal(started.GetDefinition())
		if err != nil {
			return err
		}
		if _, err := kv.Put(ctx, started.GetWorkflowName(), def); err != nil {
			return fmt.Errorf("register %s: %w", started.GetWorkflowName(), err)
		}
	}
	return nil
}

// buildBaseline builds the gateway of git revision rev from a worktree of
// it under dir; cleanup removes the worktree.
func buildBaseline(ctx context.Context, rev, dir string) (bin string, cleanup func(), err error) {
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", nil, fmt.Errorf("find the repository: %w", err)
	}
	root := strings.TrimSpace(string(top))
	tree := filepath.Join(dir, "baseline")
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "worktree", "add", "--detach", tree, rev).CombinedOutput(); err != nil {
		return "", nil, fmt.Errorf("git worktree add %s: %w\n%s", rev, err, out)
	}
	cleanup = func() {
		_ = exec.Command("git", "-C", root, "worktree", "remove", "--force", tree).Run()
	}
	bin = filepath.Join(dir, "gateway-baseline")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join(tree, "services", "gateway")
	if out, err := build.CombinedOutput(); err != nil {
		cleanup()
		return "", nil, fmt.Errorf("go build: %w\n%s", err, out)
	}
	return bin, cleanup, nil
}

// serveBaseline runs the baseline's gateway over infra, without keys, on a
// free loopback port, and waits until it answers.
func serveBaseline(ctx context.Context, bin string, infra *devstack.Stack) (base string, stop func(), err error) {
	ports, err := freePorts(2)
	if err != nil {
		return "", nil, err
	}
	runCtx, cancel := context.WithCancel(ctx)
	cmd := exec.CommandContext(runCtx, bin)
	cmd.Env = append(os.Environ(), "NATS_URL="+infra.NATSURL, "MONGODB_URI="+infra.MongoURI, "MONGODB_DATABASE="+chainstore.DefaultDatabase,
		"NOVA_GATEWAY_NO_AUTH=true", "GATEWAY_ADDR="+ports[0], "HEALTH_ADDR="+ports[1], "LOG_LEVEL=error")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		cancel()
		return "", nil, err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop = func() { cancel(); <-exited }
	base = "http://" + ports[0]
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/v1/workflows"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, stop, nil
			}
		}
		select {
		case err := <-exited:
			exited <- err
			stop()
			return "", nil, fmt.Errorf("the baseline's gateway exited: %v\n%s", err, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return "", nil, fmt.Errorf("the baseline's gateway did not answer within a minute\n%s", stderr.String())
		}
	}
}

// freePorts are n loopback addresses free a moment ago.
func freePorts(n int) ([]string, error) {
	var addrs []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, ln.Addr().String())
		defer ln.Close()
	}
	return addrs, nil
}

// results are the timings at each size, of each server: the API's queries
// and the pages.
type results struct {
	sizes   []int
	queries []query
	// api[size][server][query], page[size][server][page]
	api  [][][]timing
	page [][][]timing
	// totals is what one count of GET /v1/execution-totals took at each
	// size (this build).
	totals []time.Duration
}

// measure fills the store to each size in turn and times the queries and
// the pages of each server at it.
func measure(ctx context.Context, cfg config, infra *devstack.Stack, st *chainstore.Store, servers []server, br *browser) (results, error) {
	r := results{sizes: cfg.sizes}
	t0 := time.Now().Add(-time.Hour)
	have := 0
	for _, size := range cfg.sizes {
		fmt.Fprintf(os.Stderr, "benchconsole: storing %d executions\n", size)
		if err := fill(ctx, st, t0, have, size); err != nil {
			return r, fmt.Errorf("fill to %d: %w", size, err)
		}
		have = size
		// As nova dev's store does within a second of a collection's creation.
		if err := infra.Mongo.IndexIDs(ctx); err != nil {
			return r, err
		}
		// An id of the middle of the history: a search finds it in a page
		// of its own.
		r.queries = []query{
			{"first page", ""},
			{"status=failed", "&status=failed"},
			{"id prefix (8 characters)", "&id=" + executionID(size / 2)[:8]},
		}
		var apiRow, pageRow [][]timing
		for _, s := range servers {
			var row []timing
			for _, q := range r.queries {
				tm, err := timeAPI(ctx, s.base+"/v1/executions?limit=50"+q.query, cfg.runs)
				if err != nil {
					return r, fmt.Errorf("%s, %d executions, %s: %w", s.name, size, q.name, err)
				}
				row = append(row, tm)
				fmt.Fprintf(os.Stderr, "benchconsole: %s, %d executions, GET %s: p50 %.1f ms\n", s.name, size, q.name, ms(tm.p50))
			}
			apiRow = append(apiRow, row)
			var pr []timing
			if br != nil {
				for _, p := range pages {
					tm, err := br.timeFirstPaint(ctx, s.base+"/"+p.route, cfg.runs)
					if err != nil {
						return r, fmt.Errorf("%s, %d executions, %s: %w", s.name, size, p.name, err)
					}
					pr = append(pr, tm)
					fmt.Fprintf(os.Stderr, "benchconsole: %s, %d executions, %s: p50 %.1f ms\n", s.name, size, p.name, ms(tm.p50))
				}
			}
			pageRow = append(pageRow, pr)
		}
		// One count of every execution that succeeded, with a filter no
		// list asked for, so that the gateway counts instead of reusing.
		tm, err := timeAPI(ctx, servers[len(servers)-1].base+"/v1/execution-totals?status=succeeded", 0)
		if err != nil {
			return r, fmt.Errorf("%d executions, totals: %w", size, err)
		}
		r.totals = append(r.totals, tm.p50)
		fmt.Fprintf(os.Stderr, "benchconsole: this build, %d executions, GET /v1/execution-totals: %.1f ms\n", size, ms(tm.p50))
		r.api = append(r.api, apiRow)
		r.page = append(r.page, pageRow)
	}
	return r, nil
}

// firstPaintGoal is what a page's first paint should take on the machine
// that runs the bench.
const firstPaintGoal = time.Second

// print writes the table: each size's and each measure's median (p90) per
// server and, with a baseline, this build's median over the baseline's.
func (r results) print(cfg config, servers []server, browser bool) error {
	fmt.Printf("console first paint and its API reads, embedded store (FerretDB on SQLite); %d runs each; median (p90), ms\n\n", cfg.runs)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "stored\tmeasure\t"
	for _, s := range servers {
		head += s.name + "\t"
	}
	if len(servers) > 1 {
		head += "this / baseline\t"
	}
	fmt.Fprintln(tw, head)
	line := func(size int, name string, tms []timing) {
		l := fmt.Sprintf("%d\t%s\t", size, name)
		for _, tm := range tms {
			l += fmt.Sprintf("%.1f (%.1f)\t", ms(tm.p50), ms(tm.p90))
		}
		if len(tms) > 1 {
			l += fmt.Sprintf("%.2fx\t", ratio(tms[len(tms)-1].p50, tms[0].p50))
		}
		fmt.Fprintln(tw, l)
	}
	var missed []string
	for i, size := range r.sizes {
		for j, q := range r.queries {
			var tms []timing
			for k := range servers {
				tms = append(tms, r.api[i][k][j])
			}
			line(size, "API "+q.name, tms)
		}
		if !browser {
			continue
		}
		for j, p := range pages {
			var tms []timing
			for k := range servers {
				tms = append(tms, r.page[i][k][j])
			}
			line(size, p.name, tms)
			if this := tms[len(tms)-1].p50; this >= firstPaintGoal {
				missed = append(missed, fmt.Sprintf("%s at %d executions: %.0f ms", p.name, size, ms(this)))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Println()
	for i, size := range r.sizes {
		fmt.Printf("GET /v1/execution-totals counted at %d executions (this build, once, not reused): %.1f ms\n", size, ms(r.totals[i]))
	}
	switch {
	case !browser:
		fmt.Println("\nbrowser: not measured (no chromium, or -no-browser)")
	case len(missed) == 0:
		fmt.Printf("\nfirst paint under %v for every page and size (this build, median)\n", firstPaintGoal)
	default:
		fmt.Printf("\nfirst paint over %v (this build, median): %s\n", firstPaintGoal, strings.Join(missed, "; "))
	}
	return nil
}

// workflows are the names the history's executions have, in turn.
var workflows = []string{"invoice-routing", "ai-orders", "catalog", "nightly-report"}

func executionID(i int) string {
	return fmt.Sprintf("%08x-0000-4000-8000-%012d", uint32(i)*2654435761, i)
}

// fill records executions from..to-1 as the audit service records them
// once they ended: execution i started i seconds after t0; one in 50 failed.
func fill(ctx context.Context, st *chainstore.Store, t0 time.Time, from, to int) error {
	for i := from; i < to; i++ {
		started, completed, err := executionEvents(i, t0.Add(time.Duration(i)*time.Second))
		if err != nil {
			return err
		}
		if err := errors.Join(st.RecordAll(ctx, []proto.Message{started, completed})...); err != nil {
			return err
		}
	}
	return nil
}

// executionEvents are the started and completed events of execution i.
func executionEvents(i int, started time.Time) (*novav1.WorkflowStarted, *novav1.WorkflowCompleted, error) {
	name := workflows[i%len(workflows)]
	def := &novav1.WorkflowDefinition{Name: name, Nodes: []*novav1.Node{{Id: "start", Type: novav1.NodeType_NODE_TYPE_START}}}
	var summary []*novav1.NodeSummary
	path := []string{"start"}
	prev := "start"
	for n := range 3 {
		id := fmt.Sprintf("step_%d", n)
		def.Nodes = append(def.Nodes, &novav1.Node{Id: id, Type: novav1.NodeType_NODE_TYPE_ACTION,
			Code: fmt.Sprintf("context['total_%d'] = round(float(context['total']) * 1.%d, 2)", n, n)})
		def.Edges = append(def.Edges, &novav1.Edge{From: prev, To: id})
		summary = append(summary, &novav1.NodeSummary{Id: id, Status: "success", Attempts: 1, Visits: 1})
		path, prev = append(path, id), id
	}
	def.Nodes = append(def.Nodes, &novav1.Node{Id: "end", Type: novav1.NodeType_NODE_TYPE_END})
	def.Edges = append(def.Edges, &novav1.Edge{From: prev, To: "end"})
	path = append(path, "end")
	initial := map[string]any{"invoice": fmt.Sprintf("INV-2025-%05d", i), "customer": "ACME Corporation",
		"currency": "EUR", "total": 1000 + i%700}
	for k := range 8 {
		initial[fmt.Sprintf("field_%d", k)] = k * 1000
	}
	final := maps.Clone(initial)
	final["total_0"], final["total_1"], final["total_2"] = 1000.5, 1100.5, 1200.5
	in, err := jsonvalue.ObjectOf(initial)
	if err != nil {
		return nil, nil, err
	}
	out, err := jsonvalue.ObjectOf(final)
	if err != nil {
		return nil, nil, err
	}
	status, errText := "succeeded", ""
	if i%50 == 7 {
		status, errText = "failed", "node step_1: ValueError: no invoice total"
	}
	completed := started.Add(time.Duration(200+i%900) * time.Millisecond)
	id := executionID(i)
	return &novav1.WorkflowStarted{
			ExecutionId: id, WorkflowName: name, Definition: def, Context: in.Proto(), StartedAt: timestamppb.New(started),
		}, &novav1.WorkflowCompleted{
			ExecutionId: id, WorkflowName: name, Status: status, Context: out.Proto(), Path: path, Nodes: summary,
			Error: errText, StartedAt: timestamppb.New(started), CompletedAt: timestamppb.New(completed),
			CostUsd: float64(i%5) * 0.0011, ModelCalls: int32(i % 5),
		}, nil
}

// timeAPI reads url runs times (after one read not timed); with runs 0, it
// times its one read.
func timeAPI(ctx context.Context, url string, runs int) (timing, error) {
	var took []time.Duration
	for i := range runs + 1 {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return timing{}, err
		}
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return timing{}, err
		}
		_, err = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil {
			return timing{}, err
		}
		if resp.StatusCode != http.StatusOK {
			return timing{}, fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		if i > 0 || runs == 0 {
			took = append(took, time.Since(start))
		}
	}
	return summarize(took), nil
}

// browser is one headless Chromium tab.
type browser struct {
	ctx   context.Context
	close func()
}

// rows is how many rows the first page has (the sizes are at least that).
const rows = 50

// drawn, run in every page the tab loads, notes when the page first has
// what its first paint shows (ms since the navigation began): the
// executions list its rows, the workflows page every workflow's row with
// its last run.
const drawn = `new MutationObserver((_, obs) => {
	const done = location.hash.startsWith("#/workflows")
		? (() => {
			const rows = [...document.querySelectorAll("table.workflows tbody tr[data-workflow]")];
			return rows.length >= %d && rows.every(r => { const t = r.querySelector(".last-run")?.textContent ?? ""; return t !== "" && t !== "…"; });
		})()
		: document.querySelectorAll("table.executions tbody tr").length >= %d;
	if (done) {
		window.__drawn = performance.now();
		obs.disconnect();
	}
}).observe(document, {subtree: true, childList: true, characterData: true});`

// settled tells that a page has read what it reads after its first paint:
// the executions list's totals, or failed to (a build whose list has none
// has nothing to read).
const settled = `!document.querySelector("p.summary")?.textContent.startsWith("Counting")`

func newBrowser(ctx context.Context, chromium string) (*browser, error) {
	dir, err := os.MkdirTemp("", "benchconsole-chromium-")
	if err != nil {
		return nil, err
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.WindowSize(1400, 1000), chromedp.UserDataDir(dir),
		// A page kept in the back-forward cache keeps its stream of GET
		// /v1/executions/events open, and Chromium opens at most 6
		// connections to one server: the 7th load's read would wait for
		// one to close.
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,BackForwardCache"))
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	bctx, cancel := chromedp.NewContext(allocCtx)
	b := &browser{ctx: bctx, close: func() { cancel(); cancelAlloc(); _ = os.RemoveAll(dir) }}
	if err := chromedp.Do(bctx); err != nil {
		b.close()
		return nil, fmt.Errorf("start %s: %w", chromium, err)
	}
	if _, err := chromedp.Call(bctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: fmt.Sprintf(drawn, len(workflows), rows)}); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// timeFirstPaint loads url runs times (after one load not timed), each from
// a blank tab, and times each from the navigation's start to its first
// paint (drawn).
func (b *browser) timeFirstPaint(ctx context.Context, url string, runs int) (timing, error) {
	var took []time.Duration
	for i := range runs + 1 {
		c, cancel := context.WithTimeout(b.ctx, 60*time.Second)
		err := chromedp.Do(c, chromedp.Navigate("about:blank"), chromedp.Navigate(url))
		var at float64
		if err == nil {
			at, err = chromedp.Run(c, chromedp.Poll[float64](`window.__drawn`, chromedp.WithPollingInterval(10*time.Millisecond)))
		}
		cancel()
		if err == nil {
			// The next load starts once this one has read what it reads
			// after its first paint (the list's totals), as a person's next
			// open of the page would: a count still running would take a
			// core from it.
			c, cancel = context.WithTimeout(b.ctx, 2*time.Minute)
			_, err = chromedp.Run(c, chromedp.Poll[bool](settled, chromedp.WithPollingInterval(20*time.Millisecond)))
			cancel()
		}
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("the page did not draw its rows within 60 s")
			}
			return timing{}, err
		}
		if i > 0 {
			took = append(took, time.Duration(at*float64(time.Millisecond)))
		}
	}
	return summarize(took), ctx.Err()
}

func summarize(took []time.Duration) timing {
	slices.Sort(took)
	return timing{p50: took[len(took)/2], p90: took[min(len(took)-1, len(took)*9/10)]}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
