package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/llm"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/service"
	"github.com/novaflow/nova/pkg/syncbuf"
	"github.com/novaflow/nova/pkg/valueref"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/code-generator/generator"
	"github.com/novaflow/nova/services/gateway/gateway"
	"github.com/novaflow/nova/services/graph-engine/engine"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

// h is the running system every test uses: the embedded NATS and FerretDB,
// the graph engine, the sandbox, the audit service and the code generator
// (answered by the scripted model server) in this process, and a gateway
// serving on a loopback port. Tests run one after another: some
// stop the audit service or count messages on a stream.
var h *harness

type harness struct {
	dir    string
	infra  *devstack.Stack
	bus    *bus.Bus // the tests' own connection
	store  *chainstore.Store
	values *valueref.Store
	logs   *syncbuf.Buffer
	log    *slog.Logger
	spans  *tracetest.SpanRecorder
	// model is the scripted OpenAI-compatible server the code generator
	// calls; a test sets its rules (SetRules) and reads its requests.
	model     *scripted.Server
	stopModel func() error
	modelHTTP *http.Transport
	// engine configures the graph engine when it (re)starts: its
	// settings' defaults, without AI nodes until a test allows them.
	engine engine.Settings

	// url is the gateway with the default limits and the keys below.
	url  string
	keys *gateway.Keys
	// API keys by name: writer (executions:write), reader
	// (executions:read), admin (admin), refiner (refine), signaller
	// (signal).
	key map[string]string

	mu      sync.Mutex
	modules map[string]*module
	servers []*http.Server
}

type module struct {
	cancel context.CancelFunc
	done   chan error
	close  func()
}

func TestMain(m *testing.M) {
	code := runTests(m)
	if code == 0 {
		if err := goleak.Find(
			// nats-server keeps process-wide helpers alive after Shutdown.
			goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
			goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
			goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
		); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gateway-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	h = &harness{dir: dir, logs: &syncbuf.Buffer{}, modules: map[string]*module{}, spans: tracetest.NewSpanRecorder()}
	h.engine = engine.DefaultSettings()
	h.engine.AllowPrompt = false
	h.log = slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	code := 1
	if err := h.start(); err != nil {
		fmt.Fprintln(os.Stderr, "start:", err)
	} else {
		code = m.Run()
	}
	if err := h.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stop:", err)
		code = 1
	}
	if code != 0 {
		fmt.Fprintf(os.Stderr, "services' and gateway's logs:\n%s\n", h.logs.String())
	}
	return code
}

func (h *harness) start() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	infra, err := devstack.Start(ctx, devstack.Options{DataDir: filepath.Join(h.dir, "data"), Logger: h.log})
	if err != nil {
		return err
	}
	h.infra = infra
	if h.bus, err = bus.Connect(ctx, infra.NATSURL, bus.WithName("gateway-test"), bus.WithLogger(h.log)); err != nil {
		return err
	}
	if h.store, err = chainstore.Open(ctx, infra.MongoURI, "nova"); err != nil {
		return err
	}
	// A request no rule answers is a 400, which the client does not retry.
	if h.model, err = scripted.New(scripted.Rules{}, scripted.WithFallback(scripted.Response{Status: 400,
		Error: &scripted.ErrorSpec{Message: "gateway test: no scripted rule matches this request", Type: "invalid_request_error"}})); err != nil {
		return err
	}
	if _, h.stopModel, err = h.model.Start(context.Background(), ""); err != nil {
		return err
	}
	h.modelHTTP = &http.Transport{}
	for _, name := range []string{"audit", "sandbox", "graph-engine", "code-generator"} {
		if err := h.startModule(ctx, name); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
	}
	if h.values, err = valueref.Open(ctx, h.bus.JetStream(), 0, 1); err != nil {
		return err
	}

	// The keys file as an operator writes it, with hashes only.
	h.key = map[string]string{}
	var file strings.Builder
	for _, k := range []struct{ name, scopes string }{
		{"writer", "[executions:write]"}, {"reader", "[executions:read]"}, {"admin", "[admin]"}, {"refiner", "[refine]"},
		{"signaller", "[signal]"},
	} {
		key, hash, err := gateway.NewKey()
		if err != nil {
			return err
		}
		h.key[k.name] = key
		fmt.Fprintf(&file, "- name: %s\n  sha256: %s\n  scopes: %s\n", k.name, hash, k.scopes)
	}
	keysFile := filepath.Join(h.dir, "keys.yaml")
	if err := os.WriteFile(keysFile, []byte(file.String()), 0o600); err != nil {
		return err
	}
	if h.keys, err = gateway.LoadKeys(keysFile); err != nil {
		return err
	}
	h.url, err = h.serve(gateway.Deps{Keys: h.keys})
	return err
}

