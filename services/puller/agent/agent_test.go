package agent_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/imagetest"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/agent"
	"github.com/weftio/weft/services/puller/cri"
)

// node has dots, as most node names do: its subject, consumer and status
// keys must escape them.
const node = "node-a.zone-1.example"

// rig is one agent on real parts: embedded NATS, containerd with its CRI
// plugin, a kube-apiserver holding the pull secrets, and two registries
// on loopback, one of them private.
type rig struct {
	bus      *testkit.Bus
	env      *testkit.Env
	runtime  *cri.Client
	kube     *kubetest.Env
	open     *imagetest.ImageRegistry
	private  *imagetest.ImageRegistry
	uid      atomic.Int64
	password string
}

func newRig(t *testing.T, opts ...func(*agent.Options)) *rig {
	t.Helper()
	b := testkit.NATS(t)
	return newRigOn(t, b, b, opts...)
}

// newRigOn is newRig with the agent on its own connection, agentBus, and
// the test's orders and reads on b.
func newRigOn(t *testing.T, b, agentBus *testkit.Bus, opts ...func(*agent.Options)) *rig {
	t.Helper()
	r := &rig{password: "s3cret-Pa55"}
	sock := imagetest.Containerd(t)
	r.kube = kubetest.Start(t)
	r.bus = b
	r.env = testkit.NewEnv(t, agentBus, "agent-1")
	var err error
	if r.runtime, err = cri.Dial(sock); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.runtime.Close() })
	r.open = imagetest.Registry(t)
	r.private = imagetest.Registry(t, imagetest.WithBasicAuth("puller", r.password))
	ctx := context.Background()
	if _, err := r.kube.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := agent.Options{Node: node, Runtime: r.runtime, Secrets: agent.KubeSecrets{Client: r.kube.Clientset}, AckWait: 2 * time.Second}
	for _, f := range opts {
		f(&o)
	}
	testkit.Run(t, func(ctx context.Context) error { return agent.Run(ctx, r.env.Env, o) })
	return r
}

// secret creates a pull secret for the private registry in shop, in the
// dockerconfigjson or the older dockercfg format.
func (r *rig) secret(t *testing.T, name string, typ corev1.SecretType) {
	t.Helper()
	auth := base64.StdEncoding.EncodeToString([]byte("puller:" + r.password))
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Type: typ}
	switch typ {
	case corev1.SecretTypeDockerConfigJson:
		s.Data = map[string][]byte{corev1.DockerConfigJsonKey: fmt.Appendf(nil, `{"auths":{%q:{"auth":%q}}}`, r.private.Host, auth)}
	case corev1.SecretTypeDockercfg:
		s.Data = map[string][]byte{corev1.DockerConfigKey: fmt.Appendf(nil, `{%q:{"username":"puller","password":%q}}`, "http://"+r.private.Host, r.password)}
	}
	if _, err := r.kube.Clientset.CoreV1().Secrets("shop").Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// order publishes an order to pull image onto the node for a PrePullImage
// of its own, and returns it.
func (r *rig) order(t *testing.T, image string, deadline time.Duration, secrets ...string) msg.PullOrder {
	t.Helper()
	return r.orderWith(t, image, deadline, msg.PullLimits{}, secrets...)
}

// orderWith is order with limits.
func (r *rig) orderWith(t *testing.T, image string, deadline time.Duration, limits msg.PullLimits, secrets ...string) msg.PullOrder {
	t.Helper()
	o := msg.PullOrder{
		PullTarget: msg.PullTarget{Namespace: "shop", Name: "web", UID: fmt.Sprintf("uid-%d", r.uid.Add(1)), Image: image, Node: node, Attempt: 1},
		Mode:       msg.PullModeCRI, Deadline: time.Now().Add(deadline), Limits: limits,
	}
	for _, s := range secrets {
		o.PullSecrets = append(o.PullSecrets, msg.SecretRef{Namespace: "shop", Name: s})
	}
	r.publish(t, o, o.ID())
	return o
}

func (r *rig) publish(t *testing.T, o msg.PullOrder, id string) {
	t.Helper()
	if _, err := bus.Publish(context.Background(), r.bus.JS, msg.PullSubject(node), id, o); err != nil {
		t.Fatal(err)
	}
}

// busPublish publishes o on its node's subject with its id.
func busPublish(b *testkit.Bus, o msg.PullOrder) (*jetstream.PubAck, error) {
	return bus.Publish(context.Background(), b.JS, msg.PullSubject(o.Node), o.ID(), o)
}

