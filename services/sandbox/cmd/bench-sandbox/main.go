// Command bench-sandbox measures what the engine sees of the sandbox: the wall
// time of one Run (context in, result out) and the executions per second with
// concurrent callers, next to a baseline measured in the same run - a plain
// python3 -c (or node -e) subprocess without any isolation.
//
//	go run ./cmd/bench-sandbox [-n 100] [-callers 2] [-zygotes 2]
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
	"os/exec"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/services/sandbox/jsrunner"
	"github.com/novaflow/nova/services/sandbox/runner"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench-sandbox:", err)
		os.Exit(1)
	}
}

type options struct {
	n, callers, zygotes int
	light               int
	python, node        string
	cases               string
	preload             string
}

// sample is what one case measured.
type sample struct {
	p50, p99 time.Duration
	perSec   float64
	// cpu is the CPU time of every process the executions started (bwrap,
	// the interpreters and what they forked), per execution.
	cpu time.Duration
	// faults is their minor page faults per execution.
	faults float64
}

func run() error {
	o := parseFlags()
	ctx := context.Background()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	var preload []string
	if o.preload != "" {
		preload = strings.Split(o.preload, ",")
	}
	r, err := runner.New(runner.Config{Python: o.python, Zygotes: o.zygotes, LightZygotes: o.light, Preload: preload, MaxOutputBytes: 64 << 10, Logger: quiet})
	if err != nil {
		return err
	}
	defer r.Close()
	if err := awaitWarm(r); err != nil {
		return err
	}
	if err := printTable(o, benchCases(ctx, o, r, quiet)); err != nil {
		return err
	}
	fmt.Printf("load average (1, 5, 15 min) at the end: %s; other work on the machine slows sandbox and baseline alike.\n", loadAverage())
	fmt.Println("p50/p99: one caller, Run's wall time including the context in and the result out; ratios are sandbox/baseline (p50: lower is better, exec/s: higher is better).")
	fmt.Println("CPU/exec: user and system time of every process the executions started (bwrap, zygotes and the processes they fork, interpreters and what they started), over the latency and throughput runs, per execution; not the time of this Go process.")
	fmt.Println("faults/exec: minor page faults of those processes per execution (a fork's copy-on-write faults among them).")
	fmt.Println("baseline: a plain interpreter subprocess (python3 -c / node -e) with no isolation, measured in this run.")
	return nil
}

func parseFlags() options {
	var o options
	flag.IntVar(&o.n, "n", 100, "executions per measurement")
	flag.IntVar(&o.callers, "callers", 2, "concurrent callers for the executions-per-second measurement")
	flag.IntVar(&o.zygotes, "zygotes", 2, "warm zygotes")
	flag.IntVar(&o.light, "light", 0, "light zygotes, for programs that import only standard modules (0: the runner's default, -1: none)")
	flag.StringVar(&o.python, "python", "/usr/bin/python3", "python interpreter (sandbox and baseline)")
	flag.StringVar(&o.node, "node", "/usr/bin/node", "node (JavaScript sandbox and baseline)")
	flag.StringVar(&o.cases, "cases", "abcd", "the cases to run, by their letters")
	flag.StringVar(&o.preload, "preload", "", "comma-separated modules the zygotes import (default the runner's)")
	flag.Parse()
	return o
}

