package controller_test

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/controller"
	"github.com/weftio/weft/services/puller/job"
)

// startReplica runs one controller replica with the given resync and slot
// TTL; stop ends it as a kill would leave its slots (abandoned, not freed).
func (r *rig) startReplica(t *testing.T, replica string, resync, slotTTL time.Duration) (stop func()) {
	t.Helper()
	env := testkit.NewEnv(t, r.bus, replica)
	r.envs = append(r.envs, env)
	cfg := controller.Config{
		Source: source, HelperImage: "ghcr.io/weftio/weft:test",
		Kube: r.kube.Clientset, Dynamic: r.kube.Client,
		Resync: resync, SlotTTL: slotTTL,
	}
	return testkit.Run(t, func(ctx context.Context) error { return controller.Run(ctx, env.Env, cfg) })
}

// holdingKubelet finishes every pull pod of the informers' store every
// 50 ms, except those pulling an image containing hold while held is
// true (a status update failing on a stale pod is made again at a later
// step).
type holdingKubelet struct {
	r    *rig
	hold string
	held atomic.Bool
}

func (k *holdingKubelet) run(ctx context.Context) error {
	f := pullInformers(k.r)
	pods := f.Core().V1().Pods().Informer().GetStore()
	f.Start(ctx.Done())
	defer f.Shutdown()
	eachTick(ctx, 50*time.Millisecond, func() {
		for _, obj := range pods.List() {
			if p := obj.(*corev1.Pod); !k.keeps(p) {
				k.finish(ctx, p.DeepCopy())
			}
		}
	})
	return nil
}

// keeps says whether p is left as it is: finished, or held.
func (k *holdingKubelet) keeps(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || (k.held.Load() && strings.Contains(p.Annotations[job.AnnotationImages], k.hold))
}

// finish makes p Succeeded.
func (k *holdingKubelet) finish(ctx context.Context, p *corev1.Pod) {
	p.Status.Phase = corev1.PodSucceeded
	p.Status.ContainerStatuses = nil
	for _, c := range p.Spec.Containers {
		p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
			State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}})
	}
	_, _ = k.r.kube.Clientset.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
}

// unfinishedPullPods lists the pull pods neither Succeeded nor Failed.
func (r *rig) unfinishedPullPods(t *testing.T) []string {
	t.Helper()
	pods, err := r.kube.Clientset.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{LabelSelector: job.LabelManagedBy + "=" + job.ManagedBy})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	return out
}

// TestRestartHoldsRunningJobsFirst: a pull Job runs (its pod holds the
// only slot of a cluster limit of 1) and another PrePullImage waits for
// the slot, when the only controller replica dies. The Job's slots lapse
// with their TTL while no replica runs. The replica that starts next
// holds the running Job's slots again before it starts any Job, although
// the waiting PrePullImage comes first in its resync and no change names
// the running one: no second pull runs until the first ends, then the
// waiting one pulls.
func TestRestartHoldsRunningJobsFirst(t *testing.T) {
	const ttl = 2 * time.Second
	r := newRig(t, kubetest.WithControllerManager())
	k := &holdingKubelet{r: r, hold: "/hold:"}
	k.held.Store(true)
	testkit.Run(t, k.run)
	// The waiting PrePullImage's namespace sorts first.
	r.namespace(t, "a-wait", nil)
	r.namespace(t, "z-run", nil)
	r.node(t, "worker-1", true, nil)
	r.policy(t, "one", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"a-wait", "z-run"}, Selector: selectAll()},
		Mode:      v1alpha1.ModeJob,
		Limits:    v1alpha1.Limits{Cluster: 1, PerNode: 1, PerRegistry: 1},
	})
	stop := r.startReplica(t, "controller-1", time.Hour, ttl)
	r.deployment(t, "z-run", "run", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/hold:1"}}})
	testkit.Eventually(t, 2*time.Minute, func() error {
		if pods := r.unfinishedPullPods(t); len(pods) != 1 || !strings.HasPrefix(pods[0], "z-run/") {
			return fmt.Errorf("unfinished pull pods %v, want z-run's", pods)
		}
		return nil
	})
	r.deployment(t, "a-wait", "wait", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/wait:1"}}})
	r.onlyImage(t, "a-wait", time.Minute, func(p *v1alpha1.PrePullImage) error {
		if len(p.Status.Nodes) != 1 || !strings.Contains(p.Status.Nodes[0].Message, "waiting for a free slot") {
			return fmt.Errorf("nodes %s, want waiting for a free slot", nodeSummary(p))
		}
		return nil
	})
	stop()
	leases, err := r.bus.JS.KeyValue(context.Background(), msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		keys, err := slotKeys(leases)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			return fmt.Errorf("slots %v still held; their TTL is %v", keys, ttl)
		}
		return nil
	})

	r.startReplica(t, "controller-2", time.Hour, ttl)
	// Three TTLs: long enough for the waiting PrePullImage to be looked at
	// (at start, and as it retries), and for slots held but not renewed
	// to lapse.
	deadline := time.Now().Add(3 * ttl)
	for time.Now().Before(deadline) {
		if pods := r.unfinishedPullPods(t); len(pods) > 1 {
			t.Fatalf("pull pods %v run at once, with a cluster limit of 1", pods)
		}
		time.Sleep(50 * time.Millisecond)
	}
	run := r.onlyImage(t, "z-run", time.Second, phaseIs(v1alpha1.ImageInProgress))
	keys, err := slotKeys(leases)
	if err != nil {
		t.Fatal(err)
	}
	want := job.Name(&run, "worker-1", 1)
	for _, key := range keys {
		if e, err := leases.Get(context.Background(), key); err != nil || string(e.Value()) != want {
			t.Errorf("slot %s: %v %v, want held by the running Job %s", key, e, err, want)
		}
	}
	if len(keys) != 3 {
		t.Errorf("slots %v, want the running Job's cluster, node and registry slots", keys)
	}
	k.held.Store(false)
	r.onlyImage(t, "z-run", time.Minute, phaseIs(v1alpha1.ImageCompleted))
	r.onlyImage(t, "a-wait", time.Minute, phaseIs(v1alpha1.ImageCompleted))
}

