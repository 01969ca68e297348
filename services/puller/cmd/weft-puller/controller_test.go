package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// TestControllerCommand runs the real watcher (weft-watcher) and
// `weft-puller controller` on one weft.yaml whose puller section names a
// kubernetes source and adds no watched type by hand: the watcher watches
// the types the section adds, and a selected Deployment gets its
// PrePullImage, targeting the Ready node that matches its nodeSelector.
func TestControllerCommand(t *testing.T) {
	puller := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	watcher := testkit.GoBuild(t, "github.com/weftio/weft/services/watcher/cmd/weft-watcher")
	kube := kubetest.PullerCluster(t, kubetest.PullerSetup{
		CRDs:      filepath.Join("..", "..", "..", "..", "deploy", "k8s", "crds"),
		Namespace: "shop",
		Nodes:     map[string]map[string]string{"web-1": {"pool": "web"}, "db-1": {"pool": "db"}},
	})
	b := testkit.NATS(t)
	cfg := kube.Config
	ctx := context.Background()
	policy, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Spec: v1alpha1.PrePullPolicySpec{Workloads: v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{}}}})
	if err != nil {
		t.Fatal(err)
	}
	kube.Create(t, v1alpha1.PolicyResource, policy)
	kube.Deployment(t, "shop", "web", nil, corev1.PodSpec{
		NodeSelector: map[string]string{"pool": "web"},
		Containers:   []corev1.Container{{Name: "web", Image: "registry.example.com/web:1"}},
	})

	w := testkit.StartProcess(t, watcher, "--config", cfg, "--nats-url", b.URL, "--listen", testkit.FreeAddr(t))
	c := testkit.StartProcess(t, puller, "controller", "--config", cfg, "--nats-url", b.URL, "--listen", testkit.FreeAddr(t), "--log-level", "debug")
	testkit.Eventually(t, 2*time.Minute, func() error {
		for _, p := range []*testkit.Process{w, c} {
			if done, err := p.Exited(); done {
				t.Fatalf("a process exited: %v\n%s", err, p.Output())
			}
		}
		list, err := kube.Client.Resource(v1alpha1.ImageResource).Namespace("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d PrePullImages", len(list.Items))
		}
		var ppi v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(list.Items[0].Object, &ppi); err != nil {
			return err
		}
		if !slices.Equal(ppi.Spec.Nodes, []string{"web-1"}) || ppi.Spec.Mode != v1alpha1.ModeCRI || ppi.Status.Phase != v1alpha1.ImageInProgress {
			return fmt.Errorf("PrePullImage nodes %v mode %s phase %s", ppi.Spec.Nodes, ppi.Spec.Mode, ppi.Status.Phase)
		}
		return nil
	})
}
