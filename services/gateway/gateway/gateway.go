// Package gateway is NOVA's HTTP face: an http.Handler that starts workflows
// by publishing the documented start command on the bus, waits for their
// completion events, and reads executions and their chain of work from the
// audit store. It runs no code and calls no model.
//
// Every route needs an API key with the route's scope (Authorization:
// Bearer), every error is an RFC 9457 problem document, every request body
// is bounded and every handler has a deadline.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	metricnoop "go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/valueref"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/gateway/console"
)

const instrumentation = "github.com/novaflow/nova/services/gateway/gateway"

// Limits bound what one request may take.
type Limits struct {
	// MaxBody is the largest request body in bytes (default 4 MiB); a
	// larger one is answered 413.
	MaxBody int64
	// MaxWait caps ?wait= of POST /v1/executions (default 60s).
	MaxWait time.Duration
	// Timeout is every handler's deadline, a wait excepted (default 30s);
	// it is also how long a client may take to send its request, and how
	// long one write of an event stream may take.
	Timeout time.Duration
	// Rate and Burst are each API key's token bucket: requests a second
	// and how many at once (defaults 50 and 100); over it, 429.
	Rate  float64
	Burst int
	// MaxStreams and MaxStreamsPerKey bound the open event streams
	// (defaults 1000 and 100); StreamTimeout ends a stream that has run
	// this long (default 1h; the client reconnects with Last-Event-ID).
	MaxStreams, MaxStreamsPerKey int
	StreamTimeout                time.Duration
	// MaxExecuteTimeout bounds the timeout POST /v1/execute may ask for
	// (default 60s).
	MaxExecuteTimeout time.Duration
}

// Settings are the gateway's limits and CORS origins as the environment
// sets them (see docs/operations/running-services.md); the gateway
// service and nova dev read them with pkg/config.
type Settings struct {
	// MaxBody is the largest request body in bytes (413 above it).
	MaxBody int64 `env:"NOVA_GATEWAY_MAX_BODY" default:"4194304"`
	// MaxWait is the longest ?wait a start may ask for.
	MaxWait time.Duration `env:"NOVA_GATEWAY_MAX_WAIT" default:"60s"`
	// Rate and Burst are each API key's requests per second and burst (429
	// above them).
	Rate  float64 `env:"NOVA_GATEWAY_RATE" default:"50"`
	Burst int     `env:"NOVA_GATEWAY_BURST" default:"100"`
	// MaxStreams and MaxStreamsPerKey bound the open event streams, in all
	// and per API key.
	MaxStreams       int `env:"NOVA_GATEWAY_MAX_STREAMS" default:"1000"`
	MaxStreamsPerKey int `env:"NOVA_GATEWAY_MAX_STREAMS_PER_KEY" default:"100"`
	// MaxExecuteTimeout is the longest timeout POST /v1/execute and a
	// refinement's runs may ask for.
	MaxExecuteTimeout time.Duration `env:"NOVA_GATEWAY_MAX_EXECUTE_TIMEOUT" default:"60s"`
	// CORSOrigins (comma-separated) may call the API from a browser.
	CORSOrigins string `env:"NOVA_GATEWAY_CORS_ORIGINS"`
	// JaegerURL is Jaeger's UI (http://localhost:16686, say); the console
	// links each execution to its trace there. None: no link.
	JaegerURL string `env:"NOVA_JAEGER_URL"`
}