// pulled waits for the outcome of o on the node's outcome subject.
func (r *rig) pulled(t *testing.T, o msg.PullOrder) msg.Pulled {
	t.Helper()
	var out msg.Pulled
	testkit.Eventually(t, time.Minute, func() error {
		ps, err := r.outcomes(o)
		if err != nil {
			return err
		}
		if len(ps) == 0 {
			return fmt.Errorf("no outcome of %s yet", o.ID())
		}
		out = ps[0]
		return nil
	})
	return out
}

// outcomes lists every outcome of o stored so far.
func (r *rig) outcomes(o msg.PullOrder) ([]msg.Pulled, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := r.bus.JS.OrderedConsumer(ctx, msg.StreamPulled, jetstream.OrderedConsumerConfig{FilterSubjects: []string{msg.PulledSubject(node)}})
	if err != nil {
		return nil, err
	}
	info, err := c.Info(ctx)
	if err != nil {
		return nil, err
	}
	var out []msg.Pulled
	for n := info.NumPending; n > 0; {
		batch, err := c.Fetch(int(n), jetstream.FetchMaxWait(2*time.Second))
		if err != nil {
			return nil, err
		}
		for m := range batch.Messages() {
			n--
			var p msg.Pulled
			if err := msg.Decode(m.Data(), &p); err != nil {
				return nil, err
			}
			if p.ID() == o.ID() {
				out = append(out, p)
			}
		}
		if batch.Error() != nil {
			return nil, batch.Error()
		}
	}
	return out, nil
}

// status reads the node's recorded state of o's image.
func (r *rig) status(t *testing.T, o msg.PullOrder) msg.ImagePull {
	t.Helper()
	kv, err := r.bus.JS.KeyValue(context.Background(), msg.BucketPulls)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), msg.PullStatusKey(o.Namespace, o.Name, o.Node))
	if err != nil {
		t.Fatalf("status of %s: %v", o.ID(), err)
	}
	var st msg.PullStatus
	if err := msg.Decode(e.Value(), &st); err != nil {
		t.Fatal(err)
	}
	if st.UID != o.UID {
		t.Fatalf("status is of %s, want %s", st.UID, o.UID)
	}
	p, ok := st.Image(o.Image)
	if !ok {
		t.Fatalf("status %+v has no %s", st, o.Image)
	}
	if st.Phase != p.Phase {
		t.Fatalf("status phase %s, its only image %s", st.Phase, p.Phase)
	}
	return p
}

