package agent

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/slots"
	"github.com/weftio/weft/services/puller/cri"
)

// Limiter bounds how many pulls run at once. The agent calls Acquire
// before it pulls an order's image (once it knows the runtime lacks it)
// and the release it returns once the pull ended.
//
// Acquire returns an error wrapping msg.ErrWaiting when a limit is full
// (a *WaitError, naming it): the order waits, which is no failure; a
// Limiter that is also a FreeWaiter has it woken when that limit frees. Any other error is a failed try, retried with a growing delay,
// or, when permanent (msg.IsPermanent or cri.IsPermanent), ends the order
// as failed. The context Acquire returns is ctx's child, cancelled with
// the cause (context.Cause) when what was acquired is lost, since another
// pull may then take its place: the pull stops and is tried again. release
// frees what was acquired and cancels that context.
type Limiter interface {
	Acquire(ctx context.Context, order msg.PullOrder) (pctx context.Context, release func(), err error)
}

// SlotLimiter holds the order's limits (msg.PullOrder.Limits) as slots of
// the leases bucket (package slots): one slot of the cluster-wide limit,
// one of the node's and one of the image's registry host's (cri.RegistryHost),
// all or none, owned by the order's id (PullTarget.ID). The owner names the
// order, not the agent, so an agent that takes over the order of one that
// died adopts the slots it left instead of taking more; slots left by an
// agent that died with nobody taking its order over expire after the
// Slots' TTL. An order without limits takes no slot.
type SlotLimiter struct {
	Slots *slots.Slots
}

// Limits are the slot limits of o: its limits that are set, scoped to the
// cluster, o's node and the registry host of o's image.
func Limits(o msg.PullOrder) ([]slots.Limit, error) {
	l := o.Limits
	if err := l.Check(); err != nil {
		return nil, msg.Permanent(err)
	}
	var out []slots.Limit
	if l.Cluster > 0 {
		out = append(out, slots.Limit{Scope: msg.ClusterSlotScope, N: l.Cluster})
	}
	if l.PerNode > 0 {
		out = append(out, slots.Limit{Scope: msg.NodeSlotScope(o.Node), N: l.PerNode})
	}
	if l.PerRegistry > 0 {
		host, err := cri.RegistryHost(o.Image)
		if err != nil {
			return nil, err
		}
		out = append(out, slots.Limit{Scope: msg.RegistrySlotScope(host), N: l.PerRegistry})
	}
	return out, nil
}

// Acquire takes a slot of each of the order's limits.
func (s SlotLimiter) Acquire(ctx context.Context, o msg.PullOrder) (context.Context, func(), error) {
	limits, err := Limits(o)
	if err != nil {
		return nil, nil, err
	}
	pctx, cancel := context.WithCancelCause(ctx)
	if len(limits) == 0 {
		return pctx, func() { cancel(nil) }, nil
	}
	h, err := s.Slots.Acquire(ctx, o.ID(), limits...)
	if err != nil {
		cancel(nil)
		if full, ok := errors.AsType[*slots.FullError](err); ok {
			return nil, nil, &WaitError{Scope: full.Scope, N: full.N}
		}
		return nil, nil, fmt.Errorf("take a pull slot: %w", err)
	}
	stop := make(chan struct{})
	go func() {
		select {
		case <-h.Lost():
			cancel(fmt.Errorf("pull slot lost, the pull is stopped: %w", h.Err()))
		case <-stop:
		}
	}()
	return pctx, func() {
		close(stop)
		h.Release()
		cancel(nil)
	}, nil
}

// FreeWaiter is a Limiter that can wake an order waiting for a full limit:
// WaitFree returns a Waiter of the limit a *WaitError named, whose Wait
// returns true as soon as a slot of it may be free, false after poll
// without, or ctx's error (*slots.Waiter is one).
type FreeWaiter interface {
	WaitFree(full *WaitError) (Waiter, error)
}

// Waiter waits for a slot of one full limit; see FreeWaiter.
type Waiter interface {
	Wait(ctx context.Context, poll time.Duration) (bool, error)
	Close()
}

// WaitFree returns a Waiter of the full limit, sharing the process's watch
// of its scope.
func (s SlotLimiter) WaitFree(full *WaitError) (Waiter, error) {
	return s.Slots.Waiter(slots.Limit{Scope: full.Scope, N: full.N})
}

// WaitError is a limit that is full: every one of its N slots is held by
// other pulls. errors.Is(err, msg.ErrWaiting).
type WaitError struct {
	Scope string // msg.ClusterSlotScope, msg.NodeSlotScope(node), msg.RegistrySlotScope(host)
	N     int
}

func (e *WaitError) Error() string {
	return fmt.Sprintf("waiting for a pull slot: all %d slots of %s are held", e.N, e.Scope)
}

// Unwrap makes a *WaitError match msg.ErrWaiting.
func (e *WaitError) Unwrap() error { return msg.ErrWaiting }
