// Command benchcache measures the generated-code cache
// on the whole stack in this process (embedded NATS and FerretDB, every
// service, the scripted OpenAI-compatible model server over HTTP), on a
// fresh data dir:
//
//   - model use: examples/ai-orders.yaml run -runs times, one at a time,
//     with totals spread around 1000 (both routes; the context's shape is
//     the same every time). For run 1 and for the runs after it: requests
//     the scripted server received, the executions' model calls and cost and
//     the steps' tokens from the chain of work, the cache hits of each AI
//     node and what ai_metadata says the hits saved. Goal: no model call
//     after the first run; the program exits 1 when a later run calls one.
//   - latency: each AI node on a hit beside a code node doing the same work,
//     the baseline: the workflow with its AI nodes pinned
//     (workflow.PinCode) to the code the cache holds, run as many times in
//     the same process, alternately with the AI runs. A node's latency is
//     its chain-of-work execution_time (the engine's clock from entering the
//     node to completing it, every hop included). The difference of the
//     medians is printed beside the goal (2 ms); it is not asserted. The
//     hits' ai_metadata timings say where it goes.
//
// `make bench-cache` runs it; -h lists the knobs.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/codecache"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/runtimeinfo"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

type config struct {
	workflow string
	rules    string
	runs     int
	keep     bool
}

func main() {
	var cfg config
	fs := flag.NewFlagSet("benchcache", flag.ExitOnError)
	fs.StringVar(&cfg.workflow, "workflow", "examples/ai-orders.yaml", "workflow `FILE` with AI nodes")
	fs.StringVar(&cfg.rules, "rules", "", "scripted model rules `FILE` (default: the built-in rules, as in examples/scripted-llm.yaml)")
	fs.IntVar(&cfg.runs, "runs", 100, "runs of the workflow, and as many of its pinned variant")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the data dir and the stack's log")
	_ = fs.Parse(os.Args[1:])
	if cfg.runs < 2 {
		fmt.Fprintln(os.Stderr, "benchcache: -runs must be 2 or more (run 1 fills the cache, the others hit it)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, cfg); err != nil {
		fmt.Fprintf(os.Stderr, "benchcache: %v\n", err)
		os.Exit(1)
	}
}

// runRecord is one execution as the benchmark saw it and as the chain of
// work keeps it.
type runRecord struct {
	id       string
	total    int
	requests []scripted.Recorded // received by the scripted server during the run
	exec     *chainstore.ExecutionDoc
	nodes    map[string]*chainstore.NodeDoc // last visit of each node
}

func run(ctx context.Context, cfg config) error {
	def, aiNodes, err := loadWorkflow(cfg.workflow)
	if err != nil {
		return err
	}
	rules, err := loadRules(cfg.rules)
	if err != nil {
		return err
	}

	dir, err := os.MkdirTemp("", "nova-benchcache-")
	if err != nil {
		return err
	}
	logFile, err := os.Create(filepath.Join(dir, "stack.log"))
	if err != nil {
		return err
	}
	failed := true
	defer func() {
		logFile.Close()
		if cfg.keep || failed {
			fmt.Fprintf(os.Stderr, "benchcache: data dir and stack.log kept in %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	// As nova dev runs: warm interpreters, the code cache on (its default).
	s, err := stack.Start(ctx, stack.Options{DataDir: filepath.Join(dir, "data"), Sandbox: stack.SandboxConfig(true),
		Logger: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo})),
		LLM:    stack.LLMOptions{ScriptedRules: &rules}})
	if err != nil {
		return err
	}
	defer s.Close()
	b, err := s.Connect(ctx, "benchcache", bus.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return err
	}
	defer b.Close()
	// Until the sandbox has published its runtime the engine does not use
	// the cache (the runtime is part of the key).
	if err := waitRuntime(ctx, b.JetStream()); err != nil {
		return err
	}
	fmt.Printf("benchcache: %s, %d runs and %d of its pinned variant, one at a time, on %s\n",
		cfg.workflow, cfg.runs, cfg.runs, filepath.Join(dir, "data"))
	fmt.Printf("model: SCRIPTED (%s over HTTP; %d rules)\n", s.Scripted().BaseURL(), len(rules.Rules))
	// Latencies on a busy machine are mostly waiting for a CPU.
	fmt.Printf("load average at start: %s (%d CPUs)\n\n", loadAverage(), runtime.NumCPU())

	rn := runner{stack: s, client: client.New(b, nil)}
	ai, code, err := rn.runAlternately(ctx, b.JetStream(), def, aiNodes, spreadTotals(cfg.runs))
	if err != nil {
		return err
	}
	if err := checkOutcomes(append(slices.Clone(ai), code...)); err != nil {
		return err
	}
	later := ai[1:]
	if err := printModelUse(os.Stdout, aiNodes, ai[0], later, code); err != nil {
		return err
	}
	fmt.Println()
	if err := printLatency(os.Stdout, aiNodes, later, code); err != nil {
		return err
	}
	fmt.Printf("\nload average at the end: %s\n", loadAverage())
	failed = false
	if calls, requests := modelUse(later); calls > 0 || requests > 0 {
		failed = true
		return fmt.Errorf("runs 2-%d called the model: %d model calls in the chain of work, %d requests at the scripted server (goal: 0 after the first run)",
			cfg.runs, calls, requests)
	}
	return nil
}

// modelUse is how many model calls the chain of work and how many requests
// the scripted server saw in runs.
func modelUse(runs []*runRecord) (calls, requests int) {
	for _, r := range runs {
		calls += r.exec.ModelCalls
		requests += len(r.requests)
	}
	return calls, requests
}

// loadWorkflow reads and validates the workflow of file, and names its AI
// nodes (those with a prompt); one without any has nothing to measure.
func loadWorkflow(file string) (*novav1.WorkflowDefinition, []string, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, nil, err
	}
	def, err := workflow.Parse(raw)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	if err := workflow.Validate(def, workflow.ValidateOptions{AllowPrompt: true}); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", file, err)
	}
	var aiNodes []string
	for _, n := range def.GetNodes() {
		if strings.TrimSpace(n.GetPrompt()) != "" {
			aiNodes = append(aiNodes, n.GetId())
		}
	}
	if len(aiNodes) == 0 {
		return nil, nil, fmt.Errorf("%s: no AI node (a node with a prompt)", file)
	}
	return def, aiNodes, nil
}

