// Package workload decides, for one Deployment, StatefulSet or DaemonSet,
// whether a PrePullPolicy selects it, which images it needs, under which
// name its PrePullImage goes, and which nodes still lack its images.
//
// The contract:
//   - Decode reads a workload as the resources bucket holds it (an
//     unstructured object of apps/v1) and keeps its pod template.
//   - Selects applies a defaulted policy's kinds, namespaces, namespace
//     selector and label selector; a policy without a selector selects
//     nothing (ValidatePolicy reports it).
//   - Name is deterministic from the workload's kind, name and the hash of
//     its image set, so replicas creating it together make one object and
//     a new image set makes a new PrePullImage.
//   - Lacking lists the nodes the workload's pods can land on (package
//     nodes, with the DaemonSet tolerations for a DaemonSet and the
//     policy's node selector) whose status.images does not list every
//     image: a node whose kubelet reports the images is covered.
package workload

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/distribution/reference"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/nodes"
)

// Workload is a Deployment, StatefulSet or DaemonSet as the puller needs it.
type Workload struct {
	Kind       v1alpha1.WorkloadKind
	APIVersion string
	Namespace  string
	Name       string
	UID        types.UID
	Labels     map[string]string
	// Deleting is set once the workload has a deletion timestamp.
	Deleting bool
	// Template is the pod template's spec.
	Template corev1.PodSpec
}

// Decode reads an apps/v1 Deployment, StatefulSet or DaemonSet.
func Decode(obj map[string]any) (*Workload, error) {
	if av := obj["apiVersion"]; av != "apps/v1" {
		return nil, fmt.Errorf("decode workload: apiVersion %v, want apps/v1", av)
	}
	var (
		meta metav1.ObjectMeta
		spec corev1.PodSpec
		err  error
	)
	kind, _ := obj["kind"].(string)
	conv := runtime.DefaultUnstructuredConverter
	switch v1alpha1.WorkloadKind(kind) {
	case v1alpha1.KindDeployment:
		var d appsv1.Deployment
		err = conv.FromUnstructured(obj, &d)
		meta, spec = d.ObjectMeta, d.Spec.Template.Spec
	case v1alpha1.KindStatefulSet:
		var s appsv1.StatefulSet
		err = conv.FromUnstructured(obj, &s)
		meta, spec = s.ObjectMeta, s.Spec.Template.Spec
	case v1alpha1.KindDaemonSet:
		var d appsv1.DaemonSet
		err = conv.FromUnstructured(obj, &d)
		meta, spec = d.ObjectMeta, d.Spec.Template.Spec
	default:
		return nil, fmt.Errorf("decode workload: kind %q is none of Deployment, StatefulSet, DaemonSet", kind)
	}
	if err != nil {
		return nil, fmt.Errorf("decode %s: %w", kind, err)
	}
	return &Workload{
		Kind: v1alpha1.WorkloadKind(kind), APIVersion: "apps/v1",
		Namespace: meta.Namespace, Name: meta.Name, UID: meta.UID, Labels: meta.Labels,
		Deleting: meta.DeletionTimestamp != nil, Template: spec,
	}, nil
}

// Selects reports whether the defaulted policy spec selects w, whose
// namespace has the labels nsLabels (nil when the namespace is unknown: a
// namespace selector then does not match).
func Selects(spec *v1alpha1.PrePullPolicySpec, w *Workload, nsLabels map[string]string) (bool, error) {
	sel := spec.Workloads
	if sel.Selector == nil || !slices.Contains(sel.Kinds, w.Kind) {
		return false, nil
	}
	if len(sel.Namespaces) > 0 && !slices.Contains(sel.Namespaces, w.Namespace) {
		return false, nil
	}
	if sel.NamespaceSelector != nil {
		if nsLabels == nil {
			return false, nil
		}
		ok, err := matches(sel.NamespaceSelector, nsLabels)
		if err != nil || !ok {
			return false, err
		}
	}
	return matches(sel.Selector, w.Labels)
}

func matches(ls *metav1.LabelSelector, set map[string]string) (bool, error) {
	s, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return false, fmt.Errorf("label selector: %w", err)
	}
	return s.Matches(labels.Set(set)), nil
}

// Images are the workload's container and init-container images, as a
// PrePullImage lists them.
func (w *Workload) Images() []v1alpha1.ContainerImage { return v1alpha1.ContainerImages(&w.Template) }

// UniqueImages are the distinct images of images, sorted.
func UniqueImages(images []v1alpha1.ContainerImage) []string {
	var out []string
	for _, im := range images {
		out = append(out, im.Image)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// ImageSetHash identifies a set of images (order and repeats aside).
func ImageSetHash(images []v1alpha1.ContainerImage) string {
	sum := sha256.Sum256([]byte(strings.Join(UniqueImages(images), "\n")))
	return hex.EncodeToString(sum[:5])
}

// Name is the PrePullImage's name for w and its image set: the kind, the
// workload's name (shortened to fit) and the image-set hash.
func Name(w *Workload, hash string) string {
	prefix := strings.ToLower(string(w.Kind)) + "-"
	name := w.Name
	if max := 253 - len(prefix) - 1 - len(hash); len(name) > max {
		name = strings.TrimRight(name[:max], "-.")
	}
	return prefix + name + "-" + hash
}

// Lacking returns the nodes w's pods can land on (narrowed by the policy's
// node selector, nil for none) that do not report every image of w.
func Lacking(w *Workload, all []corev1.Node, nodeSelector *metav1.LabelSelector) ([]string, error) {
	var opts []nodes.Option
	if nodeSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(nodeSelector)
		if err != nil {
			return nil, fmt.Errorf("node selector: %w", err)
		}
		opts = append(opts, nodes.WithSelector(sel))
	}
	if w.Kind == v1alpha1.KindDaemonSet {
		opts = append(opts, nodes.AsDaemonSet())
	}
	eligible, err := nodes.Eligible(&w.Template, all, opts...)
	if err != nil {
		return nil, err
	}
	images := UniqueImages(w.Images())
	var out []string
	for _, name := range eligible {
		i := slices.IndexFunc(all, func(n corev1.Node) bool { return n.Name == name })
		if !HasImages(&all[i], images) {
			out = append(out, name)
		}
	}
	return out, nil
}

// HasImages reports whether node's status lists every image (names
// compared in their normalized form: "nginx" is docker.io/library/nginx:latest).
func HasImages(node *corev1.Node, images []string) bool {
	have := map[string]bool{}
	for _, im := range node.Status.Images {
		for _, n := range im.Names {
			have[Normalize(n)] = true
		}
	}
	for _, im := range images {
		if !have[Normalize(im)] {
			return false
		}
	}
	return true
}

// Normalize is the fully qualified form of an image reference, or the
// reference itself when it does not parse.
func Normalize(image string) string {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return image
	}
	return reference.TagNameOnly(named).String()
}

// RegistryHost is the registry host of an image ("docker.io" for Docker
// Hub's), or "" when the reference does not parse.
func RegistryHost(image string) string {
	named, err := reference.ParseNormalizedNamed(image)
	if err != nil {
		return ""
	}
	return reference.Domain(named)
}
