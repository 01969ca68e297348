package controller_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/api/v1alpha1"
	"github.com/weftio/weft/services/puller/controller"
	"github.com/weftio/weft/services/puller/workload"
)

// BenchmarkSchedulingOverhead measures the puller's scheduling overhead
// per pull on a real kube-apiserver and an embedded NATS server: a
// Deployment selected by a cri-mode PrePullPolicy, N Ready nodes, and each
// round changes the Deployment's image through the API and ends when every
// node's pull order for the new image is on the WEFT_PULLS work queue (the
// moment an agent could start pulling; no agent runs, so no pull is
// timed). The path is the API change, the mirror (watches, standing in for
// the watcher), the change message, the controller's look at the workload
// (the PrePullImage created, the superseded one deleted), the
// PrePullImage's change message, and the controller's look at the
// PrePullImage (its status claiming the attempts, then one order per
// node).
//
// Metrics: ms/change (a round), ms/pull (a round over the nodes), the
// split (ms-to-change: the Deployment's change message; ms-to-ppi: the
// PrePullImage created, seen by a watch on the API server; ms-to-ppi-change:
// its change message; ms-to-first-order), and the reference measured in
// the same run: ref-ms/change, the N orders alone published one after
// another with bus.Publish to the same stream (what the controller's last
// step cannot go below), and x-publish, a round over that reference.
// Between rounds (timer stopped) the superseded PrePullImage is finalized
// and the controller's consumer drained, so rounds do not overlap.
func BenchmarkSchedulingOverhead(b *testing.B) {
	r := newBenchRig(b)
	for _, nodes := range []int{20, 200} {
		r.addNodes(b, nodes)
		for _, replicas := range []int{1, 2} {
			b.Run(fmt.Sprintf("nodes=%d/replicas=%d", nodes, replicas), func(b *testing.B) {
				r.measure(b, nodes, replicas)
			})
		}
	}
}

const benchNamespace = "bench"

// benchRig is the rig's control plane and NATS server with a mirror
// driven by watches, one Deployment selected by a cri-mode policy, the
// nodes, and a probe timing each round.
type benchRig struct {
	*rig
	deploy *appsv1.Deployment
	nodes  int
	image  int // images made so far: the last one's tag
	probe  *probe
}

func newBenchRig(b *testing.B) *benchRig {
	b.Helper()
	r := &benchRig{rig: &rig{kube: kubetest.Start(b), bus: testkit.NATS(b)}}
	r.kube.InstallCRDs(b, crdDir)
	m := &mirror{r: r.rig, logf: b.Logf, known: map[string]string{}}
	testkit.Run(b, m.run)
	r.probe = newProbe(b, r.rig)
	r.namespace(b, benchNamespace, nil)
	r.policy(b, "bench", v1alpha1.PrePullPolicySpec{Mode: v1alpha1.ModeCRI, Workloads: v1alpha1.WorkloadSelector{
		Namespaces: []string{benchNamespace}, Selector: selectAll(),
	}})
	r.deploy = r.deployment(b, benchNamespace, "web", nil, corev1.PodSpec{
		Containers: []corev1.Container{{Name: "web", Image: r.nextImage()}},
	})
	return r
}

func (r *benchRig) nextImage() string {
	r.image++
	return fmt.Sprintf("registry.example.com/bench/web:%d", r.image)
}

func benchNode(i int) string { return fmt.Sprintf("node-%03d", i) }

// addNodes makes the cluster n Ready nodes.
func (r *benchRig) addNodes(b *testing.B, n int) {
	b.Helper()
	for ; r.nodes < n; r.nodes++ {
		r.node(b, benchNode(r.nodes), true, nil)
	}
}

// controllers runs replicas controller replicas, logging at Info as in
// production; stop stops them.
func (r *benchRig) controllers(b *testing.B, replicas int) (stop func()) {
	b.Helper()
	var stops []func()
	for i := range replicas {
		env := testkit.NewEnv(b, r.bus, fmt.Sprintf("controller-%d", i+1))
		env.Log = telemetry.NewLogger(io.Discard, slog.LevelInfo)
		cfg := controller.Config{
			Source: source, HelperImage: "ghcr.io/weftio/weft:test",
			Kube: r.kube.Clientset, Dynamic: r.kube.Client,
			Resync: time.Hour, // no resync inside the rounds
		}
		stops = append(stops, testkit.Run(b, func(ctx context.Context) error { return controller.Run(ctx, env.Env, cfg) }))
	}
	return func() {
		for _, s := range stops {
			s()
		}
	}
}

