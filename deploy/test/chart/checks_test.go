package chart

import (
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"github.com/nats-io/nats-server/v2/server"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/novaflow/nova/pkg/agent"
	"github.com/novaflow/nova/pkg/bus"
	sandboxservice "github.com/novaflow/nova/services/sandbox/service"
)

// checkEveryService checks what every service's objects must satisfy.
func checkEveryService(t *testing.T, r *rendered, want []string) {
	t.Helper()
	var got []string
	for name := range r.deployments {
		if s, ok := strings.CutPrefix(name, release+"-"); ok && !strings.HasPrefix(s, "nats") {
			got = append(got, s)
		}
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("Deployments %v, want one per service %v", got, want)
	}
	password := false
	for _, sec := range r.secrets {
		if strings.HasSuffix(sec.Name, "-nats-users") {
			password = true
		}
	}

	for _, s := range want {
		name := fullname(s)
		d := r.deployments[name]
		pod := d.Spec.Template
		selector := labels.SelectorFromSet(d.Spec.Selector.MatchLabels)
		if !selector.Matches(labels.Set(pod.Labels)) {
			t.Errorf("%s: the Deployment's selector does not select its pods", s)
		}
		if pod.Labels["app.kubernetes.io/name"] != s {
			t.Errorf("%s: pod label app.kubernetes.io/name = %q", s, pod.Labels["app.kubernetes.io/name"])
		}

		// Identity: a ServiceAccount without API token.
		sa := r.serviceAccounts[pod.Spec.ServiceAccountName]
		if sa == nil {
			t.Errorf("%s: ServiceAccount %q is not rendered", s, pod.Spec.ServiceAccountName)
		} else if sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
			t.Errorf("ServiceAccount %s mounts its token", sa.Name)
		}
		if pod.Spec.AutomountServiceAccountToken == nil || *pod.Spec.AutomountServiceAccountToken {
			t.Errorf("%s: the pod mounts a service account token", s)
		}
		if psc := pod.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
			t.Errorf("%s: pod may run as root", s)
		}

		if len(pod.Spec.Containers) != 1 {
			t.Fatalf("%s: %d containers", s, len(pod.Spec.Containers))
		}
		c := pod.Spec.Containers[0]
		if !strings.HasSuffix(strings.Split(c.Image, ":")[0], "/"+s) {
			t.Errorf("%s: image %q is not the service's", s, c.Image)
		}
		if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" && p.ContainerPort == 8080 }) {
			t.Errorf("%s: no container port http 8080: %+v", s, c.Ports)
		}
		checkProbe(t, s, "liveness", c.LivenessProbe, "/healthz")
		checkProbe(t, s, "readiness", c.ReadinessProbe, "/readyz")
		checkProbe(t, s, "startup", c.StartupProbe, "/healthz")
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("%s: no container securityContext", s)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("%s is privileged", s)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("%s allows privilege escalation", s)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("%s keeps capabilities: %+v", s, sc.Capabilities)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("%s has a writable root filesystem", s)
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: memory request or limit missing", s)
		}
		if pod.Annotations["prometheus.io/scrape"] != "true" || pod.Annotations["prometheus.io/port"] != "8080" ||
			pod.Annotations["checksum/config"] == "" {
			t.Errorf("%s: pod annotations %v", s, pod.Annotations)
		}

		// Environment.
		env := environment(t, r, d)
		for k, v := range map[string]string{
			"NOVA_STREAM_REPLICAS": "3",
			"HEALTH_ADDR":          ":8080",
			"NATS_INBOX_PREFIX":    "_INBOX." + s,
		} {
			if env[k] != v {
				t.Errorf("%s: %s = %q, want %q", s, k, env[k], v)
			}
		}
		if env["NATS_URL"] == "" {
			t.Errorf("%s: no NATS_URL", s)
		}
		refs := envVars(d)
		if password {
			if env["NATS_USER"] != s {
				t.Errorf("%s: NATS_USER = %q, want its own user", s, env["NATS_USER"])
			}
			if ref := refs["NATS_PASSWORD"]; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Key != s {
				t.Errorf("%s: NATS_PASSWORD from %+v, want its own key", s, ref)
			}
		}
		if _, ok := refs["MONGODB_URI"]; ok != readsMongoDB(s) {
			t.Errorf("%s: MONGODB_URI present = %v; only audit and the gateway talk to MongoDB", s, ok)
		}
		if ref, ok := refs["OPENAI_API_KEY"]; ok && !slices.Contains(llmAgents, s) {
			t.Errorf("%s gets OPENAI_API_KEY (%+v) but calls no model", s, ref)
		}
		for k, ref := range refs {
			if ref != nil && ref.SecretKeyRef != nil && ref.SecretKeyRef.Name == "" {
				t.Errorf("%s: %s from a Secret without name", s, k)
			}
		}

		// Service, PDB, NetworkPolicy select exactly this service's pods.
		svc := r.services[name]
		if svc == nil {
			t.Errorf("%s: no Service", s)
		} else {
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(pod.Labels)) {
				t.Errorf("%s: the Service does not select the pods", s)
			}
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool {
				return p.Port == 8080 && p.TargetPort.String() == "http"
			}) {
				t.Errorf("%s: Service ports %+v, want 8080 -> http (metrics)", s, svc.Spec.Ports)
			}
		}
		pdb := r.pdbs[name]
		if pdb == nil {
			t.Errorf("%s: no PodDisruptionBudget", s)
		} else {
			if !selects(pdb.Spec.Selector, pod.Labels) {
				t.Errorf("%s: the PDB does not select the pods", s)
			}
			if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
				t.Errorf("%s: PDB maxUnavailable %v", s, pdb.Spec.MaxUnavailable)
			}
		}
		for _, other := range want {
			if other == s {
				continue
			}
			o := r.deployments[fullname(other)].Spec.Template.Labels
			if svc != nil && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(o)) {
				t.Errorf("the Service of %s also selects %s", s, other)
			}
		}
		checkNetworkPolicy(t, r, s, pod.Labels)
	}
}