// Origins are the configured CORS origins.
func (c Settings) Origins() []string {
	var out []string
	for _, o := range strings.Split(c.CORSOrigins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// Limits are the configured limits.
func (c Settings) Limits() Limits {
	return Limits{MaxBody: c.MaxBody, MaxWait: c.MaxWait, Rate: c.Rate, Burst: c.Burst, MaxStreams: c.MaxStreams,
		MaxStreamsPerKey: c.MaxStreamsPerKey, MaxExecuteTimeout: c.MaxExecuteTimeout}
}

// setDefaults gives every limit not set (zero or less) its default.
func (l *Limits) setDefaults() {
	orDefault(&l.MaxBody, DefaultMaxBody)
	orDefault(&l.MaxWait, DefaultMaxWait)
	orDefault(&l.Timeout, DefaultTimeout)
	orDefault(&l.Rate, DefaultRate)
	orDefault(&l.Burst, DefaultBurst)
	orDefault(&l.MaxStreams, DefaultMaxStreams)
	orDefault(&l.MaxStreamsPerKey, DefaultMaxStreamsPerKey)
	orDefault(&l.StreamTimeout, DefaultStreamTimeout)
	orDefault(&l.MaxExecuteTimeout, DefaultMaxExecuteTimeout)
}

func orDefault[T int | int64 | float64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Default limits.
const (
	DefaultMaxBody = 4 << 20
	DefaultMaxWait = 60 * time.Second
	DefaultTimeout = 30 * time.Second
)

// ChainReader reads the chain of work the audit service writes: all the
// gateway needs of the audit store.
type ChainReader interface {
	// Execution is one execution's document, chainstore.ErrNotFound when there
	// is none.
	Execution(ctx context.Context, id string) (*chainstore.ExecutionDoc, error)
	// Chain is an execution's node visits with their agent steps.
	Chain(ctx context.Context, executionID string) ([]chainstore.NodeDoc, error)
	// ListExecutions is a page of executions, newest first.
	ListExecutions(ctx context.Context, f chainstore.ListFilter) ([]chainstore.ExecutionDoc, error)
	// TotalsOf counts the executions a filter selects and sums their cost.
	TotalsOf(ctx context.Context, f chainstore.ListFilter) (chainstore.ListTotals, error)
	// FailedItems counts the failed map items of each of some executions.
	FailedItems(ctx context.Context, ids []string) (map[string]int, error)
	// Export calls emit with each execution f selects, whole, newest first,
	// a page at a time.
	Export(ctx context.Context, f chainstore.ExportFilter, emit func(*chainstore.ExecutionChain) error) error
	// RerunStart is the start of a rerun of an ended execution from one
	// of its nodes, built from its chain of work.
	RerunStart(ctx context.Context, id string, req chainstore.RerunRequest) (*novav1.StartWorkflow, error)
}

// Deps are what the gateway needs, built by the caller.
type Deps struct {
	Bus   *bus.Bus
	Store ChainReader
	// Values carries large initial context values by reference; nil sends
	// them inline.
	Values *valueref.Store
	// Keys are the accepted API keys. Required unless NoAuth.
	Keys *Keys
	// NoAuth serves every request without a key, as if it had every scope
	// (local development only).
	NoAuth bool
	Logger *slog.Logger
	// CORSOrigins may call the API from a browser ("*": any); none by
	// default.
	CORSOrigins []string
	// JaegerURL is Jaeger's UI, for the console's trace links (optional;
	// an absolute http or https URL).
	JaegerURL      string
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	Limits         Limits
}

// Gateway is the HTTP API.
type Gateway struct {
	bus    *bus.Bus
	store  ChainReader
	values *valueref.Store
	keys   *Keys
	noAuth bool
	log    *slog.Logger
	limits Limits
	mux    *http.ServeMux

	tracer   trace.Tracer
	prop     propagation.TextMapPropagator
	duration metric.Float64Histogram

	rates      *rateLimits
	streams    *streamSlots
	registered registeredNames
	routes     []string
	openapi    []byte

	corsOrigins []string

	mu      sync.Mutex
	buckets map[string]jetstream.KeyValue

	// totals shares GET /v1/execution-totals' aggregations.
	totals totalsCache

	// One consumer each for the waits of new executions' completions and of
	// POST /v1/execute's answers (bus.Waits).
	completions, sandboxReplies *bus.Waits
}

// New builds the gateway.
func New(d Deps) (*Gateway, error) {
	if d.Bus == nil || d.Store == nil {
		return nil, errors.New("gateway: a bus and a store are required")
	}
	if d.Keys == nil && !d.NoAuth {
		return nil, errors.New("gateway: API keys are required unless authentication is off (NoAuth)")
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	if d.TracerProvider == nil {
		d.TracerProvider = tracenoop.NewTracerProvider()
	}
	if d.MeterProvider == nil {
		d.MeterProvider = metricnoop.NewMeterProvider()
	}
	d.Limits.setDefaults()
	duration, err := d.MeterProvider.Meter(instrumentation).Float64Histogram("nova.gateway.request.duration",
		metric.WithUnit("s"), metric.WithDescription("HTTP requests served by the gateway, by method, route and status"))
	if err != nil {
		return nil, fmt.Errorf("gateway metrics: %w", err)
	}
	g := &Gateway{
		bus: d.Bus, store: guardStore(d.Store), values: d.Values, keys: d.Keys, noAuth: d.NoAuth,
		log: d.Logger, limits: d.Limits, mux: http.NewServeMux(),
		tracer: d.TracerProvider.Tracer(instrumentation), prop: propagation.TraceContext{}, duration: duration,
		buckets: map[string]jetstream.KeyValue{}, corsOrigins: d.CORSOrigins,
		rates:       newRateLimits(d.Limits.Rate, d.Limits.Burst),
		streams:     newStreamSlots(d.Limits.MaxStreams, d.Limits.MaxStreamsPerKey),
		completions: d.Bus.CompletionWaits(),
		sandboxReplies: d.Bus.NewWaits(bus.StreamEvents, bus.EventFilter(bus.ReplyKind(bus.AgentSandbox)),
			bus.SubjectKey),
	}
	if d.NoAuth {
		d.Logger.Warn("authentication is off: every request is served as if its key had every scope; never expose this gateway")
	}
	page, err := console.PageFor(console.Settings{JaegerURL: d.JaegerURL})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if g.openapi, err = OpenAPI(); err != nil {
		return nil, err
	}
	g.routes = append(g.routes, "GET /v1/openapi.json")
	g.mux.HandleFunc("GET /v1/openapi.json", g.serveOpenAPI)
	// The console: static files, no key needed (they hold no data; the
	// page asks for a key and sends it with every API request).
	g.mux.HandleFunc("GET /{$}", page)
	g.mux.HandleFunc("GET "+console.Prefix, func(w http.ResponseWriter, r *http.Request) {
		if !console.Asset(w, r) {
			writeProblem(w, newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no console file %s", r.URL.Path)))
		}
	})
	g.handle("POST /v1/executions", ScopeExecutionsWrite, d.Limits.Timeout+d.Limits.MaxWait, g.startExecution)
	g.handle("GET /v1/executions", ScopeExecutionsRead, d.Limits.Timeout, g.listExecutions)
	// Not under /v1/executions/: an execution may be named "totals".
	g.handle("GET /v1/execution-totals", ScopeExecutionsRead, totalsTimeout, g.totalExecutions)
	// The literal paths are more specific than {id}, so ServeMux gives them
	// these routes whatever the order; no execution is named "events" or
	// "export" (execution.ID).
	g.handle("GET /v1/executions/events", ScopeExecutionsRead, d.Limits.StreamTimeout, g.streamExecutions)
	g.handle("POST /v1/executions/batch", ScopeExecutionsWrite, d.Limits.Timeout, g.batchExecutions)
	g.handle("GET /v1/executions/export", ScopeExecutionsRead, d.Limits.StreamTimeout, g.exportExecutions)
	g.handle("GET /v1/executions/{id}", ScopeExecutionsRead, d.Limits.Timeout, g.getExecution)
	g.handle("GET /v1/executions/{id}/events", ScopeExecutionsRead, d.Limits.StreamTimeout, g.streamEvents)
	// Steering: cancelling takes what starting takes; a signal, a decision
	// that resumes a wait node, takes its own scope.
	g.handle("POST /v1/executions/{id}/cancel", ScopeExecutionsWrite, d.Limits.Timeout, g.cancelExecution)
	g.handle("POST /v1/executions/{id}/signals/{name}", ScopeSignal, d.Limits.Timeout, g.signalExecution)
	// A rerun starts an execution, and may wait for it as a start does.
	g.handle("POST /v1/executions/{id}/rerun", ScopeExecutionsWrite, d.Limits.Timeout+d.Limits.MaxWait, g.rerunExecution)
	// A run waits for a sandbox worker as well as for its own timeout.
	g.handle("POST /v1/execute", ScopeExecute, d.Limits.Timeout+d.Limits.MaxExecuteTimeout, g.execute)
	// A CloudEvent takes the scope of what it asks for (ingressScopes); the
	// route takes a key that may send one of them.
	g.handle("POST /v1/events", ScopeExecutionsWrite, d.Limits.Timeout, g.receiveEvent, ScopeSignal)
	g.handle("POST /v1/workflows", ScopeAdmin, d.Limits.Timeout, g.registerWorkflow)
	g.handle("GET /v1/workflows", ScopeExecutionsRead, d.Limits.Timeout, g.listWorkflows)
	g.handle("GET /v1/workflows/{name}", ScopeExecutionsRead, d.Limits.Timeout, g.getWorkflow)
	g.handle("POST /v1/workflows/{name}/nodes/{id}/code", ScopeAdmin, d.Limits.Timeout, g.saveNodeCode)
	// Schedules start executions unattended: changing them takes what
	// registering workflows takes.
	g.handle("POST /v1/schedules", ScopeAdmin, d.Limits.Timeout, g.createSchedule)
	g.handle("GET /v1/schedules", ScopeExecutionsRead, d.Limits.Timeout, g.listSchedules)
	g.handle("GET /v1/schedules/{workflow}/{id}", ScopeExecutionsRead, d.Limits.Timeout, g.getSchedule)
	g.handle("DELETE /v1/schedules/{workflow}/{id}", ScopeAdmin, d.Limits.Timeout, g.deleteSchedule)
	g.handle("POST /v1/schedules/{workflow}/{id}/pause", ScopeAdmin, d.Limits.Timeout, g.pauseSchedule)
	g.handle("POST /v1/schedules/{workflow}/{id}/resume", ScopeAdmin, d.Limits.Timeout, g.resumeSchedule)
	// A refinement streams its attempts, each a model call and a run.
	g.handle("POST /v1/refine", ScopeRefine, d.Limits.StreamTimeout, g.refine)
	g.handle("GET /v1/refine/{id}/events", ScopeRefine, d.Limits.StreamTimeout, g.refineEvents)
	return g, nil
}

// Server is an http.Server for the gateway whose timeouts keep a slow
// client from holding a connection: the request must arrive within the
// handler timeout, and the answer may take a wait longer.
func (g *Gateway) Server() *http.Server {
	return &http.Server{
		Handler:           g,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       g.limits.Timeout,
		WriteTimeout:      g.limits.Timeout + g.limits.MaxWait + 10*time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(g.log.Handler(), slog.LevelWarn),
	}
}

// requestInfo is what the handler learns that the access log reports.
type requestInfo struct{ key string }

type requestInfoKey struct{}

// ServeHTTP traces, measures and logs every request, answers unknown routes
// and wrong methods with problems, and hands the rest to their handler.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	_, pattern := g.mux.Handler(r)
	route := pattern
	if _, path, ok := strings.Cut(pattern, " "); ok {
		route = path
	}
	spanName := r.Method
	if route != "" {
		spanName += " " + route
	}
	ctx := g.prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := g.tracer.Start(ctx, spanName, trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", route),
			attribute.String("url.path", r.URL.Path),
		))
	defer span.End()
	info := &requestInfo{}
	ctx = context.WithValue(ctx, requestInfoKey{}, info)
	rw := &responseWriter{ResponseWriter: w}
	r = r.WithContext(ctx)

	defer func() {
		if v := recover(); v != nil {
			if v == http.ErrAbortHandler {
				panic(v)
			}
			g.log.ErrorContext(ctx, "handler panicked", "method", r.Method, "route", route, "panic", fmt.Sprint(v))
			if !rw.wroteHeader {
				writeProblem(rw, newProblem(http.StatusInternalServerError, TypeInternal, "the gateway failed to handle this request"))
			}
		}
		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		elapsed := time.Since(start)
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if info.key != "" {
			span.SetAttributes(attribute.String("nova.api_key.name", info.key))
		}
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
		g.duration.Record(ctx, elapsed.Seconds(), metric.WithAttributes(
			attribute.String("http.request.method", r.Method),
			attribute.String("http.route", route),
			attribute.Int("http.response.status_code", status)))
		attrs := []any{"method", r.Method, "path", r.URL.Path, "route", route, "status", status,
			"duration_ms", float64(elapsed.Microseconds()) / 1000}
		if info.key != "" {
			attrs = append(attrs, "key", info.key)
		}
		// Metrics and spans count every request; the log keeps those that
		// failed (all of them at LOG_LEVEL=debug), so a busy gateway does
		// not spend a write per request on it.
		level := slog.LevelDebug
		switch {
		case status >= 500:
			level = slog.LevelWarn
		case status >= 400:
			level = slog.LevelInfo
		}
		g.log.Log(ctx, level, "request", attrs...)
	}()

	if g.cors(rw, r) {
		return
	}
	if pattern == "" {
		g.unrouted(rw, r)
		return
	}
	g.mux.ServeHTTP(rw, r)
}

// unrouted answers a request no route takes: the mux's own answer (404,
// 405 with Allow, or a redirect to the clean path) with its plain-text body
// turned into a problem document.
func (g *Gateway) unrouted(w http.ResponseWriter, r *http.Request) {
	rec := &recorder{header: http.Header{}}
	g.mux.ServeHTTP(rec, r)
	switch rec.status {
	case http.StatusNotFound:
		writeProblem(w, newProblem(http.StatusNotFound, TypeNotFound, fmt.Sprintf("no route for %s", r.URL.Path)))
	case http.StatusMethodNotAllowed:
		allow := rec.header.Get("Allow")
		writeProblem(w, newProblem(http.StatusMethodNotAllowed, TypeMethodNotAllowed,
			fmt.Sprintf("%s does not take %s; it takes %s", r.URL.Path, r.Method, allow)).with("Allow", allow))
	default:
		for k, v := range rec.header {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.status)
		_, _ = w.Write(rec.body.Bytes())
	}
}

// handle registers a route: the key must have scope (or one of the other
// scopes given), the handler gets a deadline and a bounded body, and the
// error it returns is answered as a problem.
func (g *Gateway) handle(pattern string, scope Scope, timeout time.Duration, h func(http.ResponseWriter, *http.Request) error,
	orScopes ...Scope) {
	g.routes = append(g.routes, pattern)
	scopes := append([]Scope{scope}, orScopes...)
	g.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		name, p := g.authenticate(r, scopes...)
		if p != nil {
			g.fail(w, r, p)
			return
		}
		if info, ok := r.Context().Value(requestInfoKey{}).(*requestInfo); ok {
			info.key = name
		}
		if p := g.rates.allow(name); p != nil {
			g.fail(w, r, p)
			return
		}
		if r.ContentLength > g.limits.MaxBody {
			g.fail(w, r, tooLarge(g.limits.MaxBody))
			return
		}
		r.Body = http.MaxBytesReader(w, r.Body, g.limits.MaxBody)
		ctx, cancel := context.WithTimeout(r.Context(), timeout)
		defer cancel()
		if err := h(w, r.WithContext(ctx)); err != nil {
			g.fail(w, r.WithContext(ctx), err)
		}
	})
}

func tooLarge(limit int64) *Problem {
	return newProblem(http.StatusRequestEntityTooLarge, TypeBodyTooLarge,
		fmt.Sprintf("the request body is larger than %d bytes", limit))
}

// eventTooLarge answers a start whose event is larger than the bus takes,
// though its body was within the gateway's limit: an inline definition or
// many values each under the value store's threshold.
func eventTooLarge(e *bus.TooLargeError) *Problem {
	return newProblem(http.StatusRequestEntityTooLarge, TypeBodyTooLarge,
		fmt.Sprintf("the start event would be %d bytes; the bus takes at most %d bytes a message (the NATS server's max_payload). "+
			"Context values larger than the value store's threshold are stored there and travel as {\"$ref\": ...}; "+
			"smaller ones, and the definition, travel in the event", e.Size, e.Limit))
}

// fail answers err as a problem: a handler's own problem as it is, running
// out of time as 504, anything else as 500 (logged, not shown).
func (g *Gateway) fail(w http.ResponseWriter, r *http.Request, err error) {
	var p *Problem
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &p):
	case errors.As(err, &tooBig):
		p = tooLarge(tooBig.Limit)
	case errors.Is(err, context.DeadlineExceeded):
		p = newProblem(http.StatusGatewayTimeout, TypeTimeout, "the request took too long; try again")
	case errors.Is(err, context.Canceled):
		// The client went away; nobody reads the answer.
		p = newProblem(http.StatusServiceUnavailable, TypeUnavailable, "the request was cancelled")
	default:
		g.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "err", err)
		p = newProblem(http.StatusInternalServerError, TypeInternal, "the gateway failed to handle this request")
	}
	writeProblem(w, p)
}

