// Package v1alpha1 holds the puller's Kubernetes API of group weft.io,
// version v1alpha1: the cluster-scoped PrePullPolicy (which workloads get
// their images pre-pulled, where, how fast, how often retried, and whether
// their rollout waits) and the namespaced PrePullImage (one workload's images
// being pulled onto its target nodes, with per-node status).
//
// The types mirror the CustomResourceDefinitions in deploy/k8s/crds/ field
// for field (a test walks both); they are read from and written to the
// resources bucket and the API server as unstructured objects through
// FromUnstructured and ToUnstructured. The schema validates what it can (enums,
// minimums, patterns, CEL rules); ValidatePolicy checks the rest and
// ValidCondition turns its verdict into the policy's Valid condition.
package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the puller's API.
const (
	Group   = "weft.io"
	Version = "v1alpha1"
)

// GroupVersion is weft.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Kinds and resources of the API.
const (
	PolicyKind    = "PrePullPolicy"
	ImageKind     = "PrePullImage"
	PolicyPlural  = "prepullpolicies"
	ImagePlural   = "prepullimages"
	PolicyCRDName = PolicyPlural + "." + Group
	ImageCRDName  = ImagePlural + "." + Group
)

// PolicyResource and ImageResource name the API's resources for dynamic
// clients and the watcher.
var (
	PolicyResource = GroupVersion.WithResource(PolicyPlural)
	ImageResource  = GroupVersion.WithResource(ImagePlural)
)

// PullMode is how images get onto a node.
type PullMode string

const (
	// ModeCRI has the node agent pull through the container runtime's
	// ImageService.
	ModeCRI PullMode = "cri"
	// ModeJob runs one pull Job per node whose containers use the images.
	ModeJob PullMode = "job"
)

// WorkloadKind is a kind of workload a policy selects.
type WorkloadKind string

// The workload kinds a policy can select.
const (
	KindDeployment  WorkloadKind = "Deployment"
	KindStatefulSet WorkloadKind = "StatefulSet"
	KindDaemonSet   WorkloadKind = "DaemonSet"
)

// PrePullPolicy selects workloads whose images are pulled onto the nodes
// their pods can run on before the pods need them. Cluster-scoped.
type PrePullPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PrePullPolicySpec   `json:"spec"`
	Status PrePullPolicyStatus `json:"status,omitempty"`
}

// PrePullPolicySpec is what a policy asks for. The schema defaults mode
// (cri), limits, retry, ttl, job.timeout and gateTimeout.
type PrePullPolicySpec struct {
	// Workloads selects the workloads whose images are pre-pulled.
	Workloads WorkloadSelector `json:"workloads"`
	// NodeSelector narrows the nodes pulled onto, beyond those the
	// workload's pods can run on (never widens them).
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	// Mode is cri (the node agent) or job (one pull Job per node).
	Mode PullMode `json:"mode,omitempty"`
	// Limits bounds the pulls running at once.
	Limits Limits `json:"limits,omitempty"`
	// Retry says how often and how soon a failed pull is tried again.
	Retry Retry `json:"retry,omitempty"`
	// TTL is how long a PrePullImage is kept after it finished.
	TTL *metav1.Duration `json:"ttl,omitempty"`
	// Job shapes the pull Jobs of mode job.
	Job JobSettings `json:"job,omitempty"`
	// Gate holds the workload's new pods unscheduled until their images
	// are on the target nodes, or GateTimeout passed.
	Gate bool `json:"gate,omitempty"`
	// GateTimeout is the longest a gate holds a pod.
	GateTimeout *metav1.Duration `json:"gateTimeout,omitempty"`
}

// WorkloadSelector selects workloads by kind, namespace and labels. A
// workload is selected when every given criterion matches.
type WorkloadSelector struct {
	// Kinds of workload selected (default: all three).
	Kinds []WorkloadKind `json:"kinds,omitempty"`
	// Namespaces lists namespaces by name; empty means any namespace
	// NamespaceSelector matches.
	Namespaces []string `json:"namespaces,omitempty"`
	// NamespaceSelector selects namespaces by label; absent means any.
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// Selector selects workloads by their labels; {} selects all. It is
	// required: a policy without one selects nothing.
	Selector *metav1.LabelSelector `json:"selector"`
}

// Limits are the most pulls running at once: in the whole cluster, on one
// node, and from one registry host. PerNode and PerRegistry are at most
// Cluster.
type Limits struct {
	Cluster     int32 `json:"cluster,omitempty"`
	PerNode     int32 `json:"perNode,omitempty"`
	PerRegistry int32 `json:"perRegistry,omitempty"`
}

