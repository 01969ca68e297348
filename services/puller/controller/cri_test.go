package controller_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/imagetest"
	"github.com/weftio/weft/services/puller/agent"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/controller"
	"github.com/weftio/weft/services/puller/cri"
	"github.com/weftio/weft/services/puller/workload"
)

// TestCRIMode runs two controller replicas and the real node agent on a
// real containerd: a selected Deployment gets one PrePullImage targeting
// only the node its pods can land on (not the tainted, not-Ready or
// unselected ones), the agent pulls its init-container and container
// images on one order each, and the PrePullImage is Completed and Warm. A
// node that joins later is added and warmed. The policy's status counts
// the workload it selects.
func TestCRIMode(t *testing.T) {
	sock := imagetest.Containerd(t)
	r := newRig(t)
	reg := imagetest.Registry(t)
	web := reg.PushPlain(t, "shop/web", "1")
	migrate := reg.PushPlain(t, "shop/migrate", "1")
	runtime, err := cri.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runtime.Close() })
	agentFor := func(node string) {
		env := testkit.NewEnv(t, r.bus, "agent-"+node)
		o := agent.Options{Node: node, Runtime: runtime, Secrets: agent.KubeSecrets{Client: r.kube.Clientset}, AckWait: 2 * time.Second}
		testkit.Run(t, func(ctx context.Context) error { return agent.Run(ctx, env.Env, o) })
	}

	r.namespace(t, "shop", nil)
	pool := map[string]string{"pool": "web"}
	r.node(t, "worker-1", true, pool)
	r.node(t, "worker-2", true, pool, corev1.Taint{Key: "dedicated", Value: "db", Effect: corev1.TaintEffectNoSchedule})
	r.node(t, "worker-3", false, pool)
	r.node(t, "worker-4", true, map[string]string{"pool": "batch"})
	r.policy(t, "web", v1alpha1.PrePullPolicySpec{Workloads: v1alpha1.WorkloadSelector{
		Namespaces: []string{"shop"},
		Selector:   &metav1.LabelSelector{MatchLabels: map[string]string{"prepull": "true"}},
	}})
	d := r.deployment(t, "shop", "web", map[string]string{"prepull": "true"}, corev1.PodSpec{
		NodeSelector:   pool,
		InitContainers: []corev1.Container{{Name: "migrate", Image: migrate.Ref}},
		Containers:     []corev1.Container{{Name: "web", Image: web.Ref}},
	})
	r.deployment(t, "shop", "other", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: web.Ref}}})
	// An earlier PrePullImage of the same name left its pull status of
	// worker-1 (an order of its carried out after its finalizer ran): it
	// must not pass for this one's.
	name := "deployment-web-" + workload.ImageSetHash(v1alpha1.ContainerImages(&d.Spec.Template.Spec))
	stale := msg.PullStatus{Namespace: "shop", Name: name, UID: "an-earlier-uid", Node: "worker-1", At: time.Now().UTC()}
	for _, im := range []string{web.Ref, migrate.Ref} {
		stale.Set(msg.ImagePull{Image: im, Phase: msg.PullPulled, Attempts: 1})
	}
	pulls, err := r.bus.JS.KeyValue(context.Background(), msg.BucketPulls)
	if err != nil {
		t.Fatal(err)
	}
	data, err := msg.Encode(stale)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pulls.Put(context.Background(), msg.PullStatusKey("shop", name, "worker-1"), data); err != nil {
		t.Fatal(err)
	}
	// A PrePullImage that is gone left its pull status (an order carried
	// out after its finalizer ran): it is collected.
	orphan := msg.PullStatus{Namespace: "shop", Name: "gone", UID: "gone-uid", Node: "worker-1", At: time.Now().UTC()}
	orphan.Set(msg.ImagePull{Image: web.Ref, Phase: msg.PullPulled, Attempts: 1})
	if data, err = msg.Encode(orphan); err != nil {
		t.Fatal(err)
	}
	orphanKey := msg.PullStatusKey("shop", "gone", "worker-1")
	if _, err := pulls.Put(context.Background(), orphanKey, data); err != nil {
		t.Fatal(err)
	}
	orders, err := r.bus.NC.SubscribeSync(msg.PullAll)
	if err != nil {
		t.Fatal(err)
	}
	r.start(t, "controller-1")
	r.start(t, "controller-2")
	// No agent runs yet: the stale status must not complete the node.
	r.onlyImage(t, "shop", time.Minute, phaseIs(v1alpha1.ImageInProgress))
	for range 20 {
		if p := r.images(t, "shop"); len(p) == 1 && p[0].Status.Phase != v1alpha1.ImageInProgress {
			t.Fatalf("phase %s with no agent running: %s", p[0].Status.Phase, nodeSummary(&p[0]))
		}
		time.Sleep(200 * time.Millisecond)
	}
	agentFor("worker-1")

	ppi := r.onlyImage(t, "shop", 2*time.Minute, phaseIs(v1alpha1.ImageCompleted))
	if !slices.Equal(ppi.Spec.Nodes, []string{"worker-1"}) {
		t.Errorf("target nodes %v, want [worker-1] (worker-2 tainted, worker-3 not Ready, worker-4 not in the pool)", ppi.Spec.Nodes)
	}
	if own := ppi.OwnerReferences; len(own) != 1 || own[0].UID != d.UID || own[0].Kind != "Deployment" {
		t.Errorf("owners %+v, want the Deployment", own)
	}
	if !slices.Contains(ppi.Finalizers, controller.Finalizer) {
		t.Errorf("finalizers %v, want %s", ppi.Finalizers, controller.Finalizer)
	}
	if c := meta.FindStatusCondition(ppi.Status.Conditions, v1alpha1.ConditionWarm); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Warm condition %+v", c)
	}
	if n := ppi.Status.Nodes; len(n) != 1 || n[0].Phase != v1alpha1.NodePulled || n[0].Attempts != 1 {
		t.Errorf("node status %+v", n)
	}
	for _, image := range []string{web.Ref, migrate.Ref} {
		if _, ok, err := runtime.Status(context.Background(), image); err != nil || !ok {
			t.Errorf("%s on the runtime: %v %v", image, ok, err)
		}
	}
	wantOrders(t, r, 2) // two images, one node, one attempt, two replicas
	testkit.Eventually(t, time.Minute, func() error {
		if _, err := pulls.Get(context.Background(), orphanKey); !errors.Is(err, jetstream.ErrKeyNotFound) {
			return fmt.Errorf("the pull status of a PrePullImage that is gone: %v, want it collected", err)
		}
		return nil
	})
	// Orders carry the policy's limits (the defaults) for the agent.
	m, err := orders.NextMsg(10 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var o msg.PullOrder
	if err := msg.Decode(m.Data, &o); err != nil {
		t.Fatal(err)
	}
	if want := (msg.PullLimits{Cluster: 10, PerNode: 2, PerRegistry: 4}); o.Limits != want || o.Node != "worker-1" || o.Attempt != 1 {
		t.Errorf("order %+v limits %+v, want worker-1 attempt 1 with %+v", o.PullTarget, o.Limits, want)
	}

	testkit.Eventually(t, time.Minute, func() error {
		p := r.policyStatus(t, "web")
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionValid)
		if c == nil || c.Status != metav1.ConditionTrue || p.Status.Workloads != 1 {
			return fmt.Errorf("policy status %+v, want Valid and 1 workload", p.Status)
		}
		return nil
	})

	// A node joins the pool: it is added and warmed.
	r.node(t, "worker-5", true, pool)
	agentFor("worker-5")
	ppi = r.onlyImage(t, "shop", 2*time.Minute, func(p *v1alpha1.PrePullImage) error {
		if !slices.Contains(p.Spec.Nodes, "worker-5") || p.Status.NodesPulled != 2 || p.Status.Phase != v1alpha1.ImageCompleted {
			return fmt.Errorf("nodes %v, phase %s, %s", p.Spec.Nodes, p.Status.Phase, nodeSummary(p))
		}
		return nil
	})
	wantOrders(t, r, 4)

	// Deleted, the PrePullImage is held until its pull status is gone.
	// (The nodes report the images, so none is made again.)
	for _, node := range []string{"worker-1", "worker-5"} {
		r.reportImages(t, node, web.Ref, migrate.Ref)
	}
	key := msg.PullStatusKey("shop", ppi.Name, "worker-1")
	if _, err := pulls.Get(context.Background(), key); err != nil {
		t.Fatalf("pull status %s before the deletion: %v", key, err)
	}
	if err := r.kube.Client.Resource(v1alpha1.ImageResource).Namespace("shop").Delete(context.Background(), ppi.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		if got := r.images(t, "shop"); len(got) != 0 {
			return fmt.Errorf("%d PrePullImages left", len(got))
		}
		return nil
	})
	for _, node := range []string{"worker-1", "worker-5"} {
		if _, err := pulls.Get(context.Background(), msg.PullStatusKey("shop", ppi.Name, node)); !errors.Is(err, jetstream.ErrKeyNotFound) {
			t.Errorf("pull status of %s after the finalizer: %v, want it gone", node, err)
		}
	}
	if v := testkit.CounterValue(t, r.envs[0].Registry, "weft_puller_pulls_total") + testkit.CounterValue(t, r.envs[1].Registry, "weft_puller_pulls_total"); v < 4 {
		t.Errorf("weft_puller_pulls_total %v over both replicas, want at least 4 (2 started, 2 Pulled)", v)
	}
}

// reportImages sets the images a node's kubelet reports.
func (r *rig) reportImages(t *testing.T, node string, images ...string) {
	t.Helper()
	ctx := context.Background()
	n, err := r.kube.Clientset.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range images {
		n.Status.Images = append(n.Status.Images, corev1.ContainerImage{Names: []string{im}, SizeBytes: 1 << 20})
	}
	if _, err := r.kube.Clientset.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// wantOrders checks that n pull orders were ever stored.
func wantOrders(t *testing.T, r *rig, n uint64) {
	t.Helper()
	s, err := r.bus.JS.Stream(context.Background(), msg.StreamPulls)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.LastSeq != n {
		t.Errorf("%d pull orders stored, want %d", info.State.LastSeq, n)
	}
}

func (r *rig) policyStatus(t *testing.T, name string) v1alpha1.PrePullPolicy {
	t.Helper()
	u, err := r.kube.Client.Resource(v1alpha1.PolicyResource).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var p v1alpha1.PrePullPolicy
	if err := v1alpha1.FromUnstructured(u.Object, &p); err != nil {
		t.Fatal(err)
	}
	return p
}
