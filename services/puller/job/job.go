// Package job builds the pull Job of mode job: for one PrePullImage, one
// node and one attempt, a Job in the workload's namespace whose pod runs on
// that node only and whose containers use the workload's images, so the
// node's kubelet pulls them with the workload's own credentials.
//
// The Job's pod:
//   - is pinned to the node by required node affinity on metadata.name (the
//     scheduler still checks resources) and tolerates exactly the node's
//     taints, nothing more;
//   - is hardened as the "restricted" Pod Security Standard asks: non-root
//     (65532), read-only root filesystem, all capabilities dropped, no
//     privilege escalation, seccomp RuntimeDefault, no service account token;
//   - uses the workload's imagePullSecrets and its ServiceAccount's (read
//     through ServiceAccounts; an error there is returned, never taken as
//     "no secrets"), and the workload's ServiceAccount;
//   - never runs an image's entrypoint or shell: an init container of weft's
//     image installs weft-noop, a static program, into an emptyDir, and each
//     target-image container runs it (its command set explicitly), so
//     distroless and scratch images work.
//
// backoffLimit is 0 (the puller retries, with its own backoff) and
// activeDeadlineSeconds is the policy's job timeout. The Job is owned by the
// PrePullImage (deleted with it) and labelled with weft and the
// PrePullImage's uid, the node and the attempt.
package job

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/weftio/weft/services/puller/api/v1alpha1"
)

// Paths of weft-noop: where weft's image holds it, and where the pull Job
// mounts the emptyDir it is installed into.
const (
	DefaultHelperBinary = "/usr/local/bin/weft-noop"
	MountPath           = "/.weft"
	NoopPath            = MountPath + "/noop"
)

// Labels and annotations on pull Jobs and their pods.
const (
	LabelManagedBy    = "app.kubernetes.io/managed-by"
	LabelComponent    = "app.kubernetes.io/component"
	LabelPrePullImage = "weft.io/prepullimage"
	LabelImageUID     = "weft.io/prepullimage-uid"
	LabelNode         = "weft.io/node"
	LabelAttempt      = "weft.io/attempt"
	AnnotationNode    = "weft.io/node"
	AnnotationImages  = "weft.io/images"

	ManagedBy = "weft"
	Component = "puller"
)

// The user and group a pull Job's containers run as (distroless "nonroot").
const nonRoot = 65532

// ErrInvalidInput is returned for an Input a Job cannot be built from.
var ErrInvalidInput = errors.New("invalid pull Job input")

// ServiceAccounts reads a ServiceAccount.
type ServiceAccounts interface {
	ServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error)
}

// ServiceAccountsFunc is a function that is a ServiceAccounts.
type ServiceAccountsFunc func(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error)

// ServiceAccount calls f.
func (f ServiceAccountsFunc) ServiceAccount(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
	return f(ctx, namespace, name)
}

// Builder builds pull Jobs.
type Builder struct {
	// HelperImage is weft's image, holding weft-noop at HelperBinary.
	HelperImage string
	// HelperBinary is weft-noop's path in HelperImage (default
	// DefaultHelperBinary).
	HelperBinary string
	// ServiceAccounts reads the workload's ServiceAccount.
	ServiceAccounts ServiceAccounts
}

// Input is what one pull Job is for.
type Input struct {
	// Owner is the PrePullImage (name, namespace, uid and images).
	Owner *v1alpha1.PrePullImage
	// Node is the node pulled onto.
	Node *corev1.Node
	// Workload is the workload's pod template spec: its imagePullSecrets
	// and serviceAccountName.
	Workload *corev1.PodSpec
	// Attempt counts from 1.
	Attempt int32
	// Settings are the policy's job settings (defaulted).
	Settings v1alpha1.JobSettings
}

