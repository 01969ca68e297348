package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	pullercontroller "github.com/weftio/weft/services/puller/controller"
)

// TestUpRunsThePullerController runs `weft up` on a weft.yaml whose puller
// section (mode job) names a kubernetes source on a real API server: a
// policy and a Deployment created through the API get a PrePullImage and
// a pull Job for the workload's Ready node.
func TestUpRunsThePullerController(t *testing.T) {
	kube := kubetest.PullerCluster(t, kubetest.PullerSetup{
		CRDs:      filepath.Join("..", "..", "deploy", "k8s", "crds"),
		Namespace: "shop",
		Nodes:     map[string]map[string]string{"web-1": nil},
	})
	cfg := kube.Config
	ctx := context.Background()
	cs := kube.Clientset
	policy, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Spec: v1alpha1.PrePullPolicySpec{Mode: v1alpha1.ModeJob, Workloads: v1alpha1.WorkloadSelector{Selector: &metav1.LabelSelector{}}}})
	if err != nil {
		t.Fatal(err)
	}
	kube.Create(t, v1alpha1.PolicyResource, policy)
	kube.Deployment(t, "shop", "web", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "registry.example.com/web:1"}}})

	w := startWeft(t, "up", "--config", cfg, "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	testkit.Eventually(t, 3*time.Minute, func() error {
		if done, err := w.exited(); done {
			t.Fatalf("weft up exited: %v", err)
		}
		list, err := kube.Client.Resource(v1alpha1.ImageResource).Namespace("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 {
			return fmt.Errorf("%d PrePullImages", len(list.Items))
		}
		jobs, err := cs.BatchV1().Jobs("shop").List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(jobs.Items) != 1 || !pinnedTo(jobs.Items[0].Spec.Template.Spec.Affinity, "web-1") {
			return fmt.Errorf("%d pull Jobs, want one pinned to web-1", len(jobs.Items))
		}
		return nil
	})
}

// pinnedTo reports whether a is required node affinity on node's name.
func pinnedTo(a *corev1.Affinity, node string) bool {
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return false
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && len(f.Values) == 1 && f.Values[0] == node {
				return true
			}
		}
	}
	return false
}

// TestNoPullerWithoutItsSection: with no `puller:` section, the puller's
// entry of the all-in-one host returns at once and makes nothing: no
// consumer of the controller on the changes stream.
func TestNoPullerWithoutItsSection(t *testing.T) {
	bus := testkit.NATS(t)
	env := testkit.NewEnv(t, bus, "up")
	cfg := loadQuickstart(t)
	if cfg.Puller != nil {
		t.Fatal("the quickstart has a puller section")
	}
	done := make(chan error, 1)
	go func() { done <- runPullerController(context.Background(), env.Env, cfg) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("puller entry without a puller section: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the puller entry runs without a puller section")
	}
	_, err := bus.JS.Consumer(context.Background(), msg.StreamChanges, pullercontroller.ChangesConsumer)
	if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Fatalf("the controller's consumer: %v, want none", err)
	}
}
