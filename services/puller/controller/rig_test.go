package controller_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/controller"
	"github.com/weftio/weft/services/puller/job"
)

const source = "cluster"

var crdDir = filepath.Join("..", "..", "..", "deploy", "k8s", "crds")

// rig is a test control plane, an embedded NATS server, a mirror that
// writes the control plane's objects into the resources bucket and
// announces them as the watcher does, and controller replicas.
type rig struct {
	kube *kubetest.Env
	bus  *testkit.Bus
	envs []*testkit.Env
}

func newRig(t *testing.T, opts ...kubetest.Option) *rig {
	t.Helper()
	r := &rig{kube: kubetest.Start(t, opts...), bus: testkit.NATS(t)}
	r.kube.InstallCRDs(t, crdDir)
	m := &mirror{r: r, logf: t.Logf, known: map[string]string{}}
	testkit.Run(t, m.run)
	return r
}

// start runs one controller replica, its configuration changed by opts.
func (r *rig) start(t *testing.T, replica string, opts ...func(*controller.Config)) *testkit.Env {
	t.Helper()
	env := testkit.NewEnv(t, r.bus, replica)
	r.envs = append(r.envs, env)
	cfg := controller.Config{
		Source: source, HelperImage: "ghcr.io/weftio/weft:test",
		Kube: r.kube.Clientset, Dynamic: r.kube.Client,
		Resync: 2 * time.Second, SlotTTL: 3 * time.Second,
	}
	for _, o := range opts {
		o(&cfg)
	}
	testkit.Run(t, func(ctx context.Context) error { return controller.Run(ctx, env.Env, cfg) })
	return env
}

// The mirrored types: the name, resource and list options of each.
type mirrored struct {
	typ      string
	gvr      schema.GroupVersionResource
	selector string
}

var mirroredTypes = []mirrored{
	{controller.DefaultTypes.Deployments, appsv1.SchemeGroupVersion.WithResource("deployments"), ""},
	{controller.DefaultTypes.StatefulSets, appsv1.SchemeGroupVersion.WithResource("statefulsets"), ""},
	{controller.DefaultTypes.DaemonSets, appsv1.SchemeGroupVersion.WithResource("daemonsets"), ""},
	{controller.DefaultTypes.Nodes, corev1.SchemeGroupVersion.WithResource("nodes"), ""},
	{controller.DefaultTypes.Namespaces, corev1.SchemeGroupVersion.WithResource("namespaces"), ""},
	{controller.DefaultTypes.Policies, v1alpha1.PolicyResource, ""},
	{controller.DefaultTypes.Images, v1alpha1.ImageResource, ""},
	{controller.DefaultTypes.Jobs, batchv1.SchemeGroupVersion.WithResource("jobs"), job.LabelManagedBy + "=" + job.ManagedBy},
}

// mirror watches the control plane's objects, one informer per mirrored
// type, and writes each change into the resources bucket as msg.Resource
// (managedFields stripped; an object whose hash is unchanged is not
// written again), announcing each write or delete with a msg.Change
// carrying the key's revision, as the watcher does. The first write that
// fails, unless the mirror is stopping, is logged, and run returns it
// once its context ends.
type mirror struct {
	r    *rig
	logf func(format string, args ...any)
	kv   jetstream.KeyValue

	mu    sync.Mutex        // held over each put or delete
	known map[string]string // key -> hash
	err   error             // the first write that failed
}

func (m *mirror) run(ctx context.Context) error {
	kv, err := m.r.bus.JS.KeyValue(ctx, msg.BucketResources)
	if err != nil {
		return err
	}
	m.kv = kv
	var infs []cache.SharedIndexInformer
	for _, mt := range mirroredTypes {
		inf := dynamicinformer.NewFilteredDynamicInformer(m.r.kube.Client, mt.gvr, metav1.NamespaceAll, 0, cache.Indexers{},
			func(o *metav1.ListOptions) { o.LabelSelector = mt.selector }).Informer()
		if _, err := inf.AddEventHandler(m.handler(ctx, mt.typ)); err != nil {
			return err
		}
		infs = append(infs, inf)
	}
	// An informer retries its list until its type is served; each
	// returns once ctx ends and its handler calls are over.
	var wg sync.WaitGroup
	for _, inf := range infs {
		wg.Go(func() { inf.RunWithContext(ctx) })
	}
	wg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

// handler mirrors the events of typ's informer.
func (m *mirror) handler(ctx context.Context, typ string) cache.ResourceEventHandlerFuncs {
	write := func(obj any) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		key := msg.ResourceKey(source, typ, u.GetNamespace(), u.GetName())
		m.record(ctx, m.put(ctx, typ, key, *u.DeepCopy()))
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    write,
		UpdateFunc: func(_, obj any) { write(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				return
			}
			m.record(ctx, m.delete(ctx, msg.ResourceKey(source, typ, u.GetNamespace(), u.GetName())))
		},
	}
}

// record keeps err if it is the first write error and ctx is not done.
func (m *mirror) record(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = err
		m.logf("mirror: %v", err)
	}
}

