package controller

import (
	"context"
	"fmt"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// kubeServiceAccounts reads ServiceAccounts from the API server
// (job.ServiceAccounts).
type kubeServiceAccounts struct{ kube kubernetes.Interface }

func (k kubeServiceAccounts) ServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return k.kube.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
}

// update writes ppi's metadata and spec, with the resourceVersion read: a
// conflict is an error, and the next look reads again.
func (c *controller) update(ctx context.Context, ppi *v1alpha1.PrePullImage) error {
	u, err := v1alpha1.ToUnstructured(ppi)
	if err != nil {
		return err
	}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.ImageResource).Namespace(ppi.Namespace).Update(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update PrePullImage %s/%s: %w", ppi.Namespace, ppi.Name, err)
	}
	return nil
}

// updateStatus writes ppi's status through the status subresource and
// returns the PrePullImage as the API server has it then (nil when it is
// gone).
func (c *controller) updateStatus(ctx context.Context, ppi *v1alpha1.PrePullImage) (*v1alpha1.PrePullImage, error) {
	u, err := v1alpha1.ToUnstructured(ppi)
	if err != nil {
		return nil, err
	}
	out, err := c.cfg.Dynamic.Resource(v1alpha1.ImageResource).Namespace(ppi.Namespace).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("update the status of PrePullImage %s/%s: %w", ppi.Namespace, ppi.Name, err)
	}
	var written v1alpha1.PrePullImage
	if err := v1alpha1.FromUnstructured(out.Object, &written); err != nil {
		return nil, err
	}
	return &written, nil
}

// updatePolicyStatus writes p's status through the status subresource.
func (c *controller) updatePolicyStatus(ctx context.Context, p *v1alpha1.PrePullPolicy) error {
	u, err := v1alpha1.ToUnstructured(p)
	if err != nil {
		return err
	}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.PolicyResource).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("update the status of PrePullPolicy %s: %w", p.Name, err)
	}
	return nil
}

// deleteImage deletes ppi, if it is still the one read.
func (c *controller) deleteImage(ctx context.Context, ppi *v1alpha1.PrePullImage) error {
	err := c.cfg.Dynamic.Resource(v1alpha1.ImageResource).Namespace(ppi.Namespace).Delete(ctx, ppi.Name,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &ppi.UID}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("delete PrePullImage %s/%s: %w", ppi.Namespace, ppi.Name, err)
	}
	return nil
}

// createJob creates j; one that exists is done.
func (c *controller) createJob(ctx context.Context, j *batchv1.Job) error {
	_, err := c.cfg.Kube.BatchV1().Jobs(j.Namespace).Create(ctx, j, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create pull Job %s/%s: %w", j.Namespace, j.Name, err)
	}
	return nil
}

// deleteJob deletes a Job and its pods; one that is gone is done.
func (c *controller) deleteJob(ctx context.Context, namespace, name string) error {
	err := c.cfg.Kube.BatchV1().Jobs(namespace).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: ptr(metav1.DeletePropagationBackground)})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete pull Job %s/%s: %w", namespace, name, err)
	}
	return nil
}

// podMessage is what the pods of a failed Job say about their failure:
// each container's waiting or terminated reason and message (an image
// that cannot be pulled is ErrImagePull with the registry's words), else
// the pod's own.
func (c *controller) podMessage(ctx context.Context, namespace, jobName string) string {
	pods, err := c.cfg.Kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: batchv1.JobNameLabel + "=" + jobName})
	if err != nil {
		return "the pull Job failed (its pods could not be read: " + err.Error() + ")"
	}
	var out []string
	for _, p := range pods.Items {
		for _, s := range append(append([]corev1.ContainerStatus(nil), p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...) {
			switch {
			case s.State.Waiting != nil && s.State.Waiting.Reason != "":
				out = append(out, joinNonEmpty(s.Image, s.State.Waiting.Reason, s.State.Waiting.Message))
			case s.State.Terminated != nil && s.State.Terminated.ExitCode != 0:
				out = append(out, joinNonEmpty(s.Image, s.State.Terminated.Reason, s.State.Terminated.Message))
			}
		}
		if len(out) == 0 && (p.Status.Reason != "" || p.Status.Message != "") {
			out = append(out, joinNonEmpty(p.Status.Reason, p.Status.Message))
		}
	}
	if len(out) == 0 {
		return "the pull Job failed"
	}
	return strings.Join(out, "; ")
}

func joinNonEmpty(parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, ": ")
}