// measure runs b.N rounds on nodes nodes with replicas controller
// replicas and reports their times and the reference's.
func (r *benchRig) measure(b *testing.B, nodes, replicas int) {
	defer r.controllers(b, replicas)()
	// An untimed round first: the replicas are up and their start-up
	// resync is over.
	r.quiesce(b, r.round(b, nodes).ppi)
	refs := make([]time.Duration, 3)
	for i := range refs {
		refs[i] = r.publishOrders(b, nodes)
	}
	slices.Sort(refs)
	ref := refs[1]

	var sum roundTimes
	b.ResetTimer()
	for range b.N {
		t := r.round(b, nodes)
		b.StopTimer()
		sum.add(t)
		r.quiesce(b, t.ppi)
		b.StartTimer()
	}
	n := float64(b.N)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / n }
	b.ReportMetric(ms(sum.total), "ms/change")
	b.ReportMetric(ms(sum.total)/float64(nodes), "ms/pull")
	b.ReportMetric(ms(sum.change), "ms-to-change")
	b.ReportMetric(ms(sum.created), "ms-to-ppi")
	b.ReportMetric(ms(sum.announced), "ms-to-ppi-change")
	b.ReportMetric(ms(sum.first), "ms-to-first-order")
	b.ReportMetric(float64(ref)/float64(time.Millisecond), "ref-ms/change")
	b.ReportMetric(float64(sum.total)/n/float64(ref), "x-publish")
}

// roundTimes are a round's times from the API change: to the Deployment's
// change message, to the PrePullImage created and its change message, to
// the first and the last order.
type roundTimes struct {
	ppi                                      string
	change, created, announced, first, total time.Duration
}

func (s *roundTimes) add(t roundTimes) {
	s.change += t.change
	s.created += t.created
	s.announced += t.announced
	s.first += t.first
	s.total += t.total
}

// round changes the Deployment's image and waits until every node's
// order for it is on the work queue.
func (r *benchRig) round(b *testing.B, nodes int) roundTimes {
	b.Helper()
	image := r.nextImage()
	done := r.probe.expect(image, nodes)
	ctx := context.Background()
	start := time.Now()
	for {
		d := r.deploy.DeepCopy()
		d.Spec.Template.Spec.Containers[0].Image = image
		updated, err := r.kube.Clientset.AppsV1().Deployments(benchNamespace).Update(ctx, d, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if r.deploy, err = r.kube.Clientset.AppsV1().Deployments(benchNamespace).Get(ctx, "web", metav1.GetOptions{}); err != nil {
				b.Fatal(err)
			}
			continue
		}
		if err != nil {
			b.Fatal(err)
		}
		r.deploy = updated
		break
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		b.Fatalf("orders of %s for %d of %d nodes after 2 minutes", image, r.probe.ordered(), nodes)
	}
	ppi := workload.Name(&workload.Workload{Kind: "Deployment", Name: "web"},
		workload.ImageSetHash(v1alpha1.ContainerImages(&r.deploy.Spec.Template.Spec)))
	return r.probe.times(b, start, r.deploy.ResourceVersion, ppi)
}

// quiesce waits until ppi is the only PrePullImage (the superseded one is
// finalized and gone) and the controller's consumer has had nothing to
// do for 200 ms.
func (r *benchRig) quiesce(b *testing.B, ppi string) {
	b.Helper()
	ctx := context.Background()
	var idleSince time.Time
	testkit.Eventually(b, 2*time.Minute, func() error {
		list, err := r.kube.Client.Resource(v1alpha1.ImageResource).Namespace(benchNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return err
		}
		if len(list.Items) != 1 || list.Items[0].GetName() != ppi {
			idleSince = time.Time{}
			return fmt.Errorf("%d PrePullImages, want only %s", len(list.Items), ppi)
		}
		cons, err := r.bus.JS.Consumer(ctx, msg.StreamChanges, controller.ChangesConsumer)
		if err != nil {
			return err
		}
		info, err := cons.Info(ctx)
		if err != nil {
			return err
		}
		if info.NumPending > 0 || info.NumAckPending > 0 {
			idleSince = time.Time{}
			return fmt.Errorf("the controller's consumer has %d pending, %d unacknowledged", info.NumPending, info.NumAckPending)
		}
		if idleSince.IsZero() {
			idleSince = time.Now()
		}
		if time.Since(idleSince) < 200*time.Millisecond {
			return fmt.Errorf("idle for %v", time.Since(idleSince))
		}
		return nil
	})
}

