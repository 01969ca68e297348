package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// PullerSetup says what PullerCluster makes.
type PullerSetup struct {
	// CRDs is the folder of the puller's CustomResourceDefinitions
	// (deploy/k8s/crds).
	CRDs string
	// Namespace is created with its default ServiceAccount (no controller
	// makes it on the test control plane); "": none.
	Namespace string
	// Nodes are created Ready and untainted, by name, with their labels.
	Nodes map[string]map[string]string
	// Watched is weft.yaml's watched_resources: YAML of its types, each
	// indented by two spaces; "": none beyond the puller section's.
	Watched string
}

// PullerKube is a test control plane set up for the puller, and the
// weft.yaml that reaches it.
type PullerKube struct {
	*Env
	// Config is the path of a weft.yaml whose kubernetes source "cluster"
	// reaches the control plane and whose puller section reads it (helper
	// image ghcr.io/weftio/weft:test, resync 2s).
	Config string
}

// PullerCluster starts a control plane (Start) with opts, installs the puller's
// CustomResourceDefinitions, creates s's namespace and nodes, and writes
// the weft.yaml of PullerKube.Config.
func PullerCluster(t testing.TB, s PullerSetup, opts ...Option) *PullerKube {
	t.Helper()
	k := &PullerKube{Env: Start(t, opts...)}
	k.InstallCRDs(t, s.CRDs)
	ctx := context.Background()
	cs := k.Clientset
	if s.Namespace != "" {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.Namespace}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().ServiceAccounts(s.Namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	names := make([]string, 0, len(s.Nodes))
	for n := range s.Nodes {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		k.ReadyNode(t, n, s.Nodes[n])
	}
	var b strings.Builder
	fmt.Fprintf(&b, "sources:\n  - name: cluster\n    type: kubernetes\n    kubeconfig: %s\n", k.Kubeconfig)
	if s.Watched != "" {
		b.WriteString("watched_resources:\n" + strings.TrimRight(s.Watched, "\n") + "\n")
	}
	b.WriteString("puller:\n  source: cluster\n  helper_image: ghcr.io/weftio/weft:test\n  resync: 2s\n")
	k.Config = filepath.Join(t.TempDir(), "weft.yaml")
	if err := os.WriteFile(k.Config, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return k
}

// ReadyNode creates node name with labels, Ready and without taints.
func (k *Env) ReadyNode(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	ctx := context.Background()
	nodes := k.Clientset.CoreV1().Nodes()
	node, err := nodes.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if node, err = nodes.UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The node lifecycle controller (not running) lifts the not-ready
	// taint of a Ready node.
	node.Spec.Taints = nil
	if _, err := nodes.Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// Create creates obj (an object of resource gvr as unstructured content,
// cluster-scoped or naming its namespace) and returns what the API server
// stored.
func (k *Env) Create(t testing.TB, gvr schema.GroupVersionResource, obj map[string]any) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{Object: obj}
	var r interface {
		Create(context.Context, *unstructured.Unstructured, metav1.CreateOptions, ...string) (*unstructured.Unstructured, error)
	} = k.Client.Resource(gvr)
	if ns := u.GetNamespace(); ns != "" {
		r = k.Client.Resource(gvr).Namespace(ns)
	}
	out, err := r.Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s: %v", gvr.Resource, u.GetName(), err)
	}
	return out
}

// Deployment creates a Deployment name in namespace ns with labels, whose
// pods (labelled app=<name>) run pod.
func (k *Env) Deployment(t testing.TB, ns, name string, labels map[string]string, pod corev1.PodSpec) *appsv1.Deployment {
	t.Helper()
	sel := map[string]string{"app": name}
	d, err := k.Clientset.AppsV1().Deployments(ns).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: sel},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: sel}, Spec: pod},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create Deployment %s/%s: %v", ns, name, err)
	}
	return d
}
