package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	"github.com/novaflow/nova/services/nova/client"
	"github.com/novaflow/nova/services/nova/stack"
)

// BenchmarkWorkflow3NodesBreakdown runs the sequential benchmark with every
// module's spans recorded and splits each code node's time into the hops on
// its critical path: where the overhead outside the code goes. Recording spans
// costs a little, so its totals read slightly higher than
// BenchmarkWorkflow3Nodes'. Each program runs cold (bubblewrap and python3
// started for it).
func BenchmarkWorkflow3NodesBreakdown(b *testing.B) { benchmarkBreakdown(b, false) }

// BenchmarkWorkflow3NodesBreakdownWarm is the breakdown with the warm sandbox
// of nova dev (each program forked from a zygote): its programs take
// milliseconds, not tens, and the hops share the machine with a fork's
// teardown rather than bubblewrap's and an interpreter's.
func BenchmarkWorkflow3NodesBreakdownWarm(b *testing.B) { benchmarkBreakdown(b, true) }

func benchmarkBreakdown(b *testing.B, warm bool) {
	ctx := b.Context()
	def, err := workflow.Parse([]byte(benchWorkflow))
	if err != nil {
		b.Fatal(err)
	}
	spans := tracetest.NewInMemoryExporter()
	s, err := stack.Start(ctx, stack.Options{DataDir: b.TempDir(), SpanExporter: spans, Sandbox: stack.SandboxConfig(warm)})
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
	spans.Reset()

	var runs []benchRun
	for b.Loop() {
		start := time.Now()
		id := env.run(b)
		runs = append(runs, benchRun{id: id, start: start, end: time.Now()})
	}
	ids := make([]string, len(runs))
	for i, r := range runs {
		ids[i] = r.id
	}
	times := env.chainTimes(b, ids)
	hops, err := benchBreakdown(spans.GetSpans(), runs, times)
	if err != nil {
		b.Fatal(err)
	}

	overhead := benchMedian(benchColumn(times, func(n benchNodeTimes) float64 { return n.total - n.code }))
	var t strings.Builder
	fmt.Fprintf(&t, "medians in ms over %d code nodes: node total %.2f = code %.2f + overhead %.2f, of which on the critical path:\n",
		len(times), benchMedian(benchColumn(times, func(n benchNodeTimes) float64 { return n.total })),
		benchMedian(benchColumn(times, func(n benchNodeTimes) float64 { return n.code })), overhead)
	for _, h := range benchHops {
		fmt.Fprintf(&t, "  %-68s %6.2f\n", h.label, benchMedian(hops[h.key]))
	}
	start, end := benchMedian(hops["workflow-start"]), benchMedian(hops["workflow-end"])
	fmt.Fprintf(&t, "  per workflow: start (Run called -> first command published) %.2f, end (last result in hand -> Run returns) %.2f; engine KV CAS after each command publish, off the critical path: %.2f\n",
		start, end, benchMedian(hops["engine-after"]))
	fmt.Fprintf(&t, "  per step with the start and completion hops: overhead + (start + end) / %d = %.2f", len(benchCodeNodes),
		overhead+(start+end)/float64(len(benchCodeNodes)))
	b.Log(t.String())
}

// benchRun is one workflow as the client saw it.
type benchRun struct {
	id         string
	start, end time.Time
}

func benchColumn(ts []benchNodeTimes, f func(benchNodeTimes) float64) []float64 {
	out := make([]float64, len(ts))
	for i, t := range ts {
		out[i] = f(t)
	}
	return out
}

var benchHops = []struct{ key, label string }{
	{"engine-before", "engine: event in hand -> ExecuteCode publish (KV get, 2 fact publishes)"},
	{"publish-cmd", "engine: publish ExecuteCode (JetStream ack round trip)"},
	{"to-sandbox", "bus: command published -> sandbox handler starts"},
	{"sandbox-service", "sandbox: handler time outside the code's run time"},
	{"publish-result", "sandbox: publish CodeExecuted (JetStream ack round trip)"},
	{"to-engine", "bus: result published -> engine handler starts"},
}

// benchBreakdown finds, for every code node of the runs, the spans of its hops by
// their message ids (the ids the engine derives from the step).
func benchBreakdown(spans tracetest.SpanStubs, runs []benchRun, times []benchNodeTimes) (map[string][]float64, error) {
	code := map[string]float64{}
	for _, t := range times {
		code[t.step] = t.code
	}
	bySpanID := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		bySpanID[s.SpanContext.SpanID().String()] = s
	}
	// byKey holds "publish <message id>" and "<consumer> <message id>" spans;
	// handlerOf maps a published message id to the handler that published it.
	byKey := map[string]tracetest.SpanStub{}
	handlerOf := map[string]tracetest.SpanStub{}
	for _, s := range spans {
		var msgID string
		for _, a := range s.Attributes {
			if a.Key == "messaging.message.id" {
				msgID = a.Value.AsString()
			}
		}
		switch {
		case strings.HasPrefix(s.Name, "publish "):
			byKey["publish "+msgID] = s
			if parent, ok := bySpanID[s.Parent.SpanID().String()]; ok {
				handlerOf[msgID] = parent
			}
		case strings.Contains(s.Name, " handle "):
			consumer, _, _ := strings.Cut(s.Name, " ")
			byKey[consumer+" "+msgID] = s
		}
	}
	between := func(a, b time.Time) float64 { return benchMS(b.Sub(a)) }
	hops := map[string][]float64{}
	add := func(k string, v float64) { hops[k] = append(hops[k], v) }
	for _, run := range runs {
		for _, node := range benchCodeNodes {
			step := fmt.Sprintf("%s/%s/1/1", run.id, node)
			pubCmd, ok1 := byKey["publish "+step+"/cmd"]
			engineIn, ok2 := handlerOf[step+"/cmd"]
			sandbox, ok3 := byKey["sandbox "+step+"/cmd"]
			pubRes, ok4 := byKey["publish "+step+"/result"]
			engineRes, ok5 := byKey["graph-engine-results "+step+"/result"]
			if !(ok1 && ok2 && ok3 && ok4 && ok5) {
				return nil, fmt.Errorf("spans of step %s incomplete: %v %v %v %v %v", step, ok1, ok2, ok3, ok4, ok5)
			}
			add("engine-before", between(engineIn.StartTime, pubCmd.StartTime))
			add("publish-cmd", between(pubCmd.StartTime, pubCmd.EndTime))
			add("engine-after", between(pubCmd.EndTime, engineIn.EndTime))
			add("to-sandbox", between(pubCmd.EndTime, sandbox.StartTime))
			add("sandbox-service", between(sandbox.StartTime, pubRes.StartTime)-code[run.id+"/"+node])
			add("publish-result", between(pubRes.StartTime, pubRes.EndTime))
			add("to-engine", between(pubRes.EndTime, engineRes.StartTime))
			switch node {
			case benchCodeNodes[0]:
				add("workflow-start", between(run.start, pubCmd.StartTime))
			case benchCodeNodes[len(benchCodeNodes)-1]:
				add("workflow-end", between(engineRes.StartTime, run.end))
			}
		}
	}
	return hops, nil
}
