// Package chart renders helm/nova the way `helm template` does, with Helm's
// own Go packages (the version `make helm` builds), and decodes every
// manifest strictly into the Kubernetes and KEDA API types; keda_test.go
// runs the bundled NATS's rendered configuration as a three-server cluster
// and polls it the way KEDA polls the rendered triggers.
package chart

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	kedav1alpha1 "github.com/kedacore/keda/v2/apis/keda/v1alpha1"
	"go.uber.org/goleak"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/novaflow/nova/pkg/bus"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// nats-server keeps process-wide helpers alive after Shutdown.
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*Server).startGoRoutine"),
		goleak.IgnoreTopFunction("github.com/nats-io/nats-server/v2/server.(*fileStore).flushStreamStateLoop"),
		goleak.IgnoreAnyFunction("github.com/nats-io/nats-server/v2/server.(*diskIO).loop"),
	)
}

const (
	chartDir  = "../../../helm/nova"
	release   = "nova"
	namespace = "nova-system"
)

// services are the Deployments the chart must render by default.
var services = []string{"audit", "code-generator", "code-validator", "gateway", "graph-engine", "input-analyzer", "output-validator", "sandbox"}

// agents scale on their work-queue consumer, each the durable named after
// the agent on NOVA_CMD (pkg/agent); the sandbox is scaled the same way.
var queueConsumers = []string{bus.AgentInputAnalyzer, bus.AgentCodeGenerator, bus.AgentCodeValidator, bus.AgentOutputValidator, bus.AgentSandbox}

// llmAgents call the model and need OPENAI_API_KEY and egress to the API.
var llmAgents = []string{bus.AgentInputAnalyzer, bus.AgentCodeGenerator, bus.AgentOutputValidator}

// serviceMonitor mirrors the fields of the Prometheus Operator CRD the
// chart uses, so that unknown fields still fail.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// rendered is one release's manifests, decoded.
type rendered struct {
	deployments     map[string]*appsv1.Deployment
	statefulSets    map[string]*appsv1.StatefulSet
	services        map[string]*corev1.Service
	configMaps      map[string]*corev1.ConfigMap
	secrets         map[string]*corev1.Secret
	serviceAccounts map[string]*corev1.ServiceAccount
	pdbs            map[string]*policyv1.PodDisruptionBudget
	netpols         map[string]*networkingv1.NetworkPolicy
	ingresses       map[string]*networkingv1.Ingress
	hpas            map[string]*autoscalingv2.HorizontalPodAutoscaler
	scaledObjects   map[string]*kedav1alpha1.ScaledObject
	serviceMonitors map[string]*serviceMonitor
	pods            map[string]*corev1.Pod
	count           int
}

// kedaAPI is what a cluster with KEDA serves, and `helm template` is told
// with --api-versions.
var kedaAPI = []string{"keda.sh/v1alpha1", "keda.sh/v1alpha1/ScaledObject"}

// render runs what `helm template nova helm/nova -n nova-system
// --api-versions keda.sh/v1alpha1/ScaledObject` runs (a cluster with KEDA),
// with vals over the chart's values.
func render(t *testing.T, vals map[string]any) *rendered {
	t.Helper()
	return renderOn(t, kedaAPI, vals)
}