// put writes item under key unless its hash is unchanged.
func (m *mirror) put(ctx context.Context, typ, key string, item unstructured.Unstructured) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	unstructured.RemoveNestedField(item.Object, "metadata", "managedFields")
	b, err := json.Marshal(item.Object)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	hash := hex.EncodeToString(sum[:])
	if m.known[key] == hash {
		return nil
	}
	value, err := msg.Encode(msg.Resource{Source: source, Type: typ, Namespace: item.GetNamespace(), Name: item.GetName(),
		ResourceVersion: item.GetResourceVersion(), Hash: hash, Object: item.Object})
	if err != nil {
		return err
	}
	rev, err := m.kv.Put(ctx, key, value)
	if err != nil {
		return err
	}
	m.known[key] = hash
	c := msg.Change{Source: source, Type: typ, Key: key, Op: msg.OpPut, Namespace: item.GetNamespace(), Name: item.GetName(),
		ResourceVersion: item.GetResourceVersion(), Hash: hash, Revision: rev, ObservedAt: time.Now().UTC()}
	_, err = bus.Publish(ctx, m.r.bus.JS, msg.ChangeSubject(source, typ), msg.ChangeID(key, rev), c)
	return err
}

// delete deletes key if it was written.
func (m *mirror) delete(ctx context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.known[key]; !ok {
		return nil
	}
	_, typ, ns, name, err := msg.ParseResourceKey(key)
	if err != nil {
		return err
	}
	del := nats.NewMsg(msg.ResourceSubject(key))
	del.Header.Set(msg.HeaderKVOperation, msg.KVOpDelete)
	ack, err := m.r.bus.JS.PublishMsg(ctx, del)
	if err != nil {
		return err
	}
	delete(m.known, key)
	c := msg.Change{Source: source, Type: typ, Key: key, Op: msg.OpDelete, Namespace: ns, Name: name, Revision: ack.Sequence, ObservedAt: time.Now().UTC()}
	_, err = bus.Publish(ctx, m.r.bus.JS, msg.ChangeSubject(source, typ), msg.ChangeID(key, ack.Sequence), c)
	return err
}

// pullInformers returns a factory of informers over weft's pull Jobs
// and pods; the informers asked of it before Start run.
func pullInformers(r *rig) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(r.kube.Clientset, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = job.LabelManagedBy + "=" + job.ManagedBy
	}))
}

// eachTick calls f at once, then every d until ctx ends.
func eachTick(ctx context.Context, d time.Duration, f func()) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		f()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// node creates a node; ready sets its Ready condition.
func (r *rig) node(t testing.TB, name string, ready bool, labels map[string]string, taints ...corev1.Taint) *corev1.Node {
	t.Helper()
	ctx := context.Background()
	n, err := r.kube.Clientset.CoreV1().Nodes().Create(ctx, &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       corev1.NodeSpec{Taints: taints},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status, LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if n, err = r.kube.Clientset.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if ready {
		// The API server taints a new node not-ready; the node lifecycle
		// controller (not running here) lifts the taint once it is Ready.
		n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == corev1.TaintNodeNotReady })
		if n, err = r.kube.Clientset.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

func (r *rig) namespace(t testing.TB, name string, labels map[string]string) {
	t.Helper()
	_, err := r.kube.Clientset.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The ServiceAccount controller does not run: make the default one.
	_, err = r.kube.Clientset.CoreV1().ServiceAccounts(name).Create(context.Background(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

// deployment creates a Deployment with the given pod spec.
func (r *rig) deployment(t testing.TB, ns, name string, labels map[string]string, spec corev1.PodSpec) *appsv1.Deployment {
	t.Helper()
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name}}, Spec: spec},
		},
	}
	d, err := r.kube.Clientset.AppsV1().Deployments(ns).Create(context.Background(), d, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// policy creates a PrePullPolicy.
func (r *rig) policy(t testing.TB, name string, spec v1alpha1.PrePullPolicySpec) {
	t.Helper()
	u, err := v1alpha1.ToUnstructured(&v1alpha1.PrePullPolicy{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.kube.Client.Resource(v1alpha1.PolicyResource).Create(context.Background(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// images lists the PrePullImages of namespace ns.
func (r *rig) images(t *testing.T, ns string) []v1alpha1.PrePullImage {
	t.Helper()
	list, err := r.kube.Client.Resource(v1alpha1.ImageResource).Namespace(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]v1alpha1.PrePullImage, len(list.Items))
	for i, item := range list.Items {
		if err := v1alpha1.FromUnstructured(item.Object, &out[i]); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// onlyImage waits for exactly one PrePullImage in ns meeting ok, and
// returns it.
func (r *rig) onlyImage(t *testing.T, ns string, timeout time.Duration, ok func(*v1alpha1.PrePullImage) error) v1alpha1.PrePullImage {
	t.Helper()
	var got v1alpha1.PrePullImage
	testkit.Eventually(t, timeout, func() error {
		list := r.images(t, ns)
		if len(list) != 1 {
			var names []string
			for _, p := range list {
				names = append(names, p.Name)
			}
			return fmt.Errorf("%d PrePullImages %v, want 1", len(list), names)
		}
		got = list[0]
		return ok(&got)
	})
	return got
}

func phaseIs(p v1alpha1.ImagePhase) func(*v1alpha1.PrePullImage) error {
	return func(ppi *v1alpha1.PrePullImage) error {
		if ppi.Status.Phase != p {
			return fmt.Errorf("phase %q, want %q; nodes %s", ppi.Status.Phase, p, nodeSummary(ppi))
		}
		return nil
	}
}

func nodeSummary(ppi *v1alpha1.PrePullImage) string {
	var out []string
	for _, n := range ppi.Status.Nodes {
		out = append(out, fmt.Sprintf("%s=%s#%d(%s)", n.Node, n.Phase, n.Attempts, n.Message))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func selectAll() *metav1.LabelSelector { return &metav1.LabelSelector{} }

func dur(d time.Duration) *metav1.Duration { return &metav1.Duration{Duration: d} }
