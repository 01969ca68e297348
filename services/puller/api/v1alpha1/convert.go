package v1alpha1

import (
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Defaults the CRDs' schemas apply (a test keeps them equal).
const (
	DefaultMode        = ModeCRI
	DefaultCluster     = 10
	DefaultPerNode     = 2
	DefaultPerRegistry = 4
	DefaultMaxAttempts = 3
	DefaultBackoff     = 30 * time.Second
	DefaultMaxBackoff  = 10 * time.Minute
	DefaultTTL         = time.Hour
	DefaultJobTimeout  = 10 * time.Minute
	DefaultGateTimeout = 10 * time.Minute
)

// FromUnstructured decodes an unstructured object (as the API server and
// the resources bucket hold it) into out, a *PrePullPolicy or
// *PrePullImage, checking its apiVersion and kind.
func FromUnstructured(obj map[string]any, out any) error {
	var kind string
	switch out.(type) {
	case *PrePullPolicy:
		kind = PolicyKind
	case *PrePullImage:
		kind = ImageKind
	default:
		return fmt.Errorf("decode %T: not a type of %s", out, GroupVersion)
	}
	if av, k := obj["apiVersion"], obj["kind"]; av != GroupVersion.String() || k != kind {
		return fmt.Errorf("decode %s: object is apiVersion %v kind %v", kind, av, k)
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, out); err != nil {
		return fmt.Errorf("decode %s: %w", kind, err)
	}
	return nil
}

// ToUnstructured encodes a *PrePullPolicy or *PrePullImage as an
// unstructured object, setting its apiVersion and kind.
func ToUnstructured(in any) (map[string]any, error) {
	switch o := in.(type) {
	case *PrePullPolicy:
		o.APIVersion, o.Kind = GroupVersion.String(), PolicyKind
	case *PrePullImage:
		o.APIVersion, o.Kind = GroupVersion.String(), ImageKind
	default:
		return nil, fmt.Errorf("encode %T: not a type of %s", in, GroupVersion)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(in)
	if err != nil {
		return nil, fmt.Errorf("encode %T: %w", in, err)
	}
	return u, nil
}

// ContainerImages lists the image of every init container and container
// of a pod template spec, init containers first, as PrePullImageSpec.Images
// holds them.
func ContainerImages(spec *corev1.PodSpec) []ContainerImage {
	out := make([]ContainerImage, 0, len(spec.InitContainers)+len(spec.Containers))
	for _, c := range spec.InitContainers {
		out = append(out, ContainerImage{Container: c.Name, Image: c.Image, Init: true})
	}
	for _, c := range spec.Containers {
		out = append(out, ContainerImage{Container: c.Name, Image: c.Image})
	}
	return out
}
