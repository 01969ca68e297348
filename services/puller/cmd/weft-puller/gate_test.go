package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
)

// TestGateCommand runs the real watcher and `weft-puller gate` on one
// weft.yaml, with a kube-apiserver calling the shipped webhook
// configuration at the gate's HTTPS address: a pod of a StatefulSet that a
// gated policy selects is created with the scheduling gate, and the same
// process removes it once the policy's gateTimeout (2s) passed, with an
// Event on the StatefulSet and the removal counted in its metrics.
func TestGateCommand(t *testing.T) {
	puller := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	watcher := testkit.GoBuild(t, "github.com/weftio/weft/services/watcher/cmd/weft-watcher")
	kube, hooks := gateCluster(t, nil)
	b := testkit.NATS(t)
	cfg := kube.Config
	ctx := context.Background()
	cs := kube.Clientset
	createPolicies(t, kube, gatedPolicy("gated"))
	pod := gatedDB(t, cs)

	listen := testkit.FreeAddr(t)
	w := testkit.StartProcess(t, watcher, "--config", cfg, "--nats-url", b.URL, "--listen", testkit.FreeAddr(t))
	g := testkit.StartProcess(t, puller, "gate", "--config", cfg, "--nats-url", b.URL, "--listen", listen,
		"--tls-cert", hooks.CertFile, "--tls-key", hooks.KeyFile, "--webhook-listen", hooks.Addr, "--release-interval", "1s", "--log-level", "debug")
	alive := func() {
		for _, p := range []*testkit.Process{w, g} {
			if done, err := p.Exited(); done {
				t.Fatalf("a process exited: %v\n%s", err, p.Output())
			}
		}
	}
	testkit.Eventually(t, 2*time.Minute, func() error {
		alive()
		_, err := get("http://" + listen + "/readyz")
		return err
	})

	created := createGated(t, cs, pod, alive)
	if created.Labels[gate.Label] != "true" {
		t.Fatalf("pod created with labels %v", created.Labels)
	}
	if d, err := gate.Parse(created); err != nil || d.Policy != "gated" || d.Workload.Name != "db" {
		t.Fatalf("pod decision %+v, %v", d, err)
	}
	waitReleased(t, cs, created.Name, alive)
	testkit.Eventually(t, 30*time.Second, func() error {
		evs, err := cs.CoreV1().Events("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		for _, e := range evs.Items {
			if e.InvolvedObject.Kind == "StatefulSet" && e.InvolvedObject.Name == "db" && e.Reason == "GateTimeout" {
				return nil
			}
		}
		return fmt.Errorf("no GateTimeout Event on StatefulSet db among %d events", len(evs.Items))
	})
	body, err := get("http://" + listen + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`weft_puller_gate_removed_total{reason="GateTimeout"} 1`, `weft_puller_gate_admissions_total{decision="gated"}`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// createPolicies creates the policies.
func createPolicies(t *testing.T, kube *kubetest.PullerKube, policies ...v1alpha1.PrePullPolicy) {
	t.Helper()
	for _, p := range policies {
		obj, err := v1alpha1.ToUnstructured(&p)
		if err != nil {
			t.Fatal(err)
		}
		kube.Create(t, v1alpha1.PolicyResource, obj)
	}
}

// gatedPolicy gates the workloads labelled prepull=gate for 2s.
func gatedPolicy(name string) v1alpha1.PrePullPolicy {
	return v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PrePullPolicySpec{
			Workloads:   v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"prepull": "gate"}}},
			Gate:        true,
			GateTimeout: &metav1.Duration{Duration: 2 * time.Second},
		}}
}

// gatedDB creates the StatefulSet shop/db, labelled prepull=gate, and
// returns what makes a new pod db-0 of it.
func gatedDB(t *testing.T, cs kubernetes.Interface) func() *corev1.Pod {
	t.Helper()
	labels := map[string]string{"app": "db"}
	sts, err := cs.AppsV1().StatefulSets("shop").Create(context.Background(), &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{"prepull": "gate"}},
		Spec: appsv1.StatefulSetSpec{
			ServiceName: "db",
			Selector:    &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example.com/db:1"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "db-0", Namespace: "shop", Labels: labels, OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "apps/v1", Kind: "StatefulSet", Name: sts.Name, UID: sts.UID, Controller: new(true)}}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "db", Image: "registry.example.com/db:1"}}},
		}
	}
}