// loadRules reads the scripted model's rules from file, or the built-in
// ones when file is "".
func loadRules(file string) (scripted.Rules, error) {
	rules, err := stack.DefaultRules()
	if file != "" {
		rules, err = scripted.LoadRules(file)
	}
	if err != nil {
		return rules, fmt.Errorf("scripted model rules: %w", err)
	}
	return rules, nil
}

// runner runs workflows on the stack one at a time and records each.
type runner struct {
	stack  *stack.Stack
	client *client.Client
}

// once runs def with total and records it. A run is over once the audit
// service has recorded it, so that recording one run does not slow the
// next.
func (rn runner) once(ctx context.Context, def *novav1.WorkflowDefinition, total int) (*runRecord, error) {
	before := len(rn.stack.Scripted().Requests())
	e, err := rn.client.Start(ctx, def, "", fmt.Sprintf(`{"total": %d}`, total))
	if err != nil {
		return nil, err
	}
	wc, err := e.Wait(ctx)
	if err != nil {
		return nil, err
	}
	if wc.GetStatus() != execution.StatusSucceeded {
		return nil, fmt.Errorf("workflow %s (total %d), execution %s %s: %s", def.GetName(), total, e.ID, wc.GetStatus(), wc.GetError())
	}
	r := &runRecord{id: e.ID, total: total, requests: rn.stack.Scripted().Requests()[before:]}
	return r, readChain(ctx, rn.client, rn.stack.Store, r)
}

