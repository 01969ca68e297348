package deployer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/lease"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// errLeaseLost ends an order's handling whose deploy lease passed to
// another replica (or ran out without a renewal landing) while it ran.
var errLeaseLost = errors.New("deploy lease lost while carrying out the order")

// fenceRetry is how soon an order whose instance is held by another
// replica is delivered again: a dead holder's lease ends within
// msg.DeployLeaseTTL of its last renewal.
const fenceRetry = 250 * time.Millisecond

// fenced runs f while this replica holds the instance's deploy lease, so
// that two replicas never apply to one instance at once, even when an
// order is delivered again while its first handler still runs (its
// keep-alive was late, the NATS node it spoke to went away). The lease is
// renewed while f runs; f's context ends if the lease is lost. The lease is
// released when f returns, so the next order, on whichever replica, starts
// at once; a replica that dies holding it frees it within
// msg.DeployLeaseTTL. An order that finds the lease held is delivered again
// shortly (msg.ErrBusy).
func (d *deployer) fenced(ctx context.Context, in *instance, f func(context.Context) error) error {
	key := msg.DeployLeaseKey(in.target, in.name)
	l, err := lease.New(d.leases, key, d.env.Replica, msg.DeployLeaseTTL, lease.WithKeyTTL(d.env.JS, msg.LeaseSubject(key)))
	if err != nil {
		return err
	}
	_, span := telemetry.Step(ctx, "deployer lease")
	held, settled := l.Try(ctx)
	span.End()
	switch {
	case !held && settled:
		return msg.Retry(fmt.Errorf("instance %s/%s: %w", in.target, in.name, msg.ErrBusy), fenceRetry)
	case !held:
		return msg.Retry(fmt.Errorf("instance %s/%s: deploy lease: the leases bucket did not answer", in.target, in.name), fenceRetry)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	wg.Go(func() { l.Keep(wctx, func() { cancel(errLeaseLost) }) })
	err = f(wctx)
	cancel(nil)
	wg.Wait()
	l.Release()
	if ctx.Err() == nil && errors.Is(context.Cause(wctx), errLeaseLost) {
		return msg.Retry(fmt.Errorf("instance %s/%s: %w", in.target, in.name, errLeaseLost), fenceRetry)
	}
	return err
}