// unavailable is a 503 for a dependency that failed (the bus, the store);
// the cause is logged, not shown.
func (g *Gateway) unavailable(r *http.Request, detail string, err error) *Problem {
	g.log.ErrorContext(r.Context(), "dependency failed", "method", r.Method, "path", r.URL.Path, "err", err)
	if errors.Is(err, errStoreDown) {
		detail += " (" + errStoreDown.Error() + ")"
	}
	return newProblem(http.StatusServiceUnavailable, TypeUnavailable, detail).with("Retry-After", retryAfterUnavailable)
}

// retryAfterUnavailable is the Retry-After of a 503: seconds until a
// dependency that failed is worth asking again.
const retryAfterUnavailable = "5"

// authenticate checks the Bearer key and its scope (any one of scopes)
// and returns the key's name. The key itself goes nowhere: not in a log, a
// span or a problem.
func (g *Gateway) authenticate(r *http.Request, scopes ...Scope) (string, *Problem) {
	if g.noAuth {
		return "anonymous", nil
	}
	const realm = `Bearer realm="nova"`
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", newProblem(http.StatusUnauthorized, TypeUnauthorized,
			"an API key is required: Authorization: Bearer <key>").with("WWW-Authenticate", realm)
	}
	scheme, key, _ := strings.Cut(h, " ")
	key = strings.TrimSpace(key)
	if !strings.EqualFold(scheme, "Bearer") || key == "" {
		return "", newProblem(http.StatusUnauthorized, TypeUnauthorized,
			"the Authorization header must be: Bearer <key>").with("WWW-Authenticate", realm+`, error="invalid_request"`)
	}
	k := g.keys.lookup(key)
	if k == nil {
		return "", newProblem(http.StatusUnauthorized, TypeUnauthorized,
			"the API key is not valid").with("WWW-Authenticate", realm+`, error="invalid_token"`)
	}
	if !slices.ContainsFunc(scopes, k.Allows) {
		names := make([]string, len(scopes))
		for i, s := range scopes {
			names[i] = string(s)
		}
		what := "the scope " + names[0]
		if len(names) > 1 {
			what = "any of the scopes " + strings.Join(names, ", ")
		}
		return "", newProblem(http.StatusForbidden, TypeForbidden,
			fmt.Sprintf("API key %q does not have %s", k.Name, what)).
			with("WWW-Authenticate", fmt.Sprintf(`%s, error="insufficient_scope", scope="%s"`, realm, strings.Join(names, " ")))
	}
	return k.Name, nil
}

// writeJSON answers v as JSON, numbers as they are (json.Number and
// json.RawMessage keep their text) and without HTML escaping.
func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		writeProblem(w, newProblem(http.StatusInternalServerError, TypeInternal, "the answer could not be encoded"))
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// responseWriter remembers the status for the access log and the metrics.
type responseWriter struct {
	http.ResponseWriter
	status      int
	wroteHeader bool
}

func (w *responseWriter) WriteHeader(status int) {
	if !w.wroteHeader {
		w.status, w.wroteHeader = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *responseWriter) Write(b []byte) (int, error) {
	if !w.wroteHeader {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection.
func (w *responseWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// recorder keeps the mux's answer to an unrouted request.
type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.body.Write(b)
}
