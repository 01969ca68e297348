package release_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/release"
	"github.com/weftio/weft/services/puller/gate/webhook"
)

const (
	crdDir        = "../../../../deploy/k8s/crds"
	webhookConfig = "../../../../deploy/k8s/puller/gate-webhook.yaml"
	ns            = "shop"
)

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func logger(t testing.TB) *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{t}, nil)) }

// cluster is a control plane whose Deployments make pods, the gate's
// webhook called by it, and the resources bucket the webhook decides from.
type cluster struct {
	t   *testing.T
	k   *kubetest.Env
	bus *testkit.Bus
}

func newCluster(t *testing.T) *cluster {
	k := kubetest.Start(t, kubetest.WithControllerManager("deployment-controller", "replicaset-controller"))
	k.InstallCRDs(t, crdDir)
	hooks := k.InstallWebhooks(t, webhookConfig)
	bus := testkit.NATS(t)
	view := gate.NewView(bus.JS, gate.Types{Policies: "policies", Deployments: "deployments"}, logger(t))
	testkit.Run(t, view.Run)
	s, err := webhook.New(view, webhook.Options{Addr: hooks.Addr, CertFile: hooks.CertFile, KeyFile: hooks.KeyFile}, logger(t), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, s.Run)
	if _, err := k.Clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, k: k, bus: bus}
}

// put writes what the API server returned to the bucket, as the watcher does.
func (c *cluster) put(typ string, obj map[string]any) {
	c.t.Helper()
	testkit.PutResource(c.t, c.bus.JS, "k8s", typ, obj)
}

func (c *cluster) policy(name, selects string, timeout time.Duration) {
	c.t.Helper()
	u, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1alpha1.PrePullPolicySpec{
			Workloads:   v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"prepull": selects}}},
			Gate:        true,
			GateTimeout: &metav1.Duration{Duration: timeout},
		},
	})
	if err != nil {
		c.t.Fatal(err)
	}
	got, err := c.k.Client.Resource(v1alpha1.PolicyResource).Create(context.Background(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.put("policies", got.Object)
}

func (c *cluster) deployment(name, prepull string, replicas int32, images ...string) *appsv1.Deployment {
	c.t.Helper()
	labels := map[string]string{"app": name}
	spec := corev1.PodSpec{}
	for i, img := range images {
		spec.Containers = append(spec.Containers, corev1.Container{Name: fmt.Sprintf("c%d", i), Image: img})
	}
	d, err := c.k.Clientset.AppsV1().Deployments(ns).Create(context.Background(), &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"prepull": prepull}},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels}, Spec: spec},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(d)
	if err != nil {
		c.t.Fatal(err)
	}
	u["apiVersion"], u["kind"] = "apps/v1", "Deployment"
	c.put("deployments", u)
	return d
}

func (c *cluster) pods(app string) []corev1.Pod {
	c.t.Helper()
	l, err := c.k.Clientset.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + app})
	if err != nil {
		c.t.Fatal(err)
	}
	return l.Items
}

// gatedPods waits for n pods of app, each gated.
func (c *cluster) gatedPods(app string, n int) []corev1.Pod {
	c.t.Helper()
	var pods []corev1.Pod
	testkit.Eventually(c.t, 2*time.Minute, func() error {
		pods = c.pods(app)
		if len(pods) < n {
			return fmt.Errorf("%d pods of %s, want %d", len(pods), app, n)
		}
		return nil
	})
	for _, p := range pods {
		if !gate.Has(&p) {
			c.t.Fatalf("pod %s of %s was created without the gate", p.Name, app)
		}
	}
	return pods
}