// runAlternately runs def with the first total, which fills the cache,
// then its variant pinned to the cached code with every total and def
// again with every total but the first. It returns def's runs, run 1
// first, and the pinned variant's.
func (rn runner) runAlternately(ctx context.Context, js jetstream.JetStream, def *novav1.WorkflowDefinition, aiNodes []string, totals []int) (ai, code []*runRecord, err error) {
	first, err := rn.once(ctx, def, totals[0])
	if err != nil {
		return nil, nil, err
	}
	pinned, err := pinFromCache(ctx, js, def, first, aiNodes)
	if err != nil {
		return nil, nil, err
	}
	// Alternately, so that both see the same machine.
	ai = []*runRecord{first}
	for i, total := range totals {
		r, err := rn.once(ctx, pinned, total)
		if err != nil {
			return nil, nil, err
		}
		code = append(code, r)
		if i == 0 {
			continue
		}
		if r, err = rn.once(ctx, def, total); err != nil {
			return nil, nil, err
		}
		ai = append(ai, r)
	}
	return ai, code, nil
}

// checkOutcomes is an error naming every run that computed a wrong result:
// a fast run that is wrong measures nothing.
func checkOutcomes(runs []*runRecord) error {
	var wrong []string
	for _, r := range runs {
		if why := checkOutcome(r); why != "" {
			wrong = append(wrong, why)
		}
	}
	if len(wrong) > 0 {
		return fmt.Errorf("%d runs computed a wrong result: %s", len(wrong), strings.Join(wrong, "; "))
	}
	return nil
}

