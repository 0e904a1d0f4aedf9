// Package podmantest holds what the tests that run NOVA's images with
// podman share: podman as deploy/images/images.sh runs it, the images'
// names, timed steps, and a client of the gateway's HTTP API that uses curl
// for what a user would type and reads the chain of work back.
package podmantest

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

	"github.com/novaflow/nova/pkg/llm/scripted"
)

// Args are podman's global flags here: runc and cgroupfs, as
// deploy/images/images.sh says why.
var Args = []string{"--runtime", "runc", "--cgroup-manager", "cgroupfs"}

// Podman runs podman with Args and returns its output.
func Podman(args ...string) (string, error) {
	out, err := exec.Command("podman", append(slices.Clone(Args), args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// Image is the name `make images` gives a service's image
// (IMAGE_PREFIX/<service>:IMAGE_TAG, which the make targets set: nova and
// the chart's appVersion; nova and dev when unset).
func Image(service string) string {
	prefix, tag := os.Getenv("IMAGE_PREFIX"), os.Getenv("IMAGE_TAG")
	if prefix == "" {
		prefix = "nova"
	}
	if tag == "" {
		tag = "dev"
	}
	return fmt.Sprintf("localhost/%s/%s:%s", prefix, service, tag)
}

// StandIn labels the images `make base-images` made locally.
const StandIn = "io.nova.local-stand-in"

// Steps times what a test does and prints it at the end.
type Steps struct {
	T    *testing.T
	done []string
}

// Run runs f as the step name and records how long it took.
func (s *Steps) Run(name string, f func()) {
	s.T.Helper()
	start := time.Now()
	s.T.Logf("%s ...", name)
	f()
	d := time.Since(start)
	s.done = append(s.done, fmt.Sprintf("%7.1f s  %s", d.Seconds(), name))
	s.T.Logf("%s: %.1f s", name, d.Seconds())
}

// Print logs every step with its time.
func (s *Steps) Print(what string) {
	s.T.Logf("what %s did, and how long each step took:\n%s", what, strings.Join(s.done, "\n"))
}

// FreePort is a port free on the host now.
func FreePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// LastLine is the last line of s.
func LastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// WaitReady waits until url answers 200.
func WaitReady(t *testing.T, ctx context.Context, url string) {
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
		Pause(t, ctx, fmt.Sprintf("%s does not answer 200: %v", url, err))
	}
}

// Pause waits a tenth of a second, failing with why when ctx ends.
func Pause(t *testing.T, ctx context.Context, why string) {
	t.Helper()
	select {
	case <-ctx.Done():
		t.Fatal(why)
	case <-time.After(100 * time.Millisecond):
	}
}

// Gateway is NOVA's HTTP API at URL, called with the API key Key.
type Gateway struct {
	URL, Key string
}

// Curl runs curl against the gateway and returns the answer's status and
// JSON body.
func (g Gateway) Curl(t *testing.T, method, path, contentType string, body []byte) (int, map[string]any) {
	t.Helper()
	args := []string{"-s", "-S", "-X", method, "-H", "Authorization: Bearer " + g.Key, "-w", "\n%{http_code}", g.URL + path}
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

// Get reads the gateway without curl, for the waits that poll it.
func (g Gateway) Get(ctx context.Context, path string, into any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, g.URL+path, nil)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+g.Key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	return resp.StatusCode, json.NewDecoder(resp.Body).Decode(into)
}

// The paths the examples take: invoice-routing's amount under the
// approval limit, ai-orders' total of 1500.
var (
	InvoiceAutoPath = []string{"start", "extract", "validate", "check_amount", "auto_approve", "done"}
	AIOrdersPath    = []string{"start", "discount", "route", "review", "done"}
)

// RegisterExamples registers workflows of examples/ through the gateway
// with curl, as their YAML.
func (g Gateway) RegisterExamples(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", name))
		if err != nil {
			t.Fatal(err)
		}
		if code, doc := g.Curl(t, "POST", "/v1/workflows", "application/yaml", b); code != http.StatusOK && code != http.StatusCreated {
			t.Fatalf("POST /v1/workflows %s: %d %v", name, code, doc)
		}
	}
}

// Run starts an execution with curl (body: POST /v1/executions's), waits
// for its end (the gateway's longest wait, 60 s), which must be a
// success, and checks its chain of work along want (CheckChain). It
// returns the execution's id.
func (g Gateway) Run(t *testing.T, ctx context.Context, body string, want []string) string {
	t.Helper()
	code, doc := g.Curl(t, "POST", "/v1/executions?wait=60s", "application/json", []byte(body))
	if code != http.StatusOK || doc["status"] != "succeeded" {
		t.Fatalf("%s: %d %v", body, code, doc)
	}
	id := doc["execution_id"].(string)
	if err := CheckChain(g.Ended(t, ctx, id), want); err != nil {
		t.Error(err)
	}
	return id
}

// Execution is what the tests read of GET /v1/executions/{id}.
type Execution struct {
	Execution struct {
		ID      string   `json:"execution_id"`
		Status  string   `json:"status"`
		Path    []string `json:"path"`
		Error   string   `json:"error"`
		Waiting *struct {
			Node string `json:"node"`
		} `json:"waiting"`
	} `json:"execution"`
	Nodes []struct {
		NodeID   string `json:"node_id"`
		NodeType string `json:"node_type"`
		Status   string `json:"status"`
		Steps    []Step `json:"steps"`
	} `json:"nodes"`
}

// Step is one agent step of a node visit.
type Step struct {
	AgentName string `json:"agent_name"`
	Status    string `json:"status"`
	SandboxID string `json:"sandbox_id"`
}

// Ended waits until the audit store has recorded the execution's end and
// every node visit on its path.
func (g Gateway) Ended(t *testing.T, ctx context.Context, id string) Execution {
	t.Helper()
	for {
		var e Execution
		code, err := g.Get(ctx, "/v1/executions/"+id, &e)
		if err == nil && code == http.StatusOK && e.Execution.Status != "running" && len(e.Nodes) >= len(e.Execution.Path) {
			return e
		}
		Pause(t, ctx, fmt.Sprintf("execution %s has not ended: %d %v %+v", id, code, err, e.Execution))
	}
}

// WaitingFor waits until the execution waits at node.
func (g Gateway) WaitingFor(t *testing.T, ctx context.Context, id, node string) {
	t.Helper()
	for {
		var e Execution
		if code, err := g.Get(ctx, "/v1/executions/"+id, &e); err == nil && code == http.StatusOK {
			if e.Execution.Waiting != nil && e.Execution.Waiting.Node == node {
				return
			}
			if e.Execution.Status != "" && e.Execution.Status != "running" {
				t.Fatalf("execution %s ended %s before waiting at %s", id, e.Execution.Status, node)
			}
		}
		Pause(t, ctx, fmt.Sprintf("execution %s does not wait at %s", id, node))
	}
}

// CheckChain says what is wrong with an ended execution's chain of work:
// it must have succeeded along want, each node visit succeeded, and each
// code node run in the sandbox.
func CheckChain(e Execution, want []string) error {
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
		ran := slices.ContainsFunc(n.Steps, func(s Step) bool {
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

// Network creates a podman network (with DNS: containers find each other by
// name) for the test, removed when it ends, and returns the host's address
// on it: where containers reach a server of the test. That address exists
// once a container is on the network.
func Network(t *testing.T, name string) string {
	t.Helper()
	_, _ = Podman("network", "rm", "-f", name)
	if out, err := Podman("network", "create", name); err != nil {
		t.Fatalf("podman network create: %v %s", err, out)
	}
	t.Cleanup(func() { _, _ = Podman("network", "rm", "-f", name) })
	addr, err := Podman("network", "inspect", "-f", "{{range .Subnets}}{{.Gateway}}{{end}}", name)
	if err != nil || net.ParseIP(addr) == nil {
		t.Fatalf("the address of network %s's gateway: %q %v", name, addr, err)
	}
	return addr
}

// ScriptedModel serves the scripted OpenAI-compatible model with the
// examples' rules (examples/scripted-llm.yaml) at addr until the test ends,
// waiting for addr to exist (a network's address, see Network).
func ScriptedModel(t *testing.T, ctx context.Context, addr string) {
	t.Helper()
	rules, err := scripted.LoadRules(filepath.Join("..", "..", "..", "examples", "scripted-llm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	model, err := scripted.New(rules)
	if err != nil {
		t.Fatal(err)
	}
	for {
		_, stop, err := model.Start(ctx, addr)
		if err == nil {
			t.Cleanup(func() { _ = stop() })
			return
		}
		Pause(t, ctx, fmt.Sprintf("the scripted model cannot listen on %s: %v", addr, err))
	}
}