// publishOrders is the reference: one order per node, as the controller
// makes them, published one after another to the same stream.
func (r *benchRig) publishOrders(b *testing.B, nodes int) time.Duration {
	b.Helper()
	ctx := context.Background()
	image := r.nextImage() + "-reference"
	start := time.Now()
	for i := range nodes {
		o := msg.PullOrder{
			PullTarget: msg.PullTarget{Namespace: benchNamespace, Name: "reference", UID: "reference", Image: image, Node: benchNode(i), Attempt: 1},
			Mode:       msg.PullModeCRI, Deadline: time.Now().Add(10 * time.Minute).UTC(),
			Limits: msg.PullLimits{Cluster: 10, PerNode: 2, PerRegistry: 4},
		}
		if _, err := bus.Publish(ctx, r.bus.JS, msg.PullSubject(o.Node), o.ID(), o); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// probe notes when each stage of a round is seen: the Deployment's change
// messages (by resourceVersion), PrePullImages created (a watch on the API
// server) and announced (their first change message), and the orders of
// the round's image (every node's, counted once).
type probe struct {
	mu        sync.Mutex
	changes   map[string]time.Time // Deployment change messages by resourceVersion
	created   map[string]time.Time // PrePullImages by name
	announced map[string]time.Time // PrePullImages' first change message by name
	image     string
	want      int
	nodes     map[string]bool
	first     time.Time
	last      time.Time
	done      chan struct{}
}

func newProbe(b *testing.B, r *rig) *probe {
	b.Helper()
	p := &probe{changes: map[string]time.Time{}, created: map[string]time.Time{}, announced: map[string]time.Time{}}
	subscribe := func(subject string, f func(now time.Time, data []byte)) {
		sub, err := r.bus.NC.Subscribe(subject, func(m *nats.Msg) { f(time.Now(), m.Data) })
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = sub.Unsubscribe() })
	}
	subscribe(msg.ChangeSubject(source, controller.DefaultTypes.Deployments), func(now time.Time, data []byte) {
		var ch msg.Change
		if msg.Decode(data, &ch) != nil || ch.Name != "web" {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, ok := p.changes[ch.ResourceVersion]; !ok {
			p.changes[ch.ResourceVersion] = now
		}
	})
	subscribe(msg.ChangeSubject(source, controller.DefaultTypes.Images), func(now time.Time, data []byte) {
		var ch msg.Change
		if msg.Decode(data, &ch) != nil || ch.Op != msg.OpPut {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if _, ok := p.announced[ch.Name]; !ok {
			p.announced[ch.Name] = now
		}
	})
	subscribe(msg.PullAll, func(now time.Time, data []byte) {
		var o msg.PullOrder
		if msg.Decode(data, &o) != nil {
			return
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		if o.Image != p.image || p.nodes[o.Node] || p.done == nil {
			return
		}
		if o.Attempt != 1 || o.Mode != msg.PullModeCRI {
			return // not the round's first attempt: ordered() shows it missing
		}
		p.nodes[o.Node] = true
		if p.first.IsZero() {
			p.first = now
		}
		if len(p.nodes) == p.want {
			p.last = now
			close(p.done)
			p.done = nil
		}
	})
	testkit.Run(b, func(ctx context.Context) error {
		for ctx.Err() == nil {
			w, err := r.kube.Client.Resource(v1alpha1.ImageResource).Namespace(benchNamespace).Watch(ctx, metav1.ListOptions{})
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for ev := range w.ResultChan() {
				u, ok := ev.Object.(*unstructured.Unstructured)
				if ev.Type != watch.Added || !ok {
					continue
				}
				p.mu.Lock()
				if _, seen := p.created[u.GetName()]; !seen {
					p.created[u.GetName()] = time.Now()
				}
				p.mu.Unlock()
			}
			w.Stop()
		}
		return nil
	})
	return p
}

// expect starts a round: done is closed once want nodes have an order for
// image.
func (p *probe) expect(image string, want int) (done <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ch := make(chan struct{})
	p.image, p.want, p.nodes, p.done = image, want, map[string]bool{}, ch
	p.first, p.last = time.Time{}, time.Time{}
	return ch
}

func (p *probe) ordered() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.nodes)
}

// times are the round's stages from start; a stage never seen fails the
// benchmark (the path did not go as measured).
func (p *probe) times(b *testing.B, start time.Time, rv, ppi string) roundTimes {
	b.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	var missing []string
	stage := func(name string, at time.Time, ok bool) time.Duration {
		if !ok || at.Before(start) {
			missing = append(missing, name)
		}
		return at.Sub(start)
	}
	change, ok := p.changes[rv]
	t := roundTimes{ppi: ppi, total: p.last.Sub(start), first: p.first.Sub(start)}
	t.change = stage("the Deployment's change message (resourceVersion "+rv+")", change, ok)
	created, ok := p.created[ppi]
	t.created = stage("PrePullImage "+ppi+" created", created, ok)
	announced, ok := p.announced[ppi]
	t.announced = stage("PrePullImage "+ppi+"'s change message", announced, ok)
	if len(missing) > 0 {
		var seen []string
		for name := range p.created {
			seen = append(seen, name)
		}
		sort.Strings(seen)
		b.Fatalf("not seen: %s (PrePullImages created: %s)", strings.Join(missing, "; "), strings.Join(seen, ", "))
	}
	return t
}
