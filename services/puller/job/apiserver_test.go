package job_test

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
)

var crdDir = filepath.Join("..", "..", "..", "deploy", "k8s", "crds")

// TestJobOnAPIServer creates a pull Job on a real API server with the job
// and garbage-collector controllers running, in a namespace that enforces
// the "restricted" Pod Security Standard: the job controller makes its pod
// with the built spec (pinned, tolerating the node's taints, the
// workload's and its ServiceAccount's pull secrets, hardened, weft-noop
// commands), a failed pod fails the Job with no second pod (backoffLimit
// 0), and deleting the PrePullImage deletes the Job.
func TestJobOnAPIServer(t *testing.T) {
	k := kubetest.Start(t, kubetest.WithControllerManager())
	k.InstallCRDs(t, crdDir)
	ctx := context.Background()
	cs := k.Clientset
	const ns = "shop"

	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		Name:   ns,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The namespace really refuses a pod that is not restricted.
	loose := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "loose", Namespace: ns},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "nginx"}}},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, loose, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("a pod that is not restricted: %v, want Forbidden by Pod Security admission", err)
	}

	_, err = cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{
		ObjectMeta:       metav1.ObjectMeta{Name: "web"},
		ImagePullSecrets: secrets("sa-creds", "shared-creds"),
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{"pool": "gpu"}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: "gpu", Value: "true", Effect: corev1.TaintEffectNoSchedule},
			{Key: "dedicated", Effect: corev1.TaintEffectNoExecute},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	ppi := &v1alpha1.PrePullImage{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: ns},
		Spec: v1alpha1.PrePullImageSpec{
			Policy:   "all",
			Workload: v1alpha1.WorkloadReference{APIVersion: "apps/v1", Kind: v1alpha1.KindDeployment, Name: "web"},
			Images: []v1alpha1.ContainerImage{
				{Container: "migrate", Image: "registry.example.com/web/migrate:1.2", Init: true},
				{Container: "web", Image: "registry.example.com/web:1.2"},
			},
			Nodes: []string{node.Name},
		},
	}
	u, err := v1alpha1.ToUnstructured(ppi)
	if err != nil {
		t.Fatal(err)
	}
	created, err := k.Client.Resource(v1alpha1.ImageResource).Namespace(ns).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := v1alpha1.FromUnstructured(created.Object, ppi); err != nil {
		t.Fatal(err)
	}

	b := &job.Builder{
		HelperImage: "ghcr.io/weftio/weft:v0.1.0",
		ServiceAccounts: job.ServiceAccountsFunc(func(ctx context.Context, namespace, name string) (*corev1.ServiceAccount, error) {
			return cs.CoreV1().ServiceAccounts(namespace).Get(ctx, name, metav1.GetOptions{})
		}),
	}
	built, err := b.Build(ctx, job.Input{
		Owner:    ppi,
		Node:     node,
		Workload: &corev1.PodSpec{ServiceAccountName: "web", ImagePullSecrets: secrets("web-creds", "shared-creds")},
		Attempt:  1,
		Settings: v1alpha1.JobSettings{Timeout: &metav1.Duration{Duration: 5 * time.Minute}},
	})
	if err != nil {
		t.Fatal(err)
	}
	j, err := cs.BatchV1().Jobs(ns).Create(ctx, built, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("the API server refused the pull Job: %v", err)
	}

	// The job controller makes the pod.
	selector := labels.SelectorFromSet(map[string]string{job.LabelImageUID: string(ppi.UID)}).String()
	var pod corev1.Pod
	testkit.Eventually(t, time.Minute, func() error {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		if len(pods.Items) != 1 {
			events, _ := cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
			return fmt.Errorf("%d pods; events: %s", len(pods.Items), eventMessages(events))
		}
		pod = pods.Items[0]
		return nil
	})
	checkPod(t, &pod, j, node)

	// The pod fails: with backoffLimit 0 the Job fails and makes no other.
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{
		Name: "pull-0", Image: pod.Spec.Containers[0].Image,
		State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error"}},
	}}
	if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, &pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		got, err := cs.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range got.Status.Conditions {
			if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
				if c.Reason != batchv1.JobReasonBackoffLimitExceeded {
					t.Errorf("Job failed with reason %s", c.Reason)
				}
				return nil
			}
		}
		return fmt.Errorf("Job not failed: %+v", got.Status)
	})
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 1 {
		t.Errorf("%d pods after the failure, want the one", len(pods.Items))
	}

	// The PrePullImage goes: the garbage collector takes its Job.
	if err := k.Client.Resource(v1alpha1.ImageResource).Namespace(ns).Delete(ctx, ppi.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		_, err := cs.BatchV1().Jobs(ns).Get(ctx, j.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("Job still there (%v)", err)
	})
}