// Build returns the pull Job for in.
func (b *Builder) Build(ctx context.Context, in Input) (*batchv1.Job, error) {
	if err := b.check(in); err != nil {
		return nil, err
	}
	secrets, err := PullSecrets(ctx, b.ServiceAccounts, in.Owner.Namespace, in.Workload)
	if err != nil {
		return nil, err
	}
	images := uniqueImages(in.Owner.Spec.Images)
	labels := map[string]string{
		LabelManagedBy:    ManagedBy,
		LabelComponent:    Component,
		LabelPrePullImage: labelValue(in.Owner.Name),
		LabelImageUID:     string(in.Owner.UID),
		LabelNode:         labelValue(in.Node.Name),
		LabelAttempt:      strconv.Itoa(int(in.Attempt)),
	}
	annotations := map[string]string{
		AnnotationNode:   in.Node.Name,
		AnnotationImages: strings.Join(images, ","),
	}
	timeout := v1alpha1.DefaultJobTimeout
	if in.Settings.Timeout != nil {
		timeout = in.Settings.Timeout.Duration
	}
	deadline := int64((timeout + time.Second - 1) / time.Second)
	resources := containerResources(in.Settings.Resources)

	containers := make([]corev1.Container, len(images))
	for i, image := range images {
		containers[i] = corev1.Container{
			Name:            "pull-" + strconv.Itoa(i),
			Image:           image,
			ImagePullPolicy: corev1.PullIfNotPresent,
			Command:         []string{NoopPath},
			Resources:       resources,
			SecurityContext: containerSecurity(),
			VolumeMounts:    []corev1.VolumeMount{{Name: "weft-noop", MountPath: MountPath, ReadOnly: true}},
		}
	}
	helper := b.HelperBinary
	if helper == "" {
		helper = DefaultHelperBinary
	}
	job := &batchv1.Job{
		TypeMeta: metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        Name(in.Owner, in.Node.Name, in.Attempt),
			Namespace:   in.Owner.Namespace,
			Labels:      labels,
			Annotations: annotations,
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.GroupVersion.String(),
				Kind:               v1alpha1.ImageKind,
				Name:               in.Owner.Name,
				UID:                in.Owner.UID,
				Controller:         ptr(true),
				BlockOwnerDeletion: ptr(true),
			}},
		},
		Spec: batchv1.JobSpec{
			BackoffLimit:          ptr(int32(0)),
			ActiveDeadlineSeconds: &deadline,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations},
				Spec: corev1.PodSpec{
					RestartPolicy:                corev1.RestartPolicyNever,
					ServiceAccountName:           in.Workload.ServiceAccountName,
					AutomountServiceAccountToken: ptr(false),
					EnableServiceLinks:           ptr(false),
					ImagePullSecrets:             secrets,
					Affinity:                     pinTo(in.Node.Name),
					Tolerations:                  tolerationsOf(in.Node),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr(true),
						RunAsUser:      ptr(int64(nonRoot)),
						RunAsGroup:     ptr(int64(nonRoot)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					InitContainers: []corev1.Container{{
						Name:            "weft-noop",
						Image:           b.HelperImage,
						ImagePullPolicy: corev1.PullIfNotPresent,
						Command:         []string{helper, "install", NoopPath},
						Resources:       resources,
						SecurityContext: containerSecurity(),
						VolumeMounts:    []corev1.VolumeMount{{Name: "weft-noop", MountPath: MountPath}},
					}},
					Containers: containers,
					Volumes: []corev1.Volume{{
						Name: "weft-noop",
						VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{
							SizeLimit: ptr(resource.MustParse("32Mi")),
						}},
					}},
				},
			},
		},
	}
	return job, nil
}

func (b *Builder) check(in Input) error {
	var problems []string
	if b.HelperImage == "" {
		problems = append(problems, "no helper image (weft's image)")
	}
	if b.ServiceAccounts == nil {
		problems = append(problems, "no ServiceAccount reader")
	}
	switch {
	case in.Owner == nil:
		problems = append(problems, "no PrePullImage")
	case in.Owner.Name == "" || in.Owner.Namespace == "" || in.Owner.UID == "":
		problems = append(problems, "the PrePullImage has no name, namespace or uid")
	case len(in.Owner.Spec.Images) == 0:
		problems = append(problems, "the PrePullImage has no images")
	}
	if in.Node == nil || in.Node.Name == "" {
		problems = append(problems, "no node")
	}
	if in.Workload == nil {
		problems = append(problems, "no workload pod spec")
	}
	if in.Attempt < 1 {
		problems = append(problems, fmt.Sprintf("attempt %d (counts from 1)", in.Attempt))
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidInput, strings.Join(problems, "; "))
	}
	return nil
}

