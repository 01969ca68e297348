package release_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/release"
)

// TestBucketState reads gated pods, policies and PrePullImages as the
// watcher writes them; an object that does not decode is named in the
// error and the others are still read.
func TestBucketState(t *testing.T) {
	bus := testkit.NATS(t)
	put := func(typ string, obj map[string]any) { testkit.PutResource(t, bus.JS, "k8s", typ, obj) }
	pod := func(ns, name string, labels map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"namespace": ns, "name": name, "labels": labels},
			"spec": map[string]any{"schedulingGates": []any{map[string]any{"name": gate.Name}}, "containers": []any{map[string]any{"name": "c", "image": "i"}}}}
	}
	put("pods", pod("shop", "gated", map[string]any{gate.Label: "true"}))
	put("pods", pod("shop.eu", "gated", map[string]any{gate.Label: "true"}))
	put("pods", pod("shop", "released", map[string]any{"app": "web"}))
	put("pods", map[string]any{"apiVersion": "v1", "kind": "Pod", "metadata": map[string]any{"namespace": "shop", "name": "broken", "labels": map[string]any{gate.Label: "true"}},
		"spec": "not a spec"})
	for _, name := range []string{"web", "web.v2"} {
		u, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.PrePullPolicySpec{Gate: true}})
		if err != nil {
			t.Fatal(err)
		}
		put("policies", u)
	}
	for _, id := range [][2]string{{"shop", "a"}, {"shop", "b"}, {"other", "c"}} {
		u, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullImage{ObjectMeta: metav1.ObjectMeta{Namespace: id[0], Name: id[1]}})
		if err != nil {
			t.Fatal(err)
		}
		put("prepullimages", u)
	}
	s := release.BucketState{JS: bus.JS, Types: release.BucketTypes{Pods: "pods", Policies: "policies", Images: "prepullimages"}}
	ctx := context.Background()

	pods, err := s.GatedPods(ctx)
	if err == nil || !strings.Contains(err.Error(), "broken") {
		t.Errorf("error %v does not name the pod that does not decode", err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Namespace+"/"+p.Name)
	}
	if strings.Join(names, ",") != "shop/gated,shop.eu/gated" {
		t.Errorf("gated pods %v, want shop/gated and shop.eu/gated", names)
	}

	p, err := s.Policy(ctx, "web.v2")
	if err != nil || p == nil || p.Name != "web.v2" || !p.Spec.Gate {
		t.Errorf("policy web.v2: %+v, %v", p, err)
	}
	if p, err := s.Policy(ctx, "gone"); err != nil || p != nil {
		t.Errorf("policy gone: %+v, %v; want none", p, err)
	}

	imgs, err := s.Images(ctx, "shop")
	if err != nil || len(imgs) != 2 || imgs[0].Name != "a" || imgs[1].Name != "b" {
		t.Errorf("PrePullImages of shop: %+v, %v", imgs, err)
	}
}
