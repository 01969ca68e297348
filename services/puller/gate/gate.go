// Package gate is the vocabulary of the puller's rollout gate, shared by the
// admission webhook (gate/webhook) that adds the gate and the release
// (gate/release) that removes it, and the View that decides which pods are
// gated.
//
// With `gate: true` in a valid PrePullPolicy, each new pod of a workload the
// policy selects is created with the scheduling gate Name
// (spec.schedulingGates): the scheduler leaves it Pending until the gate is
// removed. Beside the gate the pod gets the label Label (so gated pods are
// listed, and watched, by label) and the annotation Annotation recording the
// Decision: the policy, its gateTimeout and the workload. The gate is
// removed once the pod's images are warm on the nodes its workload can land
// on, or once the pod is older than the timeout, so a gate never holds a
// rollout forever.
//
// A Decision is made from data the caller holds: View reads the policies,
// workloads, ReplicaSets and Namespaces the watcher writes to the resources
// bucket (msg.BucketResources) and resolves a pod's owner chain (Pod →
// ReplicaSet → Deployment, or Pod → StatefulSet / DaemonSet) there.
package gate

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// Name is the scheduling gate the webhook adds and the release removes.
const Name = "weft.io/images"

// Label marks a pod created with the gate, until the gate is removed.
const Label = "weft.io/gated"

// Annotation holds the Decision that gated the pod, as JSON.
const Annotation = "weft.io/gate"

// ErrNoDecision is wrapped by Parse for a pod without a readable Annotation.
var ErrNoDecision = errors.New("no gate decision on the pod")

// Decision is whether a new pod is gated, and by which policy.
type Decision struct {
	// Gated is true when a valid policy with gate: true selects the
	// pod's workload.
	Gated bool `json:"-"`
	// Policy names the PrePullPolicy that gates the workload.
	Policy string `json:"policy"`
	// Timeout is the policy's gateTimeout: the longest the gate holds.
	Timeout Duration `json:"timeout"`
	// Workload is the pod's workload, in the pod's namespace.
	Workload v1alpha1.WorkloadReference `json:"workload"`
}

// Duration is a time.Duration written as Go writes it ("10m0s").
type Duration time.Duration

// MarshalJSON writes d as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// String is the duration as Go writes it.
func (d Duration) String() string { return time.Duration(d).String() }

// Parse reads the Decision recorded on a gated pod.
func Parse(pod *corev1.Pod) (Decision, error) {
	raw, ok := pod.Annotations[Annotation]
	if !ok {
		return Decision{}, fmt.Errorf("%w: annotation %s missing", ErrNoDecision, Annotation)
	}
	var d Decision
	if err := json.Unmarshal([]byte(raw), &d); err != nil {
		return Decision{}, fmt.Errorf("%w: annotation %s: %w", ErrNoDecision, Annotation, err)
	}
	if d.Timeout <= 0 || d.Workload.Kind == "" || d.Workload.Name == "" {
		return Decision{}, fmt.Errorf("%w: annotation %s lacks a timeout or workload", ErrNoDecision, Annotation)
	}
	d.Gated = true
	return d, nil
}

// Has reports whether pod carries the gate.
func Has(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == Name })
}

// PatchOp is one JSON patch (RFC 6902) operation.
type PatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// AddPatch is the JSON patch that gates pod as d says: the gate, the label
// and the annotation. It is empty for a pod that already has the gate.
func AddPatch(pod *corev1.Pod, d Decision) ([]PatchOp, error) {
	if Has(pod) {
		return nil, nil
	}
	note, err := json.Marshal(d)
	if err != nil {
		return nil, fmt.Errorf("encode the gate decision: %w", err)
	}
	var ops []PatchOp
	if len(pod.Spec.SchedulingGates) == 0 {
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/schedulingGates", Value: []corev1.PodSchedulingGate{{Name: Name}}})
	} else {
		ops = append(ops, PatchOp{Op: "add", Path: "/spec/schedulingGates/-", Value: corev1.PodSchedulingGate{Name: Name}})
	}
	ops = append(ops, mapEntry(pod.Labels == nil, "/metadata/labels", Label, "true"))
	ops = append(ops, mapEntry(pod.Annotations == nil, "/metadata/annotations", Annotation, string(note)))
	return ops, nil
}

func mapEntry(absent bool, path, key, value string) PatchOp {
	if absent {
		return PatchOp{Op: "add", Path: path, Value: map[string]string{key: value}}
	}
	return PatchOp{Op: "add", Path: path + "/" + escapePointer(key), Value: value}
}

// RemovePatch is the JSON patch that removes the gate from pod, and the
// label with it, leaving other gates as they are. Its first operation tests
// that spec.schedulingGates is still what pod holds, so of two replicas
// removing the same gate one patch applies and the other fails. It is empty
// for a pod without the gate and the label.
func RemovePatch(pod *corev1.Pod) []PatchOp {
	var ops []PatchOp
	if Has(pod) {
		rest := slices.DeleteFunc(slices.Clone(pod.Spec.SchedulingGates), func(g corev1.PodSchedulingGate) bool { return g.Name == Name })
		ops = append(ops,
			PatchOp{Op: "test", Path: "/spec/schedulingGates", Value: pod.Spec.SchedulingGates},
			PatchOp{Op: "replace", Path: "/spec/schedulingGates", Value: nonNil(rest)})
	}
	if _, ok := pod.Labels[Label]; ok {
		ops = append(ops, PatchOp{Op: "remove", Path: "/metadata/labels/" + escapePointer(Label)})
	}
	return ops
}

func nonNil(gates []corev1.PodSchedulingGate) []corev1.PodSchedulingGate {
	if gates == nil {
		return []corev1.PodSchedulingGate{}
	}
	return gates
}

// escapePointer escapes a map key as one JSON pointer token (RFC 6901).
func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
