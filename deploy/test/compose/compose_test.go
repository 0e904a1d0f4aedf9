// Package compose brings deploy/compose.yaml up with podman-compose and
// runs NATS, the store and NOVA's services as that file runs them: the
// per-service NATS users of deploy/nats, the gateway's keys, the sandbox's
// security options. Workflows go in through the gateway with curl, their
// chains of work come back out of it, and the sandbox container is killed
// while a load runs, losing nothing.
//
// `make compose-test` builds the images and runs it (NOVA_COMPOSE_TEST=1);
// `make test` skips it.
package compose

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/novaflow/nova/pkg/llm/scripted"
)

const (
	// project names the containers (<project>_<service>_1), the network
	// and the volumes, apart from a `compose up` of the file's own name.
	project = "nova-compose-test"
	gateway = "http://127.0.0.1:8000"
	// apiKey is deploy/gateway-keys.yaml's admin key for this local setup.
	apiKey = "nova_gk_compose-dev-only"
	// standIn labels the base images `make base-images` made locally.
	standIn = "io.nova.local-stand-in"
	// loadRuns is the executions in flight when the sandbox is killed.
	loadRuns = 40
)

var required = os.Getenv("NOVA_COMPOSE_TEST") == "1"

// podman runs podman as deploy/images/images.sh does (runc, cgroupfs).
var podmanArgs = []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}

