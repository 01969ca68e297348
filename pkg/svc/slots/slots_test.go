package slots_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
)

// leases returns the leases bucket of a fresh embedded NATS server.
func leases(t testing.TB) (jetstream.KeyValue, jetstream.JetStream) {
	t.Helper()
	bus := testkit.NATS(t)
	kv, err := bus.JS.KeyValue(context.Background(), msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	return kv, bus.JS
}

func newSlots(t testing.TB, kv jetstream.KeyValue, js jetstream.JetStream, opts ...slots.Option) *slots.Slots {
	t.Helper()
	s, err := slots.New(kv, js, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// gauge is what a caller's gauge of held slots would show, per scope.
type gauge struct {
	mu sync.Mutex
	v  map[string]int
}

func (g *gauge) observe(scope string, delta int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.v[scope] += delta
}

func (g *gauge) get(scope string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.v[scope]
}

// TestLimitsHonoured: many goroutines, each a piece of work on one of a
// few nodes and registries, acquire, work a moment and release; no limit
// ever has more holders than it allows, every piece of work gets done,
// and the limits are reached (so the test could see them exceeded).
func TestLimitsHonoured(t *testing.T) {
	tests := []struct {
		name                       string
		cluster, node, registry    int
		nodes, registries, workers int
	}{
		{"cluster limit binds", 3, 2, 3, 4, 2, 24},
		{"node and registry limits bind", 8, 1, 2, 3, 2, 24},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv, js := leases(t)
			g := &gauge{v: map[string]int{}}
			s := newSlots(t, kv, js, slots.WithTTL(3*time.Second), slots.WithObserver(g.observe))
			var mu sync.Mutex
			holders, peak := map[string]int{}, map[string]int{}
			limit := map[string]int{}
			var wg sync.WaitGroup
			errs := make(chan error, tc.workers)
			for w := range tc.workers {
				limits := []slots.Limit{
					{Scope: msg.ClusterSlotScope, N: tc.cluster},
					{Scope: msg.NodeSlotScope(fmt.Sprintf("node-%d", w%tc.nodes)), N: tc.node},
					{Scope: msg.RegistrySlotScope(fmt.Sprintf("r%d.example.com", w%tc.registries)), N: tc.registry},
				}
				mu.Lock()
				for _, l := range limits {
					limit[l.Scope] = l.N
				}
				mu.Unlock()
				wg.Go(func() {
					owner := fmt.Sprintf("work-%d", w)
					deadline := time.Now().Add(time.Minute)
					for {
						h, err := s.Acquire(context.Background(), owner, limits...)
						if errors.Is(err, slots.ErrFull) && time.Now().Before(deadline) {
							time.Sleep(time.Duration(rand.IntN(10)) * time.Millisecond)
							continue
						}
						if err != nil {
							errs <- fmt.Errorf("%s: %w", owner, err)
							return
						}
						mu.Lock()
						for _, l := range limits {
							holders[l.Scope]++
							peak[l.Scope] = max(peak[l.Scope], holders[l.Scope])
						}
						mu.Unlock()
						time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
						mu.Lock()
						for _, l := range limits {
							holders[l.Scope]--
						}
						mu.Unlock()
						h.Release()
						return
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			reached := false
			for scope, p := range peak {
				if p > limit[scope] {
					t.Errorf("%s had %d holders at once, limit %d", scope, p, limit[scope])
				}
				reached = reached || p == limit[scope]
				if g.get(scope) != 0 {
					t.Errorf("the gauge of %s shows %d held after every release", scope, g.get(scope))
				}
			}
			if !reached {
				t.Errorf("no limit was ever reached (peaks %v): the test saw no contention", peak)
			}
		})
	}
}

// TestAllOrNone: when one limit is full, Acquire holds no slot of the
// others, whatever their order.
func TestAllOrNone(t *testing.T) {
	kv, js := leases(t)
	s := newSlots(t, kv, js)
	ctx := context.Background()
	full := slots.Limit{Scope: msg.NodeSlotScope("n1"), N: 2}
	for _, o := range []string{"a", "b"} {
		h, err := s.Acquire(ctx, o, full)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(h.Release)
	}
	free := []slots.Limit{{Scope: msg.ClusterSlotScope, N: 1}, {Scope: msg.RegistrySlotScope("r.example.com"), N: 3}}
	for _, limits := range [][]slots.Limit{
		{free[0], full, free[1]},
		{full, free[0], free[1]},
		{free[1], free[0], full},
	} {
		_, err := s.Acquire(ctx, "c", limits...)
		var fe *slots.FullError
		if !errors.As(err, &fe) || fe.Scope != full.Scope || !errors.Is(err, slots.ErrFull) {
			t.Fatalf("Acquire with %v = %v, want a FullError of %s", limits, err, full.Scope)
		}
		for _, l := range free {
			for i := range l.N {
				if e, err := kv.Get(ctx, msg.SlotKey(l.Scope, i)); !errors.Is(err, jetstream.ErrKeyNotFound) {
					t.Fatalf("%s is held after a refused Acquire (%v, %v)", msg.SlotKey(l.Scope, i), e, err)
				}
			}
		}
		// The cluster's only slot is free for another owner at once.
		h, err := s.Acquire(ctx, "d", free[0])
		if err != nil {
			t.Fatal(err)
		}
		h.Release()
	}
}

// TestErrFullNamesTheScope: the error of a full limit names it, and is
// told apart from a bucket that does not answer.
func TestErrFullNamesTheScope(t *testing.T) {
	kv, js := leases(t)
	s := newSlots(t, kv, js)
	ctx := context.Background()
	tests := []struct {
		scope string
		n     int
	}{
		{msg.ClusterSlotScope, 1},
		{msg.NodeSlotScope("worker.1"), 2},
		{msg.RegistrySlotScope("registry.example.com:5000"), 3},
	}
	for _, tc := range tests {
		t.Run(tc.scope, func(t *testing.T) {
			l := slots.Limit{Scope: tc.scope, N: tc.n}
			for i := range tc.n {
				h, err := s.Acquire(ctx, fmt.Sprintf("holder-%d", i), l)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(h.Release)
			}
			_, err := s.Acquire(ctx, "late", l)
			var fe *slots.FullError
			if !errors.As(err, &fe) || fe.Scope != tc.scope || fe.N != tc.n {
				t.Fatalf("err = %v, want a FullError naming %s of %d", err, tc.scope, tc.n)
			}
			if !errors.Is(err, slots.ErrFull) || errors.Is(err, slots.ErrUnavailable) {
				t.Fatalf("err = %v: ErrFull %v, ErrUnavailable %v", err, errors.Is(err, slots.ErrFull), errors.Is(err, slots.ErrUnavailable))
			}
		})
	}
	// A bucket that does not answer is not a full limit.
	down := newSlots(t, &deafKV{kv}, js)
	_, err := down.Acquire(ctx, "x", slots.Limit{Scope: "quiet", N: 2})
	if !errors.Is(err, slots.ErrUnavailable) || errors.Is(err, slots.ErrFull) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

// deafKV is a leases bucket whose writes are never answered.
type deafKV struct{ jetstream.KeyValue }

func (d *deafKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	return 0, context.DeadlineExceeded
}

// TestDeadHolderFreesAfterTTL: a holder that stops renewing without
// releasing (killed) blocks its slot until the TTL ends, then another
// owner takes it; until then the others see the limit full.
func TestDeadHolderFreesAfterTTL(t *testing.T) {
	kv, js := leases(t)
	const ttl = 2 * time.Second
	g := &gauge{v: map[string]int{}}
	s := newSlots(t, kv, js, slots.WithTTL(ttl), slots.WithObserver(g.observe))
	ctx := context.Background()
	l := slots.Limit{Scope: msg.NodeSlotScope("n1"), N: 1}
	h, err := s.Acquire(ctx, "dead", l)
	if err != nil {
		t.Fatal(err)
	}
	// Kept past several TTLs while renewed.
	for end := time.Now().Add(2 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		if _, err := s.Acquire(ctx, "other", l); !errors.Is(err, slots.ErrFull) {
			t.Fatalf("Acquire of a renewed slot = %v, want ErrFull", err)
		}
	}
	h.Abandon()
	if g.get(l.Scope) != 0 {
		t.Fatalf("gauge %d after Abandon, want 0", g.get(l.Scope))
	}
	// The slot expires TTL after the last renewal the bucket stored.
	e, err := kv.Get(ctx, msg.SlotKey(l.Scope, 0))
	if err != nil || string(e.Value()) != "dead" {
		t.Fatalf("the dead holder's key: %v, %v", e, err)
	}
	expires := e.Created().Add(ttl)
	_, err = s.Acquire(ctx, "other", l)
	if time.Now().Before(expires) && !errors.Is(err, slots.ErrFull) {
		t.Fatalf("Acquire before the dead holder's slot expired = %v, want ErrFull", err)
	}
	var other *slots.Held
	testkit.Eventually(t, 20*time.Second, func() error {
		other, err = s.Acquire(ctx, "other", l)
		return err
	})
	if now := time.Now(); now.Before(expires) {
		t.Fatalf("the dead holder's slot was free %v before its TTL ended", expires.Sub(now))
	}
	other.Release()
}

// TestAdoptionByOwner: a replica that takes over running work acquires
// its slots under the same owner: it adopts them (the limit being full
// with them) and keeps them past the TTL; other owners stay out.
func TestAdoptionByOwner(t *testing.T) {
	kv, js := leases(t)
	const ttl = time.Second
	ctx := context.Background()
	first := newSlots(t, kv, js, slots.WithTTL(ttl))
	second := newSlots(t, kv, js, slots.WithTTL(ttl))
	limits := []slots.Limit{{Scope: msg.ClusterSlotScope, N: 3}, {Scope: msg.NodeSlotScope("n1"), N: 1}}
	h1, err := first.Acquire(ctx, "pull/ns/web/n1", limits...)
	if err != nil {
		t.Fatal(err)
	}
	h1.Abandon() // the first replica dies with the work running
	h2, err := second.Acquire(ctx, "pull/ns/web/n1", limits...)
	if err != nil {
		t.Fatalf("the owner's second Acquire = %v, want its slots adopted", err)
	}
	defer h2.Release()
	if got, want := h2.Slots(), h1.Slots(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("adopted %v, want the slots held before %v", got, want)
	}
	for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(ttl / 4) {
		if _, err := first.Acquire(ctx, "pull/ns/api/n1", limits...); !errors.Is(err, slots.ErrFull) {
			t.Fatalf("another owner's Acquire = %v, want ErrFull while the adopter renews", err)
		}
	}
	select {
	case <-h2.Lost():
		t.Fatalf("the adopter lost a slot: %v", h2.Err())
	default:
	}
}

// TestLostWhenTaken: a slot overwritten by another owner closes Lost,
// names the slot, and the gauge stops counting it.
func TestLostWhenTaken(t *testing.T) {
	kv, js := leases(t)
	g := &gauge{v: map[string]int{}}
	s := newSlots(t, kv, js, slots.WithTTL(time.Second), slots.WithObserver(g.observe))
	ctx := context.Background()
	node := msg.NodeSlotScope("n1")
	h, err := s.Acquire(ctx, "a", slots.Limit{Scope: msg.ClusterSlotScope, N: 5}, slots.Limit{Scope: node, N: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Release()
	if g.get(node) != 1 || g.get(msg.ClusterSlotScope) != 1 {
		t.Fatalf("gauge %v, want one slot of each scope", g.v)
	}
	if err := h.Err(); err != nil {
		t.Fatal(err)
	}
	key := msg.SlotKey(node, 0)
	if err := kv.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, key, []byte("intruder")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.Lost():
	case <-time.After(20 * time.Second):
		t.Fatal("Lost was not closed when another owner took a slot")
	}
	if err := h.Err(); !errors.Is(err, slots.ErrLost) || !strings.Contains(err.Error(), key) {
		t.Fatalf("Err = %v, want ErrLost naming %s", err, key)
	}
	if g.get(node) != 0 || g.get(msg.ClusterSlotScope) != 1 {
		t.Fatalf("gauge %v, want the node's slot gone and the cluster's kept", g.v)
	}
	h.Release()
	if g.get(msg.ClusterSlotScope) != 0 {
		t.Fatalf("gauge %v after Release", g.v)
	}
	if e, err := kv.Get(ctx, key); err != nil || string(e.Value()) != "intruder" {
		t.Fatalf("Release touched the slot another owner took: %v, %v", e, err)
	}
}

// TestBadArguments: options, owners and limits that cannot work are
// refused with ErrInvalid.
func TestBadArguments(t *testing.T) {
	kv, js := leases(t)
	other, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "not-leases"})
	if err != nil {
		t.Fatal(err)
	}
	news := []struct {
		name string
		kv   jetstream.KeyValue
		pub  jetstream.JetStream
		opts []slots.Option
	}{
		{"zero TTL", kv, js, []slots.Option{slots.WithTTL(0)}},
		{"negative TTL", kv, js, []slots.Option{slots.WithTTL(-time.Second)}},
		{"TTL beyond the bucket's", kv, js, []slots.Option{slots.WithTTL(msg.LeaseTTL + time.Second)}},
		{"nil observer", kv, js, []slots.Option{slots.WithObserver(nil)}},
		{"no bucket", nil, js, nil},
		{"no publisher", kv, nil, nil},
		{"another bucket", other, js, nil},
	}
	for _, tc := range news {
		t.Run(tc.name, func(t *testing.T) {
			var kv jetstream.KeyValue = tc.kv
			var err error
			switch {
			case kv == nil:
				_, err = slots.New(nil, tc.pub, tc.opts...)
			case tc.pub == nil:
				_, err = slots.New(kv, nil, tc.opts...)
			default:
				_, err = slots.New(kv, tc.pub, tc.opts...)
			}
			if !errors.Is(err, slots.ErrInvalid) {
				t.Fatalf("New = %v, want ErrInvalid", err)
			}
		})
	}
	s := newSlots(t, kv, js)
	ok := slots.Limit{Scope: msg.ClusterSlotScope, N: 1}
	acquires := []struct {
		name   string
		owner  string
		limits []slots.Limit
	}{
		{"empty owner", "", []slots.Limit{ok}},
		{"no limit", "o", nil},
		{"zero slots", "o", []slots.Limit{{Scope: "node/n1", N: 0}}},
		{"negative slots", "o", []slots.Limit{{Scope: "node/n1", N: -2}}},
		{"empty scope", "o", []slots.Limit{{Scope: "", N: 1}}},
		{"empty scope part", "o", []slots.Limit{{Scope: "node/", N: 1}}},
		{"scope twice", "o", []slots.Limit{ok, {Scope: "node/n1", N: 2}, ok}},
	}
	for _, tc := range acquires {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := s.Acquire(context.Background(), tc.owner, tc.limits...); !errors.Is(err, slots.ErrInvalid) {
				t.Fatalf("Acquire = %v, want ErrInvalid", err)
			}
		})
	}
	// Nothing was taken by the refused calls.
	h, err := s.Acquire(context.Background(), "o", ok)
	if err != nil {
		t.Fatal(err)
	}
	h.Release()
}

// TestAdoptionBehindAnotherHolder: the owner's earlier slot may lie after
// one held by another owner in its order; Acquire still finds and adopts
// it rather than failing on the full limit. Several owners, so that both
// orders occur.
func TestAdoptionBehindAnotherHolder(t *testing.T) {
	kv, js := leases(t)
	ctx := context.Background()
	s := newSlots(t, kv, js, slots.WithTTL(time.Second))
	for i := range 6 {
		l := slots.Limit{Scope: msg.NodeSlotScope(fmt.Sprintf("n%d", i)), N: 2}
		other, err := s.Acquire(ctx, "other", l)
		if err != nil {
			t.Fatal(err)
		}
		owner := fmt.Sprintf("pull-%d", i)
		h1, err := s.Acquire(ctx, owner, l)
		if err != nil {
			t.Fatal(err)
		}
		h1.Abandon()
		h2, err := s.Acquire(ctx, owner, l)
		if err != nil {
			t.Fatalf("%s: Acquire of the owner's own slot = %v, want it adopted", owner, err)
		}
		if fmt.Sprint(h2.Slots()) != fmt.Sprint(h1.Slots()) {
			t.Fatalf("%s: adopted %v, want %v", owner, h2.Slots(), h1.Slots())
		}
		h2.Release()
		other.Release()
	}
}
