package lease_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/svc/lease"
	"github.com/weftio/weft/pkg/testkit"
)

// faultyKV is a real bucket whose next calls can fail: "lost" performs the
// call and then reports a timeout (its reply was lost), "down" fails
// without performing it (the bucket did not answer), "read-down" fails
// reads only, "hang" blocks a write until its context ends (a request
// nobody answers), "freed" makes a create find the key held by a rival
// that frees it before the lease reads it.
type faultyKV struct {
	jetstream.KeyValue
	mu    sync.Mutex
	fault string
	n     int // how many calls the fault applies to
	// afterGet, if set, runs once after the next read succeeds.
	afterGet func()
}

func (f *faultyKV) inject(fault string, n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fault, f.n = fault, n
}

// take returns the fault pending for a call that one of faults applies to.
func (f *faultyKV) take(faults ...string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.n == 0 {
		return ""
	}
	for _, fault := range faults {
		if fault == f.fault {
			f.n--
			return fault
		}
	}
	return ""
}

func (f *faultyKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	if f.take("freed") != "" {
		if _, err := f.KeyValue.Create(ctx, key, []byte("rival")); err != nil {
			return 0, err
		}
		_, err := f.KeyValue.Create(ctx, key, value, opts...)
		if derr := f.KeyValue.Delete(ctx, key); derr != nil {
			return 0, derr
		}
		return 0, err
	}
	return f.write(ctx, func() (uint64, error) { return f.KeyValue.Create(ctx, key, value, opts...) })
}

func (f *faultyKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	return f.write(ctx, func() (uint64, error) { return f.KeyValue.Update(ctx, key, value, rev) })
}

func (f *faultyKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if f.take("down", "read-down") != "" {
		return nil, context.DeadlineExceeded
	}
	e, err := f.KeyValue.Get(ctx, key)
	f.mu.Lock()
	after := f.afterGet
	f.afterGet = nil
	f.mu.Unlock()
	if err == nil && after != nil {
		after()
	}
	return e, err
}

func (f *faultyKV) write(ctx context.Context, do func() (uint64, error)) (uint64, error) {
	switch f.take("down", "lost", "hang") {
	case "hang":
		<-ctx.Done()
		return 0, ctx.Err()
	case "down":
		return 0, context.DeadlineExceeded
	case "lost":
		if _, err := do(); err != nil {
			return 0, err
		}
		return 0, context.DeadlineExceeded
	}
	return do()
}

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const ttl = time.Minute

func bucket(t *testing.T) jetstream.KeyValue {
	t.Helper()
	bus := testkit.NATS(t)
	kv, err := bus.JS.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "leases-test", TTL: ttl})
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// TestLeaseSurvivesFailedRenewals: the steps run in order on one lease
// (and a rival on the same key); after each, whether each holds it.
func TestLeaseSurvivesFailedRenewals(t *testing.T) {
	type step struct {
		name            string
		fault           string // on the lease's next calls
		calls           int
		advance         time.Duration // the lease's clock moves before the attempt
		rival           bool          // the rival tries instead of the lease
		held, rivalHeld bool
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a renewal whose reply was lost is adopted", []step{
			{name: "take", held: true},
			{name: "renew, reply lost", fault: "lost", calls: 1, held: true},
			{name: "rival tries", rival: true, held: true},
			{name: "renew on the adopted revision", held: true},
		}},
		{"a create whose reply was lost is adopted", []step{
			{name: "create, reply lost", fault: "lost", calls: 1, held: false},
			{name: "create again finds its own key", held: true},
			{name: "rival tries", rival: true, held: true},
		}},
		{"a renewal without an answer keeps the lease while its TTL lasts", []step{
			{name: "take", held: true},
			{name: "renew, no answer", fault: "down", calls: 1, advance: ttl / 3, held: true},
			{name: "renew, no answer, TTL nearly over", fault: "down", calls: 1, advance: ttl/2 + ttl/10, held: true},
			{name: "renew, no answer, TTL over", fault: "down", calls: 1, advance: ttl / 5, held: false},
		}},
		{"a rival's key is not taken", []step{
			{name: "rival takes", rival: true, held: false, rivalHeld: true},
			{name: "create conflicts", held: false, rivalHeld: true},
			{name: "create conflicts, then the read fails", fault: "read-down", calls: 1, held: false, rivalHeld: true},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kv := &faultyKV{KeyValue: bucket(t)}
			c := &clock{t: time.Unix(1e9, 0)}
			l, err := lease.New(kv, "render.web", "replica-a", ttl, lease.WithClock(c.now))
			if err != nil {
				t.Fatal(err)
			}
			rival, err := lease.New(kv.KeyValue, "render.web", "replica-b", ttl)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			for _, s := range tc.steps {
				c.add(s.advance)
				if s.rival {
					rival.Try(ctx)
				} else {
					kv.inject(s.fault, s.calls)
					l.Try(ctx)
					kv.inject("", 0)
				}
				if got := l.Held(); got != s.held {
					t.Fatalf("%s: held = %v, want %v", s.name, got, s.held)
				}
				if got := rival.Held(); got != s.rivalHeld {
					t.Fatalf("%s: rival held = %v, want %v", s.name, got, s.rivalHeld)
				}
			}
		})
	}
}

