package chart

import (
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	psaapi "k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
)

// The Pod Security Standards level each workload of the chart needs, as
// docs/operations/helm.md states it ("Pod Security"), checked with the Pod Security
// Admission's own evaluator (k8s.io/pod-security-admission, the code the
// API server runs) on the rendered pod templates.

// podLevels evaluates every pod template of r at Kubernetes version v and
// returns, by workload, the strictest level it passes, and why it fails
// the next one.
func podLevels(t *testing.T, r *rendered, v psaapi.Version) (levels map[string]psaapi.Level, why map[string]string) {
	t.Helper()
	eval, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		t.Fatal(err)
	}
	levels, why = map[string]psaapi.Level{}, map[string]string{}
	judge := func(name string, meta metav1.ObjectMeta, spec corev1.PodSpec) {
		levels[name] = psaapi.LevelPrivileged
		for _, level := range []psaapi.Level{psaapi.LevelBaseline, psaapi.LevelRestricted} {
			res := policy.AggregateCheckResults(eval.EvaluatePod(psaapi.LevelVersion{Level: level, Version: v}, &meta, &spec))
			if !res.Allowed {
				why[name] = fmt.Sprintf("not %s: %s", level, res.ForbiddenDetail())
				return
			}
			levels[name] = level
		}
	}
	for name, d := range r.deployments {
		judge(name, d.Spec.Template.ObjectMeta, d.Spec.Template.Spec)
	}
	for name, s := range r.statefulSets {
		judge(name, s.Spec.Template.ObjectMeta, s.Spec.Template.Spec)
	}
	for name, p := range r.pods {
		judge(name, p.ObjectMeta, p.Spec)
	}
	return levels, why
}

// TestPodSecurityLevels: every workload but the sandbox meets the
// restricted level; the default sandbox (its own user namespace, an
// unmasked /proc for bubblewrap's fresh procfs, seccomp and AppArmor
// unconfined) needs privileged; the sandbox with Localhost seccomp and
// AppArmor profiles meets baseline from Kubernetes 1.35 (which
// allows an unmasked /proc in a user namespace) and needs privileged
// before; under gVisor it meets restricted.
func TestPodSecurityLevels(t *testing.T) {
	sandbox := fullname("sandbox")
	cases := []struct {
		name    string
		vals    map[string]any
		version psaapi.Version
		sandbox psaapi.Level
	}{
		{"defaults", nil, psaapi.LatestVersion(), psaapi.LevelPrivileged},
		{"localhost profiles, 1.35", localhostProfiles, psaapi.MajorMinorVersion(1, 35), psaapi.LevelBaseline},
		{"localhost profiles, 1.34", localhostProfiles, psaapi.MajorMinorVersion(1, 34), psaapi.LevelPrivileged},
		{"gvisor", gvisorSandbox, psaapi.LatestVersion(), psaapi.LevelRestricted},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, tc.vals)
			levels, why := podLevels(t, r, tc.version)
			if len(levels) < len(services)+1 {
				t.Fatalf("%d workloads judged, want every service and the bundled NATS: %v", len(levels), keys(levels))
			}
			for name, got := range levels {
				want := psaapi.LevelRestricted
				if name == sandbox {
					want = tc.sandbox
				}
				if got != want {
					t.Errorf("%s meets %s, want %s (%s)", name, got, want, why[name])
				}
			}
		})
	}
}

// localhostProfiles runs the sandbox under Localhost seccomp and AppArmor
// profiles installed on the nodes.
var localhostProfiles = map[string]any{"services": map[string]any{"sandbox": map[string]any{
	"securityContext": map[string]any{
		"seccompProfile":  map[string]any{"type": "Localhost", "localhostProfile": "nova/sandbox.json"},
		"appArmorProfile": map[string]any{"type": "Localhost", "localhostProfile": "nova-sandbox"},
	},
}}}

// gvisorSandbox runs the sandbox under gVisor, whose kernel the program's
// namespaces are made in: the runtime's default profiles, /proc masked.
var gvisorSandbox = map[string]any{"services": map[string]any{"sandbox": map[string]any{
	"runtimeClassName": "gvisor",
	"hostUsers":        nil,
	"securityContext": map[string]any{
		"seccompProfile":  map[string]any{"type": "RuntimeDefault"},
		"appArmorProfile": map[string]any{"type": "RuntimeDefault"},
		"procMount":       nil,
	},
}}}

// TestSandboxStartsOnAnOrdinaryNode: the default sandbox pod has what
// bubblewrap needs for its fresh procfs without gVisor: its own user
// namespace and an unmasked /proc, no capability and no privilege.
func TestSandboxStartsOnAnOrdinaryNode(t *testing.T) {
	r := render(t, nil)
	d := r.deployments[fullname("sandbox")]
	if d == nil {
		t.Fatal("no sandbox Deployment")
	}
	spec := d.Spec.Template.Spec
	if spec.HostUsers == nil || *spec.HostUsers {
		t.Errorf("hostUsers %v, want false: without its own user namespace the pod may not unmask /proc", spec.HostUsers)
	}
	c := spec.Containers[0].SecurityContext
	if c == nil || c.ProcMount == nil || *c.ProcMount != corev1.UnmaskedProcMount {
		t.Fatalf("procMount is not Unmasked: bubblewrap fails with \"Can't mount proc on /newroot/proc\"")
	}
	if (c.Privileged != nil && *c.Privileged) || (c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation) ||
		c.Capabilities == nil || len(c.Capabilities.Add) != 0 || !strings.EqualFold(string(firstDrop(c.Capabilities)), "ALL") {
		t.Errorf("the sandbox container is privileged, may escalate, or keeps capabilities: %+v", c)
	}
}

func firstDrop(c *corev1.Capabilities) corev1.Capability {
	if len(c.Drop) == 0 {
		return ""
	}
	return c.Drop[0]
}