// renderOn renders the chart for a cluster that serves apis beside the
// built-in ones.
func renderOn(t *testing.T, apis []string, vals map[string]any) *rendered {
	t.Helper()
	manifest, _ := renderRelease(t, apis, vals)
	r := &rendered{
		deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{},
		services: map[string]*corev1.Service{}, configMaps: map[string]*corev1.ConfigMap{},
		secrets: map[string]*corev1.Secret{}, serviceAccounts: map[string]*corev1.ServiceAccount{},
		pdbs: map[string]*policyv1.PodDisruptionBudget{}, netpols: map[string]*networkingv1.NetworkPolicy{},
		ingresses: map[string]*networkingv1.Ingress{},
		hpas:      map[string]*autoscalingv2.HorizontalPodAutoscaler{}, scaledObjects: map[string]*kedav1alpha1.ScaledObject{},
		serviceMonitors: map[string]*serviceMonitor{}, pods: map[string]*corev1.Pod{},
	}
	for _, doc := range splitDocuments(manifest) {
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
			t.Fatalf("manifest is not YAML: %v\n%s", err, doc)
		}
		var obj any
		var name *string
		var keep func()
		switch tm.APIVersion + " " + tm.Kind {
		case "apps/v1 Deployment":
			o := &appsv1.Deployment{}
			obj, name, keep = o, &o.Name, func() { r.deployments[o.Name] = o }
		case "apps/v1 StatefulSet":
			o := &appsv1.StatefulSet{}
			obj, name, keep = o, &o.Name, func() { r.statefulSets[o.Name] = o }
		case "v1 Service":
			o := &corev1.Service{}
			obj, name, keep = o, &o.Name, func() { r.services[o.Name] = o }
		case "v1 ConfigMap":
			o := &corev1.ConfigMap{}
			obj, name, keep = o, &o.Name, func() { r.configMaps[o.Name] = o }
		case "v1 Secret":
			o := &corev1.Secret{}
			obj, name, keep = o, &o.Name, func() { r.secrets[o.Name] = o }
		case "v1 ServiceAccount":
			o := &corev1.ServiceAccount{}
			obj, name, keep = o, &o.Name, func() { r.serviceAccounts[o.Name] = o }
		case "v1 Pod":
			o := &corev1.Pod{}
			obj, name, keep = o, &o.Name, func() { r.pods[o.Name] = o }
		case "policy/v1 PodDisruptionBudget":
			o := &policyv1.PodDisruptionBudget{}
			obj, name, keep = o, &o.Name, func() { r.pdbs[o.Name] = o }
		case "networking.k8s.io/v1 NetworkPolicy":
			o := &networkingv1.NetworkPolicy{}
			obj, name, keep = o, &o.Name, func() { r.netpols[o.Name] = o }
		case "networking.k8s.io/v1 Ingress":
			o := &networkingv1.Ingress{}
			obj, name, keep = o, &o.Name, func() { r.ingresses[o.Name] = o }
		case "autoscaling/v2 HorizontalPodAutoscaler":
			o := &autoscalingv2.HorizontalPodAutoscaler{}
			obj, name, keep = o, &o.Name, func() { r.hpas[o.Name] = o }
		case "keda.sh/v1alpha1 ScaledObject":
			o := &kedav1alpha1.ScaledObject{}
			obj, name, keep = o, &o.Name, func() { r.scaledObjects[o.Name] = o }
		case "monitoring.coreos.com/v1 ServiceMonitor":
			o := &serviceMonitor{}
			obj, name, keep = o, &o.Name, func() { r.serviceMonitors[o.Name] = o }
		default:
			t.Fatalf("the chart renders %s %s, which this test does not know: add its API type\n%s", tm.APIVersion, tm.Kind, doc)
		}
		if err := decodeStrict(doc, obj); err != nil {
			t.Fatalf("%s %s does not decode strictly: %v\n%s", tm.Kind, firstLine(doc, "name:"), err, doc)
		}
		if *name == "" {
			t.Fatalf("%s without a name:\n%s", tm.Kind, doc)
		}
		keep()
		r.count++
	}
	return r
}

// decodeStrict decodes one manifest as the API server reads it: YAML to
// JSON without knowledge of the target (so a number where the API wants a
// string fails), then JSON with unknown fields refused; duplicate keys fail.
func decodeStrict(doc string, obj any) error {
	j, err := yaml.YAMLToJSONStrict([]byte(doc))
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(obj)
}

// renderRelease renders the chart for a cluster that serves apis beside the
// built-in ones: its manifests with its hooks', and its notes.
func renderRelease(t *testing.T, apis []string, vals map[string]any) (manifest, notes string) {
	t.Helper()
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	if err := action.CheckDependencies(chrt, chrt.Metadata.Dependencies); err != nil {
		t.Fatalf("dependencies: %v", err)
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.DryRunOption = true, "true"
	install.ClientOnly, install.Replace = true, true
	install.ReleaseName, install.Namespace = release, namespace
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.33.0", Major: "1", Minor: "33"}
	install.APIVersions = apis
	rel, err := install.Run(chrt, vals)
	if err != nil {
		t.Fatalf("render chart: %v", err)
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "\n---\n%s\n", h.Manifest)
	}
	return b.String(), rel.Info.Notes
}

