package agent_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/imagetest"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/puller/agent"
	"github.com/weftio/weft/services/puller/cri"
)

// TestLimits: the slot limits of an order, scoped to the cluster, its node
// and its image's registry host, Docker Hub's by every name.
func TestLimits(t *testing.T) {
	o := msg.PullOrder{PullTarget: msg.PullTarget{Namespace: "shop", Name: "web", UID: "u", Image: "nginx:1.27", Node: "n1.zone", Attempt: 1}}
	cases := []struct {
		name   string
		image  string
		limits msg.PullLimits
		want   []slots.Limit
	}{
		{"none", "nginx", msg.PullLimits{}, nil},
		{"all, Docker Hub", "nginx:1.27", msg.PullLimits{Cluster: 3, PerNode: 1, PerRegistry: 2}, []slots.Limit{
			{Scope: "cluster", N: 3}, {Scope: "node/n1.zone", N: 1}, {Scope: "registry/index.docker.io", N: 2}}},
		{"Docker Hub by its long name", "docker.io/library/nginx", msg.PullLimits{PerRegistry: 4}, []slots.Limit{{Scope: "registry/index.docker.io", N: 4}}},
		{"a registry with a port", "Registry.example.com:5000/a/b:1", msg.PullLimits{Cluster: 10, PerRegistry: 4}, []slots.Limit{
			{Scope: "cluster", N: 10}, {Scope: "registry/registry.example.com:5000", N: 4}}},
		{"per node only", "ghcr.io/a/b", msg.PullLimits{PerNode: 2}, []slots.Limit{{Scope: "node/n1.zone", N: 2}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := o
			o.Image, o.Limits = tc.image, tc.limits
			got, err := agent.Limits(o)
			if err != nil || fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Fatalf("Limits = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	o.Image, o.Limits = "UPPER", msg.PullLimits{PerRegistry: 1}
	if _, err := agent.Limits(o); !cri.IsPermanent(err) {
		t.Fatalf("Limits of an invalid reference = %v, want a permanent error", err)
	}
	o.Image, o.Limits = "nginx", msg.PullLimits{Cluster: 1, PerNode: 2}
	if _, err := agent.Limits(o); !msg.IsPermanent(err) {
		t.Fatalf("Limits above the cluster's = %v, want a permanent error", err)
	}
}

// holdSlot takes a slot of limit for owner, as another pull elsewhere
// would, until the test releases it or ends.
func holdSlot(t *testing.T, b *testkit.Bus, owner string, limit slots.Limit) *slots.Held {
	t.Helper()
	ctx := context.Background()
	kv, err := b.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	s, err := slots.New(kv, b.JS)
	if err != nil {
		t.Fatal(err)
	}
	h, err := s.Acquire(ctx, owner, limit)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Release)
	return h
}

// statusMessages follows every write of the node's status of o's
// PrePullImage and returns what o's image's state said, in order.
func statusMessages(t *testing.T, b *testkit.Bus, o msg.PullOrder) func() []msg.ImagePull {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	kv, err := b.JS.KeyValue(ctx, msg.BucketPulls)
	if err != nil {
		t.Fatal(err)
	}
	w, err := kv.Watch(ctx, msg.PullStatusKey(o.Namespace, o.Name, o.Node))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var seen []msg.ImagePull
	go func() {
		for e := range w.Updates() {
			if e == nil || e.Operation() != jetstream.KeyValuePut {
				continue
			}
			var st msg.PullStatus
			if msg.Decode(e.Value(), &st) != nil || st.UID != o.UID {
				continue
			}
			if p, ok := st.Image(o.Image); ok {
				mu.Lock()
				seen = append(seen, p)
				mu.Unlock()
			}
		}
	}()
	return func() []msg.ImagePull {
		mu.Lock()
		defer mu.Unlock()
		return append([]msg.ImagePull(nil), seen...)
	}
}

// TestAgentWaitsForAFullLimit: an order whose limit is full (its slot held
// by a pull elsewhere) is no failure: it stays queued, Pending and saying
// which limit it waits for, counted as queued, and is pulled once the slot
// is free, holding a slot it frees at the end.
func TestAgentWaitsForAFullLimit(t *testing.T) {
	r := newRig(t, func(o *agent.Options) { o.QueueRetry = 100 * time.Millisecond })
	img := r.open.PushPlain(t, "shop/web", "1")
	manifests := r.open.ManifestRequests("shop/web") // the push's
	other := holdSlot(t, r.bus, "another-pull", slots.Limit{Scope: msg.ClusterSlotScope, N: 1})
	o := r.orderWith(t, img.Ref, time.Minute, msg.PullLimits{Cluster: 1, PerNode: 1, PerRegistry: 1})
	states := statusMessages(t, r.bus, o)

	const want = "waiting for a pull slot: all 1 slots of cluster are held"
	testkit.Eventually(t, time.Minute, func() error {
		if q := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_queued_pulls"); q != 1 {
			return fmt.Errorf("queued pulls %v, want 1", q)
		}
		if n := testkit.LabeledValue(t, r.env.Registry, "weft_puller_agent_limit_full_total", map[string]string{"scope": "cluster"}); n < 3 {
			return fmt.Errorf("the full limit seen %v times, want it looked at again and again", n)
		}
		return nil
	})
	st := r.status(t, o)
	if st.Phase != msg.PullPending || st.Message != want || !st.Started.IsZero() {
		t.Fatalf("status while waiting %+v, want Pending saying %q", st, want)
	}
	if r.onRuntime(t, img.Ref) || r.open.ManifestRequests("shop/web") != manifests {
		t.Fatal("pulled while the limit was full")
	}
	if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_retries_total"); n != 0 {
		t.Fatalf("retries %v: waiting for a slot is no failure", n)
	}
	if n := queuedOrders(t, r.bus); n != 1 {
		t.Fatalf("%d orders in the work queue, want the waiting one", n)
	}
	if logs := r.env.Logs.String(); strings.Contains(logs, `"level":"WARN"`) || strings.Contains(logs, `"level":"ERROR"`) {
		t.Fatalf("waiting logged as a failure:\n%s", logs)
	}

	other.Release()
	if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled || p.ImageRef != img.ID {
		t.Fatalf("outcome %+v, want pulled once the slot was free", p)
	}
	// The status said Pending while it waited, once (not on every look),
	// then Pulling, then Pulled, its start when the pull began.
	var phases []string
	for _, p := range states() {
		phases = append(phases, string(p.Phase)+":"+p.Message)
	}
	if got := strings.Join(phases, " > "); got != "Pending:"+want+" > Pulling: > Pulled:" {
		t.Fatalf("status went %s", got)
	}
	if st := r.status(t, o); st.Started.IsZero() || st.Finished.Before(st.Started) || st.Message != "" {
		t.Fatalf("status %+v", st)
	}
	testkit.Eventually(t, 30*time.Second, func() error {
		if q := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_queued_pulls"); q != 0 {
			return fmt.Errorf("queued pulls %v after the pull", q)
		}
		if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_slots_held"); n != 0 {
			return fmt.Errorf("slots held %v after the pull", n)
		}
		if keys := slotKeys(t, r.bus); len(keys) != 0 {
			return fmt.Errorf("slot keys left: %v", keys)
		}
		return nil
	})
	// While it pulled, it held one slot of each limit.
	for _, scope := range []string{"cluster", "node/" + node, "registry/" + r.open.Host} {
		if n := testkit.LabeledValue(t, r.env.Registry, "weft_puller_agent_slots_held", map[string]string{"scope": scope}); n != 0 {
			t.Fatalf("slots held of %s: %v", scope, n)
		}
	}
}

