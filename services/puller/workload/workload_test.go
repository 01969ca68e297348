package workload_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/workload"
)

func deployment(labels map[string]string) map[string]any {
	return map[string]any{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"name": "web", "namespace": "shop", "uid": "u1", "labels": toAny(labels)},
		"spec": map[string]any{"template": map[string]any{"spec": map[string]any{
			"initContainers": []any{map[string]any{"name": "init", "image": "busybox"}},
			"containers":     []any{map[string]any{"name": "web", "image": "registry.example.com/web:1"}},
		}}},
	}
}

func toAny(m map[string]string) map[string]any {
	out := map[string]any{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func TestSelects(t *testing.T) {
	w, err := workload.Decode(deployment(map[string]string{"tier": "front"}))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		sel      v1alpha1.WorkloadSelector
		nsLabels map[string]string
		want     bool
	}{
		{"empty selector selects all", v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{}}, nil, true},
		{"no selector selects nothing", v1alpha1.WorkloadSelector{}, nil, false},
		{"labels match", v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "front"}}}, nil, true},
		{"labels differ", v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "back"}}}, nil, false},
		{"other kind", v1alpha1.WorkloadSelector{Kinds: []v1alpha1.WorkloadKind{v1alpha1.KindDaemonSet}, Selector: &metav1.LabelSelector{}}, nil, false},
		{"namespace listed", v1alpha1.WorkloadSelector{Namespaces: []string{"shop"}, Selector: &metav1.LabelSelector{}}, nil, true},
		{"namespace not listed", v1alpha1.WorkloadSelector{Namespaces: []string{"blog"}, Selector: &metav1.LabelSelector{}}, nil, false},
		{"namespace selector matches", v1alpha1.WorkloadSelector{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}, Selector: &metav1.LabelSelector{}}, map[string]string{"env": "prod"}, true},
		{"namespace selector, namespace unknown", v1alpha1.WorkloadSelector{NamespaceSelector: &metav1.LabelSelector{}, Selector: &metav1.LabelSelector{}}, nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := v1alpha1.PrePullPolicySpec{Workloads: tt.sel}
			spec.Default()
			got, err := workload.Selects(&spec, w, tt.nsLabels)
			if err != nil || got != tt.want {
				t.Errorf("Selects = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestName(t *testing.T) {
	w, err := workload.Decode(deployment(nil))
	if err != nil {
		t.Fatal(err)
	}
	h := workload.ImageSetHash(w.Images())
	if got := workload.Name(w, h); got != "deployment-web-"+h {
		t.Errorf("Name = %s", got)
	}
	reordered := []v1alpha1.ContainerImage{{Image: "registry.example.com/web:1"}, {Image: "busybox"}, {Image: "busybox"}}
	if workload.ImageSetHash(reordered) != h {
		t.Error("the image-set hash depends on order or repeats")
	}
	w.Name = strings.Repeat("x", 300)
	if got := workload.Name(w, h); len(got) > 253 || !strings.HasSuffix(got, "-"+h) {
		t.Errorf("long name %d chars: %s", len(got), got)
	}
}

func node(name string, images ...string) corev1.Node {
	n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"pool": "web"}}}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if len(images) > 0 {
		n.Status.Images = []corev1.ContainerImage{{Names: images}}
	}
	return n
}

func TestLacking(t *testing.T) {
	w, err := workload.Decode(deployment(nil))
	if err != nil {
		t.Fatal(err)
	}
	nodes := []corev1.Node{
		node("warm", "docker.io/library/busybox:latest", "registry.example.com/web:1"),
		node("half", "busybox"),
		node("cold"),
	}
	tainted := node("tainted")
	tainted.Spec.Taints = []corev1.Taint{{Key: "gpu", Effect: corev1.TaintEffectNoSchedule}}
	nodes = append(nodes, tainted)
	got, err := workload.Lacking(w, nodes, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(got, ",") != "half,cold" {
		t.Errorf("Lacking = %v, want half,cold (warm has both images, tainted is not tolerated)", got)
	}
	got, err = workload.Lacking(w, nodes, &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "gpu"}})
	if err != nil || len(got) != 0 {
		t.Errorf("Lacking with a node selector matching none = %v, %v", got, err)
	}
}

// A DaemonSet's pods tolerate what the DaemonSet controller gives them: a
// cordoned node is eligible for it, not for a Deployment.
func TestLackingDaemonSet(t *testing.T) {
	cordoned := node("cordoned")
	cordoned.Spec.Unschedulable = true
	for kind, want := range map[string]string{"DaemonSet": "cordoned", "Deployment": ""} {
		obj := deployment(nil)
		obj["kind"] = kind
		w, err := workload.Decode(obj)
		if err != nil {
			t.Fatal(err)
		}
		got, err := workload.Lacking(w, []corev1.Node{cordoned}, nil)
		if err != nil || strings.Join(got, ",") != want {
			t.Errorf("%s: Lacking = %v, %v; want %q", kind, got, err, want)
		}
	}
}
