package deployer

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/lease"
	"github.com/weftio/weft/pkg/testkit"
)

// TestFencedOneReplicaAtATime: while one replica carries out an order for
// an instance, another replica's handling of an order for it (the same
// order delivered again, or the next one) does not run and is retried
// shortly; it runs at once when the first is done, within the lease's TTL
// of a holder that died, and a holder whose lease is taken stops.
func TestFencedOneReplicaAtATime(t *testing.T) {
	bus := testkit.NATS(t)
	ctx := context.Background()
	leases, err := bus.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	replica := func(name string) *deployer {
		return &deployer{env: testkit.NewEnv(t, bus, name).Env, leases: leases}
	}
	a, b := replica("deployer-a"), replica("deployer-b")
	in := &instance{target: "edge", name: "local"}
	var running atomic.Int32
	work := func(hold <-chan struct{}) func(context.Context) error {
		return func(ctx context.Context) error {
			if running.Add(1) > 1 {
				t.Error("two replicas apply to one instance at once")
			}
			defer running.Add(-1)
			select {
			case <-hold:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	busy := func(who string, err error) {
		t.Helper()
		if !errors.Is(err, msg.ErrBusy) {
			t.Fatalf("%s: err = %v, want ErrBusy", who, err)
		}
		if d := msg.Classify(err); d.Action != msg.Nak || d.Delay != fenceRetry {
			t.Fatalf("%s: decision %+v, want a retry in %v", who, d, fenceRetry)
		}
	}
	done := func() <-chan struct{} { c := make(chan struct{}); close(c); return c }

	// a holds the instance, over several of its lease's TTLs.
	hold := make(chan struct{})
	aDone := make(chan error, 1)
	go func() { aDone <- a.fenced(ctx, in, work(hold)) }()
	testkit.Eventually(t, 10*time.Second, func() error {
		if running.Load() == 0 {
			return errors.New("a is not carrying out its order")
		}
		return nil
	})
	for range 4 {
		busy("b while a works", b.fenced(ctx, in, work(done())))
		time.Sleep(msg.DeployLeaseTTL / 2)
	}
	close(hold)
	if err := <-aDone; err != nil {
		t.Fatalf("a: %v", err)
	}
	// Released: b carries out its order at once.
	if err := b.fenced(ctx, in, work(done())); err != nil {
		t.Fatalf("b after a: %v", err)
	}

	// A holder that died (took the lease, renews nothing): b waits for the
	// TTL, not longer.
	key := msg.DeployLeaseKey(in.target, in.name)
	dead, err := lease.New(leases, key, "deployer-dead", msg.DeployLeaseTTL, lease.WithKeyTTL(bus.JS, msg.LeaseSubject(key)))
	if err != nil {
		t.Fatal(err)
	}
	if held, _ := dead.Try(ctx); !held {
		t.Fatal("the dead holder could not take the lease")
	}
	busy("b while the dead holder's lease lasts", b.fenced(ctx, in, work(done())))
	testkit.Eventually(t, 10*msg.DeployLeaseTTL, func() error { return b.fenced(ctx, in, work(done())) })

	// Another owner takes the key while a works: a stops, and its order
	// is retried.
	go func() { aDone <- a.fenced(ctx, in, work(make(chan struct{}))) }()
	testkit.Eventually(t, 10*time.Second, func() error {
		if running.Load() == 0 {
			return errors.New("a is not carrying out its order")
		}
		return nil
	})
	if err := leases.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := leases.Create(ctx, key, []byte("deployer-c")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-aDone:
		if !errors.Is(err, errLeaseLost) || msg.Classify(err).Action != msg.Nak {
			t.Fatalf("a after losing its lease: %v (%+v), want a retried errLeaseLost", err, msg.Classify(err))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a kept working after its lease was taken")
	}
}
