package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/novaflow/nova/pkg/telemetry"
)

func TestLogsCarryTraceIDs(t *testing.T) {
	var buf bytes.Buffer
	exp := tracetest.NewInMemoryExporter()
	tel, err := telemetry.Setup(context.Background(), "graph-engine",
		telemetry.WithSpanExporter(exp), telemetry.WithLog(&buf, slog.LevelInfo, true))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())

	ctx, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "work")
	tel.Logger.InfoContext(ctx, "node dispatched", "node", "extract")
	span.End()

	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	if rec["trace_id"] != span.SpanContext().TraceID().String() || rec["service"] != "graph-engine" || rec["msg"] != "node dispatched" {
		t.Errorf("log record %v lacks trace id, service or static message", rec)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("exported %d spans, want 1", len(spans))
	}
	var service string
	for _, kv := range spans[0].Resource.Attributes() {
		if kv.Key == "service.name" {
			service = kv.Value.AsString()
		}
	}
	if service != "graph-engine" {
		t.Errorf("span resource service.name = %q", service)
	}
}

// TestWithoutExporterSpansCarryContextOnly: with nothing to export to, a
// root span starts a sampled trace, a span started inside it and one started
// from its traceparent (the next hop) carry the same trace, nothing records,
// and the logs carry the trace id.
func TestWithoutExporterSpansCarryContextOnly(t *testing.T) {
	var buf bytes.Buffer
	tel, err := telemetry.Setup(context.Background(), "graph-engine", telemetry.WithLog(&buf, slog.LevelInfo, true))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	if _, ok := tel.TracerProvider.(telemetry.ContextOnly); !ok {
		t.Fatalf("tracer provider without an exporter is %T, want telemetry.ContextOnly", tel.TracerProvider)
	}
	tracer := tel.TracerProvider.Tracer("test")

	ctx, root := tracer.Start(context.Background(), "handle")
	sc := root.SpanContext()
	if !sc.IsValid() || !sc.IsSampled() || root.IsRecording() {
		t.Fatalf("root span: context %v valid %v sampled %v, recording %v; want a valid sampled context, not recording",
			sc, sc.IsValid(), sc.IsSampled(), root.IsRecording())
	}
	_, inner := tracer.Start(ctx, "publish")
	if !inner.SpanContext().Equal(sc) || inner.IsRecording() {
		t.Errorf("span inside the root carries %v (recording %v), want the root's %v", inner.SpanContext(), inner.IsRecording(), sc)
	}

	carrier := propagation.MapCarrier{}
	propagation.TraceContext{}.Inject(ctx, carrier)
	if want := "00-" + sc.TraceID().String() + "-" + sc.SpanID().String() + "-01"; carrier["traceparent"] != want {
		t.Errorf("traceparent %q, want %q", carrier["traceparent"], want)
	}
	next := propagation.TraceContext{}.Extract(context.Background(), carrier)
	_, hop := tracer.Start(next, "next hop")
	if hop.SpanContext().TraceID() != sc.TraceID() {
		t.Errorf("the next hop's trace %s, want %s", hop.SpanContext().TraceID(), sc.TraceID())
	}

	_, other := tracer.Start(context.Background(), "handle")
	if other.SpanContext().TraceID() == sc.TraceID() || other.SpanContext().SpanID() == sc.SpanID() {
		t.Errorf("two roots share ids: %v and %v", other.SpanContext(), sc)
	}

	tel.Logger.InfoContext(ctx, "node dispatched")
	var rec map[string]any
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatalf("log line %q: %v", buf.String(), err)
	}
	if rec["trace_id"] != sc.TraceID().String() || rec["span_id"] != sc.SpanID().String() {
		t.Errorf("log record %v, want trace_id %s and span_id %s", rec, sc.TraceID(), sc.SpanID())
	}
}

func TestMetricsAreServedAsPrometheusText(t *testing.T) {
	tel, err := telemetry.Setup(context.Background(), "sandbox", telemetry.WithLog(&bytes.Buffer{}, slog.LevelInfo, false))
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Shutdown(context.Background())
	c, err := tel.MeterProvider.Meter("test").Int64Counter("nova.sandbox.executions")
	if err != nil {
		t.Fatal(err)
	}
	c.Add(context.Background(), 3)
	srv := httptest.NewServer(promhttp.HandlerFor(tel.Registry, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	if !strings.Contains(body.String(), "nova_sandbox_executions_total") || !strings.Contains(body.String(), "go_goroutines") {
		t.Errorf("metrics page lacks the counter or runtime metrics:\n%.2000s", body.String())
	}
}

func TestSpansReachAnOTLPEndpoint(t *testing.T) {
	type post struct{ path, contentType string }
	got := make(chan post, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- post{r.URL.Path, r.Header.Get("Content-Type")}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	tel, err := telemetry.Setup(context.Background(), "audit",
		telemetry.WithOTLPEndpoint(srv.URL), telemetry.WithLog(&bytes.Buffer{}, slog.LevelInfo, false))
	if err != nil {
		t.Fatal(err)
	}
	_, span := tel.TracerProvider.Tracer("test").Start(context.Background(), "audit record")
	span.End()
	if err := tel.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-got:
		if p.path != "/v1/traces" || p.contentType != "application/x-protobuf" {
			t.Errorf("posted to %s as %s", p.path, p.contentType)
		}
	default:
		t.Fatal("no spans were posted")
	}
}
