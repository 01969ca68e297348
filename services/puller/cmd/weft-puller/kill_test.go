package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/job"
	"github.com/weftio/weft/services/puller/workload"
)

// The workload of TestControllerReplicasKilled: by default 6
// Deployments, each pulled onto 8 nodes (48 pulls); with -kill-full, 10
// Deployments onto 20 nodes (200 pulls). Their images are on two
// registry hosts.
const (
	killCluster, killPerNode, killPerRegistry = 4, 2, 3
	killReplicas                              = 3
)

var killFull = flag.Bool("kill-full", false, "TestControllerReplicasKilled: 200 pulls (10 Deployments over 20 nodes) instead of 48")

// killSize is the number of nodes and of Deployments of the kill test.
func killSize() (nodes, workloads int) {
	if *killFull {
		return 20, 10
	}
	return 8, 6
}

// TestControllerReplicasKilled: 3 `weft-puller controller` processes,
// each on its own node of a 3-node NATS cluster, with the real watcher,
// a real kube-apiserver and the job controller, carry out 48 pulls (200
// with -kill-full) in mode job (6 Deployments over 8 nodes, or 10 over
// 20, images of two registry hosts,
// limits 4 in the cluster, 2 per node, 3 per registry host) while the
// test SIGKILLs replicas at random moments, once two at a time, and
// starts them again. A kubelet of the test runs each pull pod for 0.1 to
// 1 s; a sampler counts the pods not finished every 50 ms, in the
// cluster, per node and per registry host: no count may ever exceed its
// limit, every PrePullImage ends Completed with every node Pulled, and
// once done no slot stays held.
func TestControllerReplicasKilled(t *testing.T) {
	killNodes, killWorkloads := killSize()
	puller := testkit.GoBuild(t, "github.com/weftio/weft/services/puller/cmd/weft-puller")
	watcher := testkit.GoBuild(t, "github.com/weftio/weft/services/watcher/cmd/weft-watcher")
	kube := kubetest.Start(t, kubetest.WithControllerManager())
	kube.InstallCRDs(t, filepath.Join("..", "..", "..", "..", "deploy", "k8s", "crds"))
	nc := testkit.NATSCluster(t)
	b := nc.Bus(t, -1)
	nc.Provision(t, b)
	cfg := filepath.Join(t.TempDir(), "weft.yaml")
	// A short slot TTL: slots that no replica keeps come back within the
	// life of a pull pod. The resync, longer than it, is not what keeps
	// them.
	err := os.WriteFile(cfg, fmt.Appendf(nil, `sources:
  - name: cluster
    type: kubernetes
    kubeconfig: %s
puller:
  source: cluster
  helper_image: ghcr.io/weftio/weft:test
  resync: 10s
  slot_ttl: 3s
`, kube.Kubeconfig), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cs := kube.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range killNodes {
		kube.ReadyNode(t, fmt.Sprintf("node-%02d", i), nil)
	}
	policy, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"},
		Spec: v1alpha1.PrePullPolicySpec{
			Workloads: v1alpha1.WorkloadSelector{Namespaces: []string{"shop"}, Selector: &metav1.LabelSelector{}},
			Mode:      v1alpha1.ModeJob,
			Limits:    v1alpha1.Limits{Cluster: killCluster, PerNode: killPerNode, PerRegistry: killPerRegistry},
			Retry:     v1alpha1.Retry{MaxAttempts: 5, Backoff: &metav1.Duration{Duration: time.Second}, MaxBackoff: &metav1.Duration{Duration: 2 * time.Second}},
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kube.Client.Resource(v1alpha1.PolicyResource).Create(ctx, &unstructured.Unstructured{Object: policy}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for i := range killWorkloads {
		// Even workloads pull from r0, odd ones from r1; the first also
		// has an init container from r1, so its pulls hold both hosts.
		spec := corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: fmt.Sprintf("r%d.example.com/app-%d:1", i%2, i)}}}
		if i == 0 {
			spec.InitContainers = []corev1.Container{{Name: "init", Image: "r1.example.com/init:1"}}
		}
		kube.Deployment(t, "shop", fmt.Sprintf("app-%d", i), nil, spec)
	}

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	k := &podKubelet{cs: cs, rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 2)), finishAt: map[string]time.Time{}}
	s := &podSampler{cs: cs, max: map[string]int{}}
	var wg sync.WaitGroup
	wg.Go(func() { k.run(runCtx) })
	wg.Go(func() { s.run(runCtx) })
	defer wg.Wait()
	defer stop()

	testkit.StartProcess(t, watcher, "--config", cfg, "--nats-url", nc.URL(), "--replicas", "3", "--listen", testkit.FreeAddr(t))
	replica := func(i int) *testkit.Process {
		return testkit.StartProcess(t, puller, "controller", "--config", cfg, "--nats-url", nc.URLs()[i],
			"--replicas", "3", "--listen", testkit.FreeAddr(t))
	}
	procs := make([]*testkit.Process, killReplicas)
	for i := range procs {
		procs[i] = replica(i)
	}

	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	began := time.Now()
	kills, doubles := 0, 0
	var done error
	for {
		done = allPulled(ctx, kube)
		if done == nil {
			break
		}
		if time.Since(began) > 6*time.Minute {
			break
		}
		for i, p := range procs {
			if exited, err := p.Exited(); exited {
				t.Fatalf("controller replica %d exited by itself: %v\n%s", i, err, p.Output())
			}
		}
		time.Sleep(3*time.Second + time.Duration(rng.Int64N(int64(4*time.Second))))
		// The third kill, and then about one in four, takes two
		// replicas down together.
		victims := []int{rng.IntN(killReplicas)}
		if kills == 2 || rng.IntN(4) == 0 {
			victims = append(victims, (victims[0]+1+rng.IntN(killReplicas-1))%killReplicas)
			doubles++
		}
		for _, i := range victims {
			procs[i].Kill(t)
			kills++
		}
		time.Sleep(500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond))))
		for _, i := range victims {
			procs[i] = replica(i)
		}
	}
	elapsed := time.Since(began)
	stop()
	wg.Wait()
	maxes, violations := s.result()
	t.Logf("%v: %d replica kills (%d of two at once); most pods running at once: cluster %d (limit %d), a node %d (limit %d), a registry host %d (limit %d); %d samples",
		elapsed.Round(time.Second), kills, doubles, maxes["cluster"], killCluster, maxes["node"], killPerNode, maxes["registry"], killPerRegistry, s.samples)
	for _, v := range violations {
		t.Error(v)
	}
	if done != nil {
		t.Fatalf("not every pull done after %v: %v", elapsed.Round(time.Second), done)
	}
	minKills := 4
	if *killFull {
		minKills = 6
	}
	if kills < minKills || doubles < 1 {
		t.Fatalf("%d kills, %d of two replicas at once, during the pulls: the test killed too little", kills, doubles)
	}
	if maxes["cluster"] < killCluster && maxes["node"] < killPerNode && maxes["registry"] < killPerRegistry {
		t.Errorf("no limit was ever reached: the test saw no contention")
	}
	// Every Job ended and was seen to: no slot stays held (a slot of a
	// finished Job renewed forever would keep others waiting).
	leases, err := b.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		keys, err := slotKeys(ctx, leases)
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			return fmt.Errorf("slots still held after every pull ended: %v", keys)
		}
		return nil
	})
}