func checkProbe(t *testing.T, service, kind string, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP %s probe", service, kind)
		return
	}
	if p.HTTPGet.Path != path || p.HTTPGet.Port.String() != "http" {
		t.Errorf("%s: %s probe %s on %s, want %s on http", service, kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), path)
	}
}

// checkNetworkPolicy: ingress only to the service's ports; egress only to
// DNS, NATS, the collector when tracing is on, MongoDB for audit, the LLM
// API for the LLM agents.
func checkNetworkPolicy(t *testing.T, r *rendered, s string, podLabels map[string]string) {
	t.Helper()
	np := r.netpols[fullname(s)]
	if np == nil {
		t.Errorf("%s: no NetworkPolicy", s)
		return
	}
	if !selects(&np.Spec.PodSelector, podLabels) {
		t.Errorf("%s: the NetworkPolicy does not select the pods", s)
	}
	if !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeIngress) || !slices.Contains(np.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("%s: policyTypes %v, want Ingress and Egress", s, np.Spec.PolicyTypes)
	}
	for _, in := range np.Spec.Ingress {
		if len(in.Ports) == 0 {
			t.Errorf("%s: an ingress rule opens every port", s)
		}
	}
	var ports []int
	for _, e := range np.Spec.Egress {
		if len(e.Ports) == 0 {
			t.Errorf("%s: an egress rule allows every port: %+v", s, e)
		}
		for _, p := range e.Ports {
			ports = append(ports, p.Port.IntValue())
		}
	}
	slices.Sort(ports)
	ports = slices.Compact(ports)
	want := []int{53, 4222}
	if hasEgressPort(np, 4318) {
		want = append(want, 4318)
	}
	if readsMongoDB(s) {
		want = append(want, 27017)
	}
	if slices.Contains(llmAgents, s) {
		want = append(want, 443)
	}
	slices.Sort(want)
	if !slices.Equal(ports, want) {
		t.Errorf("%s: egress ports %v, want %v", s, ports, want)
	}
	if s == "sandbox" && (slices.Contains(ports, 443) || slices.Contains(ports, 80)) {
		t.Errorf("the sandbox may reach the web: %v", ports)
	}
}

func hasEgressPort(np *networkingv1.NetworkPolicy, port int) bool {
	for _, e := range np.Spec.Egress {
		for _, p := range e.Ports {
			if p.Port.IntValue() == port {
				return true
			}
		}
	}
	return false
}

