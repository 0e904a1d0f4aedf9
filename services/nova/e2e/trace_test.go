package e2e

import (
	"slices"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/services/nova/stack"
)

// TestOneWorkflowIsOneTrace: every hop of a workflow, across the graph
// engine, the sandbox and the audit service, continues the producer's trace.
func TestOneWorkflowIsOneTrace(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	e := startEnv(t, func(o *stack.Options) { o.SpanExporter = spans })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("e2e-producer"))))
	e.connect(bus.WithTracerProvider(tp))

	def := routeWorkflow(t, `context["branch_decision"] = "high"`)
	ctx, root := tp.Tracer("e2e").Start(e.ctx, "run workflow")
	wc, err := e.client.Run(ctx, def, nil)
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != "succeeded" {
		t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
	}
	// Every consumer has finished (and so ended its spans).
	for _, c := range []struct{ stream, durable string }{
		{bus.StreamCommands, bus.ConsumerEngineCommands}, {bus.StreamCommands, bus.AgentSandbox},
		{bus.StreamEvents, bus.ConsumerEngineResults}, {bus.StreamEvents, "audit"},
	} {
		if err := e.client.WaitConsumerIdle(e.ctx, c.stream, c.durable); err != nil {
			t.Fatal(err)
		}
	}
	// Read before the stack closes: shutting down a provider resets the exporter.
	all := spans.GetSpans()

	traceID := root.SpanContext().TraceID()
	inTrace := map[trace.SpanID]tracetest.SpanStub{}
	services := map[string]int{}
	var publishes, handles int
	for _, s := range all {
		service := serviceName(s)
		messaging := strings.HasPrefix(s.Name, "publish ") || strings.Contains(s.Name, " handle ")
		ofExecution := slices.Contains(s.Attributes, attribute.String("execution.id", wc.ExecutionId))
		if s.SpanContext.TraceID() != traceID {
			// This stack ran only this workflow: every hop belongs to it.
			if messaging || ofExecution {
				t.Errorf("span %q of %s is in trace %s, want the workflow's trace %s", s.Name, service, s.SpanContext.TraceID(), traceID)
			}
			continue
		}
		inTrace[s.SpanContext.SpanID()] = s
		services[service]++
		if strings.HasPrefix(s.Name, "publish ") {
			publishes++
		}
		if strings.Contains(s.Name, " handle ") {
			handles++
		}
	}
	for _, s := range inTrace {
		if s.SpanContext.SpanID() == root.SpanContext().SpanID() {
			if s.Parent.IsValid() {
				t.Errorf("root span has parent %s", s.Parent.SpanID())
			}
			continue
		}
		if _, ok := inTrace[s.Parent.SpanID()]; !ok {
			t.Errorf("span %q of %s has parent %s, which is not in the trace: the chain is broken", s.Name, serviceName(s), s.Parent.SpanID())
		}
	}
	for _, svc := range []string{"e2e-producer", stack.GraphEngine, stack.Sandbox, stack.Audit} {
		if services[svc] == 0 {
			t.Errorf("no span of service %s in the trace; spans by service: %v", svc, services)
		}
	}
	// start -> route -> high_path -> done: the start, two commands and two
	// results are handled by engine and sandbox, and each fact by the audit.
	if publishes < 5 || handles < 5 {
		t.Errorf("%d publish and %d handle spans in the trace, want at least 5 of each", publishes, handles)
	}
	var sandboxRuns int
	for _, s := range inTrace {
		if serviceName(s) == stack.Sandbox && strings.Contains(s.Name, " handle ") &&
			slices.Contains(s.Attributes, attribute.String("execution.id", wc.ExecutionId)) {
			sandboxRuns++
		}
	}
	if sandboxRuns != 2 {
		t.Errorf("%d sandbox handle spans name the execution, want 2 (route and high_path)", sandboxRuns)
	}
}

func serviceName(s tracetest.SpanStub) string {
	if s.Resource == nil {
		return ""
	}
	v, _ := s.Resource.Set().Value(semconv.ServiceNameKey)
	return v.AsString()
}

// TestBranchesOverlapInOneTrace: the sandbox runs of a fan-out's branches
// are spans of the workflow's one trace, and they overlap in time.
func TestBranchesOverlapInOneTrace(t *testing.T) {
	spans := tracetest.NewInMemoryExporter()
	e := startEnv(t, func(o *stack.Options) {
		o.SpanExporter = spans
		o.Sandbox = stack.SandboxConfig(false)
		o.Sandbox.Workers = 3 // the three branches' programs at once
	})
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(spans),
		sdktrace.WithResource(resource.NewSchemaless(semconv.ServiceName("e2e-producer"))))
	e.connect(bus.WithTracerProvider(tp))
	def := parse(t, `
name: traced-fan-out
nodes:
  - {id: start, type: start}
  - {id: a, type: action, code: "import time\ntime.sleep(0.3)\ncontext['a'] = 1"}
  - {id: b, type: action, code: "import time\ntime.sleep(0.3)\ncontext['b'] = 1"}
  - {id: c, type: action, code: "import time\ntime.sleep(0.3)\ncontext['c'] = 1"}
  - {id: join, type: join}
  - {id: done, type: end}
edges:
  - {from: start, to: a}
  - {from: start, to: b}
  - {from: start, to: c}
  - {from: a, to: join}
  - {from: b, to: join}
  - {from: c, to: join}
  - {from: join, to: done}
`)
	ctx, root := tp.Tracer("e2e").Start(e.ctx, "run workflow")
	wc, err := e.client.Run(ctx, def, nil)
	root.End()
	if err != nil {
		t.Fatal(err)
	}
	if wc.Status != "succeeded" {
		t.Fatalf("status %q, error %q; want succeeded", wc.Status, wc.Error)
	}
	if err := e.client.WaitConsumerIdle(e.ctx, bus.StreamCommands, bus.AgentSandbox); err != nil {
		t.Fatal(err)
	}
	var runs []tracetest.SpanStub
	for _, s := range spans.GetSpans() {
		if serviceName(s) == stack.Sandbox && strings.Contains(s.Name, " handle ") &&
			slices.Contains(s.Attributes, attribute.String("execution.id", wc.ExecutionId)) {
			runs = append(runs, s)
		}
	}
	if len(runs) != 3 {
		t.Fatalf("%d sandbox handle spans name the execution, want 3 (a, b, c)", len(runs))
	}
	latestStart, earliestEnd := runs[0].StartTime, runs[0].EndTime
	for _, s := range runs {
		if s.SpanContext.TraceID() != root.SpanContext().TraceID() {
			t.Errorf("sandbox span in trace %s, want the workflow's %s", s.SpanContext.TraceID(), root.SpanContext().TraceID())
		}
		if s.StartTime.After(latestStart) {
			latestStart = s.StartTime
		}
		if s.EndTime.Before(earliestEnd) {
			earliestEnd = s.EndTime
		}
	}
	if !latestStart.Before(earliestEnd) {
		t.Errorf("the branches' sandbox spans do not overlap: the last starts at %v, the first ends at %v", latestStart, earliestEnd)
	}
}
