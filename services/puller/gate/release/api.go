package release

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/gate"
)

// APIState reads the State from the API server.
type APIState struct {
	Clientset kubernetes.Interface
	Dynamic   dynamic.Interface
}

// GatedPods lists the pods of every namespace labelled gate.Label.
func (s APIState) GatedPods(ctx context.Context) ([]corev1.Pod, error) {
	l, err := s.Clientset.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: gate.Label})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Policy gets the policy named name; nil when there is none.
func (s APIState) Policy(ctx context.Context, name string) (*v1alpha1.PrePullPolicy, error) {
	u, err := s.Dynamic.Resource(v1alpha1.PolicyResource).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var p v1alpha1.PrePullPolicy
	if err := v1alpha1.FromUnstructured(u.Object, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Images lists the PrePullImages of namespace; one that does not decode is
// skipped and named in the error.
func (s APIState) Images(ctx context.Context, namespace string) ([]v1alpha1.PrePullImage, error) {
	l, err := s.Dynamic.Resource(v1alpha1.ImageResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]v1alpha1.PrePullImage, 0, len(l.Items))
	var errs []error
	for i := range l.Items {
		var p v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(l.Items[i].Object, &p); err != nil {
			errs = append(errs, fmt.Errorf("PrePullImage %s/%s: %w", namespace, l.Items[i].GetName(), err))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

// NewRecorder returns an EventRecorder writing Events through cs as
// component weft-puller, and the function that stops it.
func NewRecorder(cs kubernetes.Interface) (record.EventRecorder, func()) {
	b := record.NewBroadcaster()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: cs.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "weft-puller"}), b.Shutdown
}
