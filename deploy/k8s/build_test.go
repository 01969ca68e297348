package k8s_test

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
)

// namespace is where every weft object lives.
const namespace = "weft-system"

// installation is one way of installing weft: a kustomization folder (made
// in a temporary folder when it adds components to an overlay) and the
// weft.yaml it installs.
type installation struct {
	name string
	// dir is the kustomization, relative to this folder.
	dir string
	// components are added to dir by a kustomization of the test's own.
	components []string
	// weftYAML is the weft.yaml the installation holds.
	weftYAML string
}

var installations = []installation{
	{name: "base", dir: "base", weftYAML: "base/weft.yaml"},
	{name: "single", dir: "overlays/single", weftYAML: "overlays/single/weft.yaml"},
	{name: "ingress", dir: "overlays/ingress", weftYAML: "overlays/ingress/weft.yaml"},
	{name: "ingress+monitoring+gate", dir: "overlays/ingress", components: []string{"components/monitoring", "components/gate"}, weftYAML: "overlays/ingress/weft.yaml"},
	{name: "ingress+webhook", dir: "overlays/ingress", components: []string{"components/webhook", "components/webhook-cert-manager"}, weftYAML: "overlays/ingress/weft.yaml"},
	{name: "site", dir: "overlays/site", weftYAML: "overlays/site/weft.yaml"},
}

// build runs kustomize on the installation and returns its objects.
func build(t *testing.T, in installation) []*unstructured.Unstructured {
	t.Helper()
	dir, err := filepath.Abs(in.dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(in.components) > 0 {
		// kustomize takes only relative paths to other kustomizations
		tmp := t.TempDir()
		rel := func(p string) string {
			t.Helper()
			abs, err := filepath.Abs(p)
			if err != nil {
				t.Fatal(err)
			}
			r, err := filepath.Rel(tmp, abs)
			if err != nil {
				t.Fatal(err)
			}
			return r
		}
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n- %s\ncomponents:\n", rel(in.dir))
		for _, c := range in.components {
			fmt.Fprintf(&b, "- %s\n", rel(c))
		}
		dir = tmp
		if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", in.dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		obj, err := r.Map()
		if err != nil {
			t.Fatalf("%s: %s: %v", in.name, r.CurId(), err)
		}
		out = append(out, &unstructured.Unstructured{Object: obj})
	}
	if len(out) == 0 {
		t.Fatalf("%s: no objects", in.name)
	}
	return out
}

// typed converts u into a typed object of its kind.
func typed[T any](t *testing.T, u *unstructured.Unstructured) *T {
	t.Helper()
	var v T
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &v, true); err != nil {
		t.Fatalf("%s %s: %v", u.GetKind(), u.GetName(), err)
	}
	return &v
}

// workload is a pod template with where it comes from.
type workload struct {
	kind, name string
	replicas   *int32
	selector   map[string]string
	spec       corev1.PodTemplateSpec
}

func workloads(t *testing.T, objs []*unstructured.Unstructured) []workload {
	t.Helper()
	var out []workload
	for _, o := range objs {
		switch o.GetKind() {
		case "Deployment":
			d := typed[appsv1.Deployment](t, o)
			out = append(out, workload{"Deployment", d.Name, d.Spec.Replicas, d.Spec.Selector.MatchLabels, d.Spec.Template})
		case "StatefulSet":
			s := typed[appsv1.StatefulSet](t, o)
			out = append(out, workload{"StatefulSet", s.Name, s.Spec.Replicas, s.Spec.Selector.MatchLabels, s.Spec.Template})
		case "DaemonSet":
			d := typed[appsv1.DaemonSet](t, o)
			out = append(out, workload{"DaemonSet", d.Name, nil, d.Spec.Selector.MatchLabels, d.Spec.Template})
		case "Job":
			j := typed[batchv1.Job](t, o)
			out = append(out, workload{"Job", j.Name, nil, nil, j.Spec.Template})
		}
	}
	return out
}

// rootWorkloads may run as root: the puller's node agent connects to the
// container runtime's socket, which is root's.
var rootWorkloads = []string{"weft-puller-agent"}

// noKubeAPI are the ServiceAccounts of services that never talk to the API
// server.
var noKubeAPI = []string{"weft-renderer", "weft-validator", "weft-deployer", "weft-nats", "weft-haproxy"}

// TestManifests builds every installation and checks what every pod of it
// promises: no privilege, a read-only root, resources, probes, replicas
// spread and covered by a PodDisruptionBudget, no API token where the
// service has no use for one, and every ConfigMap, Secret and
// ServiceAccount it names present in the build or made at install by its
// Job weft-nats-setup (madeAtInstall).
func TestManifests(t *testing.T) {
	for _, in := range installations {
		t.Run(in.name, func(t *testing.T) {
			objs := build(t, in)
			have := map[string]bool{}
			var pdbs []*policyv1.PodDisruptionBudget
			for _, o := range objs {
				if o.GetNamespace() != "" && o.GetNamespace() != namespace {
					t.Errorf("%s %s is in namespace %q, not %s", o.GetKind(), o.GetName(), o.GetNamespace(), namespace)
				}
				have[o.GetKind()+"/"+o.GetName()] = true
				if o.GetKind() == "PodDisruptionBudget" {
					pdbs = append(pdbs, typed[policyv1.PodDisruptionBudget](t, o))
				}
			}
			ws := workloads(t, objs)
			if len(ws) == 0 {
				t.Fatal("no workload")
			}
			for name := range madeAtInstall(t, objs) {
				have["Secret/"+name] = true
			}
			for _, w := range ws {
				for _, p := range podProblems(w, have, pdbs) {
					t.Errorf("%s %s: %s", w.kind, w.name, p)
				}
			}
		})
	}
}