// onRuntime reports whether containerd has image.
func (r *rig) onRuntime(t *testing.T, image string) bool {
	t.Helper()
	_, ok, err := r.runtime.Status(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

func (r *rig) metric(t *testing.T, outcome string) float64 {
	return testkit.LabeledValue(t, r.env.Registry, "weft_puller_agent_pulls_total", map[string]string{"outcome": outcome})
}

// TestAgentPulls carries out orders through a real containerd from real
// registries, credentials from Secrets in a real kube-apiserver.
func TestAgentPulls(t *testing.T) {
	r := newRig(t)
	plain := r.open.PushPlain(t, "shop/web", "1.0")
	scratch := r.open.PushScratch(t, "tools/noop", "1", "/noop", []byte("\x7fELF a static binary"))
	private := r.private.PushPlain(t, "team/app", "2")
	privateCfg := r.private.PushPlain(t, "team/app", "3")
	privateNoSecret := r.private.PushPlain(t, "team/other", "1")
	r.secret(t, "regcred", corev1.SecretTypeDockerConfigJson)
	r.secret(t, "legacy", corev1.SecretTypeDockercfg)

	t.Run("plain image", func(t *testing.T) {
		o := r.order(t, plain.Ref, time.Minute)
		p := r.pulled(t, o)
		if p.Outcome != msg.PullOutcomePulled || p.ImageRef != plain.ID || p.Size == 0 || !strings.HasSuffix(p.Digest, "@"+plain.Digest) || p.Agent != "agent-1" {
			t.Fatalf("outcome %+v, want pulled %s", p, plain.ID)
		}
		st := r.status(t, o)
		if st.Phase != msg.PullPulled || st.Present || st.ImageRef != plain.ID || st.Attempts != 1 || st.Started.IsZero() || st.Finished.Before(st.Started) {
			t.Fatalf("status %+v", st)
		}
		if !r.onRuntime(t, plain.Ref) {
			t.Fatal("containerd does not have the image")
		}
	})

	t.Run("scratch image by digest", func(t *testing.T) {
		o := r.order(t, scratch.ByDigest, time.Minute)
		if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled || p.ImageRef != scratch.ID {
			t.Fatalf("outcome %+v, want pulled %s", p, scratch.ID)
		}
		if !r.onRuntime(t, scratch.ByDigest) {
			t.Fatal("containerd does not have the image")
		}
	})

	t.Run("present image is not pulled again", func(t *testing.T) {
		before := r.open.ManifestRequests("shop/web")
		o := r.order(t, plain.Ref, time.Minute)
		p := r.pulled(t, o)
		if p.Outcome != msg.PullOutcomePresent || p.ImageRef != plain.ID {
			t.Fatalf("outcome %+v, want present", p)
		}
		if st := r.status(t, o); st.Phase != msg.PullPulled || !st.Present {
			t.Fatalf("status %+v, want pulled and present", st)
		}
		if after := r.open.ManifestRequests("shop/web"); after != before {
			t.Fatalf("the registry was asked for the manifest %d times: a present image was pulled", after-before)
		}
	})

	t.Run("missing image fails with the registry's message", func(t *testing.T) {
		o := r.order(t, r.open.Host+"/shop/web:9.9", time.Minute)
		p := r.pulled(t, o)
		if p.Outcome != msg.PullOutcomeFailed || !strings.Contains(p.Error, "not found") || !strings.Contains(p.Error, "shop/web:9.9") {
			t.Fatalf("outcome %+v, want failed: not found", p)
		}
		if st := r.status(t, o); st.Phase != msg.PullFailed || st.Message != p.Error || st.Finished.IsZero() {
			t.Fatalf("status %+v", st)
		}
	})

	t.Run("private image with a dockerconfigjson secret", func(t *testing.T) {
		o := r.order(t, private.Ref, time.Minute, "regcred")
		if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled || p.ImageRef != private.ID {
			t.Fatalf("outcome %+v, want pulled %s", p, private.ID)
		}
	})

	t.Run("private image with a dockercfg secret after a missing one", func(t *testing.T) {
		o := r.order(t, privateCfg.Ref, time.Minute, "gone", "legacy")
		p := r.pulled(t, o)
		if p.Outcome != msg.PullOutcomePulled || p.ImageRef != privateCfg.ID {
			t.Fatalf("outcome %+v, want pulled %s", p, privateCfg.ID)
		}
		want := []string{"pull secret shop/gone not found"}
		if st := r.status(t, o); !slices.Equal(st.Problems, want) || st.Message != "" {
			t.Fatalf("status %+v does not name the missing secret", st)
		}
		if !slices.Equal(p.Problems, want) {
			t.Fatalf("outcome %+v does not name the missing secret", p)
		}
	})

	t.Run("private image without its secret fails clearly", func(t *testing.T) {
		cases := []struct {
			name    string
			secrets []string
			want    []string
		}{
			{"secret missing", []string{"nosuch"}, []string{"401 Unauthorized", "pull secret shop/nosuch not found"}},
			{"no secret", nil, []string{"401 Unauthorized", "registry refused the pull"}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				o := r.order(t, privateNoSecret.Ref, time.Minute, tc.secrets...)
				p := r.pulled(t, o)
				if p.Outcome != msg.PullOutcomeFailed {
					t.Fatalf("outcome %+v, want failed", p)
				}
				for _, w := range tc.want {
					if !strings.Contains(p.Error, w) {
						t.Fatalf("error %q does not say %q", p.Error, w)
					}
				}
				if len(p.Problems) != len(tc.secrets) {
					t.Fatalf("problems %q, want one per secret that could not be read", p.Problems)
				}
				if r.onRuntime(t, privateNoSecret.Ref) {
					t.Fatal("containerd has the image")
				}
			})
		}
	})

	t.Run("an order delivered again after its outcome is not pulled again", func(t *testing.T) {
		// A failed pull: carried out again, it would ask the registry again.
		o := r.order(t, r.open.Host+"/shop/gone:1", time.Minute)
		if p := r.pulled(t, o); p.Outcome != msg.PullOutcomeFailed {
			t.Fatalf("outcome %+v, want failed", p)
		}
		before := r.open.ManifestRequests("shop/gone")
		// The same order once more, past JetStream's de-duplication (no
		// message id), as when an agent dies between its outcome and its
		// acknowledgement.
		r.publish(t, o, "")
		testkit.Eventually(t, time.Minute, func() error {
			s, err := r.bus.JS.Stream(context.Background(), msg.StreamPulls)
			if err != nil {
				return err
			}
			info, err := s.Info(context.Background())
			if err != nil {
				return err
			}
			if info.State.Msgs != 0 {
				return fmt.Errorf("%d orders in the work queue", info.State.Msgs)
			}
			return nil
		})
		if after := r.open.ManifestRequests("shop/gone"); after != before {
			t.Fatalf("the order was carried out again (%d manifest requests)", after-before)
		}
		if ps, err := r.outcomes(o); err != nil || len(ps) != 1 {
			t.Fatalf("outcomes %+v %v, want the one (the second publication a duplicate)", ps, err)
		}
	})

	t.Run("an order past its deadline fails", func(t *testing.T) {
		o := r.order(t, r.open.Host+"/shop/web:late", -time.Second)
		p := r.pulled(t, o)
		if p.Outcome != msg.PullOutcomeFailed || !strings.Contains(p.Error, "deadline") {
			t.Fatalf("outcome %+v, want failed by the deadline", p)
		}
	})

	t.Run("an unreachable registry is retried until the deadline", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		closed := l.Addr().String()
		_ = l.Close()
		retries := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_retries_total")
		o := r.order(t, closed+"/shop/web:1", 4*time.Second)
		p := r.pulled(t, o)
		if p.Outcome != msg.PullOutcomeFailed || !strings.Contains(p.Error, "deadline") || !strings.Contains(p.Error, "connection refused") {
			t.Fatalf("outcome %+v, want failed by the deadline after connection refused", p)
		}
		if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_retries_total"); n <= retries {
			t.Fatalf("retries %v, want more than %v", n, retries)
		}
	})

	t.Run("metrics count the outcomes", func(t *testing.T) {
		if n := r.metric(t, msg.PullOutcomePulled); n < 4 {
			t.Fatalf("pulled %v, want 4 or more", n)
		}
		if n := r.metric(t, msg.PullOutcomePresent); n != 1 {
			t.Fatalf("present %v, want 1", n)
		}
		if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_pulled_bytes_total"); n == 0 {
			t.Fatal("no bytes counted")
		}
	})

	// One span per order handled, parented on the order's trace.
	spans := 0
	for _, sp := range r.env.Spans.Ended() {
		if sp.Name() == agent.Service+" pulls" {
			spans++
		}
	}
	if spans < 10 {
		t.Fatalf("%d spans of handled orders, want one per order", spans)
	}
	// Credentials never reach a log line or a message.
	if strings.Contains(r.env.Logs.String(), r.password) {
		t.Fatal("the pull secret's password is in the log")
	}
}

