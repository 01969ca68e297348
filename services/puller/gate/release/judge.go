package release

import (
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
)

// Reasons a gate is removed: the metric label, the Event's and the Gated
// condition's reason. ReasonWaiting is the condition's while pods wait.
const (
	ReasonImagesWarm = "ImagesWarm"  // a PrePullImage of the pod's images is Completed
	ReasonTimeout    = "GateTimeout" // the pod is older than the policy's gateTimeout
	ReasonPullFailed = "PullFailed"  // the PrePullImage of the pod's images Failed: waiting gains nothing
	ReasonGateOff    = "GateOff"     // the policy is gone, invalid, or no longer gates
	ReasonWaiting    = "ImagesPulling"
)

// ConditionGated is the PrePullImage condition the release keeps: True
// while pods of the workload wait for its images, False with the reason
// the last gate was removed.
const ConditionGated = "Gated"

// Verdict is what to do with one gated pod.
type Verdict struct {
	// Release is true when the gate comes off now, for Reason.
	Release bool
	Reason  string
	// Message says why, for the Event and the condition.
	Message string
	// Image is the PrePullImage of the pod's images, when there is one.
	Image *v1alpha1.PrePullImage
	// Wait is how long until the gate times out, for a pod kept gated.
	Wait time.Duration
}

// PolicyState is what is known of the policy that gated a pod.
type PolicyState int

// The states of the policy that gated a pod.
const (
	PolicyUnknown PolicyState = iota // it could not be read
	PolicyGating                     // it exists, is valid and gates
	PolicyOff                        // it is gone, invalid, or gate: false
)

// Judge decides on one gated pod at now: d is the decision recorded on the
// pod (zero when none is readable), policy the state of its policy and
// timeout the policy's current gateTimeout (0: the recorded one),
// images the PrePullImages of the pod's namespace. The pod's images are
// warm when a PrePullImage of its workload lists every image of the pod
// and is Completed: every node the workload can land on has them. The gate
// comes off then, or when that PrePullImage Failed, or when the policy no
// longer gates, or once the pod is older than the timeout; a pod whose
// decision is unreadable waits at most v1alpha1.DefaultGateTimeout.
func Judge(pod *corev1.Pod, d gate.Decision, policy PolicyState, timeout time.Duration, images []v1alpha1.PrePullImage, now time.Time) Verdict {
	var v Verdict
	if d.Gated {
		v.Image = imagesOf(pod, d.Workload, images)
	}
	if timeout <= 0 {
		timeout = time.Duration(d.Timeout)
	}
	if timeout <= 0 {
		timeout = v1alpha1.DefaultGateTimeout
	}
	switch {
	case v.Image != nil && v.Image.Status.Phase == v1alpha1.ImageCompleted:
		v.Release, v.Reason = true, ReasonImagesWarm
		v.Message = fmt.Sprintf("images warm; gate removed from pod %s", pod.Name)
	case v.Image != nil && v.Image.Status.Phase == v1alpha1.ImageFailed:
		v.Release, v.Reason = true, ReasonPullFailed
		v.Message = fmt.Sprintf("images failed to pull on %d of %d nodes (PrePullImage %s); gate removed from pod %s",
			v.Image.Status.NodesFailed, v.Image.Status.NodesTotal, v.Image.Name, pod.Name)
	case policy == PolicyOff:
		v.Release, v.Reason = true, ReasonGateOff
		v.Message = fmt.Sprintf("policy %s no longer gates; gate removed from pod %s", d.Policy, pod.Name)
	default:
		left := pod.CreationTimestamp.Add(timeout).Sub(now)
		if left > 0 {
			v.Reason, v.Wait = ReasonWaiting, left
			v.Message = fmt.Sprintf("pods wait for their images, at most %s", timeout)
			return v
		}
		v.Release, v.Reason = true, ReasonTimeout
		v.Message = fmt.Sprintf("gate timed out after %s; removed from pod %s (images not warm yet)", timeout, pod.Name)
	}
	return v
}

// imagesOf returns the PrePullImage of workload w listing every image of
// pod: a Completed one first, then a Failed one, then any.
func imagesOf(pod *corev1.Pod, w v1alpha1.WorkloadReference, images []v1alpha1.PrePullImage) *v1alpha1.PrePullImage {
	want := v1alpha1.ContainerImages(&pod.Spec)
	var found *v1alpha1.PrePullImage
	rank := func(p *v1alpha1.PrePullImage) int {
		switch p.Status.Phase {
		case v1alpha1.ImageCompleted:
			return 2
		case v1alpha1.ImageFailed:
			return 1
		}
		return 0
	}
	for i := range images {
		p := &images[i]
		ref := p.Spec.Workload
		if p.Namespace != pod.Namespace || ref.Kind != w.Kind || ref.Name != w.Name || (ref.UID != "" && w.UID != "" && ref.UID != w.UID) {
			continue
		}
		if !slices.ContainsFunc(want, func(c v1alpha1.ContainerImage) bool {
			return !slices.ContainsFunc(p.Spec.Images, func(have v1alpha1.ContainerImage) bool { return have.Image == c.Image })
		}) && (found == nil || rank(p) > rank(found)) {
			found = p
		}
	}
	return found
}