// TestRunYieldsWhileItCannotWork: a replica that cannot do the work gives
// its lease up at once, and another replica takes it.
func TestRunYieldsWhileItCannotWork(t *testing.T) {
	kv := bucket(t)
	a, err := lease.New(kv, "render.web", "replica-a", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.New(kv, "render.web", "replica-b", 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	deaf := false
	changes := make(chan bool, 16)
	go func() {
		_ = a.Run(ctx, func() bool { mu.Lock(); defer mu.Unlock(); return deaf }, func(held bool) { changes <- held })
	}()
	if held := <-changes; !held {
		t.Fatal("a did not take the free lease")
	}
	go func() { _ = b.Run(ctx, nil, func(bool) {}) }()
	mu.Lock()
	deaf = true
	mu.Unlock()
	if held := <-changes; held {
		t.Fatal("a reported a gain, want the loss")
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if !b.Held() {
			return errors.New("b does not hold the lease")
		}
		return nil
	})
	if a.Held() {
		t.Fatal("both hold the lease")
	}
}

// TestKeyTTL: with a TTL of its own, a lease outlives its holder by that
// TTL, not by the bucket's, while renewals keep it as long as they come.
func TestKeyTTL(t *testing.T) {
	bus := testkit.NATS(t)
	ctx := context.Background()
	kv, err := bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases-ttl", TTL: time.Hour, LimitMarkerTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const keyTTL = time.Second
	subject := "$KV.leases-ttl.render.web"
	a, err := lease.New(kv, "render.web", "replica-a", keyTTL, lease.WithKeyTTL(bus.JS, subject))
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.New(kv, "render.web", "replica-b", keyTTL, lease.WithKeyTTL(bus.JS, subject))
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := a.Try(ctx); !held {
		t.Fatal("a did not take the free lease")
	}
	// Renewed more often than its TTL, a keeps it past several TTLs.
	deadline := time.Now().Add(3 * keyTTL)
	for time.Now().Before(deadline) {
		if held, _ := a.Try(ctx); !held {
			t.Fatal("a lost the lease it renews")
		}
		if held, _ := b.Try(ctx); held {
			t.Fatal("b took a renewed lease")
		}
		time.Sleep(keyTTL / 4)
	}
	// a stops renewing (it died): b takes the lease once the key's own TTL
	// is over, long before the bucket's hour.
	testkit.Eventually(t, 10*time.Second, func() error {
		if held, _ := b.Try(ctx); !held {
			return errors.New("b cannot take the lease")
		}
		return nil
	})
}

func TestKeyTTLOptions(t *testing.T) {
	kv := bucket(t)
	if _, err := lease.New(kv, "k", "o", time.Second, lease.WithKeyTTL(nil, "s")); err == nil {
		t.Fatal("a key TTL without a publisher was accepted")
	}
	if _, err := lease.New(kv, "k", "o", time.Second, lease.WithClock(nil)); err == nil {
		t.Fatal("a nil clock was accepted")
	}
}

// TestKeepAndRelease: a lease taken for one piece of work is kept by Keep
// while the work runs, is reported lost when another owner takes the key,
// and once released is taken by another replica at once.
func TestKeepAndRelease(t *testing.T) {
	kv := bucket(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const short = 600 * time.Millisecond
	a, err := lease.New(kv, "deploy.web.a", "replica-a", short)
	if err != nil {
		t.Fatal(err)
	}
	b, err := lease.New(kv, "deploy.web.a", "replica-b", short)
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := a.Try(ctx); !held {
		t.Fatal("a did not take the free lease")
	}
	lost := make(chan struct{})
	keepCtx, stop := context.WithCancel(ctx)
	go func() {
		a.Keep(keepCtx, func() { close(lost) })
	}()
	// Kept over several renewals: b cannot take it.
	for range 5 {
		time.Sleep(short / 2)
		if held, _ := b.Try(ctx); held {
			t.Fatal("b took a kept lease")
		}
	}
	stop()
	a.Release()
	if held, _ := b.Try(ctx); !held {
		t.Fatal("b cannot take a released lease")
	}
	select {
	case <-lost:
		t.Fatal("a stopped Keep reported a loss")
	default:
	}

	// b's key is overwritten by another owner: Keep reports the loss.
	go b.Keep(ctx, func() { close(lost) })
	if err := kv.Delete(ctx, "deploy.web.a"); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Create(ctx, "deploy.web.a", []byte("replica-c")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-lost:
	case <-time.After(10 * time.Second):
		t.Fatal("Keep did not report the lease taken by another owner")
	}
	if b.Held() {
		t.Fatal("b still believes it holds the lease")
	}
}

// TestKeepReportsTheLossWhileARenewalHangs: a renewal nobody answers does
// not keep a lease past its TTL: Keep bounds each attempt by what is left
// of the TTL, and reports the loss by then, while the request still hangs.
func TestKeepReportsTheLossWhileARenewalHangs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const short = time.Second
	kv, err := testkit.NATS(t).JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "leases-hang", TTL: short})
	if err != nil {
		t.Fatal(err)
	}
	f := &faultyKV{KeyValue: kv}
	a, err := lease.New(f, "deploy.web.a", "replica-a", short)
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := a.Try(ctx); !held {
		t.Fatal("a did not take the free lease")
	}
	f.inject("hang", 1<<30)
	lost := make(chan struct{})
	go a.Keep(ctx, func() { close(lost) })
	select {
	case <-lost:
	case <-time.After(30 * time.Second):
		t.Fatal("Keep did not report the loss of a lease whose renewals hang")
	}
	if a.Held() {
		t.Fatal("a still believes it holds the lease it lost")
	}
	// The key expired: another replica takes it.
	b, err := lease.New(kv, "deploy.web.a", "replica-b", short)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if held, _ := b.Try(ctx); !held {
			return errors.New("b cannot take the expired lease")
		}
		return nil
	})
}