var docSeparator = regexp.MustCompile(`(?m)^---\s*$`)

// splitDocuments splits a multi-document YAML stream, dropping empty ones.
func splitDocuments(manifest string) []string {
	var docs []string
	for _, d := range docSeparator.Split(manifest, -1) {
		if strings.TrimSpace(stripComments(d)) != "" {
			docs = append(docs, d)
		}
	}
	return docs
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

func firstLine(doc, prefix string) string {
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), prefix) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

func fullname(service string) string { return release + "-" + service }

// --- scenarios -------------------------------------------------------------

// TestDefaultsKEDAOn is the default install: bundled three-server NATS,
// password users, KEDA scaling the agents and the sandbox.
func TestDefaultsKEDAOn(t *testing.T) {
	r := render(t, nil)
	checkEveryService(t, r, services)

	for _, svc := range queueConsumers {
		so, ok := r.scaledObjects[fullname(svc)]
		if !ok {
			t.Errorf("no ScaledObject for %s", svc)
			continue
		}
		checkScaledObject(t, so, svc)
		if d := r.deployments[fullname(svc)]; d != nil && d.Spec.Replicas != nil {
			t.Errorf("%s: the Deployment sets replicas %d although KEDA scales it (each upgrade would reset them)", svc, *d.Spec.Replicas)
		}
	}
	if len(r.scaledObjects) != len(queueConsumers) {
		t.Errorf("%d ScaledObjects, want %d (one per agent and the sandbox)", len(r.scaledObjects), len(queueConsumers))
	}
	if len(r.hpas) != 0 {
		t.Errorf("HPAs rendered with KEDA on: %v", keys(r.hpas))
	}
	// Fixed replicas for the services KEDA does not scale by default.
	for _, svc := range []string{"graph-engine", "audit"} {
		if d := r.deployments[fullname(svc)]; d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("%s: want 2 fixed replicas for availability", svc)
		}
	}

	checkBundledNATS(t, r)
	so := r.scaledObjects[fullname(bus.AgentCodeGenerator)]
	if got, want := so.Spec.Triggers[0].Metadata["natsServerMonitoringEndpoint"], "nova-nats-headless.nova-system.svc.cluster.local:8222"; got != want {
		t.Errorf("monitoring endpoint = %q, want the bundled NATS's headless service %q", got, want)
	}
	if _, ok := r.secrets[release+"-nats-users"]; !ok {
		t.Error("no Secret with the NATS users' passwords")
	}
	for _, u := range []string{"graph-engine", "sandbox", "audit", "input-analyzer", "code-generator", "code-validator", "output-validator", "gateway", "nova", "admin", "sys"} {
		if s := r.secrets[release+"-nats-users"]; s != nil && len(s.Data[u]) < 16 {
			t.Errorf("NATS user %s has no generated password", u)
		}
	}
}

// TestDefaultsWithoutKEDA: the default install on a cluster that does not
// serve KEDA's API renders no ScaledObject (which the API server would
// refuse, failing the whole install) and no HPA; the queue consumers keep
// their values' replicas, and the release notes say why and what to do.
func TestDefaultsWithoutKEDA(t *testing.T) {
	manifest, notes := renderRelease(t, nil, nil)
	if strings.Contains(manifest, "keda.sh/") {
		t.Error("the chart renders a KEDA object for a cluster without KEDA")
	}
	r := renderOn(t, nil, nil)
	checkEveryService(t, r, services)
	if len(r.scaledObjects)+len(r.hpas) != 0 {
		t.Errorf("autoscalers rendered: %v %v", keys(r.scaledObjects), keys(r.hpas))
	}
	for _, svc := range queueConsumers {
		if d := r.deployments[fullname(svc)]; d == nil || d.Spec.Replicas == nil || *d.Spec.Replicas < 1 {
			t.Errorf("%s: no fixed replicas without KEDA", svc)
		}
	}
	for _, want := range []string{"KEDA is not installed on this cluster", "keda.enabled=false"} {
		if !strings.Contains(notes, want) {
			t.Errorf("the release notes do not say %q:\n%s", want, notes)
		}
	}
	if _, notes := renderRelease(t, kedaAPI, nil); !strings.Contains(notes, "KEDA on JetStream consumer lag") {
		t.Errorf("with KEDA, the release notes do not say it scales on lag:\n%s", notes)
	}
}