// spreadTotals are n integer totals from 400 to 1600 in a shuffled order
// (a stride coprime with n), so that both routes of ai-orders are taken
// all along the run: review above 1111.12 (after the 10% discount), auto
// below. Run 1 gets the first.
func spreadTotals(n int) []int {
	stride := 37
	for gcd(stride, n) != 1 {
		stride++
	}
	out := make([]int, n)
	for i := range n {
		out[i] = 400 + 1200*((i*stride)%n)/max(n-1, 1)
	}
	return out
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// waitRuntime waits until the sandbox has published its runtime description.
func waitRuntime(ctx context.Context, js jetstream.JetStream) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		_, err := runtimeinfo.Load(ctx, js)
		if err == nil {
			return nil
		}
		if !errors.Is(err, runtimeinfo.ErrNotPublished) {
			return fmt.Errorf("runtime description: %w", err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the sandbox published no runtime description (the code cache needs it): %w", ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// readChain waits until the audit service has recorded everything so far
// and reads r's execution and node visits.
func readChain(ctx context.Context, c *client.Client, st *chainstore.Store, r *runRecord) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	err := c.WaitConsumerIdle(wctx, bus.StreamEvents, auditservice.Consumer)
	cancel()
	if err != nil {
		return err
	}
	exec, err := st.Execution(ctx, r.id)
	if err != nil {
		return err
	}
	chain, err := st.Chain(ctx, r.id)
	if err != nil {
		return err
	}
	r.exec, r.nodes = exec, map[string]*chainstore.NodeDoc{}
	for i := range chain {
		n := &chain[i]
		if last := r.nodes[n.NodeID]; last == nil || n.Visit > last.Visit {
			r.nodes[n.NodeID] = n
		}
	}
	return nil
}

// pinFromCache is def with each AI node pinned to the code the cache holds
// for it from run first, which must be the code that node ran there. A node
// the cache holds nothing for is pinned to the code run 1 ran (the chain of
// work), and said so: the figures then show the misses.
func pinFromCache(ctx context.Context, js jetstream.JetStream, def *novav1.WorkflowDefinition, first *runRecord, aiNodes []string) (*novav1.WorkflowDefinition, error) {
	kv, err := js.KeyValue(ctx, codecache.Bucket)
	if err != nil {
		return nil, fmt.Errorf("KV %s: %w", codecache.Bucket, err)
	}
	cached := map[string]*codecache.Entry{}
	// The engine stores an entry once the transition that accepted the
	// code is stored; it may trail the completion a little.
	for deadline := time.Now().Add(5 * time.Second); len(cached) < len(aiNodes) && time.Now().Before(deadline); {
		keys, err := kv.ListKeys(ctx)
		if err != nil {
			return nil, err
		}
		for key := range keys.Keys() {
			entry, err := kv.Get(ctx, key)
			if err != nil {
				continue
			}
			if e, err := codecache.Decode(entry.Value()); err == nil && e.Execution == first.id {
				cached[e.Node] = e
			}
		}
		if len(cached) < len(aiNodes) {
			time.Sleep(100 * time.Millisecond)
		}
	}
	out := def
	for _, id := range aiNodes {
		ran, _ := first.nodes[id].AIMetadata["generated_code"].(string)
		code, language := ran, ""
		switch e := cached[id]; {
		case e == nil:
			fmt.Printf("note: the code cache holds nothing from run 1 for node %s; its pinned variant runs the code run 1 ran\n", id)
		case e.Code != ran:
			return nil, fmt.Errorf("node %s: the cache holds other code than run 1 ran:\n%s\n-- ran:\n%s", id, e.Code, ran)
		default:
			code, language = e.Code, e.Language
		}
		if out, err = workflow.PinCode(out, id, code, language); err != nil {
			return nil, fmt.Errorf("pin node %s: %w", id, err)
		}
	}
	out.Name += "-pinned"
	return out, nil
}

// checkOutcome says what is wrong with r's final context for ai-orders, ""
// when it is right (or the workflow is another one).
func checkOutcome(r *runRecord) string {
	fc := r.exec.FinalContext
	if _, ok := fc["final_total"]; !ok {
		return ""
	}
	final := float64(r.total)
	if r.total > 1000 {
		final *= 0.9
	}
	queue := "automatic"
	if final > 1000 {
		queue = "manual-review"
	}
	if got := number(fc["final_total"]); got < final-0.01 || got > final+0.01 || fc["queue"] != queue {
		return fmt.Sprintf("%s %s total %d: final_total %v queue %v, want %.2f %s", r.exec.WorkflowName, r.id, r.total, fc["final_total"], fc["queue"], final, queue)
	}
	return ""
}

// usage sums what runs cost and saved.
type usage struct {
	runs, requests, calls int
	tokensIn, tokensOut   int64
	cost                  float64
	byAgent               map[string]int
	hits, visits          map[string]int
	savedTokens           float64
	savedCost             float64
	savedCalls            float64
}

func sumUsage(runs []*runRecord, aiNodes []string) usage {
	u := usage{byAgent: map[string]int{}, hits: map[string]int{}, visits: map[string]int{}}
	for _, r := range runs {
		u.runs++
		u.requests += len(r.requests)
		for _, q := range r.requests {
			u.byAgent[q.Agent]++
		}
		u.calls += r.exec.ModelCalls
		u.cost += r.exec.CostUSD
		for _, n := range r.nodes {
			for _, st := range n.Steps {
				u.tokensIn += st.TokensInput
				u.tokensOut += st.TokensOutput
			}
		}
		for _, id := range aiNodes {
			n := r.nodes[id]
			if n == nil {
				continue
			}
			u.visits[id]++
			if hit, _ := n.AIMetadata["cache_hit"].(bool); hit {
				u.hits[id]++
				u.savedTokens += number(n.AIMetadata["tokens_saved"])
				u.savedCost += number(n.AIMetadata["cost_usd_saved"])
				u.savedCalls += number(n.AIMetadata["model_calls_saved"])
			}
		}
	}
	return u
}

func printModelUse(w io.Writer, aiNodes []string, first *runRecord, later, code []*runRecord) error {
	f, l, p := sumUsage([]*runRecord{first}, aiNodes), sumUsage(later, aiNodes), sumUsage(code, aiNodes)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(label string, a, b, c any) { fmt.Fprintf(tw, "%s\t%v\t%v\t%v\t\n", label, a, b, c) }
	fmt.Fprintf(tw, "MODEL USE (scripted server; chain of work)\tRUN 1\tRUNS 2-%d\tPINNED, %d RUNS\t\n", l.runs+1, p.runs)
	row("requests received by the scripted model server", f.requests, l.requests, p.requests)
	row("  of them input-analyzer / code-generator / output-validator", agents(f), agents(l), agents(p))
	row("model calls (executions' model_calls)", f.calls, l.calls, p.calls)
	row("tokens in / out (steps' tokens_input / tokens_output)", fmt.Sprintf("%d / %d", f.tokensIn, f.tokensOut),
		fmt.Sprintf("%d / %d", l.tokensIn, l.tokensOut), fmt.Sprintf("%d / %d", p.tokensIn, p.tokensOut))
	row("cost USD (executions' cost_usd)", usd(f.cost), usd(l.cost), usd(p.cost))
	for _, id := range aiNodes {
		row(fmt.Sprintf("cache hits of AI node %s (ai_metadata cache_hit)", id), fmt.Sprintf("%d/%d", f.hits[id], f.visits[id]),
			fmt.Sprintf("%d/%d", l.hits[id], l.visits[id]), "-")
	}
	row("saved, as ai_metadata reports: model calls", f.savedCalls, l.savedCalls, "-")
	row("  tokens (tokens_saved)", f.savedTokens, l.savedTokens, "-")
	row("  cost USD (cost_usd_saved)", usd(f.savedCost), usd(l.savedCost), "-")
	verdict := "met"
	if l.calls > 0 || l.requests > 0 {
		verdict = "NOT MET"
	}
	fmt.Fprintf(tw, "goal: 0 model calls after run 1\t\t%s\t\t\n", verdict)
	return tw.Flush()
}

func agents(u usage) string {
	return fmt.Sprintf("%d / %d / %d", u.byAgent[bus.AgentInputAnalyzer], u.byAgent[bus.AgentCodeGenerator], u.byAgent[bus.AgentOutputValidator])
}

func usd(v float64) string { return fmt.Sprintf("$%.6f", v) }

// goal is how far the median of an AI node on a hit may be from the
// median of the code node doing the same work .
const goal = 2 * time.Millisecond

// hitPhases are the steps of a hit, as ai_metadata.timings names them.
var hitPhases = []string{"cache_lookup", "code_validation", "code_execution", "output_validation"}

func printLatency(w io.Writer, aiNodes []string, hits, code []*runRecord) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "NODE LATENCY, ENTERED TO COMPLETED (chain of work execution_time)\tRUNS\tP50\tP90\tP50 - BASELINE\t\n")
	for _, id := range aiNodes {
		printNodeLatency(tw, id, hits, code)
	}
	fmt.Fprintln(tw)
	// Where a hit's time goes: each step as the agent timed it (ai_metadata
	// timings), and the rest, which is the engine and the bus: one command
	// and one result per step, each result a state update in KV.
	fmt.Fprintf(tw, "P50 OF EACH STEP (agent's own time; rest = engine and bus)\tRUNS\t%s\tREST\tTOTAL\t\n", strings.Join(hitPhases, "\t"))
	for _, id := range aiNodes {
		printHitSteps(tw, id, hits)
		printCodeSteps(tw, id, code)
	}
	return tw.Flush()
}

