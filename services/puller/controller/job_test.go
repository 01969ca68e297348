package controller_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
)

// kubelet plays the nodes' kubelets for pull Jobs' pods: every 50 ms, a
// pod of the informers' store on a node in fail gets Failed with an image
// pull error, any other Succeeded (a status update failing on a stale pod
// is made again at a later step). After every event of its Job informer
// it records every pull Job seen and the most unfinished Jobs at once.
type kubelet struct {
	r    *rig
	fail map[string]bool

	mu      sync.Mutex
	current map[string]*batchv1.Job // by namespace/name, as of the last event; read only
	jobs    map[string]string       // name -> node#attempt
	maxLive int
}

const pullError = `failed to pull and unpack image "registry.example.com/api:1": not found`

func (k *kubelet) run(ctx context.Context) error {
	f := pullInformers(k.r)
	k.mu.Lock()
	k.current = map[string]*batchv1.Job{}
	k.mu.Unlock()
	_, err := f.Batch().V1().Jobs().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { k.observe(obj, false) },
		UpdateFunc: func(_, obj any) { k.observe(obj, false) },
		DeleteFunc: func(obj any) { k.observe(obj, true) },
	})
	if err != nil {
		return err
	}
	pods := f.Core().V1().Pods().Informer().GetStore()
	f.Start(ctx.Done())
	defer f.Shutdown()
	eachTick(ctx, 50*time.Millisecond, func() {
		for _, obj := range pods.List() {
			k.finish(ctx, obj.(*corev1.Pod).DeepCopy())
		}
	})
	return nil
}

// observe records a Job event, obj or its deletion, and counts the
// unfinished Jobs it leaves.
func (k *kubelet) observe(obj any, deleted bool) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if j, ok := obj.(*batchv1.Job); ok && !deleted {
		k.current[key] = j
	} else {
		delete(k.current, key)
	}
	live := 0
	for _, j := range k.current {
		k.jobs[j.Name] = j.Annotations[job.AnnotationNode] + "#" + j.Labels[job.LabelAttempt]
		finished := slices.ContainsFunc(j.Status.Conditions, func(c batchv1.JobCondition) bool {
			return (c.Type == batchv1.JobComplete || c.Type == batchv1.JobFailed) && c.Status == corev1.ConditionTrue
		})
		if !finished && j.DeletionTimestamp == nil {
			live++
		}
	}
	k.maxLive = max(k.maxLive, live)
}

func (k *kubelet) finish(ctx context.Context, pod *corev1.Pod) {
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		return
	}
	node := pod.Annotations[job.AnnotationNode]
	pod.Status.Phase = corev1.PodSucceeded
	state := corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	k.mu.Lock()
	fail := k.fail[node]
	k.mu.Unlock()
	if fail {
		pod.Status.Phase = corev1.PodFailed
		state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ErrImagePull", Message: pullError}}
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: state})
	}
	_, _ = k.r.kube.Clientset.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
}

func (k *kubelet) seen() (map[string]string, int) {
	k.mu.Lock()
	defer k.mu.Unlock()
	out := map[string]string{}
	for n, v := range k.jobs {
		out[n] = v
	}
	return out, k.maxLive
}

