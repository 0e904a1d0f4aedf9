// Package images tests NOVA's container images as `make images` builds them,
// run with podman: every service image starts as a non-root user on a
// read-only root file system with no capabilities and answers /readyz; no
// runtime image carries a Go toolchain or a compiler; the sandbox image, run
// with the chart's security context, runs a program and holds against the
// sandbox's abuse suite, and without each relaxation that context makes it
// refuses to start, saying what to allow.
//
// `make images-test` builds the images and runs them (NOVA_IMAGES_TEST=1: a
// missing podman or image is an error); `make test` skips them.
package images

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/novaflow/nova/pkg/devstack"
	"github.com/novaflow/nova/pkg/devstack/devstacktest"
	novav1 "github.com/novaflow/nova/proto/nova/v1"
	"github.com/novaflow/nova/services/sandbox/abusesuite"

	"github.com/novaflow/nova/deploy/test/internal/podmantest"
)

// required: the images must be there (make images-test).
var required = os.Getenv("NOVA_IMAGES_TEST") == "1"

// image and podman are podmantest's: the name make images gives, podman
// as deploy/images/images.sh runs it.
var (
	image  = podmantest.Image
	podman = podmantest.Podman
)

// need skips (or with NOVA_IMAGES_TEST=1 fails) the test without podman or
// without the images.
func need(t *testing.T, services ...string) {
	t.Helper()
	if !required {
		// Images built before a change would test the old code: only
		// make images-test, which builds them first, runs these.
		t.Skip("SKIPPED: the images' tests run with make images-test (NOVA_IMAGES_TEST=1), which builds them first")
	}
	missing := func(why string) { t.Fatal(why + " (make deps-images base-images images)") }
	if _, err := exec.LookPath("podman"); err != nil {
		missing("no podman")
	}
	for _, s := range services {
		if _, err := podman("image", "exists", image(s)); err != nil {
			missing("no image " + image(s))
		}
	}
}

// container is one started with podman run -d, removed when the test ends.
type container struct {
	t    *testing.T
	name string
}

