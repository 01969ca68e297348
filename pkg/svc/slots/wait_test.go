package slots_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/pkg/testkit"
)

// never is a poll interval far longer than any test's deadline: a Waiter
// that returns within the test was woken by the watch.
const never = time.Hour

// process is one more client of the bus, as another replica would be: its
// own connection, its own Slots.
func process(t *testing.T, bus *testkit.Bus, opts ...slots.Option) *slots.Slots {
	t.Helper()
	nc, err := nats.Connect(bus.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.KeyValue(context.Background(), msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	return newSlots(t, kv, js, opts...)
}

// acquireWaiting is how a caller waits for a full limit: Acquire, and on
// ErrFull wait with a Waiter of the full scope before asking again.
func acquireWaiting(ctx context.Context, s *slots.Slots, owner string, poll time.Duration, ls ...slots.Limit) (*slots.Held, error) {
	waiters := map[string]*slots.Waiter{}
	defer func() {
		for _, w := range waiters {
			w.Close()
		}
	}()
	for {
		h, err := s.Acquire(ctx, owner, ls...)
		full, ok := errors.AsType[*slots.FullError](err)
		if !ok {
			return h, err
		}
		w := waiters[full.Scope]
		if w == nil {
			if w, err = s.Waiter(slots.Limit{Scope: full.Scope, N: full.N}); err != nil {
				return nil, err
			}
			waiters[full.Scope] = w
		}
		if _, err := w.Wait(ctx, poll); err != nil {
			return nil, err
		}
	}
}

// TestWaiterWokenByFree: a pull waiting for the one slot of a limit
// starts once the slot is freed, by its holder's release or by its TTL
// after its holder died (stopped renewing without freeing it), with a
// poll far longer than the test: only the watch can have woken it.
func TestWaiterWokenByFree(t *testing.T) {
	tests := []struct {
		name string
		free func(h *slots.Held)
	}{
		{"released", (*slots.Held).Release},
		{"holder died, TTL over", (*slots.Held).Abandon},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			bus := testkit.NATS(t)
			holder := process(t, bus, slots.WithTTL(time.Second))
			waiter := process(t, bus)
			l := slots.Limit{Scope: msg.NodeSlotScope("n1"), N: 1}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			h, err := holder.Acquire(ctx, "pull-a", l)
			if err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				h, err := acquireWaiting(ctx, waiter, "pull-b", never, l)
				if err == nil {
					h.Release()
				}
				got <- err
			}()
			// pull-b waits: still without its slot a while after asking.
			select {
			case err := <-got:
				t.Fatalf("pull-b ended while pull-a holds the slot: %v", err)
			case <-time.After(2 * time.Second):
			}
			tc.free(h)
			if err := <-got; err != nil {
				t.Fatalf("pull-b did not get the freed slot: %v", err)
			}
		})
	}
}

// TestWaiterSeesAFreeSinceFull: a slot freed between the Acquire that
// found the limit full and the Waiter's start is not missed: the first
// Wait returns at once.
func TestWaiterSeesAFreeSinceFull(t *testing.T) {
	kv, js := leases(t)
	s := newSlots(t, kv, js)
	l := slots.Limit{Scope: msg.ClusterSlotScope, N: 1}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := s.Acquire(ctx, "pull-a", l)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Acquire(ctx, "pull-b", l); !errors.Is(err, slots.ErrFull) {
		t.Fatalf("acquire of a held limit: %v, want ErrFull", err)
	}
	h.Release()
	w, err := s.Waiter(l)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if woke, err := w.Wait(ctx, never); err != nil || !woke {
		t.Fatalf("first wait on a free slot: %v %v, want woken", woke, err)
	}
	// Nothing changed since: a second Wait does not return at once
	// (it would make a caller that lost the slot ask again and again).
	short, cancelShort := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancelShort()
	if woke, err := w.Wait(short, never); woke || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("second wait without a change: %v %v, want the context's end", woke, err)
	}
}

// TestWaitersNeverExceedTheLimit: pieces of work in three processes wait
// for the two slots of a limit with a poll far longer than the test; each
// gets its turn, woken by frees alone, and never more than two hold a slot
// at once.
func TestWaitersNeverExceedTheLimit(t *testing.T) {
	bus := testkit.NATS(t)
	procs := []*slots.Slots{process(t, bus), process(t, bus), process(t, bus)}
	l := slots.Limit{Scope: msg.RegistrySlotScope("registry.example"), N: 2}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	holding, peak := 0, 0
	var wg sync.WaitGroup
	errs := make(chan error, 30)
	for i := range 30 {
		wg.Go(func() {
			h, err := acquireWaiting(ctx, procs[i%len(procs)], fmt.Sprintf("pull-%d", i), never, l)
			if err != nil {
				errs <- fmt.Errorf("pull-%d: %w", i, err)
				return
			}
			mu.Lock()
			holding++
			peak = max(peak, holding)
			mu.Unlock()
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			holding--
			mu.Unlock()
			h.Release()
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if peak > l.N {
		t.Fatalf("%d held a slot at once, the limit is %d", peak, l.N)
	}
	if peak < l.N {
		t.Fatalf("at most %d held a slot at once: the limit of %d was never reached, the test shows nothing", peak, l.N)
	}
}

// TestWatchStopsAfterTheLastWaiter: a scope's watch is one consumer of the
// bucket, shared by its Waiters, and gone once the last one closed.
func TestWatchStopsAfterTheLastWaiter(t *testing.T) {
	kv, js := leases(t)
	s := newSlots(t, kv, js, slots.WithLinger(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	consumers := func() (int, error) {
		st, err := js.Stream(ctx, msg.KVStream(msg.BucketLeases))
		if err != nil {
			return 0, err
		}
		info, err := st.Info(ctx)
		if err != nil {
			return 0, err
		}
		return info.State.Consumers, nil
	}
	l := slots.Limit{Scope: msg.ClusterSlotScope, N: 3}
	var ws []*slots.Waiter
	for range 5 {
		w, err := s.Waiter(l)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	// The first Wait returns once the watch read the (free) slots.
	if woke, err := ws[0].Wait(ctx, never); err != nil || !woke {
		t.Fatalf("wait on a free limit: %v %v", woke, err)
	}
	if n, err := consumers(); err != nil || n != 1 {
		t.Fatalf("%d consumers on the bucket with five waiters of one scope (%v), want 1", n, err)
	}
	for _, w := range ws {
		w.Close()
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if n, err := consumers(); err != nil || n != 0 {
			return fmt.Errorf("%d consumers after the last waiter closed (%v)", n, err)
		}
		return nil
	})
}