// TestJobMode runs two controller replicas in mode job with a cluster
// limit of one pull at a time: each node gets its pull Job (one per node
// and attempt, never two running at once); a pod that succeeds makes its
// node Pulled; a pod that fails has its Job deleted and retried after the
// backoff, and after maxAttempts the node and the PrePullImage are Failed
// with the pod's message. A Completed PrePullImage of a policy with a
// short TTL is deleted after it, and not made again once its node reports
// the image. An invalid policy gets Valid=False and pulls nothing.
func TestJobMode(t *testing.T) {
	r := newRig(t, kubetest.WithControllerManager())
	k := &kubelet{r: r, fail: map[string]bool{"worker-2": true}, jobs: map[string]string{}}
	testkit.Run(t, k.run)
	for _, ns := range []string{"shop", "ttl", "bad"} {
		r.namespace(t, ns, nil)
	}
	r.node(t, "worker-1", true, map[string]string{"pool": "a"})
	r.node(t, "worker-2", true, nil)
	r.policy(t, "jobs", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"shop"}, Selector: selectAll()},
		Mode:      v1alpha1.ModeJob,
		Limits:    v1alpha1.Limits{Cluster: 1, PerNode: 1, PerRegistry: 1},
		Retry:     v1alpha1.Retry{MaxAttempts: 2, Backoff: dur(time.Second), MaxBackoff: dur(2 * time.Second)},
	})
	r.policy(t, "bad", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"bad"}, Selector: selectAll()},
		Mode:      v1alpha1.ModeJob,
		Job: v1alpha1.JobSettings{Resources: &v1alpha1.Resources{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1")},
		}},
	})
	r.deployment(t, "shop", "api", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "api", Image: "registry.example.com/api:1"}}})
	r.deployment(t, "bad", "api", nil, corev1.PodSpec{Containers: []corev1.Container{{Name: "api", Image: "registry.example.com/api:1"}}})
	r.start(t, "controller-1")
	r.start(t, "controller-2")

	ppi := r.onlyImage(t, "shop", 3*time.Minute, phaseIs(v1alpha1.ImageFailed))
	byNode := map[string]v1alpha1.NodeStatus{}
	for _, n := range ppi.Status.Nodes {
		byNode[n.Node] = n
	}
	if n := byNode["worker-1"]; n.Phase != v1alpha1.NodePulled || n.Attempts != 1 {
		t.Errorf("worker-1: %+v, want Pulled on the first attempt", n)
	}
	if n := byNode["worker-2"]; n.Phase != v1alpha1.NodeFailed || n.Attempts != 2 || !strings.Contains(n.Message, pullError) {
		t.Errorf("worker-2: %+v, want Failed after 2 attempts with the pod's message", n)
	}
	if c := meta.FindStatusCondition(ppi.Status.Conditions, v1alpha1.ConditionWarm); c == nil || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, pullError) {
		t.Errorf("Warm condition %+v", c)
	}
	seen, maxLive := k.seen()
	k.mu.Lock()
	k.jobs = map[string]string{}
	k.mu.Unlock()
	want := map[string]string{
		job.Name(&ppi, "worker-1", 1): "worker-1#1",
		job.Name(&ppi, "worker-2", 1): "worker-2#1",
		job.Name(&ppi, "worker-2", 2): "worker-2#2",
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Errorf("pull Jobs seen %v, want one per node and attempt %v", seen, want)
	}
	if maxLive > 1 {
		t.Errorf("%d pull Jobs ran at once, with a cluster limit of 1", maxLive)
	}
	// The failed attempts' Jobs are deleted; the successful one stays
	// with its PrePullImage.
	testkit.Eventually(t, time.Minute, func() error {
		jobs, err := r.kube.Clientset.BatchV1().Jobs("shop").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err
		}
		var names []string
		for _, j := range jobs.Items {
			names = append(names, j.Name)
		}
		if !slices.Equal(names, []string{job.Name(&ppi, "worker-1", 1)}) {
			return fmt.Errorf("Jobs %v, want only worker-1's", names)
		}
		return nil
	})

	// The invalid policy says so and pulls nothing.
	testkit.Eventually(t, time.Minute, func() error {
		p := r.policyStatus(t, "bad")
		c := meta.FindStatusCondition(p.Status.Conditions, v1alpha1.ConditionValid)
		if c == nil || c.Status != metav1.ConditionFalse || c.Reason != v1alpha1.ReasonInvalidSpec || !strings.Contains(c.Message, "spec.job.resources.requests[cpu]") {
			return fmt.Errorf("policy bad: condition %+v", c)
		}
		return nil
	})
	if got := r.images(t, "bad"); len(got) != 0 {
		t.Errorf("an invalid policy made PrePullImages: %v", got)
	}

	// The Deployment's image changes: a PrePullImage for the new image
	// replaces the old one.
	k.mu.Lock()
	k.fail["worker-2"] = false
	k.mu.Unlock()
	d, err := r.kube.Clientset.AppsV1().Deployments("shop").Get(context.Background(), "api", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	d.Spec.Template.Spec.Containers[0].Image = "registry.example.com/api:2"
	if _, err := r.kube.Clientset.AppsV1().Deployments("shop").Update(context.Background(), d, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	next := r.onlyImage(t, "shop", 2*time.Minute, func(p *v1alpha1.PrePullImage) error {
		if p.Name == ppi.Name {
			return fmt.Errorf("still the old PrePullImage")
		}
		return phaseIs(v1alpha1.ImageCompleted)(p)
	})
	if next.Spec.Images[0].Image != "registry.example.com/api:2" {
		t.Errorf("images %+v", next.Spec.Images)
	}
	testTTL(t, r)
}

// testTTL: a Completed PrePullImage goes after its policy's TTL, and is
// not made again once its node reports the image.
func testTTL(t *testing.T, r *rig) {
	r.policy(t, "short", v1alpha1.PrePullPolicySpec{
		Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"ttl"}, Selector: selectAll()},
		Mode:      v1alpha1.ModeJob,
		TTL:       dur(3 * time.Second),
	})
	const image = "registry.example.com/ttl:1"
	r.deployment(t, "ttl", "web", nil, corev1.PodSpec{
		NodeSelector: map[string]string{"pool": "a"},
		Containers:   []corev1.Container{{Name: "web", Image: image}},
	})
	ppi := r.onlyImage(t, "ttl", 2*time.Minute, phaseIs(v1alpha1.ImageCompleted))
	if !slices.Equal(ppi.Spec.Nodes, []string{"worker-1"}) {
		t.Errorf("nodes %v, want worker-1", ppi.Spec.Nodes)
	}
	r.reportImages(t, "worker-1", image)
	testkit.Eventually(t, time.Minute, func() error {
		if got := r.images(t, "ttl"); len(got) != 0 {
			return fmt.Errorf("%d PrePullImages in ttl; the TTL is over", len(got))
		}
		return nil
	})
	// Looked at again (the deletion, resyncs), the covered workload gets none.
	deadline := time.Now().Add(3 * 2 * time.Second)
	for time.Now().Before(deadline) {
		if got := r.images(t, "ttl"); len(got) != 0 {
			t.Fatalf("a PrePullImage was made again for a workload whose node has its image: %s", got[0].Name)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