// serve starts a gateway on a loopback port with deps completed by the
// harness (bus, store unless deps has one, values, logger, spans) and
// returns its URL.
func (h *harness) serve(deps gateway.Deps) (string, error) {
	if deps.Store == nil {
		deps.Store = h.store
	}
	deps.Bus, deps.Values, deps.Logger = h.bus, h.values, h.log.With("service", "gateway")
	deps.TracerProvider = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(h.spans))
	g, err := gateway.New(deps)
	if err != nil {
		return "", err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := g.Server()
	go func() { _ = srv.Serve(ln) }()
	h.mu.Lock()
	h.servers = append(h.servers, srv)
	h.mu.Unlock()
	return "http://" + ln.Addr().String(), nil
}

// startModule starts one service in this process, built from its own
// packages as its main does, with its own bus connection.
func (h *harness) startModule(ctx context.Context, name string) error {
	log := h.log.With("service", name)
	b, err := bus.Connect(ctx, h.infra.NATSURL, bus.WithName(name), bus.WithLogger(log))
	if err != nil {
		return err
	}
	closeAll := b.Close
	env := service.NewEnv(b, nil, log, 1)
	var run func(context.Context) error
	switch name {
	case "graph-engine":
		e, err := engine.Start(ctx, h.engine, env)
		if err != nil {
			closeAll()
			return err
		}
		run = e.Run
	case "sandbox":
		// JavaScript with the runtime's packages, as make deps installs them.
		cfg := sandboxservice.DefaultConfig()
		cfg.Warm = false
		cfg.NodeModules = filepath.Join("..", "..", "sandbox", "jsrunner", "runtime", "node_modules")
		sb, err := sandboxservice.Start(ctx, cfg, env, sandboxservice.WithRuntimeCacheDir(filepath.Join(h.dir, "runtime-cache")))
		if err != nil {
			closeAll()
			return err
		}
		closeAll = func() { _ = sb.Close(); b.Close() }
		run = sb.Run
	case "code-generator":
		client, err := llm.New(llm.Config{APIKey: "sk-test", BaseURL: h.model.BaseURL(), Agent: bus.AgentCodeGenerator,
			MaxRetries: 1, Logger: log, HTTPClient: &http.Client{Transport: h.modelHTTP}})
		if err != nil {
			closeAll()
			return err
		}
		cg, err := generator.Start(ctx, generator.Config{Workers: 2}, env, agent.WithLLM(client))
		if err != nil {
			closeAll()
			return err
		}
		run = cg.Run
	case "audit":
		a, err := auditservice.Start(ctx, auditservice.Config{KeepEnded: auditservice.KeepEnded}, env, auditservice.WithStore(h.store))
		if err != nil {
			closeAll()
			return err
		}
		run = a.Run
	default:
		closeAll()
		return fmt.Errorf("unknown module %q", name)
	}
	mctx, cancel := context.WithCancel(context.Background())
	m := &module{cancel: cancel, done: make(chan error, 1), close: closeAll}
	go func() { m.done <- run(mctx) }()
	h.mu.Lock()
	h.modules[name] = m
	h.mu.Unlock()
	return nil
}

// stopModule stops one service and waits for it.
func (h *harness) stopModule(name string) error {
	h.mu.Lock()
	m := h.modules[name]
	delete(h.modules, name)
	h.mu.Unlock()
	if m == nil {
		return fmt.Errorf("module %s not running", name)
	}
	m.cancel()
	err := <-m.done
	m.close()
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}

func (h *harness) stop() error {
	var errs []error
	h.mu.Lock()
	servers := h.servers
	h.mu.Unlock()
	for _, srv := range servers {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		errs = append(errs, srv.Shutdown(ctx))
		cancel()
	}
	for _, name := range []string{"code-generator", "graph-engine", "sandbox", "audit"} {
		h.mu.Lock()
		_, running := h.modules[name]
		h.mu.Unlock()
		if running {
			errs = append(errs, h.stopModule(name))
		}
	}
	if h.stopModel != nil {
		errs = append(errs, h.stopModel())
		h.modelHTTP.CloseIdleConnections()
	}
	if h.bus != nil {
		h.bus.Close()
	}
	if h.store != nil {
		errs = append(errs, h.store.Close(context.Background()))
	}
	if h.infra != nil {
		errs = append(errs, h.infra.Close())
	}
	return errors.Join(errs...)
}