// cacheHit is r's last visit of node id when it was a cache hit, else nil.
func cacheHit(r *runRecord, id string) *chainstore.NodeDoc {
	n := r.nodes[id]
	if n == nil {
		return nil
	}
	if hit, _ := n.AIMetadata["cache_hit"].(bool); !hit {
		return nil
	}
	return n
}

// printNodeLatency prints the latency of AI node id on its cache hits
// beside the code node that runs the cached code, and whether the
// difference meets the goal.
func printNodeLatency(tw io.Writer, id string, hits, code []*runRecord) {
	var hit, pinned []time.Duration
	for _, r := range hits {
		if n := cacheHit(r, id); n != nil {
			hit = append(hit, ms(n.ExecutionTime))
		}
	}
	for _, r := range code {
		if n := r.nodes[id]; n != nil {
			pinned = append(pinned, ms(n.ExecutionTime))
		}
	}
	base := percentile(pinned, 0.5)
	fmt.Fprintf(tw, "%s: code node running the cached code (baseline)\t%d\t%s\t%s\t\t\n", id, len(pinned),
		round(base), round(percentile(pinned, 0.9)))
	if len(hit) == 0 {
		fmt.Fprintf(tw, "%s: AI node, cache hit\t0\t-\t-\tno hit to compare\t\n", id)
		return
	}
	diff := percentile(hit, 0.5) - base
	verdict := "met"
	if diff > goal {
		verdict = "not met"
	}
	fmt.Fprintf(tw, "%s: AI node, cache hit\t%d\t%s\t%s\t%+v (goal <= %s: %s)\t\n", id, len(hit),
		round(percentile(hit, 0.5)), round(percentile(hit, 0.9)), round(diff), goal, verdict)
}

