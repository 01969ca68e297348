// Package nodes decides which nodes a workload's pods can land on, as the
// scheduler filters them: the pod template's nodeSelector and required node
// affinity (nodeSelectorTerms with matchExpressions and matchFields) match
// the node, every NoSchedule and NoExecute taint of the node is tolerated,
// the node is Ready and, unless the pods tolerate it, not cordoned. Matching
// and toleration are the scheduler's own code (k8s.io/component-helpers).
// A template that names its node (spec.nodeName) bypasses the scheduler, as
// the kubelet admits it: that node only, where NoSchedule taints and
// cordoning do not keep it away but NoExecute taints do.
//
// A policy's node selector can narrow the result, never widen it; nothing
// here tolerates a taint the workload does not. Every node gets a Verdict
// naming each reason it is excluded, for status and logs.
package nodes

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"k8s.io/klog/v2"
)

// ErrInvalidAffinity is returned for a pod template whose required node
// affinity does not parse (an unknown operator, a bad label value): the
// scheduler could place no pod of it.
var ErrInvalidAffinity = errors.New("invalid required node affinity")

// Verdict is whether the workload's pods can land on Node, and if not, why.
type Verdict struct {
	Node     string
	Eligible bool
	// Reasons the node is excluded, in a fixed order.
	Reasons []string
}

func (v Verdict) String() string {
	if v.Eligible {
		return v.Node + ": eligible"
	}
	return v.Node + ": excluded: " + strings.Join(v.Reasons, "; ")
}

// Option adjusts Filter.
type Option func(*options)

type options struct {
	selector  labels.Selector
	daemonSet bool
}

// WithSelector narrows the nodes to those sel matches (a policy's node
// selector). A nil selector selects every node.
func WithSelector(sel labels.Selector) Option {
	return func(o *options) { o.selector = sel }
}

// AsDaemonSet adds the tolerations the DaemonSet controller gives its pods
// (not-ready and unreachable NoExecute; disk, memory and PID pressure,
// unschedulable, and for host-network pods network-unavailable NoSchedule),
// as the pods of a DaemonSet carry them.
func AsDaemonSet() Option {
	return func(o *options) { o.daemonSet = true }
}

// Filter returns a verdict for each node (in the order given) on whether
// pods of the template spec can land on it.
func Filter(spec *corev1.PodSpec, nodes []corev1.Node, opts ...Option) ([]Verdict, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	var affinity *nodeaffinity.NodeSelector
	if a := spec.Affinity; a != nil && a.NodeAffinity != nil && a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution != nil {
		var err error
		if affinity, err = nodeaffinity.NewNodeSelector(a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalidAffinity, err)
		}
	}
	var nodeSelector labels.Selector
	if len(spec.NodeSelector) > 0 {
		nodeSelector = labels.SelectorFromSet(spec.NodeSelector)
	}
	tolerations := spec.Tolerations
	if o.daemonSet {
		tolerations = append(slices.Clone(tolerations), daemonSetTolerations(spec.HostNetwork)...)
	}
	verdicts := make([]Verdict, 0, len(nodes))
	for i := range nodes {
		n := &nodes[i]
		var reasons []string
		if n.DeletionTimestamp != nil {
			reasons = append(reasons, "being deleted")
		}
		if r := notReady(n); r != "" {
			reasons = append(reasons, r)
		}
		scheduled := spec.NodeName == ""
		if scheduled && n.Spec.Unschedulable && !tolerates(tolerations, &unschedulableTaint) {
			reasons = append(reasons, "cordoned (spec.unschedulable)")
		}
		if spec.NodeName != "" && spec.NodeName != n.Name {
			reasons = append(reasons, "the pod template's nodeName is "+spec.NodeName)
		}
		if o.selector != nil && !o.selector.Matches(labels.Set(n.Labels)) {
			reasons = append(reasons, "the policy's node selector does not match")
		}
		if nodeSelector != nil && !nodeSelector.Matches(labels.Set(n.Labels)) {
			reasons = append(reasons, "nodeSelector does not match")
		}
		if affinity != nil && !affinity.Match(n) {
			reasons = append(reasons, "required node affinity does not match")
		}
		for _, taint := range n.Spec.Taints {
			if taint.Effect != corev1.TaintEffectNoExecute && (taint.Effect != corev1.TaintEffectNoSchedule || !scheduled) {
				continue
			}
			if !tolerates(tolerations, &taint) {
				reasons = append(reasons, "taint "+taint.ToString()+" not tolerated")
			}
		}
		verdicts = append(verdicts, Verdict{Node: n.Name, Eligible: len(reasons) == 0, Reasons: reasons})
	}
	return verdicts, nil
}

// Eligible returns the names of the nodes pods of spec can land on.
func Eligible(spec *corev1.PodSpec, nodes []corev1.Node, opts ...Option) ([]string, error) {
	verdicts, err := Filter(spec, nodes, opts...)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, v := range verdicts {
		if v.Eligible {
			names = append(names, v.Node)
		}
	}
	return names, nil
}

// notReady says why n is not Ready, or "" when it is.
func notReady(n *corev1.Node) string {
	for _, c := range n.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return ""
		}
		return fmt.Sprintf("not Ready (Ready is %s)", c.Status)
	}
	return "not Ready (no Ready condition)"
}

// tolerates is the scheduler's test; comparison operators (Lt, Gt) are off,
// as in a cluster without the alpha feature gate.
func tolerates(tolerations []corev1.Toleration, taint *corev1.Taint) bool {
	return corev1helpers.TolerationsTolerateTaint(klog.Background(), tolerations, taint, false)
}

var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

// daemonSetTolerations are those the DaemonSet controller adds to its pods.
func daemonSetTolerations(hostNetwork bool) []corev1.Toleration {
	t := []corev1.Toleration{
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute},
		{Key: corev1.TaintNodeDiskPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeMemoryPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodePIDPressure, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
		{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
	}
	if hostNetwork {
		t = append(t, corev1.Toleration{Key: corev1.TaintNodeNetworkUnavailable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
	return t
}
