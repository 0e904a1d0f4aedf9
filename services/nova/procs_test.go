package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/novaflow/nova/pkg/bus"
	"github.com/novaflow/nova/pkg/chainstore"
	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/execution"
	"github.com/novaflow/nova/pkg/jsonvalue"
	"github.com/novaflow/nova/pkg/llm/scripted"
	"github.com/novaflow/nova/pkg/syncbuf"
	"github.com/novaflow/nova/pkg/workflow"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	auditservice "github.com/novaflow/nova/services/audit/service"
	"github.com/novaflow/nova/services/nova/client"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

// procsServices are the service binaries the test builds and starts, with
// the durable consumers each declares when it starts.
var procsServices = []struct {
	name      string
	consumers []string
}{
	{"graph-engine", []string{bus.ConsumerEngineCommands, bus.ConsumerEngineResults, bus.ConsumerEngineDeadLetters}},
	{"sandbox", []string{sandboxservice.Consumer}},
	{"audit", []string{auditservice.Consumer}},
	{"input-analyzer", []string{bus.AgentInputAnalyzer}},
	{"code-generator", []string{bus.AgentCodeGenerator}},
	{"code-validator", []string{bus.AgentCodeValidator}},
	{"output-validator", []string{bus.AgentOutputValidator}},
}

