package release_test

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
	"github.com/weftio/weft/services/puller/gate/release"
)

func TestJudge(t *testing.T) {
	created := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", CreationTimestamp: metav1.NewTime(created)},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: "migrate", Image: "reg/migrate:2"}},
			Containers:     []corev1.Container{{Name: "web", Image: "reg/web:2"}},
		},
	}
	web := v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web", UID: "u1"}
	d := gate.Decision{Gated: true, Policy: "p", Timeout: gate.Duration(10 * time.Minute), Workload: web}
	ppi := func(name string, phase v1alpha1.ImagePhase, w v1alpha1.WorkloadReference, images ...string) v1alpha1.PrePullImage {
		p := v1alpha1.PrePullImage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
		p.Spec.Workload = w
		for _, i := range images {
			p.Spec.Images = append(p.Spec.Images, v1alpha1.ContainerImage{Image: i})
		}
		p.Status.Phase = phase
		return p
	}
	other := web
	other.UID = "u0" // the workload deleted and made again
	for _, tc := range []struct {
		name    string
		d       gate.Decision
		policy  release.PolicyState
		timeout time.Duration
		images  []v1alpha1.PrePullImage
		at      time.Duration // after creation
		reason  string
		release bool
		message string
		image   string
	}{
		{name: "no PrePullImage yet", d: d, policy: release.PolicyGating, at: time.Minute, reason: release.ReasonWaiting},
		{name: "images pulling", d: d, policy: release.PolicyGating, at: time.Minute, reason: release.ReasonWaiting,
			images: []v1alpha1.PrePullImage{ppi("a", v1alpha1.ImageInProgress, web, "reg/migrate:2", "reg/web:2")}, image: "a"},
		{name: "warm", d: d, policy: release.PolicyGating, at: time.Minute, reason: release.ReasonImagesWarm, release: true,
			images: []v1alpha1.PrePullImage{
				ppi("old", v1alpha1.ImageCompleted, web, "reg/migrate:1", "reg/web:1"),
				ppi("a", v1alpha1.ImageCompleted, web, "reg/migrate:2", "reg/web:2", "reg/sidecar:1"),
			}, message: "images warm; gate removed from pod web-1", image: "a"},
		{name: "warm with the images of another version only", d: d, policy: release.PolicyGating, at: time.Minute, reason: release.ReasonWaiting,
			images: []v1alpha1.PrePullImage{ppi("old", v1alpha1.ImageCompleted, web, "reg/migrate:1", "reg/web:2")}},
		{name: "warm for another workload", d: d, policy: release.PolicyGating, at: time.Minute, reason: release.ReasonWaiting,
			images: []v1alpha1.PrePullImage{ppi("a", v1alpha1.ImageCompleted, other, "reg/migrate:2", "reg/web:2")}},
		{name: "failed", d: d, policy: release.PolicyGating, at: time.Minute, reason: release.ReasonPullFailed, release: true,
			images: []v1alpha1.PrePullImage{ppi("a", v1alpha1.ImageFailed, web, "reg/migrate:2", "reg/web:2")}, message: "failed to pull", image: "a"},
		{name: "policy gone", d: d, policy: release.PolicyOff, at: time.Minute, reason: release.ReasonGateOff, release: true, message: "policy p no longer gates"},
		{name: "timed out", d: d, policy: release.PolicyGating, at: 10 * time.Minute, reason: release.ReasonTimeout, release: true,
			images:  []v1alpha1.PrePullImage{ppi("a", v1alpha1.ImageInProgress, web, "reg/migrate:2", "reg/web:2")},
			message: "gate timed out after 10m0s", image: "a"},
		{name: "the policy's timeout shortened", d: d, policy: release.PolicyGating, timeout: time.Minute, at: time.Minute, reason: release.ReasonTimeout, release: true},
		{name: "policy unreadable: the recorded timeout", d: d, policy: release.PolicyUnknown, at: 9 * time.Minute, reason: release.ReasonWaiting},
		{name: "no decision: the default timeout", at: v1alpha1.DefaultGateTimeout - time.Second, reason: release.ReasonWaiting},
		{name: "no decision, timed out", at: v1alpha1.DefaultGateTimeout, reason: release.ReasonTimeout, release: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := release.Judge(pod, tc.d, tc.policy, tc.timeout, tc.images, created.Add(tc.at))
			if v.Release != tc.release || v.Reason != tc.reason {
				t.Fatalf("verdict %+v, want release %v reason %s", v, tc.release, tc.reason)
			}
			if !strings.Contains(v.Message, tc.message) {
				t.Errorf("message %q does not say %q", v.Message, tc.message)
			}
			if got := v.Image != nil; got != (tc.image != "") || got && v.Image.Name != tc.image {
				t.Errorf("PrePullImage %v, want %q", v.Image, tc.image)
			}
			if !v.Release && v.Wait <= 0 {
				t.Errorf("a pod kept gated with no time left: %v", v.Wait)
			}
		})
	}
}
