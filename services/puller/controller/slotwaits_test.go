package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/controller"
	"github.com/weftio/weft/services/puller/job"
)

// TestJobWaitingForASlotIsWoken: a pull Job that could not start because
// its limit was full (its one cluster slot held by a pull elsewhere)
// starts as soon as that slot is freed, released by its holder or expired
// after its holder died, though the controller would look again only
// after an hour (SlotPoll, Resync): only the free can have woken it.
func TestJobWaitingForASlotIsWoken(t *testing.T) {
	tests := []struct {
		name string
		free func(h *slots.Held)
	}{
		{"released", (*slots.Held).Release},
		{"holder died, TTL over", (*slots.Held).Abandon},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, kubetest.WithControllerManager())
			k := &kubelet{r: r, fail: map[string]bool{}, jobs: map[string]string{}}
			testkit.Run(t, k.run)
			r.namespace(t, "shop", nil)
			r.node(t, "worker-1", true, nil)
			ctx := context.Background()
			leases, err := r.bus.JS.KeyValue(ctx, msg.BucketLeases)
			if err != nil {
				t.Fatal(err)
			}
			elsewhere, err := slots.New(leases, r.bus.JS, slots.WithTTL(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			other, err := elsewhere.Acquire(ctx, "another-pull", slots.Limit{Scope: msg.ClusterSlotScope, N: 1})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(other.Release)
			r.policy(t, "jobs", v1alpha1.PrePullPolicySpec{
				Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"shop"}, Selector: selectAll()},
				Mode:      v1alpha1.ModeJob,
				Limits:    v1alpha1.Limits{Cluster: 1, PerNode: 1, PerRegistry: 1},
			})
			r.deployment(t, "shop", "api", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "api", Image: "registry.example.com/api:1"}}})
			r.start(t, "controller-1", func(c *controller.Config) { c.SlotPoll, c.Resync = time.Hour, time.Hour })

			const want = "waiting for a free slot: all 1 of cluster are held"
			ppi := r.onlyImage(t, "shop", 2*time.Minute, func(p *v1alpha1.PrePullImage) error {
				if len(p.Status.Nodes) != 1 || p.Status.Nodes[0].Phase != v1alpha1.NodePending || p.Status.Nodes[0].Message != want {
					return fmt.Errorf("nodes %s, want worker-1 Pending: %s", nodeSummary(p), want)
				}
				return nil
			})
			// Still waiting a while later: nothing else looks at it again.
			time.Sleep(3 * time.Second)
			if jobs, _ := k.seen(); len(jobs) != 0 {
				t.Fatalf("pull Jobs %v ran while the limit was full", jobs)
			}
			tc.free(other)
			done := r.onlyImage(t, "shop", 2*time.Minute, phaseIs(v1alpha1.ImageCompleted))
			if done.Name != ppi.Name {
				t.Fatalf("PrePullImage %s completed, want %s", done.Name, ppi.Name)
			}
			if jobs, _ := k.seen(); len(jobs) != 1 || jobs[job.Name(&ppi, "worker-1", 1)] == "" {
				t.Fatalf("pull Jobs %v, want worker-1's first attempt", jobs)
			}
		})
	}
}
