package agent_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/imagetest"
	"github.com/weftio/weft/services/puller/agent"
	"github.com/weftio/weft/services/puller/cri"
)

// The benchmarks run the agent on real parts: an embedded NATS server,
// Debian's containerd through its CRI socket, and a registry on loopback.
// One containerd stands in for every "node": what one node pulled is
// present for the others, so the first pulls and the presence checks are
// measured apart.

// benchParts are the parts every benchmark shares.
type benchParts struct {
	bus     *testkit.Bus
	sock    string
	runtime *cri.Client
	images  runtimeapi.ImageServiceClient // to remove images between rounds
	reg     *imagetest.ImageRegistry
	blobs   atomic.Int64 // layer and config downloads served
}

func newBenchParts(b *testing.B) *benchParts {
	b.Helper()
	p := &benchParts{sock: imagetest.Containerd(b), bus: testkit.NATS(b)}
	var err error
	if p.runtime, err = cri.Dial(p.sock); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.runtime.Close() })
	conn, err := grpc.NewClient("unix://"+p.sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	p.images = runtimeapi.NewImageServiceClient(conn)
	p.reg = imagetest.Registry(b, imagetest.WithMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
				p.blobs.Add(1)
			}
			next.ServeHTTP(w, r)
		})
	}))
	return p
}

// push pushes n images, app-<i>/web:1.
func (p *benchParts) push(b *testing.B, n int) []string {
	b.Helper()
	refs := make([]string, n)
	for i := range n {
		refs[i] = p.reg.PushPlain(b, fmt.Sprintf("app-%d/web", i), "1").Ref
	}
	return refs
}

// remove deletes the images from containerd (its CRI removes their content
// and snapshots at once), so that the next round pulls them again.
func (p *benchParts) remove(b *testing.B, refs []string) {
	b.Helper()
	for _, ref := range refs {
		if _, err := p.images.RemoveImage(context.Background(), &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: ref}}); err != nil {
			b.Fatal(err)
		}
		if _, ok, err := p.runtime.Status(context.Background(), ref); err != nil || ok {
			b.Fatalf("%s still on the runtime (%v)", ref, err)
		}
	}
}

// noSecrets reads no Secret: the benchmarks' orders name none, so a call
// is a bug the outcome shows.
type noSecrets struct{}

func (noSecrets) Secret(_ context.Context, namespace, name string) (*corev1.Secret, error) {
	return nil, fmt.Errorf("the benchmark's orders name no pull secret, yet %s/%s was asked for", namespace, name)
}

// timedRuntime is the real runtime, timing its pulls.
type timedRuntime struct {
	*cri.Client
	mu        sync.Mutex
	pulls     int
	pullTime  time.Duration
	firstCall time.Time
}

func (r *timedRuntime) Pull(ctx context.Context, ref string, auth *cri.Auth) (string, error) {
	start := time.Now()
	id, err := r.Client.Pull(ctx, ref, auth)
	took := time.Since(start)
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.firstCall.IsZero() || start.Before(r.firstCall) {
		r.firstCall = start
	}
	r.pulls++
	r.pullTime += took
	return id, err
}

func (r *timedRuntime) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pulls, r.pullTime, r.firstCall = 0, 0, time.Time{}
}

// outcomes follows every outcome published; wait returns those of a
// round once it has n.
type outcomes struct {
	mu   sync.Mutex
	seen map[string]msg.Pulled // by order id
	got  chan struct{}
}

func followOutcomes(b *testing.B, nc *nats.Conn) *outcomes {
	b.Helper()
	o := &outcomes{seen: map[string]msg.Pulled{}, got: make(chan struct{}, 1)}
	sub, err := nc.Subscribe(msg.PulledAll, func(m *nats.Msg) {
		var p msg.Pulled
		if msg.Decode(m.Data, &p) != nil {
			return
		}
		o.mu.Lock()
		o.seen[p.ID()] = p
		o.mu.Unlock()
		select {
		case o.got <- struct{}{}:
		default:
		}
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Unsubscribe() })
	return o
}

// wait returns the outcomes of orders once every one has one.
func (o *outcomes) wait(b *testing.B, orders []msg.PullOrder) []msg.Pulled {
	b.Helper()
	deadline := time.After(5 * time.Minute)
	for {
		o.mu.Lock()
		out := make([]msg.Pulled, 0, len(orders))
		for _, ord := range orders {
			if p, ok := o.seen[ord.ID()]; ok {
				out = append(out, p)
			}
		}
		o.mu.Unlock()
		if len(out) == len(orders) {
			for _, p := range out {
				if p.Outcome == msg.PullOutcomeFailed {
					b.Fatalf("pull failed: %+v", p)
				}
			}
			return out
		}
		select {
		case <-o.got:
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			b.Fatalf("%d of %d outcomes after 5 minutes", len(out), len(orders))
		}
	}
}