// TestAgentRefusesOrdersItCannotCarryOut: a malformed order, an order of
// another mode, an order for another node put on this node's subject and
// one naming a pull secret of another namespace are dead-lettered, and
// pull nothing.
func TestAgentRefusesOrdersItCannotCarryOut(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	good := msg.PullOrder{PullTarget: msg.PullTarget{Namespace: "shop", Name: "web", UID: "u", Image: r.open.Host + "/a:1", Node: node, Attempt: 1}, Mode: msg.PullModeCRI, Deadline: time.Now().Add(time.Minute)}
	job, other, foreign := good, good, good
	job.Mode = msg.PullModeJob
	other.Node = "node-b"
	foreign.PullSecrets = []msg.SecretRef{{Namespace: "kube-system", Name: "registry-admin"}}
	if err := r.bus.NC.Publish(msg.PullSubject(node), []byte(`{"schema":"weft.pullorder.v1","image":"x"}`)); err != nil {
		t.Fatal(err)
	}
	r.publish(t, job, "job")
	r.publish(t, other, "other")
	// Built by hand: Publish refuses the invalid order.
	foreignMsg, _ := json.Marshal(struct {
		Schema string `json:"schema"`
		msg.PullOrder
	}{msg.SchemaPullOrder, foreign})
	if err := r.bus.NC.Publish(msg.PullSubject(node), foreignMsg); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		s, err := r.bus.JS.Stream(ctx, msg.StreamDLQ)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Msgs != 4 {
			return fmt.Errorf("%d dead letters, want 4", info.State.Msgs)
		}
		return nil
	})
	m, err := r.bus.JS.Stream(ctx, msg.StreamDLQ)
	if err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for seq := uint64(1); seq <= 4; seq++ {
		raw, err := m.GetMsg(ctx, seq)
		if err != nil {
			t.Fatal(err)
		}
		var dl msg.DeadLetter
		if err := msg.Decode(raw.Data, &dl); err != nil {
			t.Fatal(err)
		}
		if dl.Subject != msg.PullSubject(node) || dl.Service != agent.Service {
			t.Fatalf("dead letter %+v", dl)
		}
		reasons = append(reasons, dl.Reason)
	}
	all := strings.Join(reasons, "\n")
	for _, w := range []string{"namespace is missing", "a job-mode order is not for the node agent", `an order for node "node-b"`, "kube-system/registry-admin is not in the PrePullImage's namespace shop"} {
		if !strings.Contains(all, w) {
			t.Errorf("no dead letter says %q:\n%s", w, all)
		}
	}
	kv, _ := r.bus.JS.KeyValue(ctx, msg.BucketPulls)
	if _, err := kv.Get(ctx, msg.PullStatusKey("shop", "web", node)); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a refused order left a status: %v", err)
	}
}

