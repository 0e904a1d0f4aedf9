// Package telemetry sets up OpenTelemetry traces and metrics and a slog
// logger that carries trace ids, for one NOVA service.
package telemetry

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.26.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
	"go.opentelemetry.io/otel/trace/noop"
)

// Telemetry holds one service's providers. Pass TracerProvider and
// MeterProvider to the components that emit; Shutdown flushes them.
type Telemetry struct {
	Service        string
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// Registry holds the service's Prometheus metrics, served on /metrics.
	Registry *prometheus.Registry
	Logger   *slog.Logger

	shutdown []func(context.Context) error
}

type options struct {
	exporters []sdktrace.SpanExporter
	otlp      string
	logOut    io.Writer
	logLevel  slog.Level
	logJSON   bool
	registry  *prometheus.Registry
}

// Option configures Setup.
type Option func(*options)

// WithSpanExporter adds an exporter (tests use an in-memory one); it is
// called synchronously so tests see spans as soon as they end.
func WithSpanExporter(e sdktrace.SpanExporter) Option {
	return func(o *options) { o.exporters = append(o.exporters, e) }
}

// WithOTLPEndpoint exports spans over OTLP/HTTP to endpoint, read as
// OTEL_EXPORTER_OTLP_ENDPOINT is specified: a base URL such as
// http://collector:4318 to which /v1/traces is appended (a URL that already
// ends in /v1/traces is used as it is). Empty means traces are not exported.
func WithOTLPEndpoint(endpoint string) Option { return func(o *options) { o.otlp = endpoint } }

// WithLog sets where logs go, their level and whether they are JSON.
func WithLog(w io.Writer, level slog.Level, json bool) Option {
	return func(o *options) { o.logOut, o.logLevel, o.logJSON = w, level, json }
}

// WithRegistry shares a Prometheus registry between services of one process.
func WithRegistry(r *prometheus.Registry) Option { return func(o *options) { o.registry = r } }

// Setup builds the providers for service. Traces go to the OTLP endpoint
// when one is given (OTEL_EXPORTER_OTLP_ENDPOINT in the services' config)
// and to any extra exporter; without either, the tracer provider is
// ContextOnly: spans are not recorded but trace context still propagates.
func Setup(ctx context.Context, service string, opts ...Option) (*Telemetry, error) {
	o := options{logOut: os.Stderr, logLevel: slog.LevelInfo}
	for _, opt := range opts {
		opt(&o)
	}
	t := &Telemetry{Service: service}
	res := resource.NewWithAttributes(semconv.SchemaURL, semconv.ServiceName(service), semconv.ServiceNamespace("nova"))

	if len(o.exporters) == 0 && o.otlp == "" {
		t.TracerProvider = ContextOnly{}
	} else {
		var tpOpts []sdktrace.TracerProviderOption
		tpOpts = append(tpOpts, sdktrace.WithResource(res))
		for _, e := range o.exporters {
			tpOpts = append(tpOpts, sdktrace.WithSyncer(e))
		}
		if o.otlp != "" {
			exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpointURL(TracesURL(o.otlp)))
			if err != nil {
				return nil, fmt.Errorf("OTLP exporter for %s: %w", o.otlp, err)
			}
			tpOpts = append(tpOpts, sdktrace.WithBatcher(exp))
		}
		tp := sdktrace.NewTracerProvider(tpOpts...)
		t.TracerProvider = tp
		t.shutdown = append(t.shutdown, tp.Shutdown)
	}

	reg := o.registry
	if reg == nil {
		reg = prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	t.Registry = reg
	promExp, err := otelprom.New(otelprom.WithRegisterer(reg), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithResource(res), sdkmetric.WithReader(promExp))
	t.MeterProvider = mp
	t.shutdown = append(t.shutdown, mp.Shutdown)

	t.Logger = NewLogger(o.logOut, o.logLevel, o.logJSON).With("service", service)
	return t, nil
}

// TracesURL is where spans are posted for an OTLP/HTTP base endpoint.
func TracesURL(endpoint string) string {
	endpoint = strings.TrimRight(endpoint, "/")
	if strings.HasSuffix(endpoint, "/v1/traces") {
		return endpoint
	}
	return endpoint + "/v1/traces"
}

// Shutdown flushes and stops the providers.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	var errs []error
	for i := len(t.shutdown) - 1; i >= 0; i-- {
		errs = append(errs, t.shutdown[i](ctx))
	}
	return errors.Join(errs...)
}

// ContextOnly is the tracer provider of a service whose spans go nowhere. Its
// spans record nothing and carry the trace context they start in, so a
// workflow keeps one trace id across every hop (in its events' traceparent
// and in the logs) and a hop that does export spans parents them to the last
// span that was exported; a span with no trace context around it starts a
// new trace, sampled. The SDK's provider without an exporter built and ended
// a recording span for every hop that nothing read: 3.6% of what a workflow
// allocates in nova dev (BenchmarkWorkflow3NodesWarm: 1.51 to 1.45 MB).
type ContextOnly struct{ embedded.TracerProvider }

// Tracer returns the provider's only tracer.
func (ContextOnly) Tracer(string, ...trace.TracerOption) trace.Tracer { return contextOnlyTracer{} }

type contextOnlyTracer struct{ embedded.Tracer }

func (contextOnlyTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		ctx = trace.ContextWithSpanContext(ctx, newRoot())
	}
	return noop.Tracer{}.Start(ctx, name, opts...)
}

// newRoot is the context of a new sampled trace, with random ids.
func newRoot() trace.SpanContext {
	var tid trace.TraceID
	var sid trace.SpanID
	for !tid.IsValid() {
		binary.BigEndian.PutUint64(tid[:8], rand.Uint64())
		binary.BigEndian.PutUint64(tid[8:], rand.Uint64())
	}
	for !sid.IsValid() {
		binary.BigEndian.PutUint64(sid[:], rand.Uint64())
	}
	return trace.NewSpanContext(trace.SpanContextConfig{TraceID: tid, SpanID: sid, TraceFlags: trace.FlagsSampled})
}

// NewLogger returns a slog logger whose records carry trace_id and span_id
// when logged with a context holding a span.
func NewLogger(w io.Writer, level slog.Level, json bool) *slog.Logger {
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if json {
		h = slog.NewJSONHandler(w, hopts)
	} else {
		h = slog.NewTextHandler(w, hopts)
	}
	return slog.New(traceHandler{h})
}

type traceHandler struct{ slog.Handler }

func (h traceHandler) Handle(ctx context.Context, r slog.Record) error {
	if sc := trace.SpanContextFromContext(ctx); sc.IsValid() {
		r.AddAttrs(slog.String("trace_id", sc.TraceID().String()), slog.String("span_id", sc.SpanID().String()))
	}
	return h.Handler.Handle(ctx, r)
}

func (h traceHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return traceHandler{h.Handler.WithAttrs(attrs)}
}

func (h traceHandler) WithGroup(name string) slog.Handler {
	return traceHandler{h.Handler.WithGroup(name)}
}
