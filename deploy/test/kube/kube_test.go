// Package kube plays the Helm chart's pods with `podman kube play`: `helm
// template` of helm/nova with the values of a small install (values.yaml
// here), its Deployments, ConfigMaps and Secrets run as podman pods beside a
// NATS pod and a store pod, every probe the chart declares answered, and
// workflows run through the chart's gateway. What kube play cannot run
// (Services and their DNS, NetworkPolicies, HPAs, KEDA, PodDisruptionBudgets,
// the ServiceAccount) is listed as the test leaves it out; each is checked
// by the chart test (deploy/test/chart) instead.
//
// `make kube-test` builds Helm and the images and runs it
// (NOVA_KUBE_TEST=1); `make test` skips it.
package kube

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
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

const (
	network = "nova-kube-test"
	release = "nova"
	// The NATS and store pods' names: values.yaml's NATS URL and MongoDB
	// URI name them, as they would name Services.
	natsPod  = "nova-kube-nats"
	storePod = "nova-kube-store"
)

var required = os.Getenv("NOVA_KUBE_TEST") == "1"

// leftOut is what kube play does not run, and where each is checked.
var leftOut = map[string]string{
	"Service":                 "no Services or their DNS: pods reach NATS and the store by an alias on a podman network with DNS; the Services' selectors and ports are checked by the chart test",
	"NetworkPolicy":           "not enforced by podman; the policies' peers and ports are checked by the chart test",
	"HorizontalPodAutoscaler": "no autoscaling; the HPAs' targets are checked by the chart test",
	"ScaledObject":            "no KEDA; the ScaledObjects are checked by the chart test against KEDA's own scaler code",
	"PodDisruptionBudget":     "no evictions; checked by the chart test",
	"ServiceAccount":          "no Kubernetes API; the pods mount no token (automountServiceAccountToken: false, checked by the chart test)",
	"ServiceMonitor":          "no Prometheus Operator; checked by the chart test",
	"Pod":                     "the helm test pod: it asks each service by its Service's name, which kube play does not make; what it asks is checked by the chart test (TestHelmTestPod)",
}

type object = map[string]any

func mapAt(o object, keys ...string) object {
	for _, k := range keys {
		next, _ := o[k].(map[string]any)
		if next == nil {
			return nil
		}
		o = next
	}
	return o
}

func listAt(o object, keys ...string) []any {
	last := keys[len(keys)-1]
	parent := mapAt(o, keys[:len(keys)-1]...)
	if parent == nil {
		return nil
	}
	l, _ := parent[last].([]any)
	return l
}

// probe is one httpGet probe of a container, at the host port its named
// port is published on.
type probe struct {
	deployment, kind, path string
	hostPort               string
}

