// Package statuslease runs the status writers of the watcher (package
// ingstatus's Ingress status, package gwstatus's Gateway API status) on one
// replica at a time, and drives their reconcile loop.
//
// Contract:
//   - Run takes part in the election of one lease key in weft-leases:
//     while this replica holds the lease, the work runs with a context
//     that is cancelled when the lease is lost or Run's context is done;
//     Run returns only after the work has returned. A replica that stops
//     releases the lease, one that dies loses it after the TTL, and
//     another replica takes over.
//   - Loop reconciles at once, on every poke, every resync and after a
//     failed reconcile with backoff (Backoff: doubling from RetryMin up to
//     RetryMax, reset by a success), until its context is done.
package statuslease

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/lease"
)

// Retry bounds of a failed reconcile (Backoff).
const (
	RetryMin = time.Second
	RetryMax = 30 * time.Second
)

// Backoff is the wait after a failure that follows a wait of prev (0
// after a success): twice prev, within RetryMin and RetryMax.
func Backoff(prev time.Duration) time.Duration { return min(max(prev*2, RetryMin), RetryMax) }

// Leases is the leases bucket and the publisher of key-TTL renewals.
type Leases struct {
	KV  lease.KV
	Pub lease.Publisher
}

// Holder names the lease of one status writer and how it is logged.
type Holder struct {
	Leases Leases
	Target string        // the target the writer writes the status of
	Key    string        // the lease key (msg.*StatusLeaseKey)
	Owner  string        // this replica, unique among replicas
	TTL    time.Duration // how long the lease outlives its last renewal
	// What is the writer's name in errors and logs ("ingress status"),
	// Doing what it does while it holds the lease, logged when taken.
	What, Doing string
	Log         *slog.Logger
}

// Run runs work whenever this replica holds h's lease, until ctx is done.
func Run(ctx context.Context, h Holder, work func(ctx context.Context)) error {
	l, err := lease.New(h.Leases.KV, h.Key, h.Owner, h.TTL, lease.WithKeyTTL(h.Leases.Pub, msg.LeaseSubject(h.Key)))
	if err != nil {
		return fmt.Errorf("%s %s: %w", h.What, h.Target, err)
	}
	var (
		mu     sync.Mutex
		cancel context.CancelFunc
		wg     sync.WaitGroup
	)
	stop := func() {
		mu.Lock()
		if cancel != nil {
			cancel()
			cancel = nil
		}
		mu.Unlock()
		wg.Wait()
	}
	defer stop()
	return l.Run(ctx, nil, func(held bool) {
		if !held {
			h.Log.InfoContext(ctx, h.What+" lease lost; no longer writing")
			stop()
			return
		}
		h.Log.InfoContext(ctx, h.What+" lease taken; "+h.Doing)
		mu.Lock()
		var wctx context.Context
		wctx, cancel = context.WithCancel(ctx)
		mu.Unlock()
		wg.Go(func() { work(wctx) })
	})
}

// Loop calls reconcile at once, on every poke, every resync (none when
// resync is 0) and after a failure with Backoff, until ctx is done; each
// failure is passed to failed with the wait before the next try.
func Loop(ctx context.Context, poke <-chan struct{}, resync time.Duration, reconcile func(context.Context) error, failed func(err error, retryIn time.Duration)) {
	backoff := time.Duration(0)
	retry := time.NewTimer(0) // the first look, at once
	defer retry.Stop()
	var tick <-chan time.Time
	if resync > 0 {
		t := time.NewTicker(resync)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-poke:
		case <-tick:
		case <-retry.C:
		}
		err := reconcile(ctx)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			backoff = 0
			continue
		}
		backoff = Backoff(backoff)
		retry.Reset(backoff)
		failed(err, backoff)
	}
}