// TestAgentStopsAPullWhoseSlotIsLost: a pull whose slot another owner took
// (its holder could not renew it in time) is stopped, since it no longer
// counts against the limit, and tried again once a slot is free.
func TestAgentStopsAPullWhoseSlotIsLost(t *testing.T) {
	var held atomic.Bool
	hanging := make(chan struct{}, 64)
	reg := imagetest.Registry(t, imagetest.WithMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if held.Load() && req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
				select {
				case hanging <- struct{}{}:
				default:
				}
				for held.Load() && req.Context().Err() == nil {
					time.Sleep(10 * time.Millisecond)
				}
			}
			next.ServeHTTP(w, req)
		})
	}))
	r := newRig(t, func(o *agent.Options) { o.SlotTTL = 1500 * time.Millisecond; o.QueueRetry = 100 * time.Millisecond })
	img := reg.PushPlain(t, "shop/web", "1")
	held.Store(true)
	o := r.orderWith(t, img.Ref, 2*time.Minute, msg.PullLimits{Cluster: 1})
	states := statusMessages(t, r.bus, o)
	select {
	case <-hanging:
	case <-time.After(time.Minute):
		t.Fatal("the pull never began")
	}
	kv, err := r.bus.JS.KeyValue(context.Background(), msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	key := msg.SlotKey(msg.ClusterSlotScope, 0)
	e, err := kv.Get(context.Background(), key)
	if err != nil || string(e.Value()) != o.ID() {
		t.Fatalf("slot %s while pulling: %v %v, want held by %s", key, e, err, o.ID())
	}
	// Another owner's write: the agent's next renewal finds it.
	if _, err := kv.Put(context.Background(), key, []byte("intruder")); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, time.Minute, func() error {
		for _, p := range states() {
			if strings.Contains(p.Message, "waiting for a pull slot: all 1 slots of cluster are held") {
				return nil
			}
		}
		return fmt.Errorf("status went %+v", states())
	})
	lost := false
	for _, p := range states() {
		lost = lost || (p.Phase == msg.PullPulling && strings.Contains(p.Message, "retrying: pull slot lost, the pull is stopped") && strings.Contains(p.Message, key))
	}
	if !lost {
		t.Fatalf("no status said the slot was lost: %+v", states())
	}
	if err := kv.Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	held.Store(false)
	if p := r.pulled(t, o); p.Outcome != msg.PullOutcomePulled || p.ImageRef != img.ID {
		t.Fatalf("outcome %+v, want pulled once the slot was free again", p)
	}
	if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_retries_total"); n < 1 {
		t.Fatalf("retries %v, want the stopped pull counted", n)
	}
}