func podman(args ...string) (string, error) {
	out, err := exec.Command("podman", append(slices.Clone(podmanArgs), args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func image(service string) string {
	prefix, tag := os.Getenv("IMAGE_PREFIX"), os.Getenv("IMAGE_TAG")
	if prefix == "" {
		prefix = "nova"
	}
	if tag == "" {
		tag = "dev"
	}
	return fmt.Sprintf("localhost/%s/%s:%s", prefix, service, tag)
}

// steps times what the test does and prints it at the end.
type steps struct {
	t    *testing.T
	done []string
}

func (s *steps) run(name string, f func()) {
	s.t.Helper()
	start := time.Now()
	s.t.Logf("%s ...", name)
	f()
	d := time.Since(start)
	s.done = append(s.done, fmt.Sprintf("%7.1f s  %s", d.Seconds(), name))
	s.t.Logf("%s: %.1f s", name, d.Seconds())
}

func (s *steps) print() {
	s.t.Logf("what compose-test did, and how long each step took:\n%s", strings.Join(s.done, "\n"))
}

// offline derives the file compose-test brings up from deploy/compose.yaml
// and says each change: NOVA's services run the images `make images`
// built instead of building them again; the Jaeger and Collector images
// cannot be had without a registry, so those two are left out and the
// services export no traces; the store's health check uses the stand-in's
// own ping where mongo:7.0 is the local stand-in (it has no mongosh); the
// mounted files are those of deploy/.
func offline(t *testing.T, dir string) (string, []string) {
	t.Helper()
	deploy, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(deploy, "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string]any
	if err := yaml.Unmarshal(raw, &file); err != nil {
		t.Fatalf("deploy/compose.yaml: %v", err)
	}
	var changes []string
	services, _ := file["services"].(map[string]any)
	for _, name := range []string{"jaeger", "otel-collector"} {
		if _, ok := services[name]; !ok {
			t.Fatalf("deploy/compose.yaml has no service %s", name)
		}
		delete(services, name)
	}
	changes = append(changes, "left out jaeger and otel-collector (their images need a registry); the services export no traces")
	var built []string
	for name, v := range services {
		svc := v.(map[string]any)
		if _, ok := svc["build"]; ok {
			delete(svc, "build")
			svc["image"] = image(name)
			built = append(built, name)
		}
		if deps, ok := svc["depends_on"].(map[string]any); ok {
			delete(deps, "otel-collector")
			delete(deps, "jaeger")
		}
		if env, ok := svc["environment"].(map[string]any); ok {
			delete(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
		}
		if vols, ok := svc["volumes"].([]any); ok {
			for i, vol := range vols {
				if s, ok := vol.(string); ok && strings.HasPrefix(s, "./") {
					vols[i] = filepath.Join(deploy, s)
				}
			}
		}
	}
	slices.Sort(built)
	changes = append(changes, fmt.Sprintf("%s run the images make images built (%s), not a build of their own",
		strings.Join(built, ", "), image("<service>")))
	if label, _ := podman("image", "inspect", "-f", "{{index .Labels \""+standIn+"\"}}", "docker.io/library/mongo:7.0"); label != "" && label != "<no value>" {
		mongo := services["mongo"].(map[string]any)
		mongo["healthcheck"].(map[string]any)["test"] = []any{"CMD", "nova-store", "ping"}
		changes = append(changes, "mongo:7.0 is the local stand-in ("+label+"): its health check is nova-store ping, not mongosh")
	}
	out, err := yaml.Marshal(file)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "compose.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, changes
}

// compose runs podman-compose on the derived file with env added to the
// test's environment (what compose.yaml interpolates).
type compose struct {
	t    *testing.T
	file string
	env  []string
}

func (c *compose) run(args ...string) (string, error) {
	all := append([]string{"--podman-args", strings.Join(podmanArgs, " "), "-p", project, "-f", c.file}, args...)
	cmd := exec.Command("podman-compose", all...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func container(service string) string { return project + "_" + service + "_1" }

func logs(service string) string {
	out, _ := podman("logs", "--tail", "40", container(service))
	return out
}

// curl runs curl against the gateway with the admin key and returns the
// answer's status and JSON body.
func curl(t *testing.T, method, path, contentType string, body []byte) (int, map[string]any) {
	t.Helper()
	args := []string{"-s", "-S", "-X", method, "-H", "Authorization: Bearer " + apiKey, "-w", "\n%{http_code}", gateway + path}
	if body != nil {
		args = append(args, "-H", "Content-Type: "+contentType, "--data-binary", "@-")
	}
	cmd := exec.Command("curl", args...)
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("curl -X %s %s: %v %s", method, path, err, out)
	}
	text := strings.TrimSpace(string(out))
	i := strings.LastIndexByte(text, '\n')
	var code int
	fmt.Sscan(text[i+1:], &code)
	var doc map[string]any
	if i > 0 {
		if err := json.Unmarshal([]byte(text[:i]), &doc); err != nil {
			t.Fatalf("curl -X %s %s: %d, not JSON: %s", method, path, code, text[:i])
		}
	}
	return code, doc
}

// get reads the gateway without curl, for the waits that poll it.
func get(ctx context.Context, path string, into any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, gateway+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(into)
}

type execution struct {
	Execution struct {
		ID     string   `json:"execution_id"`
		Status string   `json:"status"`
		Path   []string `json:"path"`
		Error  string   `json:"error"`
	} `json:"execution"`
	Nodes []struct {
		NodeID   string `json:"node_id"`
		NodeType string `json:"node_type"`
		Status   string `json:"status"`
		Steps    []step `json:"steps"`
	} `json:"nodes"`
}

type step struct {
	AgentName string `json:"agent_name"`
	Status    string `json:"status"`
	SandboxID string `json:"sandbox_id"`
}

// ended waits until the audit store has recorded the execution's end and
// every node visit on its path.
func ended(t *testing.T, ctx context.Context, id string) execution {
	t.Helper()
	for {
		var e execution
		code, err := get(ctx, "/v1/executions/"+id, &e)
		if err == nil && code == http.StatusOK && e.Execution.Status != "running" && len(e.Nodes) >= len(e.Execution.Path) {
			return e
		}
		select {
		case <-ctx.Done():
			t.Fatalf("execution %s has not ended: %d %v %+v", id, code, err, e.Execution)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// checkChain says what is wrong with an ended execution's chain of work:
// it must have succeeded along want, each node visit succeeded, and each
// code node run in the sandbox.
func checkChain(e execution, want []string) error {
	if e.Execution.Status != "succeeded" || !slices.Equal(e.Execution.Path, want) {
		return fmt.Errorf("%s: %s along %v (%s); want succeeded along %v", e.Execution.ID, e.Execution.Status, e.Execution.Path, e.Execution.Error, want)
	}
	var visited []string
	for _, n := range e.Nodes {
		visited = append(visited, n.NodeID)
		if n.Status != "success" {
			return fmt.Errorf("%s: node %s is %s", e.Execution.ID, n.NodeID, n.Status)
		}
		switch n.NodeType {
		case "start", "end", "wait":
			continue
		}
		ran := slices.ContainsFunc(n.Steps, func(s step) bool {
			return s.AgentName == "sandbox" && s.Status == "success" && s.SandboxID != ""
		})
		if !ran {
			return fmt.Errorf("%s: node %s has no successful sandbox step: %+v", e.Execution.ID, n.NodeID, n.Steps)
		}
	}
	if !slices.Equal(visited, want) {
		return fmt.Errorf("%s: the chain of work visits %v, want %v", e.Execution.ID, visited, want)
	}
	return nil
}

// bridgeGateway creates the project's network before compose does, and
// returns the host's address on it: where the containers reach the
// scripted model.
func bridgeGateway(t *testing.T) string {
	t.Helper()
	network := project + "_default"
	_, _ = podman("network", "rm", "-f", network)
	if out, err := podman("network", "create", network); err != nil {
		t.Fatalf("podman network create: %v %s", err, out)
	}
	t.Cleanup(func() { _, _ = podman("network", "rm", "-f", network) })
	gw, err := podman("network", "inspect", "-f", "{{range .Subnets}}{{.Gateway}}{{end}}", network)
	if err != nil || net.ParseIP(gw) == nil {
		t.Fatalf("the network's gateway: %q %v", gw, err)
	}
	return gw
}

func TestCompose(t *testing.T) {
	if !required {
		t.Skip("SKIPPED: compose-test runs with make compose-test (NOVA_COMPOSE_TEST=1), which builds the images first")
	}
	for _, tool := range []string{"podman", "podman-compose", "curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("no %s (make deps-images)", tool)
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	s := &steps{t: t}
	defer s.print()

	file, changes := offline(t, t.TempDir())
	t.Logf("deploy/compose.yaml as run here (%s):\n- %s", file, strings.Join(changes, "\n- "))

	// The AI agents call the scripted model (the examples' rules) over
	// HTTP, at the host's address on the project's network.
	rules, err := scripted.LoadRules("../../../examples/scripted-llm.yaml")
	if err != nil {
		t.Fatal(err)
	}
	model, err := scripted.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	// The host's address on the network exists once a container is on
	// it: the model listens there after compose up.
	modelAddr := net.JoinHostPort(bridgeGateway(t), freePort(t))
	c := &compose{t: t, file: file, env: []string{
		"OPENAI_BASE_URL=http://" + modelAddr + "/v1",
		"OPENAI_API_KEY=sk-compose-test-scripted",
		"NOVA_CODE_GENERATOR_MODEL=gpt-4o",
	}}
	_, _ = c.run("down", "-v")
	t.Cleanup(func() {
		if t.Failed() {
			for _, svc := range []string{"nats", "mongo", "graph-engine", "sandbox", "audit", "gateway", "code-generator"} {
				t.Logf("%s's log (last lines):\n%s", svc, logs(svc))
			}
		}
		start := time.Now()
		if out, err := c.run("down", "-v"); err != nil {
			t.Errorf("podman-compose down: %v\n%s", err, out)
		}
		t.Logf("podman-compose down -v: %.1f s", time.Since(start).Seconds())
	})

	s.run("podman-compose up -d", func() {
		if out, err := c.run("up", "-d"); err != nil {
			t.Fatalf("podman-compose up: %v\n%s", err, out)
		}
	})
	s.run("the scripted model listening on the project's network", func() {
		for {
			_, stop, err := model.Start(ctx, modelAddr)
			if err == nil {
				t.Cleanup(func() { _ = stop() })
				return
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the scripted model cannot listen on %s: %v", modelAddr, err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	})
	s.run("every service ready (/readyz on 8081-8088)", func() {
		for port := 8081; port <= 8088; port++ {
			waitReady(t, ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
		}
	})

	examples := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	s.run("register examples/invoice-routing.yaml and examples/ai-orders.yaml (curl)", func() {
		for _, name := range []string{"invoice-routing.yaml", "ai-orders.yaml"} {
			if code, doc := curl(t, "POST", "/v1/workflows", "application/yaml", examples(name)); code != http.StatusOK && code != http.StatusCreated {
				t.Fatalf("POST /v1/workflows %s: %d %v", name, code, doc)
			}
		}
	})

	invoiceAuto := []string{"start", "extract", "validate", "check_amount", "auto_approve", "done"}
	invoiceManager := []string{"start", "extract", "validate", "check_amount", "manager_approval", "record_approval", "done"}
	s.run("invoice-routing: one approved automatically, one by a manager's signal (curl)", func() {
		code, doc := curl(t, "POST", "/v1/executions?wait=60s", "application/json", []byte(`{"workflow":"invoice-routing","context":{"amount":200}}`))
		if code != http.StatusOK || doc["status"] != "succeeded" {
			t.Fatalf("invoice-routing, 200: %d %v", code, doc)
		}
		if err := checkChain(ended(t, ctx, doc["execution_id"].(string)), invoiceAuto); err != nil {
			t.Error(err)
		}
		code, doc = curl(t, "POST", "/v1/executions", "application/json", []byte(`{"workflow":"invoice-routing"}`))
		if code != http.StatusAccepted {
			t.Fatalf("invoice-routing, sample invoice: %d %v", code, doc)
		}
		id := doc["execution_id"].(string)
		waitingFor(t, ctx, id, "manager_approval")
		if code, doc := curl(t, "POST", "/v1/executions/"+id+"/signals/approval", "application/json",
			[]byte(`{"approved":true,"reviewed_by":"manager_1"}`)); code >= 300 {
			t.Fatalf("signal approval: %d %v", code, doc)
		}
		if err := checkChain(ended(t, ctx, id), invoiceManager); err != nil {
			t.Error(err)
		}
	})
	s.run("ai-orders: code written by the scripted model, checked, run (curl)", func() {
		code, doc := curl(t, "POST", "/v1/executions?wait=120s", "application/json", []byte(`{"workflow":"ai-orders","context":{"total":1500}}`))
		if code != http.StatusOK || doc["status"] != "succeeded" {
			t.Fatalf("ai-orders: %d %v", code, doc)
		}
		id := doc["execution_id"].(string)
		if err := checkChain(ended(t, ctx, id), []string{"start", "discount", "route", "review", "done"}); err != nil {
			t.Error(err)
		}
		if _, doc := curl(t, "GET", "/v1/executions/"+id, "", nil); doc != nil {
			nodes, _ := doc["nodes"].([]any)
			t.Logf("ai-orders %s: chain of work read back with curl: %d node visits, model calls %v", id, len(nodes), doc["execution"].(map[string]any)["model_calls"])
		}
	})

	// Twice a load in flight when the sandbox container goes: podman kill
	// (an operator's stop; the test starts it again), then a crash (its
	// process killed from the host; compose's restart policy brings it
	// back).
	for _, stop := range []struct {
		how  string
		stop func() string
	}{
		{"podman kill the sandbox container", func() string {
			before, _ := podman("inspect", "-f", "{{.State.StartedAt}}", container("sandbox"))
			if out, err := podman("kill", container("sandbox")); err != nil {
				t.Fatalf("podman kill: %v %s", err, out)
			}
			for {
				state, _ := podman("inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", container("sandbox"))
				if strings.HasPrefix(state, "running") && !strings.HasSuffix(state, before) {
					return "came back by itself"
				}
				if strings.HasPrefix(state, "exited") {
					// podman kill counts as stopped by the user: compose's
					// restart: unless-stopped is for crashes, so it stays
					// down until an operator starts it.
					if out, err := podman("start", container("sandbox")); err != nil {
						t.Fatalf("podman start: %v %s", err, out)
					}
					return "stayed down (stopped by the user: unless-stopped does not apply) until podman start"
				}
				pause(t, ctx, "the sandbox container is "+state)
			}
		}},
		{"kill -9 the sandbox's process from the host (a crash)", func() string {
			before, _ := podman("inspect", "-f", "{{.RestartCount}}", container("sandbox"))
			pid, err := podman("inspect", "-f", "{{.State.Pid}}", container("sandbox"))
			if err != nil {
				t.Fatalf("podman inspect: %v %s", err, pid)
			}
			if out, err := exec.Command("kill", "-9", pid).CombinedOutput(); err != nil {
				t.Fatalf("kill -9 %s: %v %s", pid, err, out)
			}
			for {
				state, _ := podman("inspect", "-f", "{{.State.Status}} {{.RestartCount}}", container("sandbox"))
				if strings.HasPrefix(state, "running") && !strings.HasSuffix(state, " "+before) {
					return "was restarted by compose's restart: unless-stopped (" + strings.TrimPrefix(state, "running ") + " restarts)"
				}
				pause(t, ctx, "the sandbox container is "+state)
			}
		}},
	} {
		var ids []string
		s.run(fmt.Sprintf("start %d invoice-routing executions (curl)", loadRuns), func() {
			for i := range loadRuns {
				code, doc := curl(t, "POST", "/v1/executions", "application/json",
					fmt.Appendf(nil, `{"workflow":"invoice-routing","context":{"amount":%d}}`, 100+i))
				if code != http.StatusAccepted {
					t.Fatalf("start %d: %d %v", i, code, doc)
				}
				ids = append(ids, doc["execution_id"].(string))
			}
		})
		s.run(stop.how+" while they run, until it is ready again", func() {
			finished := 0
			for _, id := range ids {
				var e execution
				if code, err := get(ctx, "/v1/executions/"+id, &e); err == nil && code == http.StatusOK && e.Execution.Status == "succeeded" {
					finished++
				}
			}
			if finished == len(ids) {
				t.Fatalf("every execution had ended before the sandbox went: the load is too small to show anything")
			}
			what := stop.stop()
			waitReady(t, ctx, "http://127.0.0.1:8082/readyz")
			t.Logf("%s with %d of %d executions ended: it %s", stop.how, finished, len(ids), what)
		})
		s.run(fmt.Sprintf("every one of the %d executions succeeded, its chain of work complete", loadRuns), func() {
			var bad []string
			for _, id := range ids {
				if err := checkChain(ended(t, ctx, id), invoiceAuto); err != nil {
					bad = append(bad, err.Error())
				}
			}
			if len(bad) > 0 {
				t.Errorf("%d of %d executions lost or wrong:\n%s", len(bad), len(ids), strings.Join(bad, "\n"))
			}
		})
	}
}

// pause waits a tenth of a second, failing with why when ctx ends.
func pause(t *testing.T, ctx context.Context, why string) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatal(why)
	case <-time.After(100 * time.Millisecond):
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return port
}

func waitReady(t *testing.T, ctx context.Context, url string) {
	t.Helper()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s does not answer 200: %v", url, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitingFor waits until the execution waits at node.
func waitingFor(t *testing.T, ctx context.Context, id, node string) {
	t.Helper()
	for {
		var e struct {
			Execution struct {
				Waiting *struct {
					Node string `json:"node"`
				} `json:"waiting"`
				Status string `json:"status"`
			} `json:"execution"`
		}
		if code, err := get(ctx, "/v1/executions/"+id, &e); err == nil && code == http.StatusOK {
			if e.Execution.Waiting != nil && e.Execution.Waiting.Node == node {
				return
			}
			if e.Execution.Status != "" && e.Execution.Status != "running" {
				t.Fatalf("execution %s ended %s before waiting at %s", id, e.Execution.Status, node)
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("execution %s does not wait at %s", id, node)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
