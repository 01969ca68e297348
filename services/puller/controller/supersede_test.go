package controller_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// TestImageChangeSupersedes: when a workload's images change, the
// PrePullImage of its new images is created before the superseded one is
// deleted, so that the new one's change comes first and its pulls do not
// wait behind the old one's finalizer; the old one is then finalized and
// goes.
func TestImageChangeSupersedes(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.namespace(t, "shop", nil)
	r.node(t, "worker-1", true, nil)
	r.policy(t, "all", v1alpha1.PrePullPolicySpec{Mode: v1alpha1.ModeCRI, Workloads: v1alpha1.WorkloadSelector{
		Namespaces: []string{"shop"}, Selector: selectAll(),
	}})
	d := r.deployment(t, "shop", "web", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/shop/web:1"}}})
	r.start(t, "controller-1")
	old := r.onlyImage(t, "shop", time.Minute, phaseIs(v1alpha1.ImageInProgress))

	w, err := r.kube.Client.Resource(v1alpha1.ImageResource).Namespace("shop").Watch(ctx, metav1.ListOptions{ResourceVersion: old.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	d.Spec.Template.Spec.Containers[0].Image = "registry.example.com/shop/web:2"
	if _, err := r.kube.Clientset.AppsV1().Deployments("shop").Update(ctx, d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var events []string
	created, deleting := -1, -1
	timeout := time.After(time.Minute)
	for created < 0 || deleting < 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended; events so far: %v", events)
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			events = append(events, fmt.Sprintf("%s %s (deleting: %v)", ev.Type, u.GetName(), u.GetDeletionTimestamp() != nil))
			switch {
			case u.GetName() != old.Name && ev.Type == watch.Added && created < 0:
				created = len(events) - 1
			case u.GetName() == old.Name && u.GetDeletionTimestamp() != nil && deleting < 0:
				deleting = len(events) - 1
			}
		case <-timeout:
			t.Fatalf("no new PrePullImage created and old one deleted within a minute; events: %v", events)
		}
	}
	if created > deleting {
		t.Errorf("the superseded PrePullImage was deleted before the new one was created: %v", events)
	}
	r.onlyImage(t, "shop", time.Minute, func(p *v1alpha1.PrePullImage) error {
		if p.Name == old.Name || len(p.Spec.Images) != 1 || p.Spec.Images[0].Image != "registry.example.com/shop/web:2" {
			return fmt.Errorf("%s with images %v, want the new images' only", p.Name, p.Spec.Images)
		}
		return nil
	})
}