// Retry is exponential backoff: the n-th retry waits Backoff*2^(n-1),
// at most MaxBackoff, and a node's pull is tried MaxAttempts times in all.
type Retry struct {
	MaxAttempts int32            `json:"maxAttempts,omitempty"`
	Backoff     *metav1.Duration `json:"backoff,omitempty"`
	MaxBackoff  *metav1.Duration `json:"maxBackoff,omitempty"`
}

// JobSettings shape the pull Jobs.
type JobSettings struct {
	// Resources of each container of a pull Job.
	Resources *Resources `json:"resources,omitempty"`
	// Timeout is the Job's activeDeadlineSeconds: its pod is stopped and
	// the attempt failed after it.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// Resources are the requests and limits of a pull Job's containers.
type Resources struct {
	Limits   corev1.ResourceList `json:"limits,omitempty"`
	Requests corev1.ResourceList `json:"requests,omitempty"`
}

// PrePullPolicyStatus is what the puller observed of a policy.
type PrePullPolicyStatus struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Workloads is how many workloads the policy selects.
	Workloads int32 `json:"workloads,omitempty"`
	// Conditions: Valid.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PrePullImage is one workload's images being pulled onto its target nodes.
// It lives in the workload's namespace and is owned by the workload.
type PrePullImage struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PrePullImageSpec   `json:"spec"`
	Status PrePullImageStatus `json:"status,omitempty"`
}

// PrePullImageSpec names the workload, its images and where they go.
type PrePullImageSpec struct {
	// Policy is the name of the PrePullPolicy that selected the workload.
	Policy string `json:"policy"`
	// Workload is the workload whose images these are.
	Workload WorkloadReference `json:"workload"`
	// Images of every container and init container of the workload.
	Images []ContainerImage `json:"images"`
	// Nodes the workload's pods can run on, where the images are pulled.
	Nodes []string `json:"nodes,omitempty"`
	// ImagePullSecrets are the workload's and its ServiceAccount's pull
	// secrets, in the workload's namespace.
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// ServiceAccountName is the workload's ServiceAccount.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Mode is the policy's mode when the PrePullImage was made.
	Mode PullMode `json:"mode,omitempty"`
}

// WorkloadReference names a workload in the PrePullImage's namespace.
type WorkloadReference struct {
	APIVersion string       `json:"apiVersion"`
	Kind       WorkloadKind `json:"kind"`
	Name       string       `json:"name"`
	UID        string       `json:"uid,omitempty"`
}

// ContainerImage is one container's image. Container names are unique
// across a pod's containers and init containers.
type ContainerImage struct {
	Container string `json:"container"`
	Image     string `json:"image"`
	Init      bool   `json:"init,omitempty"`
}

// ImagePhase is a PrePullImage's overall phase.
type ImagePhase string

// The phases of a PrePullImage.
const (
	ImagePending    ImagePhase = "Pending"
	ImageInProgress ImagePhase = "InProgress"
	ImageCompleted  ImagePhase = "Completed"
	ImageFailed     ImagePhase = "Failed"
)

// NodePhase is the phase of one node's pull.
type NodePhase string

// The phases of one node's pull.
const (
	NodePending NodePhase = "Pending"
	NodePulling NodePhase = "Pulling"
	NodePulled  NodePhase = "Pulled"
	NodeFailed  NodePhase = "Failed"
)

// PrePullImageStatus is the progress of the pulls, per node and overall.
type PrePullImageStatus struct {
	ObservedGeneration int64      `json:"observedGeneration,omitempty"`
	Phase              ImagePhase `json:"phase,omitempty"`
	// Nodes is each target node's pull.
	Nodes []NodeStatus `json:"nodes,omitempty"`
	// Counts of target nodes, of those whose images are pulled, and of
	// those that failed for good.
	NodesTotal  int32 `json:"nodesTotal,omitempty"`
	NodesPulled int32 `json:"nodesPulled,omitempty"`
	NodesFailed int32 `json:"nodesFailed,omitempty"`

	StartTime      *metav1.Time `json:"startTime,omitempty"`
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`
	// Conditions: Warm.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// NodeStatus is one node's pull of the PrePullImage's images.
type NodeStatus struct {
	Node     string    `json:"node"`
	Phase    NodePhase `json:"phase"`
	Attempts int32     `json:"attempts,omitempty"`

	StartTime       *metav1.Time `json:"startTime,omitempty"`
	CompletionTime  *metav1.Time `json:"completionTime,omitempty"`
	NextAttemptTime *metav1.Time `json:"nextAttemptTime,omitempty"`
	// Message is the runtime's or registry's word on the last attempt.
	Message string `json:"message,omitempty"`
}

// Condition types and reasons.
const (
	// ConditionValid is True on a policy whose spec the puller accepts.
	ConditionValid = "Valid"
	// ConditionWarm is True on a PrePullImage whose images are on every
	// target node.
	ConditionWarm = "Warm"

	ReasonValid       = "Valid"
	ReasonInvalidSpec = "InvalidSpec"
)