// TestLimitsHoldAcrossAgents: four agents (one per node, on one real
// containerd) pull 40 images from two real registries with limits of 3 in
// the cluster, 1 per node and 2 per registry. Every pull is in flight only
// while its order holds a slot of each scope, the pulls in flight never
// exceed a limit of any scope (counted where the agents call the runtime),
// the slot keys, listed again 3 ms after each listing (a listing takes
// about 20 ms under the race detector), never name a slot outside the
// limits, each limit is reached, and every image is pulled.
//
// Run twice: with waiting orders looked at again every 100 ms, and with
// them woken only by frees (QueueRetry an hour, every order waiting in its
// agent's hand), where a lost wake-up would leave an image unpulled.
func TestLimitsHoldAcrossAgents(t *testing.T) {
	tests := []struct {
		name       string
		queueRetry time.Duration
		waiting    int
	}{
		{"polled", 100 * time.Millisecond, 0},
		{"woken by frees only", time.Hour, 10},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { limitsHoldAcrossAgents(t, tc.queueRetry, tc.waiting) })
	}
}

func limitsHoldAcrossAgents(t *testing.T, queueRetry time.Duration, waiting int) {
	const nodes, images = 4, 40
	limits := msg.PullLimits{Cluster: 3, PerNode: 1, PerRegistry: 2}
	sock := imagetest.Containerd(t)
	kube := kubetest.Start(t)
	b := testkit.NATS(t)
	// Each layer download takes a while, so that pulls overlap.
	slow := imagetest.WithMiddleware(func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if req.Method == http.MethodGet && strings.Contains(req.URL.Path, "/blobs/") {
				time.Sleep(40 * time.Millisecond)
			}
			next.ServeHTTP(w, req)
		})
	})
	regs := []*imagetest.ImageRegistry{imagetest.Registry(t, slow), imagetest.Registry(t, slow)}
	runtime, err := cri.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = runtime.Close() })
	ctx := context.Background()
	leases, err := b.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	scopeLimit := map[string]int{msg.ClusterSlotScope: limits.Cluster}
	nodeName := func(i int) string { return fmt.Sprintf("node-%d.limits.example", i) }
	for i := range nodes {
		scopeLimit[msg.NodeSlotScope(nodeName(i))] = limits.PerNode
	}
	for _, reg := range regs {
		scopeLimit[msg.RegistrySlotScope(reg.Host)] = limits.PerRegistry
	}
	flight := &inFlight{t: t, kv: leases, limits: scopeLimit, now: map[string]int{}, most: map[string]int{}, orders: map[string]string{}}

	var orders []msg.PullOrder
	for i := range images {
		reg := regs[i%len(regs)]
		img := reg.PushPlain(t, fmt.Sprintf("app-%d/web", i), "1")
		o := msg.PullOrder{PullTarget: msg.PullTarget{Namespace: "shop", Name: fmt.Sprintf("web-%d", i), UID: fmt.Sprintf("uid-%d", i),
			Image: img.Ref, Node: nodeName(i % nodes), Attempt: 1}, Mode: msg.PullModeCRI, Deadline: time.Now().Add(5 * time.Minute), Limits: limits}
		orders = append(orders, o)
		flight.orders[o.Node+" "+o.Image] = o.ID()
	}
	envs := make([]*testkit.Env, nodes)
	for i := range nodes {
		envs[i] = testkit.NewEnv(t, b, fmt.Sprintf("agent-%d", i))
		o := agent.Options{Node: nodeName(i), Runtime: countingRuntime{Runtime: runtime, node: nodeName(i), f: flight},
			Secrets: agent.KubeSecrets{Client: kube.Clientset}, AckWait: 2 * time.Second, QueueRetry: queueRetry, Waiting: waiting}
		testkit.Run(t, func(ctx context.Context) error { return agent.Run(ctx, envs[i].Env, o) })
	}
	sampled := sampleSlots(t, leases, scopeLimit)

	for _, o := range orders {
		if _, err := busPublish(b, o); err != nil {
			t.Fatal(err)
		}
	}
	testkit.Eventually(t, 5*time.Minute, func() error {
		done := 0
		for i, e := range envs {
			done += int(testkit.LabeledValue(t, e.Registry, "weft_puller_agent_pulls_total", map[string]string{"outcome": msg.PullOutcomePulled}))
			if n := testkit.LabeledValue(t, e.Registry, "weft_puller_agent_pulls_total", map[string]string{"outcome": msg.PullOutcomeFailed}); n > 0 {
				t.Fatalf("agent %d failed %v pulls:\n%s", i, n, e.Logs.String())
			}
		}
		if done != images {
			return fmt.Errorf("%d of %d images pulled", done, images)
		}
		return nil
	})
	most := sampled()
	flight.mu.Lock()
	defer flight.mu.Unlock()
	for _, v := range flight.violations {
		t.Error(v)
	}
	for scope, n := range scopeLimit {
		if flight.most[scope] != n {
			t.Errorf("at most %d pulls in flight in %s, want its limit %d reached (the test would not show it holds)", flight.most[scope], scope, n)
		}
		if most[scope] > n {
			t.Errorf("%d slot keys of %s held at once, above its limit %d", most[scope], scope, n)
		}
	}
	for _, o := range orders {
		if !onRuntime(t, runtime, o.Image) {
			t.Errorf("%s is not on the runtime", o.Image)
		}
	}
	for i, e := range envs {
		if n := testkit.CounterValue(t, e.Registry, "weft_puller_agent_slots_held"); n != 0 {
			t.Errorf("agent %d holds %v slots after the pulls", i, n)
		}
		if n := testkit.CounterValue(t, e.Registry, "weft_puller_agent_limit_full_total"); n == 0 {
			t.Errorf("agent %d never found a limit full", i)
		}
	}
	t.Logf("most pulls in flight: %v; most slot keys held: %v", flight.most, most)
}