// gate is a Limiter that refuses its first request (no slot free) and
// grants the others, counting what is held.
type gate struct {
	mu                    sync.Mutex
	asked, released, held int
	orders                []string
}

func (g *gate) Acquire(ctx context.Context, o msg.PullOrder) (context.Context, func(), error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked++
	g.orders = append(g.orders, o.ID())
	if g.asked == 1 {
		return nil, nil, errors.New("the slots could not be read")
	}
	g.held++
	return ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.held--
		g.released++
	}, nil
}

// TestAgentAsksTheLimiter: every pull is made with a slot of the Limiter,
// released when it ends; a Limiter that fails is retried like any failure.
func TestAgentAsksTheLimiter(t *testing.T) {
	g := &gate{}
	r := newRig(t, func(o *agent.Options) { o.Limiter = g })
	img := r.open.PushPlain(t, "shop/web", "1")
	o := r.order(t, img.Ref, time.Minute)
	if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled {
		t.Fatalf("outcome %+v, want pulled after the failed Acquire", p)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.asked != 2 || g.released != 1 || g.held != 0 || g.orders[0] != o.ID() || g.orders[1] != o.ID() {
		t.Fatalf("limiter asked %d times for %v, released %d, holds %d; want failed once, then held and released", g.asked, g.orders, g.released, g.held)
	}
	if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_retries_total"); n != 1 {
		t.Fatalf("retries %v, want the failed Acquire's 1", n)
	}
}

// stall is a Limiter whose first request fails (the slots could not be
// read) and whose later ones wait until the order's deadline.
type stall struct {
	mu    sync.Mutex
	asked int
}

func (s *stall) Acquire(ctx context.Context, _ msg.PullOrder) (context.Context, func(), error) {
	s.mu.Lock()
	s.asked++
	first := s.asked == 1
	s.mu.Unlock()
	if first {
		return nil, nil, errors.New("the slots could not be read")
	}
	<-ctx.Done()
	return nil, nil, fmt.Errorf("take a pull slot: %w", ctx.Err())
}

// TestAgentDeadlineDuringATry: a try the order's deadline cuts short
// fails the order naming the deadline and what the try before it failed
// on, which says more than the cut.
func TestAgentDeadlineDuringATry(t *testing.T) {
	s := &stall{}
	r := newRig(t, func(o *agent.Options) { o.Limiter = s })
	img := r.open.PushPlain(t, "shop/web", "1")
	p := r.pulled(t, r.order(t, img.Ref, 3*time.Second))
	want := "; the last try: the slots could not be read"
	if p.Outcome != msg.PullOutcomeFailed || !strings.Contains(p.Error, "deadline") || !strings.HasSuffix(p.Error, want) {
		t.Fatalf("outcome %+v, want failed by the deadline, ending %q", p, want)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.asked < 2 {
		t.Fatalf("limiter asked %d times, want the failed try and the one the deadline cut", s.asked)
	}
}

// TestAgentGetsItsConsumerBack: a consumer deleted under a running agent
// (or lost with the NATS node that held it) is made again, and the orders
// published meanwhile are carried out. On a work queue a consumer must
// deliver every message there is, so it is made as it was first.
func TestAgentGetsItsConsumerBack(t *testing.T) {
	// One loop: with several, the one that had handled nothing would
	// make the consumer again for the others.
	r := newRig(t, func(o *agent.Options) { o.Parallel = 1 })
	first := r.open.PushPlain(t, "shop/web", "1")
	second := r.open.PushPlain(t, "shop/web", "2")
	if p := r.pulled(t, r.order(t, first.Ref, time.Minute)); p.Outcome != msg.PullOutcomePulled {
		t.Fatalf("outcome %+v", p)
	}
	ctx := context.Background()
	if err := r.bus.JS.DeleteConsumer(ctx, msg.StreamPulls, agent.ConsumerName(node)); err != nil {
		t.Fatal(err)
	}
	o := r.order(t, second.Ref, time.Minute)
	if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled || p.ImageRef != second.ID {
		t.Fatalf("outcome %+v, want pulled %s", p, second.ID)
	}
}