func TestKubePlay(t *testing.T) {
	if !required {
		t.Skip("SKIPPED: the chart's pods are played with make kube-test (NOVA_KUBE_TEST=1), which builds Helm and the images first")
	}
	helm := os.Getenv("HELM")
	if helm == "" {
		t.Fatal("HELM is not set (make kube-test sets it)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	s := &podmantest.Steps{T: t}
	defer s.Print("kube-test")
	dir := t.TempDir()

	// The scripted model listens on the host's address on the test's
	// network, which exists once a pod is on it.
	modelAddr := net.JoinHostPort(podmantest.Network(t, network), strconv.Itoa(podmantest.FreePort(t)))

	var rendered []byte
	s.Run("helm template helm/nova -f deploy/test/kube/values.yaml", func() {
		cmd := exec.CommandContext(ctx, helm, "template", release, "../../../helm/nova", "--namespace", "nova",
			"-f", "values.yaml", "--set", "llm.baseURL=http://"+modelAddr+"/v1", "--set", "image.tag="+os.Getenv("IMAGE_TAG"))
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("helm template: %v\n%s", err, stderr.String())
		}
		rendered = out
	})

	var (
		played  []object
		probes  []probe
		secrets []string
		gateway string // the host port of the gateway's API
		plays   []play
		// The Deployments kube play cannot run as the chart says (hostUsers:
		// false with procMount: Unmasked), the ConfigMaps, and the Secrets'
		// data (base64), for the podman run that stands in for them.
		ownUsers   []object
		configMaps []object
		secretData = map[string]map[string]string{}
		kinds      = map[string]int{}
	)
	s.Run("sort the objects: play Deployments and ConfigMaps, Secrets as podman secrets, leave out the rest", func() {
		docs := decode(t, rendered)
		mounted := map[string]bool{} // Secrets mounted as volumes
		for _, d := range docs {
			for _, v := range listAt(d, "spec", "template", "spec", "volumes") {
				secret := mapAt(v.(object), "secret")
				if name, _ := secret["secretName"].(string); name != "" {
					mounted[name] = true
					// podman 4.3 dereferences optional without a nil
					// check: say what Kubernetes assumes.
					if _, ok := secret["optional"]; !ok {
						secret["optional"] = false
					}
				}
			}
		}
		for _, d := range docs {
			kind, _ := d["kind"].(string)
			name, _ := mapAt(d, "metadata")["name"].(string)
			kinds[kind]++
			switch kind {
			case "Deployment", "ConfigMap":
				played = append(played, d)
			case "Secret":
				secrets = append(secrets, name)
				secretData[name] = createSecret(t, d, name, mounted[name])
			default:
				if _, ok := leftOut[kind]; !ok {
					t.Errorf("the chart renders a %s (%s) that this test neither plays nor says why it leaves out", kind, name)
				}
			}
		}
		var lines []string
		for kind, n := range kinds {
			why, ok := leftOut[kind]
			if !ok {
				why = "played"
				if kind == "Secret" {
					why = "made podman secrets before the play (see createSecret)"
				}
			}
			lines = append(lines, fmt.Sprintf("%d %s: %s", n, kind, why))
		}
		slices.Sort(lines)
		t.Logf("helm template rendered:\n%s", strings.Join(lines, "\n"))

		// podman 4.3 publishes every containerPort on the host's port of
		// the same number, so eight pods with port 8080 collide: each port
		// gets a free host port of its own, through which the test also
		// reads the probes' endpoints.
		for _, d := range played {
			if d["kind"] != "Deployment" {
				continue
			}
			name := mapAt(d, "metadata")["name"].(string)
			for _, c := range listAt(d, "spec", "template", "spec", "containers") {
				c := c.(object)
				named := map[string]string{}
				for _, p := range listAt(c, "ports") {
					p := p.(object)
					port := podmantest.FreePort(t)
					p["hostPort"] = port
					hp := strconv.Itoa(port)
					named[fmt.Sprint(p["name"])] = hp
					named[fmt.Sprint(p["containerPort"])] = hp
					if name == release+"-gateway" && fmt.Sprint(p["containerPort"]) == "8000" {
						gateway = hp
					}
				}
				for _, kind := range []string{"startupProbe", "livenessProbe", "readinessProbe"} {
					get := mapAt(c, kind, "httpGet")
					if get == nil {
						t.Errorf("%s: container %s has no httpGet %s", name, c["name"], kind)
						continue
					}
					probes = append(probes, probe{name, kind, fmt.Sprint(get["path"]), named[fmt.Sprint(get["port"])]})
				}
			}
		}
		if gateway == "" {
			t.Fatal("the chart's gateway publishes no port 8000")
		}
		// podman 4.3 gives a pod with hostUsers: false an automatic user
		// namespace sized for its infra image, 1024 ids, in which the
		// services' uid 10001 does not exist; Kubernetes gives every such
		// pod 65536. Those Deployments are played apart with that size.
		var hostUsers []object
		for _, d := range played {
			switch {
			case d["kind"] == "ConfigMap":
				configMaps = append(configMaps, d)
			case mapAt(d, "spec", "template", "spec")["hostUsers"] == false:
				ownUsers = append(ownUsers, d)
			default:
				hostUsers = append(hostUsers, d)
			}
		}
		plays = append(plays,
			play{"the NATS pod, under an alias on the network that stands for its Service's name", writeYAML(t, dir, natsPod, infra()[natsPod]), []string{"--network", network + ":alias=" + natsPod}},
			play{"the store pod, likewise", writeYAML(t, dir, storePod, infra()[storePod]), []string{"--network", network + ":alias=" + storePod}},
			play{fmt.Sprintf("the chart's %d Deployments in the host's user namespace, and its ConfigMaps", len(hostUsers)), writeYAML(t, dir, "chart", append(slices.Clone(configMaps), hostUsers...)), []string{"--network", network}},
		)
	})
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := podmantest.Podman("ps", "-a", "--format", "{{.Names}}")
			for _, c := range strings.Fields(out) {
				if strings.HasPrefix(c, "nova-") && !strings.HasSuffix(c, "-infra") {
					log, _ := podmantest.Podman("logs", "--tail", "15", c)
					t.Logf("%s's log (last lines):\n%s", c, log)
				}
			}
		}
		start := time.Now()
		for _, p := range plays {
			if out, err := podmantest.Podman("kube", "down", p.file); err != nil {
				t.Errorf("podman kube down %s: %v\n%s", filepath.Base(p.file), err, out)
			}
		}
		for _, name := range secrets {
			_, _ = podmantest.Podman("secret", "rm", name)
		}
		t.Logf("podman kube down: %.1f s", time.Since(start).Seconds())
	})

	for _, p := range plays {
		s.Run("podman kube play "+p.what+" ("+strings.Join(p.args, " ")+")", func() {
			if out, err := podmantest.Podman(append(append([]string{"kube", "play"}, p.args...), p.file)...); err != nil {
				t.Fatalf("podman kube play %s: %v\n%s", filepath.Base(p.file), err, out)
			}
		})
	}
	// podman 4.3's kube play reads a pod's seccomp profile only from the
	// annotations Kubernetes dropped in 1.27, and has no procMount: the
	// sandbox's Deployment, played with the annotation its
	// seccompProfile: Unconfined stands for, runs with /proc masked, where
	// bubblewrap cannot mount a fresh one, and must refuse to start saying
	// so. Then its pod spec runs as the podman run flags it translates to.
	for _, d := range ownUsers {
		name := mapAt(d, "metadata")["name"].(string)
		template := mapAt(d, "spec", "template")
		annotations := mapAt(template, "metadata", "annotations")
		for _, c := range listAt(template, "spec", "containers") {
			c := c.(object)
			if mapAt(c, "securityContext", "seccompProfile")["type"] == "Unconfined" {
				annotations["container.seccomp.security.alpha.kubernetes.io/"+c["name"].(string)] = "unconfined"
			}
		}
		file := writeYAML(t, dir, name, append(slices.Clone(configMaps), d))
		t.Cleanup(func() { _, _ = podmantest.Podman("kube", "down", file) })
		s.Run("podman kube play "+name+" (hostUsers: false: --userns=auto:size=65536): it refuses to start, naming procMount: Unmasked", func() {
			if out, err := podmantest.Podman("kube", "play", "--network", network, "--userns", "auto:size=65536", file); err != nil {
				t.Logf("podman kube play %s: %v\n%s", name, err, out)
			}
			for _, c := range listAt(template, "spec", "containers") {
				ctr := name + "-pod-0-" + c.(object)["name"].(string)
				for {
					log, _ := podmantest.Podman("logs", ctr)
					if strings.Contains(log, "procMount: Unmasked") {
						t.Logf("%s: %s", ctr, podmantest.LastLine(log))
						break
					}
					podmantest.Pause(t, ctx, ctr+" does not refuse to start naming procMount: Unmasked; its log:\n"+log)
				}
			}
			if out, err := podmantest.Podman("kube", "down", file); err != nil {
				t.Errorf("podman kube down %s: %v\n%s", name, err, out)
			}
		})
		s.Run(name+"'s pod spec as podman run flags, /proc unmasked", func() {
			for _, c := range listAt(template, "spec", "containers") {
				args := runFlags(t, template, c.(object), configMaps, secretData)
				t.Logf("podman run %s", strings.Join(args, " "))
				ctr := name + "-" + c.(object)["name"].(string)
				if out, err := podmantest.Podman(append([]string{"run", "-d", "--name", ctr, "--network", network}, args...)...); err != nil {
					t.Fatalf("podman run: %v\n%s", err, out)
				}
				t.Cleanup(func() { _, _ = podmantest.Podman("rm", "-f", "-t", "5", ctr) })
				info, _ := podmantest.Podman("inspect", "-f",
					"user={{.Config.User}} read-only={{.HostConfig.ReadonlyRootfs}} cap-drop={{len .HostConfig.CapDrop}} userns={{.HostConfig.UsernsMode}} security-opt={{.HostConfig.SecurityOpt}}", ctr)
				t.Logf("%s: %s", ctr, info)
			}
		})
	}
	s.Run("the scripted model listening on the test's network", func() {
		podmantest.ScriptedModel(t, ctx, modelAddr)
	})
	s.Run(fmt.Sprintf("every probe the chart declares answers 200 (%d probes)", len(probes)), func() {
		for _, p := range probes {
			podmantest.WaitReady(t, ctx, "http://127.0.0.1:"+p.hostPort+p.path)
		}
		var seen []string
		for _, p := range probes {
			seen = append(seen, fmt.Sprintf("%s %s %s", strings.TrimPrefix(p.deployment, release+"-"), p.kind, p.path))
		}
		t.Logf("probes answered:\n%s", strings.Join(seen, "\n"))
	})
	gw := podmantest.Gateway{URL: "http://127.0.0.1:" + gateway, Key: "nova_gk_compose-dev-only"}
	s.Run("register and run invoice-routing and ai-orders through the chart's gateway (curl)", func() {
		gw.RegisterExamples(t, "invoice-routing.yaml", "ai-orders.yaml")
		gw.Run(t, ctx, `{"workflow":"invoice-routing","context":{"amount":200}}`, podmantest.InvoiceAutoPath)
		gw.Run(t, ctx, `{"workflow":"ai-orders","context":{"total":1500}}`, podmantest.AIOrdersPath)
	})
}