// TestMonitoringEndpointIsTheHeadlessService: however the bundled NATS is
// named, KEDA's endpoint is the headless service that governs the NATS
// StatefulSet, so that <pod>.<endpoint host> is a pod's DNS name (see
// TestKEDAReadsLagFromTheBundledCluster).
func TestMonitoringEndpointIsTheHeadlessService(t *testing.T) {
	for _, tc := range []struct {
		name string
		nats map[string]any
		want string
	}{
		{"defaults", map[string]any{}, "nova-nats-headless"},
		{"fullnameOverride", map[string]any{"fullnameOverride": "bus"}, "bus-headless"},
		{"nameOverride", map[string]any{"nameOverride": "msg"}, "nova-msg-headless"},
		{"headlessService.name", map[string]any{"headlessService": map[string]any{"name": "bus-peers"}}, "bus-peers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, map[string]any{"nats": tc.nats})
			if len(r.statefulSets) != 1 {
				t.Fatalf("StatefulSets %v, want the NATS one", keys(r.statefulSets))
			}
			var sts *appsv1.StatefulSet
			for _, s := range r.statefulSets {
				sts = s
			}
			headless := r.services[sts.Spec.ServiceName]
			if headless == nil || headless.Spec.ClusterIP != corev1.ClusterIPNone {
				t.Fatalf("the StatefulSet's serviceName %q is not a rendered headless Service", sts.Spec.ServiceName)
			}
			want := tc.want + "." + namespace + ".svc.cluster.local:8222"
			if sts.Spec.ServiceName != tc.want {
				t.Fatalf("headless Service %q, want %q", sts.Spec.ServiceName, tc.want)
			}
			for _, svc := range queueConsumers {
				if got := r.scaledObjects[fullname(svc)].Spec.Triggers[0].Metadata["natsServerMonitoringEndpoint"]; got != want {
					t.Errorf("%s: monitoring endpoint %q, want %q", svc, got, want)
				}
			}
		})
	}
}

// TestKEDAOffUsesHPAs: without KEDA every autoscaled service gets a CPU HPA.
func TestKEDAOffUsesHPAs(t *testing.T) {
	r := render(t, map[string]any{"keda": map[string]any{"enabled": false}})
	checkEveryService(t, r, services)
	if len(r.scaledObjects) != 0 {
		t.Errorf("ScaledObjects rendered with KEDA off: %v", keys(r.scaledObjects))
	}
	for _, svc := range queueConsumers {
		h, ok := r.hpas[fullname(svc)]
		if !ok {
			t.Errorf("no HPA for %s", svc)
			continue
		}
		if h.Spec.ScaleTargetRef.Kind != "Deployment" || h.Spec.ScaleTargetRef.Name != fullname(svc) {
			t.Errorf("HPA %s targets %+v", h.Name, h.Spec.ScaleTargetRef)
		}
		if h.Spec.MinReplicas == nil || *h.Spec.MinReplicas < 1 || h.Spec.MaxReplicas <= *h.Spec.MinReplicas {
			t.Errorf("HPA %s: min %v max %d", h.Name, h.Spec.MinReplicas, h.Spec.MaxReplicas)
		}
		if len(h.Spec.Metrics) != 1 || h.Spec.Metrics[0].Resource == nil || h.Spec.Metrics[0].Resource.Name != corev1.ResourceCPU ||
			h.Spec.Metrics[0].Resource.Target.AverageUtilization == nil {
			t.Errorf("HPA %s does not scale on CPU utilization: %+v", h.Name, h.Spec.Metrics)
		}
		// CPU utilization is relative to the request.
		d := r.deployments[fullname(svc)]
		if d.Spec.Template.Spec.Containers[0].Resources.Requests.Cpu().IsZero() {
			t.Errorf("%s has no CPU request: its HPA cannot compute utilization", svc)
		}
		if d.Spec.Replicas != nil {
			t.Errorf("%s: the Deployment sets replicas although its HPA scales it", svc)
		}
	}
	if len(r.hpas) != len(queueConsumers) {
		t.Errorf("%d HPAs, want %d", len(r.hpas), len(queueConsumers))
	}
}