// slotKeys lists the slot keys of the leases bucket.
func slotKeys(leases jetstream.KeyValue) ([]string, error) {
	lister, err := leases.ListKeysFiltered(context.Background(), msg.SlotKeyPrefix+">")
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop() // the channel closed: the listing is complete
	return keys, nil
}

// TestClaimedAttemptWithoutJobResumes: a replica that dies after its
// status write claimed a pull attempt (the node Pulling, attempt 1) and
// before it created the attempt's Job leaves no Job behind. The next
// replica to look creates that Job (holding its slots), and the node is
// Pulled in that same attempt, long before the attempt's timeout.
func TestClaimedAttemptWithoutJobResumes(t *testing.T) {
	const ttl = 2 * time.Second
	r := newRig(t, kubetest.WithControllerManager())
	k := &holdingKubelet{r: r}
	testkit.Run(t, k.run)
	r.namespace(t, "shop", nil)
	r.node(t, "worker-1", true, nil)
	r.policy(t, "one", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"shop"}, Selector: selectAll()},
		Mode:      v1alpha1.ModeJob,
		Limits:    v1alpha1.Limits{Cluster: 1, PerNode: 1, PerRegistry: 1},
		Job:       v1alpha1.JobSettings{Timeout: dur(10 * time.Minute)},
	})
	// The test holds the only cluster slot: the first replica makes the
	// PrePullImage but starts nothing.
	leases, err := r.bus.JS.KeyValue(context.Background(), msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	s, err := slots.New(leases, r.bus.JS, slots.WithTTL(ttl))
	if err != nil {
		t.Fatal(err)
	}
	blocker, err := s.Acquire(context.Background(), "blocker", slots.Limit{Scope: msg.ClusterSlotScope, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	stop := r.startReplica(t, "controller-1", time.Hour, ttl)
	r.deployment(t, "shop", "web", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.example.com/web:1"}}})
	ppi := r.onlyImage(t, "shop", time.Minute, func(p *v1alpha1.PrePullImage) error {
		if len(p.Status.Nodes) != 1 || !strings.Contains(p.Status.Nodes[0].Message, "waiting for a free slot") {
			return fmt.Errorf("nodes %s, want waiting for a free slot", nodeSummary(p))
		}
		return nil
	})
	stop()
	// What the replica leaves when it dies right after its claim landed.
	started := metav1.NewTime(time.Now().Add(-time.Minute))
	ppi.Status.Nodes[0] = v1alpha1.NodeStatus{Node: "worker-1", Phase: v1alpha1.NodePulling, Attempts: 1, StartTime: &started}
	ppi.Status.Phase = v1alpha1.ImageInProgress
	u, err := v1alpha1.ToUnstructured(&ppi)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.kube.Client.Resource(v1alpha1.ImageResource).Namespace("shop").UpdateStatus(context.Background(), &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	blocker.Release()

	r.startReplica(t, "controller-2", time.Hour, ttl)
	done := r.onlyImage(t, "shop", time.Minute, phaseIs(v1alpha1.ImageCompleted))
	if n := done.Status.Nodes[0]; n.Phase != v1alpha1.NodePulled || n.Attempts != 1 {
		t.Errorf("node %+v, want Pulled in the claimed attempt", n)
	}
	jobs, err := r.kube.Clientset.BatchV1().Jobs("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs.Items) != 1 || jobs.Items[0].Name != job.Name(&ppi, "worker-1", 1) {
		t.Errorf("%d Jobs, want only the claimed attempt's %s", len(jobs.Items), job.Name(&ppi, "worker-1", 1))
	}
}