// createGated creates pod() once a dry run of it comes back gated (the API
// server calls a new webhook a moment after storing it, and the watcher
// writes the StatefulSet a moment after it was created), and checks that
// it was created gated. alive ends the test when a process it runs died.
func createGated(t *testing.T, cs kubernetes.Interface, pod func() *corev1.Pod, alive func()) *corev1.Pod {
	t.Helper()
	pods := cs.CoreV1().Pods(pod().Namespace)
	testkit.Eventually(t, time.Minute, func() error {
		alive()
		p, err := pods.Create(context.Background(), pod(), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if !gate.Has(p) {
			return errors.New("a pod of the gated workload is created without the gate: the webhook is not called yet")
		}
		return nil
	})
	created, err := pods.Create(context.Background(), pod(), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !gate.Has(created) {
		t.Fatalf("pod created with gates %v", created.Spec.SchedulingGates)
	}
	return created
}

// waitReleased waits until the gate and its label are removed from pod
// shop/name.
func waitReleased(t *testing.T, cs kubernetes.Interface, name string, alive func()) {
	t.Helper()
	testkit.Eventually(t, time.Minute, func() error {
		alive()
		p, err := cs.CoreV1().Pods("shop").Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if gate.Has(p) || p.Labels[gate.Label] != "" {
			return fmt.Errorf("pod still gated: gates %v, labels %v", p.Spec.SchedulingGates, p.Labels)
		}
		return nil
	})
}

// gateCluster is the puller's test control plane (namespace shop, nodes)
// with the shipped gate webhook installed, and a weft.yaml that watches
// what the gate reads (gatedTypes).
func gateCluster(t *testing.T, nodes map[string]map[string]string) (*kubetest.PullerKube, *kubetest.Webhooks) {
	t.Helper()
	deploy := filepath.Join("..", "..", "..", "..", "deploy", "k8s")
	kube := kubetest.PullerCluster(t, kubetest.PullerSetup{CRDs: filepath.Join(deploy, "crds"), Namespace: "shop", Nodes: nodes, Watched: gatedTypes})
	return kube, kube.InstallWebhooks(t, filepath.Join(deploy, "puller", "gate-webhook.yaml"))
}

// gatedTypes are the watched types the gate needs beside the puller
// section's: ReplicaSets, and the gated pods in full.
const gatedTypes = `  puller_replicasets:
    api_version: apps/v1
    kind: ReplicaSet
  puller_gated_pods:
    api_version: v1
    kind: Pod
    label_selector: weft.io/gated
`

// TestGateWithoutCertificate: a gate whose certificate files are
// missing exits saying which flags name them.
func TestGateWithoutCertificate(t *testing.T) {
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	b := testkit.NATS(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "weft.yaml")
	err := os.WriteFile(cfg, []byte(`sources:
  - name: cluster
    type: kubernetes
    kubeconfig: `+filepath.Join(dir, "kubeconfig")+`
watched_resources:
  puller_gated_pods:
    api_version: v1
    kind: Pod
    label_selector: weft.io/gated
puller:
  source: cluster
  helper_image: ghcr.io/weftio/weft:test
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kubeconfig"), []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testkit.StartProcess(t, bin, "gate", "--config", cfg, "--nats-url", b.URL, "--listen", testkit.FreeAddr(t),
		"--tls-cert", filepath.Join(dir, "absent.crt"), "--tls-key", filepath.Join(dir, "absent.key"), "--webhook-listen", testkit.FreeAddr(t))
	testkit.Eventually(t, time.Minute, func() error {
		done, _ := p.Exited()
		if !done {
			return errors.New("still running without a certificate")
		}
		return nil
	})
	for _, want := range []string{"absent.crt", "--tls-cert"} {
		if !strings.Contains(p.Output(), want) {
			t.Errorf("output does not say %q:\n%s", want, p.Output())
		}
	}
}

// TestGateTypes: the gate reads the puller's types, and the Pod type that
// holds every gated pod in full; a Pod type limited to a namespace, to
// other labels or to metadata does not.
func TestGateTypes(t *testing.T) {
	pod := func(ns, sel, store string) config.Resource {
		return config.Resource{APIVersion: "v1", Kind: "Pod", Namespace: ns, LabelSelector: sel, Store: store}
	}
	cases := []struct {
		name  string
		types map[string]config.Resource
		pods  string // "": refused
	}{
		{"gated pods", map[string]config.Resource{"gated": pod("", gate.Label, config.StoreFull)}, "gated"},
		{"one namespace's pods besides", map[string]config.Resource{"haproxy": pod("weft-system", "app=haproxy", config.StoreFull), "gated": pod("", "weft.io/gated", config.StoreFull)}, "gated"},
		{"every pod, and the gated ones", map[string]config.Resource{"all": pod("", "", config.StoreFull), "z_gated": pod("", gate.Label, config.StoreFull)}, "z_gated"},
		{"every pod", map[string]config.Resource{"all": pod("", "", config.StoreFull)}, "all"},
		{"one namespace only", map[string]config.Resource{"haproxy": pod("weft-system", "", config.StoreFull)}, ""},
		{"other labels only", map[string]config.Resource{"haproxy": pod("", "app=haproxy", config.StoreFull)}, ""},
		{"metadata only", map[string]config.Resource{"gated": pod("", gate.Label, config.StoreOnDemand)}, ""},
		{"no pods", nil, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			types, bucket, err := gateTypes(&config.Config{WatchedResources: tc.types})
			if tc.pods == "" {
				if err == nil || !strings.Contains(err.Error(), "label_selector "+gate.Label) {
					t.Fatalf("err %v, want one naming the type to add", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if bucket.Pods != tc.pods || bucket.Policies != config.PullerPolicies || bucket.Images != config.PullerImages || types.Policies != config.PullerPolicies {
				t.Fatalf("types %+v, bucket types %+v; want pods %s", types, bucket, tc.pods)
			}
		})
	}
}