// TestStaleOwnKeyIsRenewedBeforeItIsHeld: a key naming this owner whose
// TTL is over by the lease's clock may be dropped by the bucket at any
// moment, and then taken by another owner: it is held only once a renewal
// on it lands, never on the strength of the read alone.
func TestStaleOwnKeyIsRenewedBeforeItIsHeld(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rival bool // another owner writes the key between the read and the renewal
		held  bool
	}{
		{"renewed", false, true},
		{"taken meanwhile", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			kv := &faultyKV{KeyValue: bucket(t)}
			c := &clock{t: time.Now()}
			a, err := lease.New(kv, "deploy.web.a", "replica-a", ttl, lease.WithClock(c.now))
			if err != nil {
				t.Fatal(err)
			}
			// An earlier create of a's landed, its reply lost; by a's
			// clock its TTL is over when a next tries.
			kv.inject("lost", 1)
			a.Try(ctx)
			kv.inject("", 0)
			c.add(ttl + time.Second)
			before, err := kv.KeyValue.Get(ctx, "deploy.web.a")
			if err != nil {
				t.Fatal(err)
			}
			if tc.rival {
				kv.afterGet = func() {
					if _, err := kv.KeyValue.Update(ctx, "deploy.web.a", []byte("replica-b"), before.Revision()); err != nil {
						t.Error(err)
					}
				}
			}
			held, _ := a.Try(ctx)
			if held != tc.held {
				t.Fatalf("held = %v, want %v", held, tc.held)
			}
			after, err := kv.KeyValue.Get(ctx, "deploy.web.a")
			if err != nil {
				t.Fatal(err)
			}
			if tc.held && (after.Revision() <= before.Revision() || string(after.Value()) != "replica-a") {
				t.Fatalf("the stale key was held without a renewal: revision %d, then %d (%s)", before.Revision(), after.Revision(), after.Value())
			}
			if !tc.held && string(after.Value()) != "replica-b" {
				t.Fatalf("the key is %q, want the rival's", after.Value())
			}
		})
	}
}

// TestCreateAgainAfterTheHolderFreedTheKey: a create that finds the key
// held, by a holder that frees it before the lease reads it, is made again
// in the same Try: the bucket answered, the key is free. Past the bound of
// such races, the Try has no verdict.
func TestCreateAgainAfterTheHolderFreedTheKey(t *testing.T) {
	kv := bucket(t)
	for _, tc := range []struct {
		name          string
		races         int
		held, settled bool
	}{
		{"freed once", 1, true, true},
		{"freed three times", 3, true, true},
		{"freed past the bound", 20, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &faultyKV{KeyValue: kv}
			key := "freed." + strings.ReplaceAll(tc.name, " ", "-")
			l, err := lease.New(f, key, "replica-a", ttl)
			if err != nil {
				t.Fatal(err)
			}
			f.inject("freed", tc.races)
			if held, settled := l.Try(context.Background()); held != tc.held || settled != tc.settled {
				t.Fatalf("Try: held %v settled %v, want %v %v", held, settled, tc.held, tc.settled)
			}
			e, err := kv.Get(context.Background(), key)
			if tc.held && (err != nil || string(e.Value()) != "replica-a") {
				t.Fatalf("the bucket holds %v (%v), want the lease's owner", e, err)
			}
		})
	}
}
