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
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/novaflow/nova/deploy/test/internal/podmantest"
)

// project names the containers (<project>_<service>_1), the network and
// the volumes, apart from a `compose up` of the file's own name and from
// another run of this test on the same host (its process id).
var project = fmt.Sprintf("nova-compose-test-%d", os.Getpid())

// loadRuns is the executions in flight when the sandbox is killed.
const loadRuns = 40

var required = os.Getenv("NOVA_COMPOSE_TEST") == "1"

// gw is the gateway as compose publishes it (on the port hostPorts
// chose), with deploy/gateway-keys.yaml's admin key for this local setup.
var gw = podmantest.Gateway{Key: "nova_gk_compose-dev-only"}

// hostPorts gives each host port variable of deploy/compose.yaml a free
// port of this host, so that the test shares it with anything else: the
// variables' assignments for compose's environment, and the ports by
// variable.
func hostPorts(t *testing.T) (env []string, ports map[string]int) {
	t.Helper()
	ports = map[string]int{}
	for _, svc := range readCompose(t).Services {
		for _, p := range svc.Ports {
			s, _ := p.(string)
			if m := publishedPort.FindStringSubmatch(s); m != nil {
				ports[m[1]] = podmantest.FreePort(t)
				env = append(env, fmt.Sprintf("%s=%d", m[1], ports[m[1]]))
			}
		}
	}
	return env, ports
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
			svc["image"] = podmantest.Image(name)
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
		strings.Join(built, ", "), podmantest.Image("<service>")))
	if label, _ := podmantest.Podman("image", "inspect", "-f", "{{index .Labels \""+podmantest.StandIn+"\"}}", "docker.io/library/mongo:7.0"); label != "" && label != "<no value>" {
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
	all := append([]string{"--podman-args", strings.Join(podmantest.Args, " "), "-p", project, "-f", c.file}, args...)
	cmd := exec.Command("podman-compose", all...)
	cmd.Env = append(os.Environ(), c.env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func container(service string) string { return project + "_" + service + "_1" }

func logs(service string) string {
	out, _ := podmantest.Podman("logs", "--tail", "40", container(service))
	return out
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
	s := &podmantest.Steps{T: t}
	defer s.Print("compose-test")

	file, changes := offline(t, t.TempDir())
	t.Logf("deploy/compose.yaml as run here (%s):\n- %s", file, strings.Join(changes, "\n- "))

	// The AI agents call the scripted model (the examples' rules) over
	// HTTP, at the host's address on the project's network, which exists
	// once a container is on it: the model listens there after compose up.
	modelAddr := net.JoinHostPort(podmantest.Network(t, project+"_default"), strconv.Itoa(podmantest.FreePort(t)))
	portEnv, ports := hostPorts(t)
	gw.URL = fmt.Sprintf("http://127.0.0.1:%d", ports["NOVA_GATEWAY_PORT"])
	ready := func(service string) string {
		return fmt.Sprintf("http://127.0.0.1:%d/readyz", ports["NOVA_"+strings.ToUpper(strings.ReplaceAll(service, "-", "_"))+"_HEALTH_PORT"])
	}
	t.Logf("project %s; host ports %s", project, strings.Join(portEnv, " "))
	c := &compose{t: t, file: file, env: append([]string{
		"OPENAI_BASE_URL=http://" + modelAddr + "/v1",
		"OPENAI_API_KEY=sk-compose-test-scripted",
		"NOVA_CODE_GENERATOR_MODEL=gpt-4o",
	}, portEnv...)}
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

	s.Run("podman-compose up -d", func() {
		if out, err := c.run("up", "-d"); err != nil {
			t.Fatalf("podman-compose up: %v\n%s", err, out)
		}
	})
	s.Run("the scripted model listening on the project's network", func() {
		podmantest.ScriptedModel(t, ctx, modelAddr)
	})
	s.Run("every service ready (/readyz on its health port)", func() {
		for _, svc := range []string{"graph-engine", "sandbox", "audit", "input-analyzer", "code-generator", "code-validator", "output-validator", "gateway"} {
			podmantest.WaitReady(t, ctx, ready(svc))
		}
	})

	s.Run("register examples/invoice-routing.yaml and examples/ai-orders.yaml (curl)", func() {
		gw.RegisterExamples(t, "invoice-routing.yaml", "ai-orders.yaml")
	})

	invoiceManager := []string{"start", "extract", "validate", "check_amount", "manager_approval", "record_approval", "done"}
	s.Run("invoice-routing: one approved automatically, one by a manager's signal (curl)", func() {
		gw.Run(t, ctx, `{"workflow":"invoice-routing","context":{"amount":200}}`, podmantest.InvoiceAutoPath)
		code, doc := gw.Curl(t, "POST", "/v1/executions", "application/json", []byte(`{"workflow":"invoice-routing"}`))
		if code != http.StatusAccepted {
			t.Fatalf("invoice-routing, sample invoice: %d %v", code, doc)
		}
		id := doc["execution_id"].(string)
		gw.WaitingFor(t, ctx, id, "manager_approval")
		if code, doc := gw.Curl(t, "POST", "/v1/executions/"+id+"/signals/approval", "application/json",
			[]byte(`{"approved":true,"reviewed_by":"manager_1"}`)); code >= 300 {
			t.Fatalf("signal approval: %d %v", code, doc)
		}
		if err := podmantest.CheckChain(gw.Ended(t, ctx, id), invoiceManager); err != nil {
			t.Error(err)
		}
	})
	s.Run("ai-orders: code written by the scripted model, checked, run (curl)", func() {
		id := gw.Run(t, ctx, `{"workflow":"ai-orders","context":{"total":1500}}`, podmantest.AIOrdersPath)
		if _, doc := gw.Curl(t, "GET", "/v1/executions/"+id, "", nil); doc != nil {
			nodes, _ := doc["nodes"].([]any)
			t.Logf("ai-orders %s: chain of work read back with curl: %d node visits, model calls %v", id, len(nodes), doc["execution"].(map[string]any)["model_calls"])
		}
	})

	// A load with nothing killed (the baseline), then twice a load in
	// flight when the sandbox container goes: podman kill
	// (an operator's stop; the test starts it again), then a crash (its
	// process killed from the host; compose's restart policy brings it
	// back).
	for _, stop := range []struct {
		how  string
		stop func() string
	}{
		// The baseline: the same load with the sandbox left alone.
		{"", nil},
		{"podman kill the sandbox container", func() string {
			before, _ := podmantest.Podman("inspect", "-f", "{{.State.StartedAt}}", container("sandbox"))
			if out, err := podmantest.Podman("kill", container("sandbox")); err != nil {
				t.Fatalf("podman kill: %v %s", err, out)
			}
			for {
				state, _ := podmantest.Podman("inspect", "-f", "{{.State.Status}} {{.State.StartedAt}}", container("sandbox"))
				if strings.HasPrefix(state, "running") && !strings.HasSuffix(state, before) {
					return "came back by itself"
				}
				if strings.HasPrefix(state, "exited") {
					// podman kill counts as stopped by the user: compose's
					// restart: unless-stopped is for crashes, so it stays
					// down until an operator starts it.
					if out, err := podmantest.Podman("start", container("sandbox")); err != nil {
						t.Fatalf("podman start: %v %s", err, out)
					}
					return "stayed down (stopped by the user: unless-stopped does not apply) until podman start"
				}
				podmantest.Pause(t, ctx, "the sandbox container is "+state)
			}
		}},
		{"kill -9 the sandbox's process from the host (a crash)", func() string {
			before, _ := podmantest.Podman("inspect", "-f", "{{.RestartCount}}", container("sandbox"))
			pid, err := podmantest.Podman("inspect", "-f", "{{.State.Pid}}", container("sandbox"))
			if err != nil {
				t.Fatalf("podman inspect: %v %s", err, pid)
			}
			if out, err := exec.Command("kill", "-9", pid).CombinedOutput(); err != nil {
				t.Fatalf("kill -9 %s: %v %s", pid, err, out)
			}
			for {
				state, _ := podmantest.Podman("inspect", "-f", "{{.State.Status}} {{.RestartCount}}", container("sandbox"))
				if strings.HasPrefix(state, "running") && !strings.HasSuffix(state, " "+before) {
					return "was restarted by compose's restart: unless-stopped (" + strings.TrimPrefix(state, "running ") + " restarts)"
				}
				podmantest.Pause(t, ctx, "the sandbox container is "+state)
			}
		}},
	} {
		var ids []string
		s.Run(fmt.Sprintf("start %d invoice-routing executions (curl)", loadRuns), func() {
			for i := range loadRuns {
				code, doc := gw.Curl(t, "POST", "/v1/executions", "application/json",
					fmt.Appendf(nil, `{"workflow":"invoice-routing","context":{"amount":%d}}`, 100+i))
				if code != http.StatusAccepted {
					t.Fatalf("start %d: %d %v", i, code, doc)
				}
				ids = append(ids, doc["execution_id"].(string))
			}
		})
		if stop.stop != nil {
			s.Run(stop.how+" while they run, until it is ready again", func() {
				finished := 0
				for _, id := range ids {
					var e podmantest.Execution
					if code, err := gw.Get(ctx, "/v1/executions/"+id, &e); err == nil && code == http.StatusOK && e.Execution.Status == "succeeded" {
						finished++
					}
				}
				if finished == len(ids) {
					t.Fatalf("every execution had ended before the sandbox went: the load is too small to show anything")
				}
				what := stop.stop()
				podmantest.WaitReady(t, ctx, ready("sandbox"))
				t.Logf("%s with %d of %d executions ended: it %s", stop.how, finished, len(ids), what)
			})
		}
		what := "every one of the %d executions succeeded, its chain of work complete"
		if stop.stop == nil {
			what += " (the baseline: nothing killed)"
		}
		s.Run(fmt.Sprintf(what, loadRuns), func() {
			var bad []string
			for _, id := range ids {
				if err := podmantest.CheckChain(gw.Ended(t, ctx, id), podmantest.InvoiceAutoPath); err != nil {
					bad = append(bad, err.Error())
				}
			}
			if len(bad) > 0 {
				t.Errorf("%d of %d executions lost or wrong:\n%s", len(bad), len(ids), strings.Join(bad, "\n"))
			}
		})
	}
}