// play is one podman kube play: what it plays, its file and its flags.
type play struct {
	what string
	file string
	args []string
}

// writeYAML writes docs as one multi-document file dir/name.yaml.
func writeYAML(t *testing.T, dir, name string, docs []object) string {
	t.Helper()
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	for _, d := range docs {
		if err := enc.Encode(d); err != nil {
			t.Fatal(err)
		}
	}
	_ = enc.Close()
	path := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// decode splits helm's multi-document output into objects.
func decode(t *testing.T, b []byte) []object {
	t.Helper()
	var docs []object
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var d object
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("helm template's output: %v", err)
		}
		if d != nil {
			docs = append(docs, d)
		}
	}
}

// createSecret makes the chart's Secret a podman secret the way podman
// 4.3's kube play reads it, which differs by use: a container's
// env.valueFrom.secretKeyRef wants a JSON object of base64 values; a secret
// volume wants the whole Secret, and writes its data values as they are,
// without decoding them, so those are stored decoded. (kube play of the
// Secret itself stores the whole Secret as YAML, which the env path then
// fails to read: "secret ... is not valid JSON", podman#16269, fixed in
// 4.4.)
func createSecret(t *testing.T, d object, name string, mounted bool) map[string]string {
	t.Helper()
	data := map[string]string{}
	for k, v := range mapAt(d, "data") {
		data[k] = fmt.Sprint(v)
	}
	for k, v := range mapAt(d, "stringData") {
		data[k] = base64.StdEncoding.EncodeToString([]byte(fmt.Sprint(v)))
	}
	var content any = data
	if mounted {
		plain := map[string]string{}
		for k, v := range data {
			b, err := base64.StdEncoding.DecodeString(v)
			if err != nil {
				t.Fatalf("Secret %s: key %s is not base64: %v", name, k, err)
			}
			plain[k] = string(b)
		}
		content = object{"apiVersion": "v1", "kind": "Secret", "metadata": object{"name": name}, "data": plain}
	}
	b, err := json.Marshal(content)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = podmantest.Podman("secret", "rm", name)
	cmd := exec.Command("podman", append(slices.Clone(podmantest.Args), "secret", "create", name, "-")...)
	cmd.Stdin = bytes.NewReader(b)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("podman secret create %s: %v %s", name, err, out)
	}
	return data
}