func selects(sel *metav1.LabelSelector, podLabels map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && !s.Empty() && s.Matches(labels.Set(podLabels))
}

// environment is a Deployment's plain environment: its ConfigMap and
// literal values.
func environment(t *testing.T, r *rendered, d *appsv1.Deployment) map[string]string {
	t.Helper()
	env := map[string]string{}
	c := d.Spec.Template.Spec.Containers[0]
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			continue
		}
		cm := r.configMaps[from.ConfigMapRef.Name]
		if cm == nil {
			t.Fatalf("%s: ConfigMap %q is not rendered", d.Name, from.ConfigMapRef.Name)
		}
		maps.Copy(env, cm.Data)
	}
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env[e.Name] = e.Value
		}
	}
	return env
}

// envVars are a Deployment's variables taken from elsewhere (Secrets).
func envVars(d *appsv1.Deployment) map[string]*corev1.EnvVarSource {
	refs := map[string]*corev1.EnvVarSource{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil {
			refs[e.Name] = e.ValueFrom
		}
	}
	return refs
}

// checkScaledObject: the trigger watches exactly the consumer the service
// declares in code, in the account of deploy/nats, and passes KEDA's own
// admission checks.
func checkScaledObject(t *testing.T, so *kedav1alpha1.ScaledObject, svc string) {
	t.Helper()
	var consumer bus.Consumer
	if svc == bus.AgentSandbox {
		consumer = sandboxservice.ConsumerSpec(1)
	} else {
		consumer = agent.Spec{Name: svc}.Consumer()
	}
	if ref := so.Spec.ScaleTargetRef; ref == nil || ref.Name != fullname(svc) || (ref.Kind != "" && ref.Kind != "Deployment") {
		t.Errorf("%s: scaleTargetRef %+v", svc, ref)
	}
	if len(so.Spec.Triggers) != 1 {
		t.Fatalf("%s: %d triggers", svc, len(so.Spec.Triggers))
	}
	tr := so.Spec.Triggers[0]
	md := tr.Metadata
	if tr.Type != "nats-jetstream" || md["account"] != "NOVA" || md["stream"] != consumer.Stream || md["consumer"] != consumer.Durable {
		t.Errorf("%s: trigger %s account %q stream %q consumer %q, want nats-jetstream NOVA %s %s",
			svc, tr.Type, md["account"], md["stream"], md["consumer"], consumer.Stream, consumer.Durable)
	}
	for _, k := range []string{"lagThreshold", "activationLagThreshold"} {
		if n, err := strconv.Atoi(md[k]); err != nil || n < 0 || (k == "lagThreshold" && n == 0) {
			t.Errorf("%s: %s = %q", svc, k, md[k])
		}
	}
	if _, _, err := net.SplitHostPort(md["natsServerMonitoringEndpoint"]); err != nil {
		t.Errorf("%s: natsServerMonitoringEndpoint %q is not host:port", svc, md["natsServerMonitoringEndpoint"])
	}
	if so.Spec.MinReplicaCount == nil || so.Spec.MaxReplicaCount == nil {
		t.Errorf("%s: min or max replicas unset", svc)
	}
	if err := kedav1alpha1.ValidateTriggers(so.Spec.Triggers); err != nil {
		t.Errorf("%s: KEDA refuses the triggers: %v", svc, err)
	}
	if err := kedav1alpha1.CheckReplicaCountBoundsAreValid(so); err != nil {
		t.Errorf("%s: KEDA refuses the replica bounds: %v", svc, err)
	}
	if err := kedav1alpha1.CheckFallbackValid(so); err != nil {
		t.Errorf("%s: KEDA refuses the fallback: %v", svc, err)
	}
}