// Name is the pull Job's name for owner, node and attempt: at most 63
// characters (the job controller puts it in a label), stable, and distinct
// per attempt so a retry never waits for the last attempt's Job to go.
func Name(owner *v1alpha1.PrePullImage, node string, attempt int32) string {
	sum := sha256.Sum256([]byte(string(owner.UID) + "\x00" + node + "\x00" + strconv.Itoa(int(attempt))))
	prefix := owner.Name
	if len(prefix) > 40 {
		prefix = strings.TrimRight(prefix[:40], "-.")
	}
	return "pull-" + prefix + "-" + hex.EncodeToString(sum[:5])
}

// PullSecrets returns the workload's imagePullSecrets followed by those of
// its ServiceAccount ("default" when unnamed) that it does not list
// already. An error reading the ServiceAccount (a missing one included) is
// returned wrapped.
func PullSecrets(ctx context.Context, sas ServiceAccounts, namespace string, workload *corev1.PodSpec) ([]corev1.LocalObjectReference, error) {
	name := workload.ServiceAccountName
	if name == "" {
		name = "default"
	}
	sa, err := sas.ServiceAccount(ctx, namespace, name)
	if err != nil {
		return nil, fmt.Errorf("read the pull secrets of ServiceAccount %s/%s: %w", namespace, name, err)
	}
	var out []corev1.LocalObjectReference
	seen := map[string]bool{}
	for _, s := range append(append([]corev1.LocalObjectReference(nil), workload.ImagePullSecrets...), sa.ImagePullSecrets...) {
		if s.Name == "" || seen[s.Name] {
			continue
		}
		seen[s.Name] = true
		out = append(out, corev1.LocalObjectReference{Name: s.Name})
	}
	return out, nil
}

// uniqueImages are the owner's images, each once, in order.
func uniqueImages(images []v1alpha1.ContainerImage) []string {
	var out []string
	seen := map[string]bool{}
	for _, im := range images {
		if !seen[im.Image] {
			seen[im.Image] = true
			out = append(out, im.Image)
		}
	}
	return out
}

// pinTo is required node affinity on the node's name.
func pinTo(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}},
			}},
		},
	}}
}

// tolerationsOf tolerates exactly node's taints: each key, value and effect.
func tolerationsOf(node *corev1.Node) []corev1.Toleration {
	var out []corev1.Toleration
	for _, t := range node.Spec.Taints {
		out = append(out, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: t.Effect})
	}
	return out
}

func containerSecurity() *corev1.SecurityContext {
	return &corev1.SecurityContext{
		RunAsNonRoot:             ptr(true),
		ReadOnlyRootFilesystem:   ptr(true),
		AllowPrivilegeEscalation: ptr(false),
		Privileged:               ptr(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		SeccompProfile:           &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
}

// containerResources are the policy's, or a small default that a
// namespace's ResourceQuota accepts.
func containerResources(r *v1alpha1.Resources) corev1.ResourceRequirements {
	if r == nil || (len(r.Limits) == 0 && len(r.Requests) == 0) {
		return corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m"), corev1.ResourceMemory: resource.MustParse("16Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
		}
	}
	return corev1.ResourceRequirements{Limits: r.Limits.DeepCopy(), Requests: r.Requests.DeepCopy()}
}

// labelValue is s when it is a valid label value, else a shortened form
// with a hash of s.
func labelValue(s string) string {
	if len(validation.IsValidLabelValue(s)) == 0 {
		return s
	}
	sum := sha256.Sum256([]byte(s))
	prefix := s
	if len(prefix) > 50 {
		prefix = prefix[:50]
	}
	prefix = strings.TrimRight(prefix, "-._")
	return prefix + "-" + hex.EncodeToString(sum[:6])
}

func ptr[T any](v T) *T { return &v }