// TestAutoscalingOff: fixed replicas everywhere, neither KEDA nor HPA.
func TestAutoscalingOff(t *testing.T) {
	svcs := map[string]any{}
	for _, s := range services {
		svcs[s] = map[string]any{"autoscaling": map[string]any{"enabled": false}, "replicas": 3}
	}
	r := render(t, map[string]any{"services": svcs})
	checkEveryService(t, r, services)
	if len(r.scaledObjects)+len(r.hpas) != 0 {
		t.Errorf("autoscalers rendered: %v %v", keys(r.scaledObjects), keys(r.hpas))
	}
	for _, s := range services {
		if d := r.deployments[fullname(s)]; d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
			t.Errorf("%s: replicas %v, want 3", s, d.Spec.Replicas)
		}
	}
}

// TestProductionVariant: external NATS with TLS and JWT credentials, gVisor
// for the sandbox, existing Secrets, tracing, ServiceMonitors, the gateway.
func TestProductionVariant(t *testing.T) {
	r := render(t, map[string]any{
		"nats":         map[string]any{"enabled": false},
		"externalNats": map[string]any{"url": "tls://nats.messaging:4222"},
		"natsAuth": map[string]any{
			"mode": "creds", "existingSecret": "nova-nats-creds",
			"tls": map[string]any{"enabled": true, "secretName": "nova-nats-tls", "clientCert": true},
		},
		"mongodb": map[string]any{"existingSecret": "prod-mongo", "existingSecretKey": "connection-string"},
		"llm":     map[string]any{"existingSecret": "openai", "baseURL": "https://llm.internal/v1"},
		"otel":    map[string]any{"endpoint": "http://otel-collector.observability:4318"},
		"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
		"services": map[string]any{
			"sandbox": map[string]any{"runtimeClassName": "gvisor", "hostUsers": false},
			"gateway": map[string]any{"apiKeys": map[string]any{"existingSecret": "prod-gateway-keys"},
				"networkPolicy": map[string]any{"apiFrom": []any{map[string]any{"namespaceSelector": map[string]any{
					"matchLabels": map[string]any{"kubernetes.io/metadata.name": "ingress"}}}}}},
		},
	})
	all := services
	checkEveryService(t, r, all)

	sandbox := r.deployments[fullname("sandbox")].Spec.Template.Spec
	if sandbox.RuntimeClassName == nil || *sandbox.RuntimeClassName != "gvisor" {
		t.Errorf("sandbox runtimeClassName = %v, want gvisor", sandbox.RuntimeClassName)
	}
	if sandbox.HostUsers == nil || *sandbox.HostUsers {
		t.Errorf("sandbox hostUsers = %v, want false", sandbox.HostUsers)
	}
	for _, s := range all {
		if s == "sandbox" {
			continue
		}
		if rc := r.deployments[fullname(s)].Spec.Template.Spec.RuntimeClassName; rc != nil {
			t.Errorf("%s runs under RuntimeClass %q; only the sandbox should", s, *rc)
		}
	}
	if len(r.statefulSets) != 0 {
		t.Errorf("NATS rendered although nats.enabled=false: %v", keys(r.statefulSets))
	}
	if len(r.secrets) != 0 {
		t.Errorf("the chart created Secrets although every one is provided: %v", keys(r.secrets))
	}

	for _, s := range all {
		d := r.deployments[fullname(s)]
		env := environment(t, r, d)
		if env["NATS_URL"] != "tls://nats.messaging:4222" || env["NATS_CREDS"] != "/etc/nova/nats/nats.creds" ||
			env["NATS_TLS_CA"] == "" || env["NATS_TLS_CERT"] == "" || env["NATS_TLS_KEY"] == "" {
			t.Errorf("%s: NATS connection environment %v", s, env)
		}
		if _, ok := env["NATS_USER"]; ok {
			t.Errorf("%s: NATS_USER set in creds mode", s)
		}
		if env["OTEL_EXPORTER_OTLP_ENDPOINT"] != "http://otel-collector.observability:4318" {
			t.Errorf("%s: OTEL_EXPORTER_OTLP_ENDPOINT = %q", s, env["OTEL_EXPORTER_OTLP_ENDPOINT"])
		}
		// Each pod gets its own credential only.
		var creds *corev1.SecretVolumeSource
		for _, v := range d.Spec.Template.Spec.Volumes {
			if v.Name == "nats-credentials" {
				creds = v.Secret
			}
		}
		if creds == nil || creds.SecretName != "nova-nats-creds" || len(creds.Items) != 1 || creds.Items[0].Key != s+".creds" {
			t.Errorf("%s: credentials volume %+v, want only key %s.creds", s, creds, s)
		}
		if _, ok := r.serviceMonitors[fullname(s)]; !ok {
			t.Errorf("%s: no ServiceMonitor", s)
		}
		np := r.netpols[fullname(s)]
		if !hasEgressPort(np, 4318) {
			t.Errorf("%s: no egress to the OTLP collector", s)
		}
	}
	audit := envVars(r.deployments[fullname("audit")])
	if ref := audit["MONGODB_URI"]; ref == nil || ref.SecretKeyRef.Name != "prod-mongo" || ref.SecretKeyRef.Key != "connection-string" {
		t.Errorf("audit MONGODB_URI from %+v", ref)
	}
	for _, a := range llmAgents {
		if ref := envVars(r.deployments[fullname(a)])["OPENAI_API_KEY"]; ref == nil || ref.SecretKeyRef.Name != "openai" {
			t.Errorf("%s OPENAI_API_KEY from %+v", a, ref)
		}
		if environment(t, r, r.deployments[fullname(a)])["OPENAI_BASE_URL"] != "https://llm.internal/v1" {
			t.Errorf("%s: OPENAI_BASE_URL not set", a)
		}
	}
	gw := r.services[fullname("gateway")]
	if !slices.ContainsFunc(gw.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "api" && p.Port == 8000 }) {
		t.Errorf("gateway Service ports %+v, want api 8000", gw.Spec.Ports)
	}
	// The operator's keys Secret, and the API reachable only from the
	// ingress namespace.
	if v := apiKeysVolume(r.deployments[fullname("gateway")]); v == nil || v.SecretName != "prod-gateway-keys" {
		t.Errorf("gateway keys volume %+v, want the Secret prod-gateway-keys", v)
	}
	gwPolicy := r.netpols[fullname("gateway")]
	var apiRule *networkingv1.NetworkPolicyIngressRule
	for i, rule := range gwPolicy.Spec.Ingress {
		if len(rule.Ports) == 1 && rule.Ports[0].Port.String() == "api" {
			apiRule = &gwPolicy.Spec.Ingress[i]
		}
	}
	if apiRule == nil || len(apiRule.From) != 1 || apiRule.From[0].NamespaceSelector == nil {
		t.Errorf("gateway ingress %+v, want the api port from the ingress namespace only", gwPolicy.Spec.Ingress)
	}
	so := r.scaledObjects[fullname(bus.AgentCodeGenerator)]
	if got := so.Spec.Triggers[0].Metadata["natsServerMonitoringEndpoint"]; got != "nats.messaging.nova-system.svc.cluster.local:8222" &&
		got != "nats.messaging:8222" {
		t.Errorf("monitoring endpoint of an external NATS = %q", got)
	}
}

func TestInvalidValuesAreRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		vals map[string]any
		want string
	}{
		{"creds without a Secret", map[string]any{"nats": map[string]any{"enabled": false}, "natsAuth": map[string]any{"mode": "creds"}}, "existingSecret"},
		{"bundled NATS with creds", map[string]any{"natsAuth": map[string]any{"mode": "creds", "existingSecret": "x"}}, "must be password"},
		{"unknown auth mode", map[string]any{"natsAuth": map[string]any{"mode": "token"}}, "natsAuth.mode"},
		{"audit without MongoDB", map[string]any{"mongodb": map[string]any{"uri": ""}}, "MongoDB"},
		{"an API key without its hash", map[string]any{"services": map[string]any{"gateway": map[string]any{"apiKeys": map[string]any{
			"keys": []any{map[string]any{"name": "ci", "scopes": []any{"admin"}}}}}}}, "each key needs name, sha256 and scopes"},
		{"the semantic code cache without the LLM API", map[string]any{"services": map[string]any{"graph-engine": map[string]any{
			"env": map[string]any{"NOVA_CODECACHE_SEMANTIC": "true"}}}}, "NOVA_CODECACHE_SEMANTIC needs llm: true"},
		{"a misspelt key", map[string]any{"imgae": map[string]any{"tag": "1.0"}}, "imgae"},
		{"a misspelt key of a service", map[string]any{"services": map[string]any{"sandbox": map[string]any{"replica": 3}}}, "replica"},
		{"a tag that is a number", map[string]any{"image": map[string]any{"tag": 1.5}}, "tag"},
		{"a digest that is not one", map[string]any{"image": map[string]any{"digests": map[string]any{"sandbox": "latest"}}}, "/image/digests/sandbox"},
		{"an Ingress without hosts", map[string]any{"services": map[string]any{"gateway": map[string]any{"ingress": map[string]any{
			"enabled": true}}}}, "services.gateway.ingress.hosts"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chrt, err := loader.Load(chartDir)
			if err != nil {
				t.Fatal(err)
			}
			install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
			install.DryRun, install.ClientOnly, install.Replace = true, true, true
			install.ReleaseName, install.Namespace = release, namespace
			_, err = install.Run(chrt, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error = %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

// TestSemanticCodeCache: with the code cache's semantic level on, the graph
// engine gets what it needs to call the embeddings API, the key from the
// LLM Secret and egress to the API, as the LLM agents do; by default it
// gets neither (checkEveryService).
func TestSemanticCodeCache(t *testing.T) {
	r := render(t, map[string]any{
		"llm": map[string]any{"existingSecret": "openai", "baseURL": "https://llm.internal/v1"},
		"services": map[string]any{"graph-engine": map[string]any{"llm": true,
			"env": map[string]any{"NOVA_CODECACHE_SEMANTIC": "true", "NOVA_CODECACHE_SIMILARITY": "0.9"}}},
	})
	d := r.deployments[fullname(bus.AgentGraphEngine)]
	if ref := envVars(d)["OPENAI_API_KEY"]; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "openai" {
		t.Errorf("graph-engine OPENAI_API_KEY from %+v", ref)
	}
	env := environment(t, r, d)
	if env["NOVA_CODECACHE_SEMANTIC"] != "true" || env["NOVA_CODECACHE_SIMILARITY"] != "0.9" || env["OPENAI_BASE_URL"] != "https://llm.internal/v1" {
		t.Errorf("graph-engine environment %v", env)
	}
	if !hasEgressPort(r.netpols[fullname(bus.AgentGraphEngine)], 443) {
		t.Error("graph-engine: no egress to the LLM API")
	}
}

// TestLint is `helm lint --strict` for the value sets above.
func TestLint(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"defaults":      nil,
		"keda off":      {"keda": map[string]any{"enabled": false}},
		"external nats": {"nats": map[string]any{"enabled": false}},
	} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true
			lint.Namespace = namespace
			res := lint.Run([]string{chartDir}, vals)
			for _, m := range res.Messages {
				// Strict lint fails on warnings; INFO (an icon) is advice.
				if m.Severity > 1 {
					t.Errorf("lint: %s", m)
				}
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
		})
	}
}

