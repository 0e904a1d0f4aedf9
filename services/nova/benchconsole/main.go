// Command benchconsole measures how long the console's executions page
// takes to show its first page as the history grows: it stores executions
// in the embedded audit store (FerretDB on SQLite, as nova dev runs it),
// serves the gateway over them, and at each history size times
//
//   - the API: GET /v1/executions?limit=50 (the page's read), and the same
//     with ?status=failed (few match) and ?id= (an id's first 8 characters);
//   - the browser, where Chromium is installed: #/executions opened in
//     headless Chromium, from the start of the navigation to its 50 rows
//     drawn (the page, its scripts, its reads and the drawing).
//
// It prints the median and the 90th percentile of each, and each size's
// median against the first size's, measured in the same run. The history is
// recorded through the store as the audit service records it (an execution
// of a 5-node workflow with its definition, contexts and node summaries,
// its started and completed events in one batch, as nova dev's audit
// service writes a workflow that runs alone), so that it holds what the
// audit service leaves, the store's listing of the executions included;
// not timed.
//
//	go run ./benchconsole -sizes 100,10000 -runs 5
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
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
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
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchconsole", flag.ExitOnError)
	sizes := fs.String("sizes", "100,10000", "history sizes (executions stored) to measure at, growing")
	fs.IntVar(&cfg.runs, "runs", 5, "reads (and page loads) timed per query and size")
	noBrowser := fs.Bool("no-browser", false, "time the API only")
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

// query is one read the page makes, timed.
type query struct {
	name  string
	query string // after ?limit=50
}

// timing is what one query took at one size.
type timing struct {
	p50, p90 time.Duration
}

func run(ctx context.Context, cfg config) error {
	dir, err := os.MkdirTemp("", "benchconsole-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	infra, err := devstack.Start(ctx, devstack.Options{DataDir: dir, Logger: quiet})
	if err != nil {
		return err
	}
	defer infra.Close()
	st, base, stop, err := serveGateway(ctx, infra, quiet)
	if err != nil {
		return err
	}
	defer stop()
	var br *browser
	if cfg.chromium != "" {
		if br, err = newBrowser(ctx, cfg.chromium); err != nil {
			return err
		}
		defer br.close()
	}
	r, err := measure(ctx, cfg, infra, st, base, br)
	if err != nil {
		return err
	}
	return r.print(cfg, br != nil)
}

// serveGateway serves the HTTP API on a loopback port over infra, with the
// store it reads; stop shuts both down.
func serveGateway(ctx context.Context, infra *devstack.Stack, quiet *slog.Logger) (st *chainstore.Store, base string, stop func(), err error) {
	b, err := bus.Connect(ctx, infra.NATSURL, bus.WithName("benchconsole"), bus.WithLogger(quiet))
	if err != nil {
		return nil, "", nil, err
	}
	// The page follows GET /v1/executions/events: its stream must exist.
	if err := b.EnsureStreams(ctx); err != nil {
		b.Close()
		return nil, "", nil, err
	}
	if st, err = chainstore.Open(ctx, infra.MongoURI, chainstore.DefaultDatabase); err != nil {
		b.Close()
		return nil, "", nil, err
	}
	closeAll := func() { _ = st.Close(context.WithoutCancel(ctx)); b.Close() }
	if err := st.EnsureIndexes(ctx); err != nil {
		closeAll()
		return nil, "", nil, err
	}
	g, err := gateway.New(gateway.Deps{Bus: b, Store: st, NoAuth: true, Logger: quiet})
	if err != nil {
		closeAll()
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		closeAll()
		return nil, "", nil, err
	}
	srv := g.Server()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	return st, "http://" + ln.Addr().String(), func() {
		_ = srv.Shutdown(context.WithoutCancel(ctx))
		<-served
		closeAll()
	}, nil
}

// results are the timings of each size: the API's queries and the browser.
type results struct {
	sizes   []int
	queries []query
	api     [][]timing
	page    []timing
}

// measure fills the store to each size in turn and times the queries and
// the page at it.
func measure(ctx context.Context, cfg config, infra *devstack.Stack, st *chainstore.Store, base string, br *browser) (results, error) {
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
		var row []timing
		for _, q := range r.queries {
			tm, err := timeAPI(ctx, base+"/v1/executions?limit=50"+q.query, cfg.runs)
			if err != nil {
				return r, fmt.Errorf("%d executions, %s: %w", size, q.name, err)
			}
			row = append(row, tm)
			fmt.Fprintf(os.Stderr, "benchconsole: %d executions, GET %s: p50 %.1f ms\n", size, q.name, ms(tm.p50))
		}
		r.api = append(r.api, row)
		if br != nil {
			tm, err := br.timeFirstPage(ctx, base+"/#/executions", cfg.runs)
			if err != nil {
				return r, fmt.Errorf("%d executions, browser: %w", size, err)
			}
			r.page = append(r.page, tm)
			fmt.Fprintf(os.Stderr, "benchconsole: %d executions, browser: p50 %.1f ms\n", size, ms(tm.p50))
		}
	}
	return r, nil
}

