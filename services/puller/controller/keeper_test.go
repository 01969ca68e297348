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

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
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

// holdingKubelet finishes every pull pod at once, except those pulling an
// image containing hold while held is true.
type holdingKubelet struct {
	r    *rig
	hold string
	held atomic.Bool
}

func (k *holdingKubelet) run(ctx context.Context) error {
	cs := k.r.kube.Clientset
	for ctx.Err() == nil {
		pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: job.LabelManagedBy + "=" + job.ManagedBy})
		if err == nil {
			for i := range pods.Items {
				p := &pods.Items[i]
				if p.Status.Phase == corev1.PodSucceeded || (k.held.Load() && strings.Contains(p.Annotations[job.AnnotationImages], k.hold)) {
					continue
				}
				p.Status.Phase = corev1.PodSucceeded
				p.Status.ContainerStatuses = nil
				for _, c := range p.Spec.Containers {
					p.Status.ContainerStatuses = append(p.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image,
						State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{Reason: "Completed"}}})
				}
				_, _ = cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, p, metav1.UpdateOptions{})
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
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
	r := newRig(t, testkit.WithControllerManager())
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