// checkBundledNATS: three servers, their config as NATS parses it (with
// the mounted accounts and the passwords from the users' Secret).
func checkBundledNATS(t *testing.T, r *rendered) {
	t.Helper()
	sts := r.statefulSets[release+"-nats"]
	if sts == nil {
		t.Fatalf("no NATS StatefulSet; have %v", keys(r.statefulSets))
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("NATS replicas %v, want 3", sts.Spec.Replicas)
	}
	conf := layOutNATSConfig(t, r)
	opts := conf.parse(t, sts.Name+"-0")
	if !opts.JetStream || !opts.SyncAlways {
		t.Errorf("JetStream %v, sync always %v; want both", opts.JetStream, opts.SyncAlways)
	}
	if len(opts.Routes) != 3 {
		t.Errorf("%d cluster routes, want 3", len(opts.Routes))
	}
	if opts.SystemAccount != "SYS" || opts.MaxPayload != 1<<20 {
		t.Errorf("system account %q, max payload %d", opts.SystemAccount, opts.MaxPayload)
	}
	users := map[string]bool{}
	for _, u := range opts.Users {
		users[u.Username] = true
		if u.Password != natsPassword(u.Username) {
			t.Errorf("NATS user %s: password not from its Secret key", u.Username)
		}
	}
	for _, s := range services {
		if !users[s] {
			t.Errorf("bundled NATS has no user %s", s)
		}
	}
}

// natsConfig is the bundled NATS's configuration laid out as a pod sees it.
type natsConfig struct {
	path string
	// passwords maps the server's environment variables to the keys of the
	// users' Secret they come from.
	passwords map[string]string
}

// natsPassword is the test password of a NATS user (its Secret key).
func natsPassword(user string) string { return "pw-" + user }

// layOutNATSConfig writes the rendered nats.conf and accounts.conf where
// the StatefulSet mounts them, checking that it does mount them and takes
// the passwords from the users' Secret.
func layOutNATSConfig(t *testing.T, r *rendered) natsConfig {
	t.Helper()
	sts := r.statefulSets[release+"-nats"]
	if sts == nil {
		t.Fatalf("no NATS StatefulSet; have %v", keys(r.statefulSets))
	}
	var natsContainer *corev1.Container
	for i, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == "nats" {
			natsContainer = &sts.Spec.Template.Spec.Containers[i]
		}
	}
	if natsContainer == nil {
		t.Fatal("no nats container")
	}
	passwords := map[string]string{}
	for _, e := range natsContainer.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			if e.ValueFrom.SecretKeyRef.Name != release+"-nats-users" {
				t.Errorf("%s from Secret %q", e.Name, e.ValueFrom.SecretKeyRef.Name)
			}
			passwords[e.Name] = e.ValueFrom.SecretKeyRef.Key
		}
	}
	mounted := false
	for _, m := range natsContainer.VolumeMounts {
		if m.MountPath == "/etc/nova-nats" {
			for _, v := range sts.Spec.Template.Spec.Volumes {
				if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == release+"-nats-accounts" {
					mounted = true
				}
			}
		}
	}
	if !mounted {
		t.Error("the accounts ConfigMap is not mounted at /etc/nova-nats")
	}
	accounts := r.configMaps[release+"-nats-accounts"]
	natsConf := r.configMaps[release+"-nats-config"]
	if accounts == nil || natsConf == nil {
		t.Fatalf("ConfigMaps %v lack the NATS config or accounts", keys(r.configMaps))
	}

	root := t.TempDir()
	for path, content := range map[string]string{
		"etc/nats-config/nats.conf":   natsConf.Data["nats.conf"],
		"etc/nova-nats/accounts.conf": accounts.Data["accounts.conf"],
	} {
		full := filepath.Join(root, path)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return natsConfig{path: filepath.Join(root, "etc/nats-config/nats.conf"), passwords: passwords}
}

// parse lets nats-server read the configuration as the pod serverName
// does, with SERVER_NAME and the passwords in its environment.
func (c natsConfig) parse(t *testing.T, serverName string) *server.Options {
	t.Helper()
	t.Setenv("SERVER_NAME", serverName)
	for env, user := range c.passwords {
		t.Setenv(env, natsPassword(user))
	}
	opts, err := server.ProcessConfigFile(c.path)
	if err != nil {
		content, _ := os.ReadFile(c.path)
		t.Fatalf("NATS refuses the rendered config: %v\n%s", err, content)
	}
	return opts
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// readsMongoDB: the audit service writes the chain of work, the gateway
// reads it; no other service talks to MongoDB.
func readsMongoDB(service string) bool { return service == "audit" || service == "gateway" }