func run(t *testing.T, args ...string) *container {
	t.Helper()
	name := "nova-images-test-" + uuid.NewString()[:8]
	if out, err := podman(append([]string{"run", "-d", "--name", name}, args...)...); err != nil {
		t.Fatalf("podman run %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	t.Cleanup(func() { _, _ = podman("rm", "-f", "-t", "2", name) })
	return &container{t: t, name: name}
}

func (c *container) logs() string {
	out, _ := podman("logs", c.name)
	return out
}

// ready waits until url answers 200, failing with the container's state
// and log if it exits or does not within a minute.
func (c *container) ready(url string) {
	c.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		state, _ := podman("inspect", "-f", "{{.State.Status}}", c.name)
		if state == "exited" || time.Now().After(deadline) {
			c.t.Fatalf("%s is %s and %s does not answer 200 (%v); its log:\n%s", c.name, state, url, err, c.logs())
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// exited waits for the container to exit and returns its exit code.
func (c *container) exited() int {
	c.t.Helper()
	out, err := podman("wait", c.name)
	if err != nil {
		c.t.Fatalf("podman wait %s: %v %s", c.name, err, out)
	}
	var code int
	fmt.Sscan(out, &code)
	return code
}

// zygotesReady waits until the sandbox in the container has logged n
// distinct zygotes ready (LOG_LEVEL=debug), failing with its log if it
// exits or they are not within two minutes.
func (c *container) zygotesReady(n int) {
	c.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		log := c.logs()
		ready := map[string]bool{}
		for _, line := range strings.Split(log, "\n") {
			var rec struct {
				Msg     string `json:"msg"`
				Zygote  string `json:"zygote"`
				Startup any    `json:"startup"`
			}
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "sandbox zygote ready" && rec.Startup != nil {
				ready[rec.Zygote] = true
			}
		}
		if len(ready) >= n {
			return
		}
		state, _ := podman("inspect", "-f", "{{.State.Status}}", c.name)
		if state == "exited" || time.Now().After(deadline) {
			c.t.Fatalf("%s is %s with %d of %d zygotes ready; its log:\n%s", c.name, state, len(ready), n, log)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// The nine images: non-root and no toolchain; the seven services up on a
// read-only root with no capabilities against a real NATS and store, and
// the CLI validating a workflow there.
func TestServiceImages(t *testing.T) {
	services := []string{"graph-engine", "audit", "gateway", "input-analyzer", "code-generator", "code-validator", "output-validator", "nova", "sandbox"}
	need(t, services...)
	ctx := t.Context()
	dir := t.TempDir()
	n, err := devstack.StartNATS(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Shutdown)
	m, err := devstack.StartMongo(ctx, devstack.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	keys, err := filepath.Abs("../../gateway-keys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range services {
		t.Run(s, func(t *testing.T) {
			user, err := podman("image", "inspect", "-f", "{{.Config.User}}", image(s))
			if err != nil || user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "0:") || strings.HasPrefix(user, "root:") {
				t.Errorf("%s runs as %q (%v); want a non-root user", image(s), user, err)
			}
			// OCI labels: what it is and which source made it.
			labels := map[string]string{}
			if out, err := podman("image", "inspect", "-f", "{{json .Labels}}", image(s)); err != nil || json.Unmarshal([]byte(out), &labels) != nil {
				t.Errorf("%s: labels unreadable: %v %s", image(s), err, out)
			}
			for key, want := range map[string]string{
				"org.opencontainers.image.title":    "nova-" + s,
				"org.opencontainers.image.source":   "https://github.com/novaflow/nova",
				"org.opencontainers.image.version":  imageTag(),
				"org.opencontainers.image.revision": revision(t),
			} {
				if labels[key] != want {
					t.Errorf("%s: label %s = %q, want %q", image(s), key, labels[key], want)
				}
			}
			size, _ := podman("image", "inspect", "-f", "{{.Size}}", image(s))
			var bytes int64
			fmt.Sscan(size, &bytes)
			t.Logf("%s: %.1f MB, user %s", image(s), float64(bytes)/1e6, user)
			root, err := podman("image", "mount", image(s))
			if err != nil {
				t.Fatalf("podman image mount: %v %s", err, root)
			}
			t.Cleanup(func() { _, _ = podman("image", "unmount", image(s)) })
			for _, tool := range []string{"usr/local/go", "usr/bin/go", "usr/bin/gcc", "usr/bin/cc", "usr/bin/make", "go/pkg/mod"} {
				if _, err := os.Stat(filepath.Join(root, tool)); err == nil {
					t.Errorf("%s carries /%s: a build tool in a runtime image", image(s), tool)
				}
			}
			// No setuid or setgid file: nothing in the image can gain a
			// privilege the container was not given.
			var special []string
			_ = filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
				if err != nil || !d.Type().IsRegular() {
					return nil
				}
				if info, err := d.Info(); err == nil && info.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
					special = append(special, strings.TrimPrefix(path, root))
				}
				return nil
			})
			if len(special) > 0 {
				t.Errorf("%s has setuid or setgid files: %s", image(s), strings.Join(special, " "))
			}

			if s == "sandbox" {
				return // run by TestSandboxImage, in the chart's context
			}
			base := []string{"--network", "host", "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges"}
			if s == "nova" {
				// The CLI: validates a workflow from a read-only root.
				wf, err := filepath.Abs("../../../examples/invoice-routing.yaml")
				if err != nil {
					t.Fatal(err)
				}
				c := run(t, append(base, "-v", wf+":/wf.yaml:ro", image(s), "validate", "/wf.yaml")...)
				if code := c.exited(); code != 0 {
					t.Errorf("nova validate in its image: exit %d\n%s", code, c.logs())
				}
				return
			}
			health := podmantest.FreePort(t)
			env := []string{"-e", "NATS_URL=" + n.URL(), "-e", "MONGODB_URI=" + m.URI(), "-e", fmt.Sprintf("HEALTH_ADDR=127.0.0.1:%d", health)}
			if s == "gateway" {
				env = append(env, "-v", keys+":/etc/nova/gateway-keys.yaml:ro", "-e", "NOVA_GATEWAY_KEYS_FILE=/etc/nova/gateway-keys.yaml",
					"-e", fmt.Sprintf("GATEWAY_ADDR=127.0.0.1:%d", podmantest.FreePort(t)))
			}
			c := run(t, append(append(base, env...), image(s))...)
			c.ready(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
			// The image's HEALTHCHECK, run by the engine in the container.
			if out, err := podman("healthcheck", "run", c.name); err != nil {
				t.Errorf("%s: its HEALTHCHECK failed on a ready service: %v %s", image(s), err, out)
			}
		})
	}
}

// The sandbox image with the chart's security context (its own user
// namespace as hostUsers: false, no capabilities, a read-only root,
// seccomp and AppArmor unconfined, /proc unmasked) runs a program sent over
// NATS, and the abuse suite's programs (services/sandbox/abusesuite) in each
// of the runner's modes; without each relaxation it refuses to start, saying
// what to allow, or starts where that relaxation is not needed and the
// suite shows it isolates as well.
func TestSandboxImage(t *testing.T) {
	need(t, "sandbox")
	ctx := t.Context()
	b := devstacktest.Bus(ctx, t, "images-test")
	port := strings.TrimPrefix(b.Conn().ConnectedUrl(), "nats://127.0.0.1:")
	apparmor := hostHasAppArmor()
	relaxations := map[string][]string{
		"seccomp unconfined":  {"--security-opt", "seccomp=unconfined"},
		"AppArmor unconfined": {"--security-opt", "apparmor=unconfined"},
		"/proc unmasked":      {"--security-opt", "unmask=ALL"},
	}
	// What each relaxation's absence does on a host like this one (podman
	// 4.3's default seccomp profile; AppArmor where the kernel has it).
	without := map[string]string{
		"seccomp unconfined": "seccomp=unconfined",
		"/proc unmasked":     "procMount: Unmasked",
	}
	if apparmor {
		without["AppArmor unconfined"] = "AppArmor"
	}
	start := func(t *testing.T, skip string, extra ...string) (*container, int) {
		health := podmantest.FreePort(t)
		userns := "--userns=auto"
		if skip == "own user namespace" {
			userns = "--userns=host"
		}
		args := []string{userns, "--read-only", "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
			"--network", "slirp4netns:allow_host_loopback=true", "-p", fmt.Sprintf("127.0.0.1:%d:8080", health),
			"-e", "NATS_URL=nats://10.0.2.2:" + port, "-e", "HEALTH_ADDR=0.0.0.0:8080"}
		for name, flags := range relaxations {
			if name != skip {
				args = append(args, flags...)
			}
		}
		return run(t, append(append(args, extra...), image("sandbox"))...), health
	}

	t.Run("the chart's context", func(t *testing.T) {
		c, health := start(t, "")
		c.ready(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("the container's log:\n%s", c.logs())
			}
		})
		res, _ := abusesuite.NewClient(t, b).Execute(t, &novav1.ExecuteCode{
			Language: "python", Code: "x = 6 * 7\ncontext['answer'] = x\nprint('ran in the container')", TimeoutSeconds: 30})
		if res.Status != "success" || !strings.Contains(res.Stdout, "ran in the container") {
			t.Errorf("a node's program in the sandbox container: %s %s %s", res.Status, res.Error, res.Stdout)
		}
	})
	// abuse runs the sandbox service's abuse suite (services/sandbox/abusesuite)
	// against the container started with these flags, in one of the
	// runner's modes: its programs sent over NATS, every isolation property
	// it checks in process must hold inside the container too. The
	// container gets the suite's secret in its environment and the mode's
	// limits, workers and zygotes; the suite starts once they are ready.
	abuse := func(t *testing.T, skip string, mode abusesuite.Mode) {
		extra := []string{"-e", "LOG_LEVEL=debug"} // says when each zygote is ready
		for _, kv := range mode.Env() {
			extra = append(extra, "-e", kv)
		}
		c, health := start(t, skip, extra...)
		c.ready(fmt.Sprintf("http://127.0.0.1:%d/readyz", health))
		c.zygotesReady(mode.ZygoteCount())
		// Programs that try the host's loopback go to 10.0.2.2, where the
		// service reaches it (its NATS_URL); those that try the container's
		// own ports go to its health port, 8080. The container runs as root
		// on this machine (rootful podman), so its processes are this
		// machine's and HostProcesses counts them, whatever their user
		// namespace; the suite shows that it sees them.
		t.Log("processes left alive are counted in this machine's /proc, where rootful podman's containers' processes are")
		// What the programs must not reach or see, the container's own
		// processes do: the secret is in its environment, and the host's
		// loopback (the NATS there) and the health port answer in its network.
		control := `import os, socket
assert os.environ['OPENAI_API_KEY'] == %q, 'no secret in the environment'
for addr in [('10.0.2.2', %s), ('127.0.0.1', 8080)]:
    socket.create_connection(addr, timeout=5).close()
print('reached')`
		if out, err := podman("exec", c.name, "/usr/bin/python3", "-c", fmt.Sprintf(control, abusesuite.Secret, port)); err != nil || out != "reached" {
			t.Fatalf("in the container, outside the sandbox: %v %s", err, out)
		}
		began := time.Now()
		abusesuite.Run(t, abusesuite.Target{
			Client:       abusesuite.NewClient(t, b),
			Mode:         mode,
			HostLoopback: "10.0.2.2",
			OwnPorts:     []int{8080},
			Alive:        abusesuite.HostProcesses,
		})
		t.Logf("the abuse suite (%s) against the sandbox container: %.1f s", mode.Name, time.Since(began).Seconds())
		if t.Failed() {
			t.Logf("the container's log:\n%s", c.logs())
		}
	}
	t.Run("the abuse suite in the chart's context", func(t *testing.T) {
		for _, mode := range abusesuite.Modes {
			t.Run(mode.Name, func(t *testing.T) { abuse(t, "", mode) })
		}
	})
	// Where a relaxation is not needed the suite runs in the warm mode, as
	// the chart's defaults run programs (a light zygote beside full ones).
	warm := abusesuite.WarmMode
	// Kubernetes allows procMount: Unmasked only in a pod with a user
	// namespace of its own (hostUsers: false); podman unmasks /proc in
	// the host's too, and bubblewrap does not need the pod's own.
	t.Run("in the host's user namespace", func(t *testing.T) { abuse(t, "own user namespace", warm) })
	for name := range relaxations {
		t.Run("without "+name, func(t *testing.T) {
			want, needed := without[name]
			if !needed {
				// It starts (abuse waits for it to be ready), and
				// isolates as well without it.
				t.Logf("without %s the sandbox starts (AppArmor on this host: %v); the abuse suite then:", name, apparmor)
				abuse(t, name, warm)
				return
			}
			c, _ := start(t, name)
			code := c.exited()
			log := c.logs()
			if code == 0 || !strings.Contains(log, "the sandbox cannot isolate programs here") || !strings.Contains(log, want) {
				t.Errorf("without %s: exit %d; want it to refuse to start naming %q; its log:\n%s", name, code, want, log)
			}
			t.Logf("without %s: exit %d: %s", name, code, podmantest.LastLine(log))
		})
	}
}

func hostHasAppArmor() bool {
	b, err := os.ReadFile("/sys/module/apparmor/parameters/enabled")
	return err == nil && strings.TrimSpace(string(b)) == "Y"
}

// imageTag is the tag `make images` gave the images.
func imageTag() string {
	_, tag, _ := strings.Cut(strings.TrimPrefix(podmantest.Image("x"), "localhost/"), ":")
	return tag
}

// revision is the commit the images were built from, as images.sh names
// it: -dirty with changes not committed.
func revision(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("git rev-parse HEAD: %v", err)
	}
	r := strings.TrimSpace(string(out))
	if exec.Command("git", "diff", "--quiet", "HEAD").Run() != nil {
		r += "-dirty"
	}
	return r
}