// printHitSteps prints the p50 of each step of AI node id's cache hits,
// as ai_metadata timings has them, and of the rest of the node's time.
func printHitSteps(tw io.Writer, id string, hits []*runRecord) {
	steps := make([][]time.Duration, len(hitPhases))
	var rest, total []time.Duration
	for _, r := range hits {
		n := cacheHit(r, id)
		if n == nil {
			continue
		}
		timings, _ := n.AIMetadata["timings"].(map[string]any)
		var sum time.Duration
		for i, ph := range hitPhases {
			d := ms(number(timings[ph+"_ms"]))
			steps[i] = append(steps[i], d)
			sum += d
		}
		rest = append(rest, ms(n.ExecutionTime)-sum)
		total = append(total, ms(n.ExecutionTime))
	}
	cells := make([]string, len(hitPhases))
	for i := range steps {
		cells[i] = round(percentile(steps[i], 0.5)).String()
	}
	fmt.Fprintf(tw, "%s: AI node, cache hit\t%d\t%s\t%s\t%s\t\n", id, len(total), strings.Join(cells, "\t"),
		round(percentile(rest, 0.5)), round(percentile(total, 0.5)))
}

// printCodeSteps prints the baseline's row under printHitSteps': the p50
// of the pinned node's code execution and of the rest of its time.
func printCodeSteps(tw io.Writer, id string, code []*runRecord) {
	var exec, rest, total []time.Duration
	for _, r := range code {
		n := r.nodes[id]
		if n == nil {
			continue
		}
		var sum time.Duration
		for _, st := range n.Steps {
			sum += ms(st.ExecutionTimeMs)
		}
		exec = append(exec, sum)
		rest = append(rest, ms(n.ExecutionTime)-sum)
		total = append(total, ms(n.ExecutionTime))
	}
	fmt.Fprintf(tw, "%s: code node (baseline)\t%d\t-\t-\t%s\t-\t%s\t%s\t\n", id, len(total),
		round(percentile(exec, 0.5)), round(percentile(rest, 0.5)), round(percentile(total, 0.5)))
}

// loadAverage is the 1, 5 and 15 minute load averages (Linux), "?" elsewhere.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

func ms(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

func round(d time.Duration) time.Duration { return d.Round(10 * time.Microsecond) }

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p))]
}

// number reads a number the store decoded (float64, int32 or int64; a
// context's as json.Number).
func number(v any) float64 {
	switch n := v.(type) {
	case float64:
		return n
	case int32:
		return float64(n)
	case int64:
		return float64(n)
	case int:
		return float64(n)
	case json.Number:
		f, _ := n.Float64()
		return f
	}
	return 0
}