// podProblems lists what w's pods lack.
func podProblems(w workload, have map[string]bool, pdbs []*policyv1.PodDisruptionBudget) []string {
	var ps []string
	add := func(format string, args ...any) { ps = append(ps, fmt.Sprintf(format, args...)) }
	spec := w.spec.Spec
	sc := spec.SecurityContext
	root := slices.Contains(rootWorkloads, w.name)
	if sc == nil || sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		add("seccomp profile is not RuntimeDefault")
	}
	if !root && (sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser == 0) {
		add("pods do not run as a non-root user id (runAsNonRoot, runAsUser)")
	}
	sa := spec.ServiceAccountName
	if sa == "" || !have["ServiceAccount/"+sa] {
		add("ServiceAccount %q is not in the build", sa)
	}
	if slices.Contains(noKubeAPI, sa) && (spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken) {
		add("ServiceAccount %s needs no API access, but its token is mounted", sa)
	}
	for _, v := range spec.Volumes {
		switch {
		case v.ConfigMap != nil && !have["ConfigMap/"+v.ConfigMap.Name]:
			add("volume %s: ConfigMap %s is not in the build", v.Name, v.ConfigMap.Name)
		case v.Secret != nil && !have["Secret/"+v.Secret.SecretName] && !slices.Contains(madeByPeople, v.Secret.SecretName):
			add("volume %s: Secret %s is not in the build", v.Name, v.Secret.SecretName)
		case v.HostPath != nil && !root:
			add("volume %s: hostPath %s", v.Name, v.HostPath.Path)
		}
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		csc := c.SecurityContext
		switch {
		case csc == nil:
			add("container %s: no securityContext", c.Name)
			continue
		case csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation:
			add("container %s: allowPrivilegeEscalation is not false", c.Name)
		case csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem:
			add("container %s: root filesystem is not read-only", c.Name)
		case csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) > 0:
			add("container %s: capabilities are not exactly drop ALL", c.Name)
		case csc.Privileged != nil && *csc.Privileged:
			add("container %s: privileged", c.Name)
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			add("container %s: no cpu and memory requests and memory limit", c.Name)
		}
		for _, m := range c.VolumeMounts {
			if v := volume(spec.Volumes, m.Name); v != nil && v.HostPath != nil && !m.ReadOnly {
				add("container %s: hostPath %s mounted writable", c.Name, v.HostPath.Path)
			}
		}
		for _, e := range c.Env {
			if r := e.ValueFrom; r != nil && r.SecretKeyRef != nil && !have["Secret/"+r.SecretKeyRef.Name] && !slices.Contains(madeByPeople, r.SecretKeyRef.Name) {
				add("container %s: env %s: Secret %s is not in the build", c.Name, e.Name, r.SecretKeyRef.Name)
			}
			if r := e.ValueFrom; r != nil && r.ConfigMapKeyRef != nil && !have["ConfigMap/"+r.ConfigMapKeyRef.Name] {
				add("container %s: env %s: ConfigMap %s is not in the build", c.Name, e.Name, r.ConfigMapKeyRef.Name)
			}
		}
	}
	if w.kind == "Job" {
		return ps // runs to its end: no probes, no replicas
	}
	for _, c := range spec.Containers {
		if c.ReadinessProbe == nil || c.LivenessProbe == nil {
			add("container %s: no readiness and liveness probes", c.Name)
		}
		if strings.HasPrefix(c.Image, "ghcr.io/weftio/") {
			probes := map[string]bool{}
			for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
				if p != nil && p.HTTPGet != nil {
					probes[p.HTTPGet.Path] = true
				}
			}
			if !probes["/healthz"] || !probes["/readyz"] {
				add("container %s: probes are not /healthz (liveness) and /readyz (readiness)", c.Name)
			}
		}
	}
	if w.kind == "DaemonSet" || (w.replicas != nil && *w.replicas == 1) {
		return ps
	}
	if w.replicas == nil || *w.replicas < 2 {
		add("fewer than 2 replicas")
	}
	if len(spec.TopologySpreadConstraints) == 0 {
		add("no topology spread")
	}
	covered := false
	for _, p := range pdbs {
		sel, err := labels.ValidatedSelectorFromSet(p.Spec.Selector.MatchLabels)
		if err == nil && len(p.Spec.Selector.MatchLabels) > 0 && sel.Matches(labels.Set(w.spec.Labels)) {
			covered = true
		}
	}
	if !covered {
		add("no PodDisruptionBudget selects its pods")
	}
	return ps
}