// runFlags translates a pod template's container to podman run flags:
// its environment (values, Secrets' and ConfigMaps' keys, ConfigMaps
// whole), user, security context (a read-only root, capabilities dropped,
// no privilege escalation, seccomp and AppArmor unconfined, /proc
// unmasked, a user namespace of its own of 65536 ids as hostUsers: false
// gives), its emptyDir volumes (as tmpfs) and its ports (on their host
// ports), then its image. Resource limits are left out: they need cgroup
// controllers this host does not delegate.
func runFlags(t *testing.T, template, c object, configMaps []object, secrets map[string]map[string]string) []string {
	t.Helper()
	configMap := func(name string) object {
		for _, cm := range configMaps {
			if mapAt(cm, "metadata")["name"] == name {
				return mapAt(cm, "data")
			}
		}
		t.Fatalf("no ConfigMap %s", name)
		return nil
	}
	var args []string
	for _, from := range listAt(c, "envFrom") {
		for k, v := range configMap(mapAt(from.(object), "configMapRef")["name"].(string)) {
			args = append(args, "-e", fmt.Sprintf("%s=%v", k, v))
		}
	}
	for _, e := range listAt(c, "env") {
		e := e.(object)
		switch {
		case e["value"] != nil:
			args = append(args, "-e", fmt.Sprintf("%s=%v", e["name"], e["value"]))
		case mapAt(e, "valueFrom", "secretKeyRef") != nil:
			ref := mapAt(e, "valueFrom", "secretKeyRef")
			v, err := base64.StdEncoding.DecodeString(secrets[ref["name"].(string)][ref["key"].(string)])
			if err != nil {
				t.Fatalf("env %s: %v", e["name"], err)
			}
			args = append(args, "-e", fmt.Sprintf("%s=%s", e["name"], v))
		case mapAt(e, "valueFrom", "configMapKeyRef") != nil:
			ref := mapAt(e, "valueFrom", "configMapKeyRef")
			args = append(args, "-e", fmt.Sprintf("%s=%v", e["name"], configMap(ref["name"].(string))[ref["key"].(string)]))
		default:
			t.Fatalf("env %s: a source this translation does not know: %v", e["name"], e)
		}
	}
	pod := mapAt(template, "spec", "securityContext")
	sc := mapAt(c, "securityContext")
	setting := func(key string) any {
		if v, ok := sc[key]; ok {
			return v
		}
		return pod[key]
	}
	if u := setting("runAsUser"); u != nil {
		args = append(args, "--user", fmt.Sprintf("%v:%v", u, setting("runAsGroup")))
	}
	if sc["readOnlyRootFilesystem"] == true {
		args = append(args, "--read-only")
	}
	if slices.Contains(listAt(sc, "capabilities", "drop"), any("ALL")) {
		args = append(args, "--cap-drop", "ALL")
	}
	if sc["allowPrivilegeEscalation"] == false {
		args = append(args, "--security-opt", "no-new-privileges")
	}
	if mapAt(sc, "seccompProfile")["type"] == "Unconfined" {
		args = append(args, "--security-opt", "seccomp=unconfined")
	}
	if mapAt(sc, "appArmorProfile")["type"] == "Unconfined" {
		args = append(args, "--security-opt", "apparmor=unconfined")
	}
	if sc["procMount"] == "Unmasked" {
		args = append(args, "--security-opt", "unmask=ALL")
	}
	if mapAt(template, "spec")["hostUsers"] == false {
		args = append(args, "--userns", "auto:size=65536")
	}
	for _, m := range listAt(c, "volumeMounts") {
		m := m.(object)
		for _, v := range listAt(template, "spec", "volumes") {
			v := v.(object)
			if v["name"] == m["name"] && v["emptyDir"] != nil {
				args = append(args, "--tmpfs", fmt.Sprintf("%v:mode=1777", m["mountPath"]))
			}
		}
	}
	for _, p := range listAt(c, "ports") {
		p := p.(object)
		args = append(args, "-p", fmt.Sprintf("127.0.0.1:%v:%v", p["hostPort"], p["containerPort"]))
	}
	return append(args, c["image"].(string))
}