// TestProcsServicesAsSeparateProcesses runs the graph engine, the sandbox and
// the audit service the way they are deployed: each its own OS process built
// from its main, configured by the environment only, talking to a NATS and a
// MongoDB-compatible store outside them.
func TestProcsServicesAsSeparateProcesses(t *testing.T) {
	t.Parallel() // its own binaries, servers and processes
	if testing.Short() {
		t.Skip("builds the service binaries and starts them as processes")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()

	bin := procsBuild(t, ctx)

	dataDir := t.TempDir()
	nats, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nats.Shutdown)
	mongo, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dataDir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := mongo.Close(); err != nil {
			t.Errorf("close FerretDB: %v", err)
		}
	})

	// The AI agents talk to the scripted model over HTTP, like to any
	// OpenAI-compatible API; every service exports its spans over OTLP/HTTP.
	rules, err := scripted.LoadRules(filepath.Join("..", "..", "examples", "scripted-llm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	model, err := scripted.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	if _, stop, err := model.Start(ctx, ""); err != nil {
		t.Fatal(err)
	} else {
		t.Cleanup(func() { _ = stop() })
	}
	otlp := newOTLPReceiver(t)

	procs := make(map[string]*procsProcess, len(procsServices))
	for _, svc := range procsServices {
		procs[svc.name] = procsStart(t, filepath.Join(bin, svc.name), svc.name, map[string]string{
			"NATS_URL":                    nats.URL(),
			"MONGODB_URI":                 mongo.URI(),
			"HEALTH_ADDR":                 procsFreeAddr(t),
			"LOG_FORMAT":                  "json",
			"LOG_LEVEL":                   "info",
			"OPENAI_BASE_URL":             model.BaseURL(),
			"OPENAI_API_KEY":              "sk-procs-test",
			"OTEL_EXPORTER_OTLP_ENDPOINT": otlp.URL,
		})
	}
	for _, svc := range procsServices {
		p := procs[svc.name]
		p.waitReady(t, ctx)
		if code, body := p.get(t, ctx, "/healthz"); code != http.StatusOK {
			t.Errorf("%s /healthz: %d %s", svc.name, code, body)
		}
	}

	b, err := bus.Connect(ctx, nats.URL(), bus.WithName("procs-test"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	// Ready means each service has declared its durable consumers, so what
	// the client publishes now is kept for them.
	for _, svc := range procsServices {
		for _, c := range svc.consumers {
			procsWaitConsumer(t, ctx, b.JetStream(), c)
		}
	}

	def, err := workflow.Load(filepath.Join("..", "..", "examples", "invoice-routing.yaml"), workflow.ValidateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := client.New(b, nil)
	runs := []struct {
		name    string
		initial map[string]any
		// approval is the payload of the signal a manager sends the wait
		// node manager_approval; nil: the run does not wait.
		approval map[string]any
		path     []string
		route    string
	}{
		{"sample invoice goes to a manager", nil, map[string]any{"approved": true, "reviewed_by": "manager_1"},
			[]string{"start", "extract", "validate", "check_amount", "manager_approval", "record_approval", "done"}, "manager"},
		{"small amount is approved automatically", map[string]any{"amount": 200}, nil,
			[]string{"start", "extract", "validate", "check_amount", "auto_approve", "done"}, "automatic"},
	}
	executions := map[string]string{}
	for _, run := range runs {
		started, err := c.Start(ctx, def, "", run.initial)
		if err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		if run.approval != nil {
			procsSignal(t, ctx, b, started.ID, "approval", run.approval)
		}
		wc, err := started.Wait(ctx)
		if err != nil {
			t.Fatalf("%s: %v", run.name, err)
		}
		if wc.Status != "succeeded" || !slices.Equal(wc.Path, run.path) {
			t.Fatalf("%s: status %s, path %v, error %q; want succeeded along %v", run.name, wc.Status, wc.Path, wc.Error, run.path)
		}
		if got := jsonvalue.Map(wc.Context)["approval_route"]; got != run.route {
			t.Errorf("%s: approval_route %v, want %s", run.name, got, run.route)
		}
		executions[run.name] = wc.ExecutionId
	}

	aiDef, err := workflow.Load(filepath.Join("..", "..", "examples", "ai-orders.yaml"), workflow.ValidateOptions{AllowPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	aiRun, err := c.Run(ctx, aiDef, map[string]any{"total": 1500})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"start", "discount", "route", "review", "done"}; aiRun.Status != "succeeded" || !slices.Equal(aiRun.Path, want) {
		t.Fatalf("AI workflow: status %s, path %v, error %q; want succeeded along %v", aiRun.Status, aiRun.Path, aiRun.Error, want)
	}

	t.Run("audit store has the chain of work", func(t *testing.T) {
		if err := c.WaitConsumerIdle(ctx, bus.StreamEvents, auditservice.Consumer); err != nil {
			t.Fatal(err)
		}
		st, err := chainstore.Open(ctx, mongo.URI(), "nova")
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = st.Close(context.WithoutCancel(ctx)) }()
		for _, run := range runs {
			id := executions[run.name]
			exec, err := st.Execution(ctx, id)
			if err != nil {
				t.Fatalf("%s: %v", run.name, err)
			}
			if exec.Status != "succeeded" || !slices.Equal(exec.Path, run.path) || exec.WorkflowName != "invoice-routing" {
				t.Errorf("%s: execution document status %s, path %v, workflow %q", run.name, exec.Status, exec.Path, exec.WorkflowName)
			}
			chain, err := st.Chain(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			var nodes []string
			for _, n := range chain {
				nodes = append(nodes, n.NodeID)
				if n.Status != "success" {
					t.Errorf("%s: node %s status %q", run.name, n.NodeID, n.Status)
				}
				if n.NodeType == "start" || n.NodeType == "end" || n.NodeType == "wait" {
					continue // no code: no step
				}
				if len(n.Steps) != 1 || n.Steps[0].AgentName != "sandbox" || n.Steps[0].SandboxID == "" || n.CodeExecuted == "" {
					t.Errorf("%s: node %s: %d steps %+v, want one sandbox step with its sandbox id", run.name, n.NodeID, len(n.Steps), n.Steps)
				}
			}
			if !slices.Equal(nodes, run.path) {
				t.Errorf("%s: chain of work visits %v, want %v", run.name, nodes, run.path)
			}
		}
	})

	t.Run("metrics", func(t *testing.T) {
		for _, svc := range procsServices {
			code, body := procs[svc.name].get(t, ctx, "/metrics")
			if code != http.StatusOK {
				t.Errorf("%s /metrics: %d", svc.name, code)
				continue
			}
			if !strings.Contains(body, "# TYPE go_goroutines gauge") {
				t.Errorf("%s /metrics has no go_goroutines gauge", svc.name)
			}
			// Every service handled events of these runs on its own consumer.
			handled := fmt.Sprintf(`consumer="%s"`, svc.consumers[0])
			if !slices.ContainsFunc(strings.Split(body, "\n"), func(l string) bool {
				return strings.HasPrefix(l, "nova_events_handled_total{") && strings.Contains(l, handled) && strings.Contains(l, `outcome="ack"`)
			}) {
				t.Errorf("%s /metrics has no nova_events_handled_total for %s:\n%s", svc.name, handled, procsGrep(body, "nova_events_handled"))
			}
		}
	})

	t.Run("logs are JSON", func(t *testing.T) {
		for _, svc := range procsServices {
			if !procs[svc.name].loggedJSON("starting") {
				t.Errorf("%s: no JSON log record \"starting\" on stderr", svc.name)
			}
		}
	})

	t.Run("SIGTERM stops each service cleanly", func(t *testing.T) {
		for _, svc := range procsServices {
			if err := procs[svc.name].cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatalf("%s: SIGTERM: %v", svc.name, err)
			}
		}
		for _, svc := range procsServices {
			p := procs[svc.name]
			select {
			case <-p.done:
				if code := p.cmd.ProcessState.ExitCode(); code != 0 {
					t.Errorf("%s exited with %d after SIGTERM, want 0", svc.name, code)
				}
				if !p.loggedJSON("stopped") {
					t.Errorf("%s: no \"stopped\" log record", svc.name)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("%s still running 10s after SIGTERM", svc.name)
			}
		}
	})

	// The services flushed their spans on shutdown.
	t.Run("one trace per workflow reaches the OTLP endpoint", func(t *testing.T) {
		spans := otlp.spans()
		// One trace per execution, the start's: what a manager's signal
		// resumes goes on in it (linked to the signal's own trace).
		ids := map[string]int{aiRun.ExecutionId: 1}
		for _, run := range runs {
			ids[executions[run.name]] = 1
		}
		for id, want := range ids {
			traces := map[string]bool{}
			for _, sp := range spans {
				if sp.attrs["execution.id"] == id {
					traces[sp.traceID] = true
				}
			}
			if len(traces) != want {
				t.Errorf("execution %s: spans in %d traces, want %d", id, len(traces), want)
			}
		}
		// The AI workflow's trace shows every agent step, named after the
		// service that did it, with the execution, node and attempt.
		var trace string
		for _, sp := range spans {
			if sp.attrs["execution.id"] == aiRun.ExecutionId {
				trace = sp.traceID
			}
		}
		steps := map[string]int{}
		genAI := 0 // model-call spans ("chat <model>")
		for _, sp := range spans {
			if sp.traceID != trace {
				continue
			}
			if sp.attrs["gen_ai.operation.name"] != "" {
				genAI++
				if sp.attrs["gen_ai.usage.input_tokens"] == "" || sp.attrs["gen_ai.request.model"] == "" {
					t.Errorf("model call span %q lacks GenAI attributes: %v", sp.name, sp.attrs)
				}
			} else if !strings.HasPrefix(sp.name, sp.service) && !strings.HasPrefix(sp.name, "publish ") {
				t.Errorf("span %q comes from service %q", sp.name, sp.service)
			}
			steps[sp.name]++
			if strings.Contains(sp.name, " handle ") || strings.HasPrefix(sp.name, "publish ") {
				continue
			}
			for _, attr := range []string{"execution.id", "node.id"} {
				if sp.attrs[attr] == "" && sp.name != "graph-engine start" {
					t.Errorf("span %q (%s) lacks %s: %v", sp.name, sp.service, attr, sp.attrs)
				}
			}
		}
		if genAI < 4 { // two AI nodes: a generation and an output check each, at least
			t.Errorf("trace has %d model-call spans, want at least 4 (spans: %v)", genAI, steps)
		}
		for name, want := range map[string]int{
			"input-analyzer analyze":    2, // one per AI node
			"code-generator generate":   2,
			"code-validator validate":   2,
			"output-validator validate": 2,
			"graph-engine start":        1,
		} {
			if steps[name] != want {
				t.Errorf("trace has %d %q spans, want %d (spans: %v)", steps[name], name, want, steps)
			}
		}
		// The sandbox ran the two AI nodes and the review node; a command
		// retried after a sandbox fault shows as one more span of that node.
		ran := map[string]bool{}
		for _, sp := range spans {
			if sp.traceID == trace && sp.name == "sandbox execute" {
				ran[sp.attrs["node.id"]] = true
			}
		}
		if len(ran) != 3 || !ran["discount"] || !ran["route"] || !ran["review"] {
			t.Errorf("sandbox execute spans for nodes %v, want discount, route and review", ran)
		}
		for _, sp := range spans {
			if sp.traceID == trace && sp.name == "code-generator generate" && sp.attrs["attempt"] != "1" {
				t.Errorf("code-generator span attempt = %q, want 1", sp.attrs["attempt"])
			}
		}
	})
}

// procsSignal sends signal name with payload to execution id once the
// engine's state says that the execution waits for it, the way nova signal
// and the gateway publish it.
func procsSignal(t *testing.T, ctx context.Context, b *bus.Bus, id, name string, payload map[string]any) {
	t.Helper()
	kv, err := b.JetStream().KeyValue(ctx, bus.BucketExecutions)
	if err != nil {
		t.Fatal(err)
	}
	for {
		st, err := execution.ReadState(ctx, kv, id)
		if err != nil {
			t.Fatal(err)
		}
		if execution.WaitingFor(st) == name {
			break
		}
		if st != nil && st.GetStatus() != execution.StatusRunning {
			t.Fatalf("execution %s ended %s (%s) before it waited for signal %q", id, st.GetStatus(), st.GetError(), name)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("execution %s does not wait for signal %q: %v", id, name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	obj, err := jsonvalue.ObjectOf(payload)
	if err != nil {
		t.Fatal(err)
	}
	err = execution.PublishSignal(ctx, b, "signal-"+uuid.NewString(),
		&novav1.SignalExecution{ExecutionId: id, Signal: name, Payload: obj.Proto(), SentBy: "procs-test"})
	if err != nil {
		t.Fatal(err)
	}
}

// otlpSpan is what the test keeps of an exported span.
type otlpSpan struct {
	traceID, name, service string
	attrs                  map[string]string
}

// otlpReceiver is an OTLP/HTTP trace endpoint, as a collector or Jaeger
// serves it.
type otlpReceiver struct {
	URL string
	mu  sync.Mutex
	got []otlpSpan
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	r := &otlpReceiver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "want protobuf on /v1/traces", http.StatusBadRequest)
			return
		}
		body, err := io.ReadAll(req.Body)
		var export coltracepb.ExportTraceServiceRequest
		if err == nil {
			err = proto.Unmarshal(body, &export)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		for _, rs := range export.ResourceSpans {
			service := ""
			for _, kv := range rs.GetResource().GetAttributes() {
				if kv.Key == "service.name" {
					service = kv.GetValue().GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					attrs := map[string]string{}
					for _, kv := range sp.Attributes {
						v := kv.GetValue()
						if v.GetStringValue() != "" {
							attrs[kv.Key] = v.GetStringValue()
						} else {
							attrs[kv.Key] = fmt.Sprint(v.GetIntValue())
						}
					}
					r.got = append(r.got, otlpSpan{traceID: fmt.Sprintf("%x", sp.TraceId), name: sp.Name, service: service, attrs: attrs})
				}
			}
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	return r
}

func (r *otlpReceiver) spans() []otlpSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.got)
}

// procsBinaries are the service binaries, built once for the tests that
// start them as processes (TestMain removes them).
var procsBinaries struct {
	once sync.Once
	dir  string
	err  error
}

// procsBuild builds the binaries of every service in procsServices and the
// gateway, once,
// into a temporary directory, and returns it.
func procsBuild(t *testing.T, ctx context.Context) string {
	t.Helper()
	procsBinaries.once.Do(func() {
		if procsBinaries.dir, procsBinaries.err = os.MkdirTemp("", "nova-procs-"); procsBinaries.err != nil {
			return
		}
		goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goTool); err != nil {
			goTool = "go"
		}
		args := []string{"build", "-o", procsBinaries.dir + string(filepath.Separator)}
		for _, svc := range procsServices {
			args = append(args, "../"+svc.name)
		}
		args = append(args, "../gateway") // for the refinement's kill test
		if out, err := exec.CommandContext(ctx, goTool, args...).CombinedOutput(); err != nil {
			procsBinaries.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	})
	if procsBinaries.err != nil {
		t.Fatal(procsBinaries.err)
	}
	return procsBinaries.dir
}

// procsProcess is one running service.
type procsProcess struct {
	name   string
	addr   string
	cmd    *exec.Cmd
	stderr *syncbuf.Buffer
	done   chan struct{} // closed once the process has been waited for
}

func procsStart(t *testing.T, path, name string, env map[string]string) *procsProcess {
	t.Helper()
	p := &procsProcess{name: name, addr: env["HEALTH_ADDR"], stderr: &syncbuf.Buffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(path)
	p.cmd.Env = procsEnv(env)
	p.cmd.Stdout = p.stderr
	p.cmd.Stderr = p.stderr
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("%s stderr:\n%s", name, p.stderr.String())
		}
	})
	return p
}

// procsEnv is the test's environment without any NOVA configuration it may
// carry, plus the service's own.
func procsEnv(own map[string]string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := own[k]; ok || strings.HasPrefix(k, "NOVA_") || strings.HasPrefix(k, "NATS_") ||
			strings.HasPrefix(k, "MONGODB_") || strings.HasPrefix(k, "OTEL_") {
			continue
		}
		env = append(env, kv)
	}
	for k, v := range own {
		env = append(env, k+"="+v)
	}
	return env
}

// waitReady polls /readyz until it answers 200; a process that exits first
// fails the test.
func (p *procsProcess) waitReady(t *testing.T, ctx context.Context) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before it was ready (%v)", p.name, p.cmd.ProcessState)
		default:
		}
		if code, body, err := p.fetch(ctx, "/readyz"); err == nil && code == http.StatusOK {
			return
		} else {
			last = fmt.Sprintf("%d %s %v", code, body, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not ready after 30s: %s", p.name, last)
}

func (p *procsProcess) get(t *testing.T, ctx context.Context, path string) (int, string) {
	t.Helper()
	code, body, err := p.fetch(ctx, path)
	if err != nil {
		t.Fatalf("%s %s: %v", p.name, path, err)
	}
	return code, body
}

func (p *procsProcess) fetch(ctx context.Context, path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.addr+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

// loggedJSON reports whether stderr holds a JSON log record with message msg.
func (p *procsProcess) loggedJSON(msg string) bool {
	sc := bufio.NewScanner(strings.NewReader(p.stderr.String()))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var rec struct {
			Msg     string `json:"msg"`
			Service string `json:"service"`
		}
		if json.Unmarshal(sc.Bytes(), &rec) == nil && rec.Msg == msg && rec.Service == p.name {
			return true
		}
	}
	return false
}

func procsWaitConsumer(t *testing.T, ctx context.Context, js jetstream.JetStream, durable string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var last error
		for _, stream := range []string{bus.StreamCommands, bus.StreamEvents, bus.StreamDeadLetters} {
			_, err := js.Consumer(ctx, stream, durable)
			if err == nil {
				return
			}
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("durable consumer %s not declared: %v", durable, errors.Join(last, ctx.Err()))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// procsFreeAddr returns a loopback address nothing listens on, never the
// same one twice in a test run: the kernel may hand a just-released port out
// again, and two services given one health port would collide.
func procsFreeAddr(t *testing.T) string {
	t.Helper()
	procsAddrs.Lock()
	defer procsAddrs.Unlock()
	for range 100 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		if !procsAddrs.given[addr] {
			procsAddrs.given[addr] = true
			return addr
		}
	}
	t.Fatal("no free loopback port")
	return ""
}

var procsAddrs = struct {
	sync.Mutex
	given map[string]bool
}{given: map[string]bool{}}

func procsGrep(text, substr string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