// TestAccountsFileIsTheComposeOne: the bundled NATS and deploy/nats use the
// same users and permissions.
func TestAccountsFileIsTheComposeOne(t *testing.T) {
	chartCopy, err := os.ReadFile(chartDir + "/files/nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	deployed, err := os.ReadFile("../../nats/accounts.conf")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(chartCopy, deployed) {
		t.Fatal("helm/nova/files/nats/accounts.conf differs from deploy/nats/accounts.conf: " +
			"edit deploy/nats/accounts.conf and run: cp deploy/nats/accounts.conf helm/nova/files/nats/accounts.conf")
	}
}

// apiKeysVolume is the Secret volume of the gateway's API keys.
func apiKeysVolume(d *appsv1.Deployment) *corev1.SecretVolumeSource {
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == "api-keys" {
			return v.Secret
		}
	}
	return nil
}

// TestGatewayByDefault: the default install runs the gateway with an admin
// key the chart generates (only its hash reaches the pod), the keys of the
// values, MongoDB, and the API port open in its NetworkPolicy.
func TestGatewayByDefault(t *testing.T) {
	r := render(t, map[string]any{"services": map[string]any{"gateway": map[string]any{"apiKeys": map[string]any{
		"keys": []any{map[string]any{"name": "ci", "sha256": strings.Repeat("ab", 32), "scopes": []any{"executions:write"}}}}}}})
	d := r.deployments[fullname("gateway")]
	env := environment(t, r, d)
	if env["NOVA_GATEWAY_KEYS_FILE"] != "/etc/nova/gateway/keys.yaml" || env["GATEWAY_ADDR"] != ":8000" {
		t.Errorf("gateway environment %v", env)
	}
	if ref := envVars(d)["MONGODB_URI"]; ref == nil || ref.SecretKeyRef == nil {
		t.Errorf("gateway MONGODB_URI from %+v", ref)
	}
	mounted := false
	for _, m := range d.Spec.Template.Spec.Containers[0].VolumeMounts {
		mounted = mounted || m.Name == "api-keys" && m.MountPath == "/etc/nova/gateway" && m.ReadOnly
	}
	v := apiKeysVolume(d)
	if !mounted || v == nil || v.SecretName != release+"-gateway-keys" {
		t.Fatalf("keys volume %+v, mounted %v", v, mounted)
	}
	admin := r.secrets[release+"-gateway-admin-key"]
	keysFile := r.secrets[release+"-gateway-keys"]
	if admin == nil || keysFile == nil {
		t.Fatalf("Secrets %v: want the admin key and the keys file", keys(r.secrets))
	}
	key := string(admin.Data["key"])
	if !strings.HasPrefix(key, "nova_gk_") || len(key) < 40 {
		t.Errorf("generated admin key %q", key)
	}
	file := keysFile.StringData["keys.yaml"]
	sum := sha256.Sum256([]byte(key))
	if strings.Contains(file, key) || !strings.Contains(file, hex.EncodeToString(sum[:])) ||
		!strings.Contains(file, `{name: "ci", sha256: "`+strings.Repeat("ab", 32)+`", scopes: ["executions:write"]}`) {
		t.Errorf("keys file holds the key itself or misses a hash:\n%s", file)
	}
	svc := r.services[fullname("gateway")]
	if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "api" && p.Port == 8000 }) {
		t.Errorf("gateway Service ports %+v, want api 8000", svc.Spec.Ports)
	}
	open := false
	for _, rule := range r.netpols[fullname("gateway")].Spec.Ingress {
		open = open || len(rule.Ports) == 1 && rule.Ports[0].Port.String() == "api" && len(rule.From) == 0
	}
	if !open {
		t.Errorf("gateway ingress %+v, want the api port open", r.netpols[fullname("gateway")].Spec.Ingress)
	}
	// Other services open no port but health and metrics.
	for _, rule := range r.netpols[fullname("graph-engine")].Spec.Ingress {
		for _, p := range rule.Ports {
			if p.Port.String() != "http" {
				t.Errorf("graph-engine ingress opens %s", p.Port.String())
			}
		}
	}
}