// infra is what the chart expects outside it: one NATS server with
// deploy/nats's configuration (accounts and a user per service, the
// passwords from the chart's Secret <release>-nats-users), and the store.
func infra() map[string][]object {
	conf, err := os.ReadFile("../../nats/nats.conf")
	if err != nil {
		panic(err)
	}
	accounts, err := os.ReadFile("../../nats/accounts.conf")
	if err != nil {
		panic(err)
	}
	var env []any
	for _, user := range []string{"graph-engine", "sandbox", "audit", "input-analyzer", "code-generator", "code-validator", "output-validator", "gateway", "nova", "admin", "sys"} {
		env = append(env, object{
			"name":      "NOVA_" + strings.ToUpper(strings.ReplaceAll(user, "-", "_")) + "_PASSWORD",
			"valueFrom": object{"secretKeyRef": object{"name": release + "-nats-users", "key": user}},
		})
	}
	return map[string][]object{natsPod: {
		{"apiVersion": "v1", "kind": "ConfigMap", "metadata": object{"name": natsPod + "-config"},
			"data": object{"nats.conf": string(conf), "accounts.conf": string(accounts)}},
		{"apiVersion": "v1", "kind": "Pod", "metadata": object{"name": natsPod}, "spec": object{
			"containers": []any{object{
				"name": "nats", "image": "docker.io/library/nats:2.15.2-alpine",
				"args":         []any{"--config", "/etc/nats/nats.conf"},
				"env":          env,
				"volumeMounts": []any{object{"name": "config", "mountPath": "/etc/nats"}},
			}},
			"volumes": []any{object{"name": "config", "configMap": object{"name": natsPod + "-config"}}},
		}},
	}, storePod: {
		{"apiVersion": "v1", "kind": "Pod", "metadata": object{"name": storePod}, "spec": object{
			"containers": []any{object{"name": "store", "image": "docker.io/library/mongo:7.0"}},
		}},
	}}
}