// inFlight counts the pulls in flight per slot scope where the agents
// call the runtime, and checks, as each begins, that its order holds a
// slot of each scope.
type inFlight struct {
	t      *testing.T
	kv     jetstream.KeyValue
	limits map[string]int    // by scope
	orders map[string]string // order id by "<node> <image>"

	mu         sync.Mutex
	now, most  map[string]int
	violations []string
}

func (f *inFlight) scopes(node, image string) []string {
	host, err := cri.RegistryHost(image)
	if err != nil {
		f.t.Error(err)
	}
	return []string{msg.ClusterSlotScope, msg.NodeSlotScope(node), msg.RegistrySlotScope(host)}
}

func (f *inFlight) begin(node, image string) (end func()) {
	scopes := f.scopes(node, image)
	id := f.orders[node+" "+image]
	for _, scope := range scopes {
		if !f.holds(scope, id) {
			f.violate("%s pulls %s without a slot of %s", node, image, scope)
		}
	}
	f.mu.Lock()
	for _, scope := range scopes {
		f.now[scope]++
		f.most[scope] = max(f.most[scope], f.now[scope])
		if f.now[scope] > f.limits[scope] {
			f.violations = append(f.violations, fmt.Sprintf("%d pulls in flight in %s, above its limit %d", f.now[scope], scope, f.limits[scope]))
		}
	}
	f.mu.Unlock()
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, scope := range scopes {
			f.now[scope]--
		}
	}
}

