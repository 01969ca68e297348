package webhook_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/webhook"
)

const webhookConfig = "../../../../deploy/k8s/puller/gate-webhook.yaml"

// TestWebhookOnAPIServer runs the shipped MutatingWebhookConfiguration on a
// real kube-apiserver calling the webhook over TLS, with the deployment and
// replicaset controllers creating the pods: the pods of a Deployment a
// gated policy selects are created with the gate, those of another
// Deployment without it, and once the webhook is down pods are admitted
// without it (failurePolicy Ignore).
func TestWebhookOnAPIServer(t *testing.T) {
	k := kubetest.Start(t, kubetest.WithControllerManager("deployment-controller", "replicaset-controller"))
	hooks := k.InstallWebhooks(t, webhookConfig)
	bus := testkit.NATS(t)
	putPolicy(t, bus, time.Minute)
	view := gate.NewView(bus.JS, testTypes, logger(t))
	testkit.Run(t, view.Run)

	reg := prometheus.NewRegistry()
	s, err := webhook.New(view, webhook.Options{Addr: hooks.Addr, CertFile: hooks.CertFile, KeyFile: hooks.KeyFile}, logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	stop := testkit.Run(t, s.Run)
	ctx := context.Background()
	cs := k.Clientset
	for _, ns := range []string{"shop", "weft-system"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitWebhook(t, cs, bus)

	// A pod with gates, labels and annotations of its own keeps them.
	own := ownedPod("shop", "probe-h", "h")
	own.Annotations = map[string]string{"example.com/note": "kept"}
	own.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/other"}}
	got, err := cs.CoreV1().Pods("shop").Create(ctx, own, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	if g := got.Spec.SchedulingGates; len(g) != 2 || g[0].Name != "example.com/other" || g[1].Name != gate.Name {
		t.Fatalf("gates %v, want example.com/other then %s", g, gate.Name)
	}
	if got.Annotations["example.com/note"] != "kept" || got.Annotations[gate.Annotation] == "" ||
		got.Labels["pod-template-hash"] != "h" || got.Labels[gate.Label] != "true" {
		t.Fatalf("labels %v, annotations %v", got.Labels, got.Annotations)
	}
	web := createDeployment(t, cs, bus, "shop", "web", "gate", 2)
	plain := createDeployment(t, cs, bus, "shop", "plain", "none", 1)
	mine := createDeployment(t, cs, bus, "weft-system", "web", "gate", 1) // weft's own namespace is not sent to the webhook

	gated := waitPods(t, cs, "shop", "web", 2)
	for _, p := range gated {
		if !gate.Has(&p) || p.Labels[gate.Label] != "true" {
			t.Fatalf("pod %s of a gated Deployment: gates %v, labels %v", p.Name, p.Spec.SchedulingGates, p.Labels)
		}
		d, err := gate.Parse(&p)
		if err != nil {
			t.Fatal(err)
		}
		if d.Policy != "gated" || d.Timeout != gate.Duration(time.Minute) || d.Workload.Name != "web" || d.Workload.UID != string(web.UID) {
			t.Fatalf("pod %s decision %+v", p.Name, d)
		}
	}
	for _, p := range append(waitPods(t, cs, "shop", "plain", 1), waitPods(t, cs, "weft-system", "web", 1)...) {
		if len(p.Spec.SchedulingGates) != 0 || p.Annotations[gate.Annotation] != "" {
			t.Fatalf("pod %s/%s of an ungated Deployment has gates %v", p.Namespace, p.Name, p.Spec.SchedulingGates)
		}
	}
	if n := testkit.CounterValue(t, reg, "weft_puller_gate_pods_gated_total"); n != 4 { // and the two dry runs
		t.Errorf("pods gated = %v, want 4", n)
	}
	_, _ = plain, mine

	// The webhook is down: the API server admits the pod unchanged.
	stop()
	scale(t, cs, "shop", "web", 3)
	testkit.Eventually(t, time.Minute, func() error {
		pods := listPods(t, cs, "shop", "web")
		for _, p := range pods {
			if !gate.Has(&p) {
				return nil
			}
		}
		return fmt.Errorf("%d pods, all gated: no pod admitted while the webhook is down", len(pods))
	})
}

// waitWebhook waits until the API server calls the webhook: it sees a new
// webhook configuration a moment after storing it. A pod of a gated
// workload is created with dryRun until it comes back gated.
func waitWebhook(t *testing.T, cs kubernetes.Interface, bus *testkit.Bus) {
	t.Helper()
	testkit.PutResource(t, bus.JS, "k8s", "deployments", map[string]any{"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]any{"namespace": "shop", "name": "probe", "uid": "probe", "labels": map[string]any{"prepull": "gate"}}})
	testkit.Eventually(t, time.Minute, func() error {
		p, err := cs.CoreV1().Pods("shop").Create(context.Background(), ownedPod("shop", "probe-h", "h"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return err
		}
		if !gate.Has(p) {
			return fmt.Errorf("a pod of a gated workload created without the gate: the webhook is not called yet")
		}
		return nil
	})
}

func createDeployment(t *testing.T, cs kubernetes.Interface, bus *testkit.Bus, ns, name, prepull string, replicas int32) *appsv1.Deployment {
	t.Helper()
	labels := map[string]string{"app": name}
	d, err := cs.AppsV1().Deployments(ns).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"prepull": prepull}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/" + name + ":1"}}},
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// As the watcher does, a moment after the API server has it.
	putObject(t, bus, "deployments", "apps/v1", "Deployment", d)
	return d
}

func listPods(t *testing.T, cs kubernetes.Interface, ns, app string) []corev1.Pod {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func waitPods(t *testing.T, cs kubernetes.Interface, ns, app string, n int) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	testkit.Eventually(t, 2*time.Minute, func() error {
		if pods = listPods(t, cs, ns, app); len(pods) < n {
			return fmt.Errorf("%d pods of %s/%s, want %d", len(pods), ns, app, n)
		}
		return nil
	})
	return pods
}

func scale(t *testing.T, cs kubernetes.Interface, ns, name string, replicas int32) {
	t.Helper()
	ctx := context.Background()
	sc, err := cs.AppsV1().Deployments(ns).GetScale(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sc.Spec.Replicas = replicas
	if _, err := cs.AppsV1().Deployments(ns).UpdateScale(ctx, name, sc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}