// orders makes one order per node and image, with a round's own UIDs.
func orders(round int, nodes []string, refs []string, limits msg.PullLimits) []msg.PullOrder {
	var out []msg.PullOrder
	for _, n := range nodes {
		for i, ref := range refs {
			out = append(out, msg.PullOrder{
				PullTarget: msg.PullTarget{Namespace: "shop", Name: "web", UID: fmt.Sprintf("r%d-%s-%d", round, n, i), Image: ref, Node: n, Attempt: 1},
				Mode:       msg.PullModeCRI, Deadline: time.Now().Add(10 * time.Minute), Limits: limits,
			})
		}
	}
	return out
}

func publishAll(b *testing.B, p *benchParts, batch []msg.PullOrder) {
	b.Helper()
	for _, o := range batch {
		if _, err := busPublish(p.bus, o); err != nil {
			b.Fatal(err)
		}
	}
}

// startAgents runs one agent per node, all on the one containerd.
func startAgents(b *testing.B, p *benchParts, rt agent.Runtime, nodes []string, parallel int) {
	b.Helper()
	for i, n := range nodes {
		env := testkit.NewEnv(b, p.bus, fmt.Sprintf("agent-%d", i))
		o := agent.Options{Node: n, Runtime: rt, Secrets: noSecrets{}, Parallel: parallel}
		testkit.Run(b, func(ctx context.Context) error { return agent.Run(ctx, env.Env, o) })
	}
}

// policyDefaults are a PrePullPolicy's default limits.
var policyDefaults = msg.PullLimits{Cluster: 10, PerNode: 2, PerRegistry: 4}

// BenchmarkWarmNodes is the time to warm 20 nodes: 20 agents with their
// own node names, on the one containerd, each given the same 3 images
// (60 orders), until every order has its outcome. The references, in the
// same run: the 3 images pulled through the CRI in a loop (what one node
// must do; no NATS), and that loop plus the presence checks of the 19
// other nodes (what 20 nodes cost on one runtime). "first pulls" removes
// the images before each round; "present" leaves them, so every order is
// answered from the runtime's ImageStatus.
func BenchmarkWarmNodes(b *testing.B) {
	p := newBenchParts(b)
	refs := p.push(b, 3)
	nodes := make([]string, 20)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%02d.bench", i)
	}
	b.Run("reference: CRI pull loop, 3 images", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			p.remove(b, refs)
			b.StartTimer()
			for _, ref := range refs {
				if _, err := p.runtime.Pull(context.Background(), ref, nil); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("reference: CRI pull loop and 19 nodes' status checks", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			p.remove(b, refs)
			b.StartTimer()
			for _, ref := range refs {
				if _, err := p.runtime.Pull(context.Background(), ref, nil); err != nil {
					b.Fatal(err)
				}
			}
			for range len(nodes) - 1 {
				for _, ref := range refs {
					if _, ok, err := p.runtime.Status(context.Background(), ref); err != nil || !ok {
						b.Fatalf("status of %s: %v %v", ref, ok, err)
					}
				}
			}
		}
	})
	rt := &timedRuntime{Client: p.runtime}
	startAgents(b, p, rt, nodes, agent.DefaultParallel)
	out := followOutcomes(b, p.bus.NC)
	round := 0
	for _, bc := range []struct {
		name   string
		remove bool
		limits msg.PullLimits
	}{
		{"20 agents, first pulls, no limits", true, msg.PullLimits{}},
		{"20 agents, first pulls, limits 10/2/4", true, policyDefaults},
		{"20 agents, present, no limits", false, msg.PullLimits{}},
		{"20 agents, present, limits 10/2/4", false, policyDefaults},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var pulled, present, pullCalls, blobs int
			var firstPulled time.Duration
			for b.Loop() {
				b.StopTimer()
				if bc.remove {
					p.remove(b, refs)
				} else {
					for _, ref := range refs {
						if _, err := p.runtime.Pull(context.Background(), ref, nil); err != nil {
							b.Fatal(err)
						}
					}
				}
				round++
				batch := orders(round, nodes, refs, bc.limits)
				rt.reset()
				blobs0 := p.blobs.Load()
				b.StartTimer()
				start := time.Now()
				publishAll(b, p, batch)
				res := out.wait(b, batch)
				b.StopTimer()
				// When every image was on the node (each image's first
				// "pulled" outcome, the last of the three).
				firsts := map[string]time.Time{}
				for _, r := range res {
					switch r.Outcome {
					case msg.PullOutcomePulled:
						pulled++
						if f, ok := firsts[r.Image]; !ok || r.At.Before(f) {
							firsts[r.Image] = r.At
						}
					case msg.PullOutcomePresent:
						present++
					}
				}
				var last time.Time
				for _, f := range firsts {
					if f.After(last) {
						last = f
					}
				}
				if !last.IsZero() {
					firstPulled += last.Sub(start)
				}
				rt.mu.Lock()
				pullCalls += rt.pulls
				rt.mu.Unlock()
				blobs += int(p.blobs.Load() - blobs0)
				b.StartTimer()
			}
			n := float64(b.N)
			b.ReportMetric(float64(pulled)/n, "pulled/op")
			b.ReportMetric(float64(present)/n, "present/op")
			b.ReportMetric(float64(pullCalls)/n, "PullImage/op")
			b.ReportMetric(float64(blobs)/n, "blobs/op")
			if bc.remove {
				b.ReportMetric(float64(firstPulled.Milliseconds())/n, "ms-all-3-on-runtime/op")
			}
		})
	}
}