// holds reports whether a slot of scope names the order id.
func (f *inFlight) holds(scope, id string) bool {
	for i := range f.limits[scope] {
		e, err := f.kv.Get(context.Background(), msg.SlotKey(scope, i))
		if err == nil && string(e.Value()) == id {
			return true
		}
		if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
			f.violate("read %s: %v", msg.SlotKey(scope, i), err)
		}
	}
	return false
}

func (f *inFlight) violate(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.violations = append(f.violations, fmt.Sprintf(format, args...))
}

// countingRuntime is a real runtime whose pulls inFlight counts.
type countingRuntime struct {
	agent.Runtime
	node string
	f    *inFlight
}

func (c countingRuntime) Pull(ctx context.Context, ref string, auth *cri.Auth) (string, error) {
	defer c.f.begin(c.node, ref)()
	return c.Runtime.Pull(ctx, ref, auth)
}

// sampleSlots lists the slot keys of the leases bucket every few
// milliseconds until the test calls the function it returns, which gives
// the most keys held at once per scope. A key outside the scopes and
// indexes the limits allow fails the test.
func sampleSlots(t *testing.T, kv jetstream.KeyValue, limits map[string]int) func() map[string]int {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan map[string]int, 1)
	go func() {
		most := map[string]int{}
		samples := 0
		defer func() {
			t.Logf("%d samples of the slot keys", samples)
			done <- most
		}()
		for {
			select {
			case <-stop:
				return
			case <-time.After(3 * time.Millisecond):
			}
			keys, err := listSlotKeys(kv)
			if err != nil {
				continue // a listing cut short by the load: the next sample
			}
			samples++
			now := map[string]int{}
			for _, k := range keys {
				scope, i, err := msg.ParseSlotKey(k)
				if err != nil || i >= limits[scope] {
					t.Errorf("slot key %s: not a slot of the limits %v (%v)", k, limits, err)
					continue
				}
				now[scope]++
				most[scope] = max(most[scope], now[scope])
			}
		}
	}()
	var once sync.Once
	var most map[string]int
	get := func() map[string]int {
		once.Do(func() {
			close(stop)
			most = <-done
		})
		return most
	}
	t.Cleanup(func() { get() })
	return get
}

func listSlotKeys(kv jetstream.KeyValue) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l, err := kv.ListKeysFiltered(ctx, msg.SlotKeyPrefix+">")
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{} // a listing may name a key twice
	var keys []string
	for k := range l.Keys() {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	_ = l.Stop()
	return keys, ctx.Err()
}

func slotKeys(t *testing.T, b *testkit.Bus) []string {
	t.Helper()
	kv, err := b.JS.KeyValue(context.Background(), msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	keys, err := listSlotKeys(kv)
	if err != nil {
		t.Fatal(err)
	}
	return keys
}

func queuedOrders(t *testing.T, b *testkit.Bus) uint64 {
	t.Helper()
	s, err := b.JS.Stream(context.Background(), msg.StreamPulls)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func onRuntime(t *testing.T, rt *cri.Client, image string) bool {
	t.Helper()
	_, ok, err := rt.Status(context.Background(), image)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestAgentWaitingPastTheDeadlineFails: an order that waited for a slot
// until its deadline fails then, saying what it waited for.
func TestAgentWaitingPastTheDeadlineFails(t *testing.T) {
	r := newRig(t, func(o *agent.Options) { o.QueueRetry = 100 * time.Millisecond })
	img := r.open.PushPlain(t, "shop/web", "1")
	holdSlot(t, r.bus, "another-pull", slots.Limit{Scope: msg.RegistrySlotScope(r.open.Host), N: 2})
	holdSlot(t, r.bus, "a-third-pull", slots.Limit{Scope: msg.RegistrySlotScope(r.open.Host), N: 2})
	o := r.orderWith(t, img.Ref, 3*time.Second, msg.PullLimits{Cluster: 5, PerRegistry: 2})
	p := r.pulled(t, o)
	want := "; the last try: waiting for a pull slot: all 2 slots of registry/" + r.open.Host + " are held"
	if p.Outcome != msg.PullOutcomeFailed || !strings.Contains(p.Error, "deadline") || !strings.HasSuffix(p.Error, want) {
		t.Fatalf("outcome %+v, want failed by the deadline %q", p, want)
	}
	if r.onRuntime(t, img.Ref) {
		t.Fatal("pulled while the limit was full")
	}
	if n := testkit.CounterValue(t, r.env.Registry, "weft_puller_agent_queued_pulls"); n != 0 {
		t.Fatalf("queued pulls %v after the order ended", n)
	}
}
