package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/valueref"
)

// resultsDef is a map whose items each return size characters (0: a
// number).
func resultsDef(size, concurrency int) string {
	code := `context["result"] = context["item"] * 2`
	if size > 0 {
		code = fmt.Sprintf(`context["result"] = str(context["item"]) + "x" * %d`, size)
	}
	return fmt.Sprintf(`
name: bench-results-%d
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: %d, output: ys, code: '%s'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, size, concurrency, code)
}

// benchResults runs a map of cfg.items items returning cfg.resultBytes
// each beside one returning a number each: on nova dev, its peak resident
// memory (VmHWM, reset before each map) and CPU per item; in this process,
// the graph engine's time per item (its spans).
func benchResults(d *dev, cfg config) error {
	xs := make([]string, cfg.items)
	for i := range xs {
		xs[i] = strconv.Itoa(i)
	}
	input := `{"xs": [` + strings.Join(xs, ",") + `]}`
	pid := d.proc.Pid()
	fmt.Printf("a map of %d items at concurrency %d on nova dev: results of %d bytes each (%.0f MB in all) beside a number each\n",
		cfg.items, cfg.concurrency, cfg.resultBytes, float64(cfg.items*cfg.resultBytes)/1e6)
	for _, size := range []int{0, cfg.resultBytes} {
		def := loadgen.Workflow(resultsDef(size, cfg.concurrency))
		if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
			return fmt.Errorf("reset nova dev's peak memory: %w", err)
		}
		rss0 := rssOf(pid)
		cpu0 := cpuOf(pid)
		wc, took, err := runOnce(d.running, d.b, def, input)
		if err != nil {
			return err
		}
		if wc.Status != "succeeded" {
			return fmt.Errorf("map of results of %d bytes: %s %s", size, wc.Status, wc.Error)
		}
		if err := checkResults(d.running, d, wc.Context.GetRaw(), cfg.items, size); err != nil {
			return err
		}
		cpu := cpuOf(pid) - cpu0
		label := "a number each (base)"
		if size > 0 {
			label = fmt.Sprintf("%d bytes each", size)
		}
		fmt.Printf("  %-22s %6.1f s, nova dev CPU %.2f ms per item, RSS %.0f MiB before, peak %.0f MiB during\n",
			label, took.Seconds(), float64(cpu.Microseconds())/1000/float64(cfg.items), rss0, peakRSS(pid))
	}
	return benchResultSpans(d.running, cfg)
}

// checkResults checks that the map's output holds items results of the
// size asked for (a large output is a reference to the value store).
func checkResults(ctx context.Context, d *dev, raw []byte, items, size int) error {
	out, err := jsonvalue.Decode(raw)
	if err != nil {
		return err
	}
	obj, _ := out.(map[string]any)
	ys, ok := obj["ys"]
	if ref, isRef := valueref.AsRef(ys); isRef {
		values, err := valueref.Open(ctx, d.b.JetStream(), 0, 0)
		if err != nil {
			return err
		}
		text, err := values.Get(ctx, ref)
		if err != nil {
			return fmt.Errorf("the map's output: %w", err)
		}
		if ys, err = jsonvalue.Decode(text); err != nil {
			return err
		}
		ok = true
	}
	l, _ := ys.([]any)
	if !ok || len(l) != items {
		return fmt.Errorf("the map's output has %d results, want %d", len(l), items)
	}
	if s, _ := l[items-1].(string); size > 0 && len(s) < size {
		return fmt.Errorf("the last result has %d bytes, want %d", len(s), size)
	}
	return nil
}

// peakRSS is process pid's peak resident set since its last reset, in MiB.
func peakRSS(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kib, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kib / 1024
		}
	}
	return 0
}

// benchResultSpans is the engine's time per item of the two maps, from its
// spans, on a stack in this process.
func benchResultSpans(ctx context.Context, cfg config) error {
	spans, _, c, stop, err := spanStack(ctx, cfg, "benchparallel-results")
	if err != nil {
		return err
	}
	defer stop()
	xs := make([]int, cfg.items)
	for i := range xs {
		xs[i] = i
	}
	fmt.Printf("engine time per item (its spans), in-process stack:\n")
	for _, size := range []int{0, 0, cfg.resultBytes} { // the first warms the sandbox
		def := loadgen.Workflow(resultsDef(size, cfg.concurrency))
		spans.Reset()
		start := time.Now()
		wc, err := c.Run(ctx, def, map[string]any{"xs": xs})
		if err != nil {
			return err
		}
		if wc.Status != "succeeded" {
			return fmt.Errorf("map of results of %d bytes: %s %s", size, wc.Status, wc.Error)
		}
		total, n := engineTime(spans, wc.ExecutionId)
		label := "a number each (base)"
		if size > 0 {
			label = fmt.Sprintf("%d bytes each", size)
		}
		fmt.Printf("  %-22s %.2f ms per item (%d events applied), %.1f s\n", label,
			float64(total.Microseconds())/1000/float64(cfg.items), n, time.Since(start).Seconds())
	}
	fmt.Println()
	return nil
}