// awaitWarm waits until every zygote of r is ready, so that the cases
// measure warm runs.
func awaitWarm(r *runner.Runner) error {
	deadline := time.Now().Add(time.Minute)
	for r.WarmReady() < r.WarmSize() {
		if time.Now().After(deadline) {
			return errors.New("the warm zygotes did not become ready within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// benchCase is one row of the table: a program in the sandbox and the same
// work in a plain interpreter, or why the case cannot run here.
type benchCase struct {
	name        string
	sandbox     func() error
	baseline    []string // argv
	unavailable string
}

func benchCases(ctx context.Context, o options, r *runner.Runner, quiet *slog.Logger) []benchCase {
	// pyRun is a warm run of code, which must end with the error kind
	// wantKind, or succeed when it is "".
	pyRun := func(code, wantKind string) func() error {
		want := runner.StatusSuccess
		if wantKind != "" {
			want = runner.StatusError
		}
		return func() error {
			res, err := r.Run(ctx, runner.Request{Code: code, Context: jsonvalue.Object{"input": json.RawMessage(`"value"`)}})
			if err == nil && (res.Status != want || res.ErrorKind != wantKind || !res.Warm) {
				err = fmt.Errorf("run: status %s, %s %s (warm %v), want %s %s", res.Status, res.ErrorKind, res.Error, res.Warm, want, wantKind)
			}
			return err
		}
	}
	cases := []benchCase{
		{
			name:     "(a) python context['x'] = 1",
			sandbox:  pyRun("context['x'] = 1", ""),
			baseline: []string{o.python, "-c", "context = {'input': 'value'}\ncontext['x'] = 1"},
		},
		{
			name:     "(b) python import pandas, fitz",
			sandbox:  pyRun("import pandas, fitz\ncontext['rows'] = len(pandas.DataFrame({'a': [1, 2]}))\ncontext['pdf'] = fitz.open().is_pdf", ""),
			baseline: []string{o.python, "-c", "import pandas, fitz\nrows = len(pandas.DataFrame({'a': [1, 2]}))\npdf = fitz.open().is_pdf"},
		},
	}
	js, jsErr := javaScript(ctx, o, quiet)
	if jsErr != nil {
		cases = append(cases, benchCase{name: "(c) javascript context.x = 1", unavailable: jsErr.Error()})
	} else {
		cases = append(cases, benchCase{name: "(c) javascript context.x = 1", sandbox: js,
			baseline: []string{o.node, "-e", "const context = {input: 'value'}; context.x = 1"}})
	}
	return append(cases, benchCase{
		// A failing program: its error and traceback are the report.
		name:    "(d) python context['x'] = {}['missing'] (fails)",
		sandbox: pyRun("context['x'] = {}['missing']", "code_error"),
		baseline: []string{o.python, "-c", "import traceback\ncontext = {'input': 'value'}\n" +
			"try:\n    context['x'] = {}['missing']\nexcept Exception:\n    traceback.format_exc()"},
	})
}

// printTable measures the cases o.cases selects and prints a row for each.
func printTable(o options, cases []benchCase) error {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "case\tp50\tp99\texec/s (%d callers)\tCPU/exec\tfaults/exec\tbaseline p50\tbaseline p99\tbaseline exec/s\tbaseline CPU/exec\tp50 ratio\texec/s ratio\tCPU ratio\t\n", o.callers)
	for _, c := range cases {
		if !strings.Contains(o.cases, c.name[1:2]) {
			continue
		}
		if c.unavailable != "" {
			fmt.Fprintf(tw, "%s\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\tn/a\t\n", c.name)
			fmt.Fprintf(os.Stderr, "%s: %s\n", c.name, c.unavailable)
			continue
		}
		s, err := measure(o, c.sandbox)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		b, err := measure(o, func() error { return exec.Command(c.baseline[0], c.baseline[1:]...).Run() })
		if err != nil {
			return fmt.Errorf("%s baseline: %w", c.name, err)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.0f\t%s\t%.0f\t%s\t%s\t%.0f\t%s\t%.2fx\t%.2fx\t%.2fx\t\n", c.name,
			ms(s.p50), ms(s.p99), s.perSec, ms(s.cpu), s.faults, ms(b.p50), ms(b.p99), b.perSec, ms(b.cpu),
			float64(s.p50)/float64(b.p50), s.perSec/b.perSec, float64(s.cpu)/float64(b.cpu))
	}
	tw.Flush()
	return nil
}

// javaScript returns the JavaScript case. The JavaScript runner is the package
// jsrunner; when it cannot run here (node or its libraries missing) the case
// is reported n/a with the reason.
func javaScript(ctx context.Context, o options, logger *slog.Logger) (func() error, error) {
	if _, err := exec.LookPath(o.node); err != nil {
		return nil, fmt.Errorf("node not found: %w", err)
	}
	r, err := jsrunner.New(jsrunner.Config{Node: o.node, MaxOutputBytes: 64 << 10, Logger: logger})
	if err != nil {
		return nil, err
	}
	run := func() error {
		res, err := r.Run(ctx, runner.Request{Language: "javascript", Code: "context.x = 1", Context: jsonvalue.Object{"input": json.RawMessage(`"value"`)}})
		if err == nil && res.Status != runner.StatusSuccess {
			err = fmt.Errorf("run: %s %s", res.ErrorKind, res.Error)
		}
		return err
	}
	if err := run(); err != nil {
		return nil, err
	}
	return run, nil
}

// measure runs f n times in a row for the latencies, then n times from
// o.callers goroutines for the throughput, after a short warm-up; the CPU of
// the processes started meanwhile is measured over both.
func measure(o options, f func() error) (sample, error) {
	for range min(10, o.n) {
		if err := f(); err != nil {
			return sample{}, err
		}
	}
	meter, err := startMeter()
	if err != nil {
		return sample{}, err
	}
	durations := make([]time.Duration, 0, o.n)
	for range o.n {
		start := time.Now()
		if err := f(); err != nil {
			return sample{}, err
		}
		durations = append(durations, time.Since(start))
	}
	slices.Sort(durations)
	s := sample{
		p50: durations[len(durations)/2],
		p99: durations[min(len(durations)-1, len(durations)*99/100)],
	}

	var left atomic.Int64
	left.Store(int64(o.n))
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	start := time.Now()
	for range o.callers {
		wg.Go(func() {
			for left.Add(-1) >= 0 {
				if err := f(); err != nil {
					mu.Lock()
					firstErr = cmp(firstErr, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return sample{}, firstErr
	}
	s.perSec = float64(o.n) / time.Since(start).Seconds()
	used, err := meter.stop()
	if err != nil {
		return sample{}, err
	}
	s.cpu = used.cpu / time.Duration(2*o.n)
	s.faults = float64(used.faults) / float64(2*o.n)
	return s, nil
}

func cmp(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000)
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