// BenchmarkAgentOverhead is the agent's own cost per order: N orders of
// distinct images queued at once for one agent that carries them out one
// at a time (Parallel 1), timed from the first publication to the last
// outcome, less the time spent inside the runtime's PullImage. The
// reference, in the same run, is the bare CRI PullImage loop over the same
// images. first-call-ms is from publishing the first order to the first
// PullImage call.
func BenchmarkAgentOverhead(b *testing.B) {
	p := newBenchParts(b)
	refs := p.push(b, 200)
	const node = "node-00.bench"
	rt := &timedRuntime{Client: p.runtime}
	startAgents(b, p, rt, []string{node}, 1)
	out := followOutcomes(b, p.bus.NC)
	round := 0
	for _, n := range []int{20, 200} {
		refs := refs[:n]
		b.Run(fmt.Sprintf("queued=%d/reference: CRI pull loop", n), func(b *testing.B) {
			var pull time.Duration
			for b.Loop() {
				b.StopTimer()
				p.remove(b, refs)
				b.StartTimer()
				start := time.Now()
				for _, ref := range refs {
					if _, err := p.runtime.Pull(context.Background(), ref, nil); err != nil {
						b.Fatal(err)
					}
				}
				pull += time.Since(start)
			}
			b.ReportMetric(float64(pull.Microseconds())/1000/float64(b.N*n), "ms-per-pull")
		})
		for _, lc := range []struct {
			name   string
			limits msg.PullLimits
		}{{"no limits", msg.PullLimits{}}, {"limits 10/2/4", policyDefaults}} {
			b.Run(fmt.Sprintf("queued=%d/agent, %s", n, lc.name), func(b *testing.B) {
				var wall, pull, first time.Duration
				for b.Loop() {
					b.StopTimer()
					p.remove(b, refs)
					round++
					batch := orders(round, []string{node}, refs, lc.limits)
					rt.reset()
					b.StartTimer()
					start := time.Now()
					publishAll(b, p, batch)
					res := out.wait(b, batch)
					wall += time.Since(start)
					b.StopTimer()
					for _, r := range res {
						if r.Outcome != msg.PullOutcomePulled {
							b.Fatalf("outcome %+v, want pulled", r)
						}
					}
					rt.mu.Lock()
					if rt.pulls != n {
						b.Fatalf("%d PullImage calls, want %d", rt.pulls, n)
					}
					pull += rt.pullTime
					first += rt.firstCall.Sub(start)
					rt.mu.Unlock()
					b.StartTimer()
				}
				per := float64(b.N * n)
				b.ReportMetric(float64(wall.Microseconds())/1000/per, "ms-per-order")
				b.ReportMetric(float64(pull.Microseconds())/1000/per, "ms-per-pull")
				b.ReportMetric(float64((wall-pull).Microseconds())/1000/per, "overhead-ms-per-order")
				b.ReportMetric(float64(first.Microseconds())/1000/float64(b.N), "first-call-ms")
			})
		}
	}
}
