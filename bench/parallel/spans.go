package main

import (
	"context"
	"fmt"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/novaflow/nova/bench/loadgen"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// engineSpan is the graph engine's span of one event it applies (the
// transition: read the state, apply, publish, store).
const engineSpan = "graph-engine advance"

// benchEngineSpans measures the graph engine's own time per map item: its
// spans of the map's execution, summed, over the items; beside it the
// spans of as many one-node executions, per execution.
func benchEngineSpans(ctx context.Context, cfg config) error {
	spans, b, c, stop, err := spanStack(ctx, cfg, "benchparallel-spans")
	if err != nil {
		return err
	}
	defer stop()
	xs := make([]int, cfg.items)
	for i := range xs {
		xs[i] = i
	}
	mapDef := loadgen.Workflow(fmt.Sprintf(`
name: bench-map
nodes:
  - {id: start, type: start}
  - {id: each, type: map, items: xs, concurrency: %d, output: ys, code: '%s'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, 1, itemCode))
	// Warm the sandbox's zygotes first.
	if _, err := c.Run(ctx, mapDef, map[string]any{"xs": xs[:32]}); err != nil {
		return err
	}
	spans.Reset()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
	}
	wc, err := c.Run(ctx, mapDef, map[string]any{"xs": xs})
	if cfg.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if err != nil {
		return err
	}
	if wc.Status != "succeeded" {
		return fmt.Errorf("map: %s %s", wc.Status, wc.Error)
	}
	mapTotal, mapCount := engineTime(spans, wc.ExecutionId)

	spans.Reset()
	one := loadgen.Workflow(fmt.Sprintf(`
name: bench-one
nodes:
  - {id: start, type: start}
  - {id: each, type: action, code: '%s'}
  - {id: done, type: end}
edges: [{from: start, to: each}, {from: each, to: done}]
`, strings.ReplaceAll(itemCode, `context["item"]`, `context["n"]`)))
	load := loadgen.NewLoad(b, one, cfg.items)
	load.Run(ctx, 1)
	if int(load.Completed.Load()) != cfg.items {
		return fmt.Errorf("one-node executions: %d of %d completed", load.Completed.Load(), cfg.items)
	}
	oneTotal, oneCount := engineTime(spans, "")

	per := func(d time.Duration, n int) string {
		return strconv.FormatFloat(float64(d.Microseconds())/1000/float64(n), 'f', 2, 64) + " ms"
	}
	fmt.Printf("engine time (its spans: each event it applies), in-process stack, %d items one at a time\n", cfg.items)
	fmt.Printf("  map node                   %s per item (%d events applied, %s each)\n", per(mapTotal, cfg.items), mapCount, per(mapTotal, mapCount))
	fmt.Printf("  one execution each (base)  %s per execution (%d events applied, %s each)\n\n", per(oneTotal, cfg.items), oneCount, per(oneTotal, oneCount))
	return nil
}

// engineTime sums the engine's spans of execution id ("": of every
// execution).
func engineTime(spans *tracetest.InMemoryExporter, id string) (time.Duration, int) {
	var total time.Duration
	n := 0
	for _, sp := range spans.GetSpans() {
		if sp.Name != engineSpan && sp.Name != "graph-engine start" {
			continue
		}
		match := id == ""
		for _, a := range sp.Attributes {
			if string(a.Key) == "execution.id" && a.Value.AsString() == id {
				match = true
			}
		}
		if match {
			total += sp.EndTime.Sub(sp.StartTime)
			n++
		}
	}
	return total, n
}

// spanStack starts a stack in this process whose spans go to spans, and a
// client of it named name; stop ends them.
func spanStack(ctx context.Context, cfg config, name string) (spans *tracetest.InMemoryExporter, b *bus.Bus, c *client.Client, stop func(), err error) {
	dir, err := os.MkdirTemp("", name+"-")
	if err != nil {
		return nil, nil, nil, nil, err
	}
	spans = tracetest.NewInMemoryExporter()
	sb := stack.SandboxConfig(true)
	sb.Workers = cfg.workers
	s, err := stack.Start(ctx, stack.Options{DataDir: dir, SpanExporter: spans, Sandbox: sb})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, nil, fmt.Errorf("start stack: %w", err)
	}
	if b, err = s.Connect(ctx, name); err != nil {
		s.Close()
		os.RemoveAll(dir)
		return nil, nil, nil, nil, err
	}
	return spans, b, client.New(b, nil), func() {
		b.Close()
		s.Close()
		os.RemoveAll(dir)
	}, nil
}