// allPulled is nil once every workload's PrePullImage is Completed with
// every node Pulled, else what is missing.
func allPulled(ctx context.Context, kube *kubetest.Env) error {
	killNodes, killWorkloads := killSize()
	list, err := kube.Client.Resource(v1alpha1.ImageResource).Namespace("shop").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	var missing []string
	if len(list.Items) != killWorkloads {
		missing = append(missing, fmt.Sprintf("%d PrePullImages, want %d", len(list.Items), killWorkloads))
	}
	for _, item := range list.Items {
		var ppi v1alpha1.PrePullImage
		if err := v1alpha1.FromUnstructured(item.Object, &ppi); err != nil {
			return err
		}
		pulled := 0
		var others []string
		for _, n := range ppi.Status.Nodes {
			if n.Phase == v1alpha1.NodePulled {
				pulled++
			} else {
				others = append(others, fmt.Sprintf("%s=%s#%d(%s)", n.Node, n.Phase, n.Attempts, n.Message))
			}
		}
		if ppi.Status.Phase != v1alpha1.ImageCompleted || pulled != killNodes || len(ppi.Spec.Nodes) != killNodes {
			missing = append(missing, fmt.Sprintf("%s: %s, %d of %d nodes pulled %v", ppi.Name, ppi.Status.Phase, pulled, len(ppi.Spec.Nodes), others))
		}
	}
	if len(missing) > 0 {
		return errors.New(strings.Join(missing, "; "))
	}
	return nil
}