// image creates the PrePullImage of a Deployment's images, in phase.
func (c *cluster) image(name string, d *appsv1.Deployment, phase v1alpha1.ImagePhase) {
	c.t.Helper()
	p := &v1alpha1.PrePullImage{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: v1alpha1.PrePullImageSpec{
			Policy:   "warm",
			Workload: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: d.Name, UID: string(d.UID)},
			Images:   v1alpha1.ContainerImages(&d.Spec.Template.Spec),
			Nodes:    []string{"node-1"},
		},
	}
	u, err := v1alpha1.ToUnstructured(p)
	if err != nil {
		c.t.Fatal(err)
	}
	res := c.k.Client.Resource(v1alpha1.ImageResource).Namespace(ns)
	got, err := res.Create(context.Background(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	c.setPhase(name, phase)
	_ = got
}

// setPhase sets a PrePullImage's phase, as the controller does.
func (c *cluster) setPhase(name string, phase v1alpha1.ImagePhase) {
	c.t.Helper()
	res := c.k.Client.Resource(v1alpha1.ImageResource).Namespace(ns)
	testkit.Eventually(c.t, 30*time.Second, func() error {
		u, err := res.Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		var p v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(u.Object, &p); err != nil {
			return err
		}
		p.Status.Phase = phase
		p.Status.NodesTotal = 1
		if phase == v1alpha1.ImageCompleted {
			p.Status.NodesPulled = 1
		}
		obj, err := v1alpha1.ToUnstructured(&p)
		if err != nil {
			return err
		}
		_, err = res.UpdateStatus(context.Background(), &unstructured.Unstructured{Object: obj}, metav1.UpdateOptions{})
		return err
	})
}

func (c *cluster) gatedCondition(name string) *metav1.Condition {
	c.t.Helper()
	u, err := c.k.Client.Resource(v1alpha1.ImageResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	var p v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(u.Object, &p); err != nil {
		c.t.Fatal(err)
	}
	return meta.FindStatusCondition(p.Status.Conditions, release.ConditionGated)
}

// events returns the Events recorded on a Deployment.
func (c *cluster) events(d *appsv1.Deployment) []corev1.Event {
	c.t.Helper()
	l, err := c.k.Clientset.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Deployment,involvedObject.name=" + d.Name,
	})
	if err != nil {
		c.t.Fatal(err)
	}
	return l.Items
}