// request is one HTTP call to a gateway.
type request struct {
	method, path string
	key          string // API key; empty sends no Authorization header
	body         string
	header       map[string]string
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func (h *harness) do(t *testing.T, base string, req request) response {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	var body io.Reader
	if req.body != "" {
		body = strings.NewReader(req.body)
	}
	r, err := http.NewRequestWithContext(ctx, req.method, base+req.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if req.key != "" {
		r.Header.Set("Authorization", "Bearer "+req.key)
	}
	for k, v := range req.header {
		r.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", req.method, req.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", req.method, req.path, err)
	}
	return response{status: resp.StatusCode, header: resp.Header, body: b}
}

// problemDoc is an RFC 9457 problem as a client reads it.
type problemDoc struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Errors []struct {
		Field  string `json:"field"`
		Node   string `json:"node"`
		Detail string `json:"detail"`
		Line   int    `json:"line"`
	} `json:"errors"`
}

// problem checks that resp is a problem document with status and type.
func problem(t *testing.T, resp response, status int, typ string) problemDoc {
	t.Helper()
	if resp.status != status {
		t.Fatalf("status %d, want %d; body %s", resp.status, status, resp.body)
	}
	if ct := resp.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json; body %s", ct, resp.body)
	}
	var p problemDoc
	dec := json.NewDecoder(bytes.NewReader(resp.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		t.Fatalf("problem document %s: %v", resp.body, err)
	}
	if p.Status != status || p.Type != typ || p.Title != http.StatusText(status) || p.Detail == "" {
		t.Fatalf("problem = %+v, want status %d, type %s, the status text as title and a detail", p, status, typ)
	}
	return p
}

// fields lists the fields a problem names.
func (p problemDoc) fields() []string {
	var out []string
	for _, e := range p.Errors {
		out = append(out, e.Field)
	}
	return out
}

// decode reads a JSON answer with numbers as their text.
func decode(t *testing.T, resp response, status int, v any) {
	t.Helper()
	if resp.status != status {
		t.Fatalf("status %d, want %d; body %s", resp.status, status, resp.body)
	}
	if ct := resp.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	dec := json.NewDecoder(bytes.NewReader(resp.body))
	dec.UseNumber()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decode %s: %v", resp.body, err)
	}
}

// waitAudit waits until the audit service has recorded every event so far.
func (h *harness) waitAudit(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cons, err := h.bus.JetStream().Consumer(ctx, bus.StreamEvents, auditservice.Consumer)
	if err != nil {
		t.Fatal(err)
	}
	for {
		info, err := cons.Info(ctx)
		if err != nil {
			t.Fatalf("audit consumer: %v", err)
		}
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("audit did not catch up: %v", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// register registers a definition with the engine, as a producer would, and
// waits until the engine has stored it.
func (h *harness) register(t *testing.T, yamlText string) {
	t.Helper()
	def, err := workflow.Parse([]byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := h.bus.PublishProto(ctx, bus.CommandSubject(bus.AgentGraphEngine), "register-"+def.Name+"-"+t.Name(),
		bus.TypeWorkflowRegister, &novav1.RegisterWorkflow{Definition: def}, nil); err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(def)
	for {
		if kv, err := h.bus.JetStream().KeyValue(ctx, bus.BucketWorkflows); err == nil {
			if e, err := kv.Get(ctx, def.Name); err == nil && bytes.Equal(e.Value(), want) {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workflow %s not registered", def.Name)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// lastCommand is the sequence of the last message stored in NOVA_CMD.
func (h *harness) lastCommand(t *testing.T) uint64 {
	t.Helper()
	s, err := h.bus.JetStream().Stream(t.Context(), bus.StreamCommands)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.LastSeq
}

// startedEvents counts the workflow.started events of an execution.
func (h *harness) startedEvents(t *testing.T, id string) uint64 {
	t.Helper()
	s, err := h.bus.JetStream().Stream(t.Context(), bus.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(t.Context(), jetstream.WithSubjectFilter(bus.ExecutionFilter(id)))
	if err != nil {
		t.Fatal(err)
	}
	// Alone, or in an envelope of the start's transition (one start each).
	return info.State.Subjects[bus.EventSubject(id, bus.KindWorkflowStarted)] +
		info.State.Subjects[bus.EventSubject(id, bus.KindEventsStart)]
}