// print writes the table: each size's medians (p90), then each size's
// ratio to the first.
func (r results) print(cfg config, browser bool) error {
	fmt.Printf("executions page, first page of 50, embedded store (FerretDB on SQLite); %d runs each; median (p90), ms\n\n", cfg.runs)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "stored\t"
	for _, q := range r.queries {
		head += "API " + q.name + "\t"
	}
	if browser {
		head += "browser: open to 50 rows drawn\t"
	}
	fmt.Fprintln(tw, head)
	for i, size := range r.sizes {
		line := fmt.Sprintf("%d\t", size)
		for _, tm := range r.api[i] {
			line += fmt.Sprintf("%.1f (%.1f)\t", ms(tm.p50), ms(tm.p90))
		}
		if browser {
			line += fmt.Sprintf("%.1f (%.1f)\t", ms(r.page[i].p50), ms(r.page[i].p90))
		}
		fmt.Fprintln(tw, line)
	}
	for i, size := range r.sizes[1:] {
		line := fmt.Sprintf("%d / %d\t", size, r.sizes[0])
		for j, tm := range r.api[i+1] {
			line += fmt.Sprintf("%.1fx\t", ratio(tm.p50, r.api[0][j].p50))
		}
		if browser {
			line += fmt.Sprintf("%.1fx\t", ratio(r.page[i+1].p50, r.page[0].p50))
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if !browser {
		fmt.Println("\nbrowser: not measured (no chromium, or -no-browser)")
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

// timeAPI reads url runs times (after one read not timed).
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
		if i > 0 {
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

// drawn, run in every page the tab loads, notes when the executions table
// first has its rows (ms since the navigation began).
const drawn = `new MutationObserver((_, obs) => {
	if (document.querySelectorAll("table.executions tbody tr").length >= 50) {
		window.__drawn = performance.now();
		obs.disconnect();
	}
}).observe(document, {subtree: true, childList: true});`

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
	if _, err := chromedp.Call(bctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: drawn}); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// timeFirstPage loads url runs times (after one load not timed), each from
// a blank tab, and times each from the navigation's start to its rows drawn.
func (b *browser) timeFirstPage(ctx context.Context, url string, runs int) (timing, error) {
	var took []time.Duration
	for i := range runs + 1 {
		c, cancel := context.WithTimeout(b.ctx, 60*time.Second)
		err := chromedp.Do(c, chromedp.Navigate("about:blank"), chromedp.Navigate(url))
		var at float64
		if err == nil {
			at, err = chromedp.Run(c, chromedp.Poll[float64](`window.__drawn`, chromedp.WithPollingInterval(10*time.Millisecond)))
		}
		cancel()
		if err != nil {
			if errors.Is(err, context.DeadlineExceeded) {
				err = fmt.Errorf("the page did not draw %d rows within 60 s", rows)
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