func (c *cluster) releaser(t *testing.T, reg prometheus.Registerer) *release.Releaser {
	t.Helper()
	rec, stop := release.NewRecorder(c.k.Clientset)
	t.Cleanup(stop)
	r, err := release.New(release.APIState{Clientset: c.k.Clientset, Dynamic: c.k.Client}, c.k.Clientset, c.k.Client, rec, logger(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestReleaseOnAPIServer: pods a real Deployment created through the gate's
// webhook keep the gate while their PrePullImage is pulling and lose it
// (only it, and the label) once it is Completed, with an Event on the
// Deployment and the PrePullImage's Gated condition; the pods of another
// Deployment, whose images never get warm, lose it after the policy's
// gateTimeout, each once although two replicas release at the same time.
func TestReleaseOnAPIServer(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	c.policy("warm", "warm", time.Hour)
	c.policy("slow", "slow", 4*time.Second)
	web := c.deployment("web", "warm", 2, "registry.example.com/web:1", "registry.example.com/sidecar:1")
	pods := c.gatedPods("web", 2)
	// A gate of someone else's is left in place: a pod with both gates,
	// made by hand (gates are only ever removed after creation) with the
	// decision of the Deployment's pods, and no owner (the ReplicaSet
	// would delete a pod too many).
	other := pods[0].DeepCopy()
	other.ObjectMeta = metav1.ObjectMeta{Name: "web-by-hand", Namespace: ns, Annotations: other.Annotations,
		Labels: map[string]string{"app": "by-hand", gate.Label: "true"}}
	other.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/other"}, {Name: gate.Name}}
	if _, err := c.k.Clientset.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	reg := prometheus.NewRegistry()
	r := c.releaser(t, reg)
	c.image("web-1", web, v1alpha1.ImageInProgress)
	next, err := r.Pass(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next <= 0 || next > time.Hour {
		t.Errorf("next timeout in %v, want within the hour", next)
	}
	for _, p := range append(c.pods("web"), c.pods("by-hand")...) {
		if !gate.Has(&p) {
			t.Fatalf("pod %s lost its gate while its images are pulling", p.Name)
		}
	}
	if cond := c.gatedCondition("web-1"); cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != release.ReasonWaiting {
		t.Fatalf("Gated condition while pulling: %+v", cond)
	}
	if n := testkit.CounterValue(t, reg, "weft_puller_gate_pods_waiting"); n != 3 {
		t.Errorf("pods waiting = %v, want 3", n)
	}

	c.setPhase("web-1", v1alpha1.ImageCompleted)
	if _, err := r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	for _, p := range append(c.pods("web"), c.pods("by-hand")...) {
		want := []corev1.PodSchedulingGate{}
		if p.Name == "web-by-hand" {
			want = []corev1.PodSchedulingGate{{Name: "example.com/other"}}
		}
		if len(p.Spec.SchedulingGates) != len(want) || len(want) == 1 && p.Spec.SchedulingGates[0] != want[0] {
			t.Fatalf("pod %s gates %v once warm, want %v", p.Name, p.Spec.SchedulingGates, want)
		}
		if _, ok := p.Labels[gate.Label]; ok {
			t.Fatalf("pod %s keeps the label %s", p.Name, gate.Label)
		}
	}
	if cond := c.gatedCondition("web-1"); cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != release.ReasonImagesWarm {
		t.Fatalf("Gated condition once warm: %+v", cond)
	}
	if n := testkit.LabeledValue(t, reg, "weft_puller_gate_removed_total", map[string]string{"reason": release.ReasonImagesWarm}); n != 3 {
		t.Errorf("gates removed as warm = %v, want 3", n)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		var warm int
		for _, e := range c.events(web) {
			if e.Reason == release.ReasonImagesWarm && e.Type == corev1.EventTypeNormal && strings.HasPrefix(e.Message, "images warm; gate removed from pod ") {
				warm++
			}
		}
		if warm != 3 {
			return fmt.Errorf("%d Events of warm images on the Deployment, want 3", warm)
		}
		return nil
	})
	// Nothing left to do: a pass changes nothing more.
	if _, err := r.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := testkit.CounterValue(t, reg, "weft_puller_gate_removed_total"); n != 3 {
		t.Errorf("gates removed = %v after a pass with nothing to do, want 3", n)
	}

	// Two replicas' loops, images never warm: each gate times out once.
	slow := c.deployment("batch", "slow", 3, "registry.example.com/batch:1")
	stale := c.gatedPods("batch", 3)
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	var wg sync.WaitGroup
	for _, reg := range regs {
		r := c.releaser(t, reg)
		wg.Add(1)
		stop := testkit.Run(t, func(ctx context.Context) error { return r.Run(ctx, 200*time.Millisecond) })
		t.Cleanup(func() { stop(); wg.Done() })
	}
	testkit.Eventually(t, time.Minute, func() error {
		for _, p := range c.pods("batch") {
			if gate.Has(&p) {
				return fmt.Errorf("pod %s still gated", p.Name)
			}
		}
		return nil
	})
	// A removal is counted just after the API server took it, so the
	// count may trail the pods by a moment; it must reach 3, never more.
	testkit.Eventually(t, 10*time.Second, func() error {
		var removed float64
		for _, reg := range regs {
			removed += testkit.LabeledValue(t, reg, "weft_puller_gate_removed_total", map[string]string{"reason": release.ReasonTimeout})
		}
		switch {
		case removed > 3:
			t.Fatalf("gates removed on timeout by both replicas = %v, want 3 (each pod once)", removed)
		case removed < 3:
			return fmt.Errorf("gates removed on timeout by both replicas = %v, want 3", removed)
		}
		return nil
	})
	// A replica whose read predates the others' removals removes nothing
	// and records nothing.
	rec, stopRec := release.NewRecorder(c.k.Clientset)
	defer stopRec()
	late := prometheus.NewRegistry()
	r3, err := release.New(staleState{APIState: release.APIState{Clientset: c.k.Clientset, Dynamic: c.k.Client}, pods: stale},
		c.k.Clientset, c.k.Client, rec, logger(t), late)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r3.Pass(ctx); err != nil {
		t.Fatalf("a pass on gates already removed: %v", err)
	}
	if n := testkit.CounterValue(t, late, "weft_puller_gate_removed_total"); n != 0 {
		t.Errorf("a replica with a stale read removed %v gates, want 0", n)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		var timedOut int
		for _, e := range c.events(slow) {
			if e.Reason == release.ReasonTimeout && e.Type == corev1.EventTypeWarning && strings.HasPrefix(e.Message, "gate timed out after 4s") {
				if e.Count > 1 {
					return fmt.Errorf("event %q recorded %d times", e.Message, e.Count)
				}
				timedOut++
			}
		}
		if timedOut != 3 {
			return fmt.Errorf("%d Events of timed out gates on the Deployment, want 3", timedOut)
		}
		return nil
	})
}

// staleState answers the gated pods read once, before another replica
// removed their gates.
type staleState struct {
	release.APIState
	pods []corev1.Pod
}

func (s staleState) GatedPods(context.Context) ([]corev1.Pod, error) { return s.pods, nil }
