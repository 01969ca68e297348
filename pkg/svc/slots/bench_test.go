package slots_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
)

// BenchmarkAcquireRelease is one piece of work taking a slot of each of
// the puller's three limits (cluster 10, node 2, registry 4) and freeing
// them, on an embedded NATS server; BenchmarkKVPut, a plain Put of the
// leases bucket in the same run, is the reference.
func BenchmarkAcquireRelease(b *testing.B) {
	for _, bc := range []struct {
		name   string
		limits []slots.Limit
	}{
		{"one limit", []slots.Limit{{Scope: msg.ClusterSlotScope, N: 10}}},
		{"three limits", []slots.Limit{
			{Scope: msg.ClusterSlotScope, N: 10},
			{Scope: msg.NodeSlotScope("worker-1"), N: 2},
			{Scope: msg.RegistrySlotScope("registry.example.com"), N: 4},
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			kv, js := leases(b)
			s := newSlots(b, kv, js)
			ctx := context.Background()
			i := 0
			for b.Loop() {
				h, err := s.Acquire(ctx, fmt.Sprintf("pull-%d", i), bc.limits...)
				if err != nil {
					b.Fatal(err)
				}
				h.Release()
				i++
			}
		})
	}
}

func BenchmarkKVPut(b *testing.B) {
	kv, _ := leases(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := kv.Put(ctx, "bench.put", []byte("pull-0")); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAcquireFull is the cost of learning that a limit of 10 is full:
// every slot is tried and its holder read.
func BenchmarkAcquireFull(b *testing.B) {
	kv, js := leases(b)
	s := newSlots(b, kv, js)
	ctx := context.Background()
	l := slots.Limit{Scope: msg.ClusterSlotScope, N: 10}
	for i := range l.N {
		h, err := s.Acquire(ctx, fmt.Sprintf("holder-%d", i), l)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(h.Release)
	}
	for b.Loop() {
		if _, err := s.Acquire(ctx, "late", l); !errors.Is(err, slots.ErrFull) {
			b.Fatalf("Acquire = %v, want ErrFull", err)
		}
	}
}

// BenchmarkHandOver is the time from a holder's Release of the one slot of
// a limit, held for a random time below 500 ms, to the Acquire of work
// that waited for it, with waiters (1, 10) waiting in the process: woken by the scope's watch (a Waiter, its poll
// an hour), every waiter tries and one gets it; against a waiter polling
// every 500 ms (the agent's poll before Waiters), where the hand-over
// takes half the poll on average.
func BenchmarkHandOver(b *testing.B) {
	for _, bc := range []struct {
		name    string
		waiters int
		poll    time.Duration
		woken   bool
	}{
		{"woken, 1 waiter", 1, time.Hour, true},
		{"woken, 10 waiters", 10, time.Hour, true},
		{"polled every 500ms, 1 waiter", 1, 500 * time.Millisecond, false},
	} {
		b.Run(bc.name, func(b *testing.B) {
			kv, js := leases(b)
			s := newSlots(b, kv, js)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			l := slots.Limit{Scope: msg.ClusterSlotScope, N: 1}
			got := make(chan *slots.Held)
			for w := range bc.waiters {
				go func() {
					for i := 0; ctx.Err() == nil; i++ {
						h, err := waitFor(ctx, s, fmt.Sprintf("waiter-%d-%d", w, i), l, bc.poll, bc.woken)
						if err != nil {
							return
						}
						select {
						case got <- h:
						case <-ctx.Done():
							h.Release()
							return
						}
					}
				}()
			}
			h, err := acquireWaiting(ctx, s, "first", bc.poll, l)
			if err != nil {
				b.Fatal(err)
			}
			var took time.Duration
			for b.Loop() {
				// Held a while, released at a random point of a poll.
				time.Sleep(rand.N(500 * time.Millisecond))
				start := time.Now()
				h.Release()
				h = <-got
				took += time.Since(start)
			}
			h.Release()
			b.ReportMetric(float64(took.Microseconds())/1000/float64(b.N), "ms-to-next-holder")
		})
	}
}

// waitFor acquires l for owner, waiting with a Waiter (woken) or sleeping
// poll between tries.
func waitFor(ctx context.Context, s *slots.Slots, owner string, l slots.Limit, poll time.Duration, woken bool) (*slots.Held, error) {
	if woken {
		return acquireWaiting(ctx, s, owner, poll, l)
	}
	for {
		h, err := s.Acquire(ctx, owner, l)
		if !errors.Is(err, slots.ErrFull) {
			return h, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(poll):
		}
	}
}