// slotKeys lists the slot keys of the leases bucket.
func slotKeys(ctx context.Context, leases jetstream.KeyValue) ([]string, error) {
	lister, err := leases.ListKeysFiltered(ctx, msg.SlotKeyPrefix+">")
	if err != nil {
		return nil, err
	}
	var keys []string
	for k := range lister.Keys() {
		keys = append(keys, k)
	}
	_ = lister.Stop()
	return keys, nil
}

// pullPods lists weft's pull pods.
func pullPods(ctx context.Context, cs kubernetes.Interface) ([]corev1.Pod, error) {
	pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: job.LabelManagedBy + "=" + job.ManagedBy})
	if err != nil {
		return nil, err
	}
	return pods.Items, nil
}

func podFinished(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
}

// podKubelet plays the nodes' kubelets for pull pods: a new pod is marked
// Running, then Succeeded 0.1 to 1 s later. It knows nothing of limits.
type podKubelet struct {
	cs       kubernetes.Interface
	rng      *rand.Rand
	finishAt map[string]time.Time // by pod UID
}

func (k *podKubelet) run(ctx context.Context) {
	for ctx.Err() == nil {
		pods, err := pullPods(ctx, k.cs)
		if err == nil {
			for i := range pods {
				k.step(ctx, &pods[i])
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (k *podKubelet) step(ctx context.Context, pod *corev1.Pod) {
	if podFinished(pod) {
		delete(k.finishAt, string(pod.UID))
		return
	}
	at, ok := k.finishAt[string(pod.UID)]
	var state corev1.ContainerState
	switch {
	case !ok || pod.Status.Phase != corev1.PodRunning:
		if !ok {
			at = time.Now().Add(100*time.Millisecond + time.Duration(k.rng.Int64N(int64(900*time.Millisecond))))
		}
		pod.Status.Phase = corev1.PodRunning
		state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}
	case time.Now().After(at):
		pod.Status.Phase = corev1.PodSucceeded
		state = corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0, Reason: "Completed"}}
	default:
		return
	}
	pod.Status.ContainerStatuses = nil
	for _, c := range pod.Spec.Containers {
		pod.Status.ContainerStatuses = append(pod.Status.ContainerStatuses, corev1.ContainerStatus{Name: c.Name, Image: c.Image, State: state})
	}
	if _, err := k.cs.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err == nil {
		k.finishAt[string(pod.UID)] = at
	}
}

// podSampler lists the pull pods every 50 ms and counts those not
// finished, in the cluster, per node and per registry host, recording the
// most seen and every count above its limit.
type podSampler struct {
	cs kubernetes.Interface

	mu         sync.Mutex
	samples    int
	max        map[string]int // cluster, node, registry: the most seen in one scope
	violations []string
}

func (s *podSampler) run(ctx context.Context) {
	for ctx.Err() == nil {
		if pods, err := pullPods(ctx, s.cs); err == nil {
			s.sample(pods)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (s *podSampler) sample(pods []corev1.Pod) {
	cluster := 0
	nodes, registries := map[string][]string{}, map[string][]string{}
	for i := range pods {
		p := &pods[i]
		if podFinished(p) {
			continue
		}
		cluster++
		nodes[p.Annotations[job.AnnotationNode]] = append(nodes[p.Annotations[job.AnnotationNode]], p.Name)
		hosts := map[string]bool{}
		for _, im := range strings.Split(p.Annotations[job.AnnotationImages], ",") {
			if h := workload.RegistryHost(im); h != "" && !hosts[h] {
				hosts[h] = true
				registries[h] = append(registries[h], p.Name)
			}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.samples++
	at := time.Now().Format("15:04:05.000")
	s.max["cluster"] = max(s.max["cluster"], cluster)
	if cluster > killCluster {
		s.violations = append(s.violations, fmt.Sprintf("%s: %d pull pods running in the cluster, limit %d", at, cluster, killCluster))
	}
	check := func(kind string, limit int, by map[string][]string) {
		for _, scope := range slices.Sorted(maps.Keys(by)) {
			n := len(by[scope])
			s.max[kind] = max(s.max[kind], n)
			if n > limit {
				names := slices.Clone(by[scope])
				sort.Strings(names)
				s.violations = append(s.violations, fmt.Sprintf("%s: %d pull pods running on %s %s, limit %d: %v", at, n, kind, scope, limit, names))
			}
		}
	}
	check("node", killPerNode, nodes)
	check("registry", killPerRegistry, registries)
}

func (s *podSampler) result() (map[string]int, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.max), slices.Clone(s.violations)
}