// madeByPeople are the Secrets an installation names that people make:
// the webhooks' serving certificates (components/gate, components/webhook;
// or cert-manager makes them) and, at a site, the copy of the hub's
// site-link key (overlays/site).
var madeByPeople = []string{"weft-puller-gate-tls", "weft-renderer-webhook-tls", "weft-nats-hub-link"}

// madeAtInstall are the Secrets the installation's Job weft-nats-setup
// makes with `weft nats-keys`: one per role of pkg/msg's access table and
// the servers' authorization block. None when the build has no such Job.
func madeAtInstall(t *testing.T, objs []*unstructured.Unstructured) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, w := range workloads(t, objs) {
		if w.kind != "Job" {
			continue
		}
		for _, c := range append(slices.Clone(w.spec.Spec.InitContainers), w.spec.Spec.Containers...) {
			if len(c.Command) > 1 && c.Command[0] == "/usr/local/bin/weft" && c.Command[1] == "nats-keys" {
				out["weft-nats-auth"] = true
				for _, r := range msg.Roles() {
					out["weft-nats-"+string(r)] = true
				}
			}
		}
	}
	return out
}

func volume(vs []corev1.Volume, name string) *corev1.Volume {
	for i := range vs {
		if vs[i].Name == name {
			return &vs[i]
		}
	}
	return nil
}

// TestWeftYAML loads every installation's weft.yaml as weft does: a
// configuration that weft would refuse cannot be shipped.
func TestWeftYAML(t *testing.T) {
	for _, in := range installations {
		t.Run(in.name, func(t *testing.T) {
			if _, err := config.Load(in.weftYAML); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestKeyJobRole: where an installation has the key Job, its Role grants
// get and update on exactly the Secrets the Job makes, and create (which
// RBAC cannot limit by name), nothing else.
func TestKeyJobRole(t *testing.T) {
	for _, in := range installations {
		t.Run(in.name, func(t *testing.T) {
			objs := build(t, in)
			made := madeAtInstall(t, objs)
			if len(made) == 0 {
				if in.name != "single" {
					t.Fatal("no key Job")
				}
				return // weft up's embedded NATS listens on the pod's loopback
			}
			r := typed[rbacv1.Role](t, find(t, objs, "Role", "weft-nats-keys"))
			var named []string
			for _, rule := range r.Rules {
				if !slices.Equal(rule.APIGroups, []string{""}) || !slices.Equal(rule.Resources, []string{"secrets"}) {
					t.Errorf("rule %+v: not on Secrets", rule)
				}
				switch {
				case slices.Equal(rule.Verbs, []string{"create"}) && len(rule.ResourceNames) == 0:
				case slices.Equal(rule.Verbs, []string{"get", "update"}):
					named = append(named, rule.ResourceNames...)
				default:
					t.Errorf("rule %+v: more than create, or get and update of named Secrets", rule)
				}
			}
			slices.Sort(named)
			want := slices.Sorted(maps.Keys(made))
			if !slices.Equal(named, want) {
				t.Errorf("the Role names the Secrets %v, the Job makes %v", named, want)
			}
		})
	}
}

// TestMonitoringComponent: the monitoring component brings weft's alert
// rules as a PrometheusRule and its dashboard as a ConfigMap for Grafana's
// sidecar, both from deploy/monitoring's files (one copy of each).
func TestMonitoringComponent(t *testing.T) {
	i := slices.IndexFunc(installations, func(in installation) bool { return slices.Contains(in.components, "components/monitoring") })
	if i < 0 {
		t.Fatal("no installation has the monitoring component")
	}
	dashboard, err := os.ReadFile("../monitoring/weft-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var rule, configMap *unstructured.Unstructured
	for _, o := range build(t, installations[i]) {
		switch {
		case o.GetKind() == "PrometheusRule" && o.GetName() == "weft":
			rule = o
		case o.GetKind() == "ConfigMap" && o.GetName() == "weft-dashboard":
			configMap = o
		}
	}
	if rule == nil || configMap == nil {
		t.Fatalf("PrometheusRule weft: %v, ConfigMap weft-dashboard: %v; want both", rule != nil, configMap != nil)
	}
	if groups, _, _ := unstructured.NestedSlice(rule.Object, "spec", "groups"); len(groups) == 0 {
		t.Error("PrometheusRule weft has no rule groups")
	}
	if rule.GetNamespace() != namespace || configMap.GetNamespace() != namespace {
		t.Errorf("namespaces %q, %q, want %q", rule.GetNamespace(), configMap.GetNamespace(), namespace)
	}
	if configMap.GetLabels()["grafana_dashboard"] != "1" {
		t.Errorf("ConfigMap weft-dashboard labels %v: Grafana's sidecar looks for grafana_dashboard: \"1\"", configMap.GetLabels())
	}
	if got, _, _ := unstructured.NestedString(configMap.Object, "data", "weft-dashboard.json"); got != string(dashboard) {
		t.Error("ConfigMap weft-dashboard does not hold deploy/monitoring/weft-dashboard.json")
	}
}