// checkPod checks the pod the job controller made for j.
func checkPod(t *testing.T, pod *corev1.Pod, j *batchv1.Job, node *corev1.Node) {
	t.Helper()
	spec := pod.Spec
	if len(pod.OwnerReferences) != 1 || pod.OwnerReferences[0].UID != j.UID {
		t.Errorf("pod owners %+v, want the Job", pod.OwnerReferences)
	}
	terms := spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms
	if len(terms) != 1 || len(terms[0].MatchFields) != 1 || terms[0].MatchFields[0].Key != "metadata.name" ||
		!reflect.DeepEqual(terms[0].MatchFields[0].Values, []string{node.Name}) {
		t.Errorf("node affinity %+v, want metadata.name In [%s]", terms, node.Name)
	}
	// Exactly the node's taints are tolerated: those it was created with
	// and the not-ready taint the API server's admission gives a new node
	// (the API server adds its own default not-ready and unreachable
	// tolerations, bounded in time, to every pod).
	var tolerated []string
	for _, tol := range spec.Tolerations {
		if tol.TolerationSeconds != nil {
			continue
		}
		tolerated = append(tolerated, tol.Key+"="+tol.Value+":"+string(tol.Effect))
	}
	var taints []string
	for _, taint := range node.Spec.Taints {
		taints = append(taints, taint.Key+"="+taint.Value+":"+string(taint.Effect))
	}
	if want := []string{"gpu=true:NoSchedule", "dedicated=:NoExecute"}; !slices.Equal(taints[:2], want) {
		t.Errorf("node taints %v, want %v first", taints, want)
	}
	if !slices.Equal(tolerated, taints) {
		t.Errorf("tolerations %v, want the node's taints %v", tolerated, taints)
	}
	var pullSecrets []string
	for _, s := range spec.ImagePullSecrets {
		pullSecrets = append(pullSecrets, s.Name)
	}
	if want := []string{"web-creds", "shared-creds", "sa-creds"}; !slices.Equal(pullSecrets, want) {
		t.Errorf("image pull secrets %v, want %v", pullSecrets, want)
	}
	if spec.ServiceAccountName != "web" || spec.AutomountServiceAccountToken == nil || *spec.AutomountServiceAccountToken {
		t.Errorf("service account %q, automount %v", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("restart policy %s", spec.RestartPolicy)
	}
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod security context %+v", psc)
	}
	var images []string
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil || !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) {
			t.Errorf("container %s security context %+v", c.Name, sc)
		}
		images = append(images, c.Image+" "+strings.Join(c.Command, " "))
	}
	want := []string{
		"ghcr.io/weftio/weft:v0.1.0 /usr/local/bin/weft-noop install /.weft/noop",
		"registry.example.com/web/migrate:1.2 /.weft/noop",
		"registry.example.com/web:1.2 /.weft/noop",
	}
	if !slices.Equal(images, want) {
		t.Errorf("containers (image command):\n%s\nwant\n%s", strings.Join(images, "\n"), strings.Join(want, "\n"))
	}
	if j.Spec.BackoffLimit == nil || *j.Spec.BackoffLimit != 0 || j.Spec.ActiveDeadlineSeconds == nil || *j.Spec.ActiveDeadlineSeconds != 300 {
		t.Errorf("backoffLimit %v activeDeadlineSeconds %v", j.Spec.BackoffLimit, j.Spec.ActiveDeadlineSeconds)
	}
	if len(j.OwnerReferences) != 1 || j.OwnerReferences[0].Kind != v1alpha1.ImageKind || j.OwnerReferences[0].Controller == nil || !*j.OwnerReferences[0].Controller {
		t.Errorf("Job owners %+v", j.OwnerReferences)
	}
}

func eventMessages(events *corev1.EventList) string {
	if events == nil {
		return "none"
	}
	var out []string
	for _, e := range events.Items {
		out = append(out, e.Reason+": "+e.Message)
	}
	return strings.Join(out, " | ")
}
