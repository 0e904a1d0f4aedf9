package chart

import (
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart/loader"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

// TestOperatorSettings: what well-kept charts let an operator add to every
// pod or one service's: labels and annotations, a PriorityClass,
// environment variables, volumes; and an Ingress to the gateway's API.
func TestOperatorSettings(t *testing.T) {
	r := render(t, map[string]any{
		"podLabels":         map[string]any{"team": "platform", "tier": "all"},
		"podAnnotations":    map[string]any{"example.com/owner": "platform"},
		"priorityClassName": "nova-default",
		"extraEnv":          []any{map[string]any{"name": "HTTPS_PROXY", "value": "http://proxy.internal:3128"}},
		"services": map[string]any{
			"sandbox": map[string]any{
				"podLabels":         map[string]any{"tier": "sandbox"},
				"priorityClassName": "nova-sandbox",
				"extraEnv":          []any{map[string]any{"name": "SSL_CERT_FILE", "value": "/etc/nova/ca/ca.crt"}},
				"extraVolumes":      []any{map[string]any{"name": "ca", "configMap": map[string]any{"name": "corp-ca"}}},
				"extraVolumeMounts": []any{map[string]any{"name": "ca", "mountPath": "/etc/nova/ca", "readOnly": true}},
			},
			"gateway": map[string]any{"ingress": map[string]any{
				"enabled": true, "className": "nginx",
				"annotations": map[string]any{"cert-manager.io/cluster-issuer": "letsencrypt"},
				"hosts":       []any{map[string]any{"host": "nova.example.com"}},
				"tls":         []any{map[string]any{"secretName": "nova-tls", "hosts": []any{"nova.example.com"}}},
			}},
		},
	})
	for _, svc := range services {
		pod := r.deployments[fullname(svc)].Spec.Template
		wantTier, wantClass := "all", "nova-default"
		if svc == "sandbox" {
			wantTier, wantClass = "sandbox", "nova-sandbox"
		}
		if pod.Labels["team"] != "platform" || pod.Labels["tier"] != wantTier {
			t.Errorf("%s: pod labels %v, want team=platform, tier=%s", svc, pod.Labels, wantTier)
		}
		if pod.Labels["app.kubernetes.io/name"] == "" {
			t.Errorf("%s: the chart's own labels are gone: %v", svc, pod.Labels)
		}
		if pod.Annotations["example.com/owner"] != "platform" || pod.Annotations["checksum/config"] == "" {
			t.Errorf("%s: pod annotations %v", svc, pod.Annotations)
		}
		if pod.Spec.PriorityClassName != wantClass {
			t.Errorf("%s: priorityClassName %q, want %q", svc, pod.Spec.PriorityClassName, wantClass)
		}
		env := map[string]corev1.EnvVar{}
		for _, e := range pod.Spec.Containers[0].Env {
			env[e.Name] = e
		}
		if env["HTTPS_PROXY"].Value != "http://proxy.internal:3128" {
			t.Errorf("%s: no HTTPS_PROXY from extraEnv: %v", svc, pod.Spec.Containers[0].Env)
		}
		if _, ok := env["NATS_PASSWORD"]; !ok {
			t.Errorf("%s: extraEnv replaced the chart's own variables: %v", svc, pod.Spec.Containers[0].Env)
		}
		_, hasCA := env["SSL_CERT_FILE"]
		if hasCA != (svc == "sandbox") {
			t.Errorf("%s: SSL_CERT_FILE set %v; only the sandbox's extraEnv has it", svc, hasCA)
		}
	}
	sandbox := r.deployments[fullname("sandbox")].Spec.Template.Spec
	mounted := false
	for _, m := range sandbox.Containers[0].VolumeMounts {
		mounted = mounted || (m.Name == "ca" && m.MountPath == "/etc/nova/ca" && m.ReadOnly)
	}
	vol := false
	for _, v := range sandbox.Volumes {
		vol = vol || (v.Name == "ca" && v.ConfigMap != nil && v.ConfigMap.Name == "corp-ca")
	}
	if !mounted || !vol {
		t.Errorf("the sandbox's extra volume: mounted %v, declared %v", mounted, vol)
	}

	ing := r.ingresses[fullname("gateway")]
	if ing == nil {
		t.Fatalf("no Ingress for the gateway: %v", keys(r.ingresses))
	}
	if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || ing.Annotations["cert-manager.io/cluster-issuer"] != "letsencrypt" {
		t.Errorf("Ingress class %v, annotations %v", ing.Spec.IngressClassName, ing.Annotations)
	}
	if len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "nova-tls" {
		t.Errorf("Ingress TLS %+v", ing.Spec.TLS)
	}
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "nova.example.com" || ing.Spec.Rules[0].HTTP == nil || len(ing.Spec.Rules[0].HTTP.Paths) != 1 {
		t.Fatalf("Ingress rules %+v", ing.Spec.Rules)
	}
	path := ing.Spec.Rules[0].HTTP.Paths[0]
	svc := r.services[fullname("gateway")]
	api := false
	for _, p := range svc.Spec.Ports {
		api = api || (p.Name == path.Backend.Service.Port.Name && p.Port == 8000)
	}
	if path.Path != "/" || path.PathType == nil || *path.PathType != networkingv1.PathTypePrefix ||
		path.Backend.Service.Name != svc.Name || !api {
		t.Errorf("Ingress path %+v does not lead to the gateway Service's API port 8000", path)
	}

	// No Ingress by default (one without hosts: TestInvalidValuesAreRefused).
	if d := render(t, nil); len(d.ingresses) != 0 {
		t.Errorf("an Ingress by default: %v", keys(d.ingresses))
	}
}

// TestHelmTestPod: `helm test` runs a pod that asks every service's
// /readyz through its Service and the gateway's API with the admin key the
// chart generated; tests.enabled=false leaves it out.
func TestHelmTestPod(t *testing.T) {
	r := render(t, nil)
	pod := r.pods[release+"-install-test"]
	if pod == nil {
		t.Fatalf("no helm test pod: %v", keys(r.pods))
	}
	if pod.Annotations["helm.sh/hook"] != "test" || pod.Spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("the test pod is not a helm test hook that runs once: %v, %s", pod.Annotations, pod.Spec.RestartPolicy)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Spec.Containers[0].Env {
		env[e.Name] = e
	}
	for _, svc := range services {
		url := "http://" + fullname(svc) + ":8080/readyz"
		if !slices.Contains(strings.Fields(env["NOVA_TEST_READYZ"].Value), url) {
			t.Errorf("the test does not ask %s: %q", url, env["NOVA_TEST_READYZ"].Value)
		}
	}
	if env["NOVA_TEST_API"].Value != "http://"+fullname("gateway")+":8000/v1/workflows" {
		t.Errorf("NOVA_TEST_API = %q", env["NOVA_TEST_API"].Value)
	}
	if ref := env["NOVA_TEST_KEY"].ValueFrom; ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != release+"-gateway-admin-key" {
		t.Errorf("NOVA_TEST_KEY is not the generated admin key: %+v", env["NOVA_TEST_KEY"])
	}
	if off := render(t, map[string]any{"tests": map[string]any{"enabled": false}}); len(off.pods) != 0 {
		t.Errorf("tests.enabled=false still renders %v", keys(off.pods))
	}
}

// TestImageTagAndDigest: the images' tag is the chart's appVersion unless
// image.tag says otherwise, and a service pinned in image.digests is
// pulled by digest.
func TestImageTagAndDigest(t *testing.T) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	app := chrt.Metadata.AppVersion
	digest := "sha256:" + strings.Repeat("ab", 32)
	r := render(t, map[string]any{"image": map[string]any{"digests": map[string]any{"sandbox": digest}}})
	for _, svc := range services {
		want := "nova/" + svc + ":" + app
		if svc == "sandbox" {
			want += "@" + digest
		}
		if got := r.deployments[fullname(svc)].Spec.Template.Spec.Containers[0].Image; got != want {
			t.Errorf("%s runs %s, want %s", svc, got, want)
		}
	}
	if got, want := r.pods[release+"-install-test"].Spec.Containers[0].Image, "nova/nova:"+app; got != want {
		t.Errorf("the helm test pod runs %s, want %s", got, want)
	}
	tagged := render(t, map[string]any{"image": map[string]any{"registry": "registry.example.com/nova", "tag": "1.2.3"}})
	if got := tagged.deployments[fullname("gateway")].Spec.Template.Spec.Containers[0].Image; got != "registry.example.com/nova/gateway:1.2.3" {
		t.Errorf("image.registry and image.tag: %s", got)
	}
}
