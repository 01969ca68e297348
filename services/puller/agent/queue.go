package agent

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// DefaultQueueRetry is how soon, on average, an order that found a limit
// full is looked at again when no freed slot woke it first.
const DefaultQueueRetry = 5 * time.Second

// waiter is what the agent remembers of an order that found a limit full,
// until the order ends here: how often it went back to its queue (those
// deliveries are no failed tries, and do not grow the retry delay),
// whether it waits now, and whether in hand.
type waiter struct {
	naks    int
	waiting bool
	inHand  bool // waiting in this agent's hand (counted while it does)
	seen    time.Time
}

// queue records that o waits, since err (a msg.ErrWaiting) says a limit
// is full: the node's status says what it waits for (written when that
// changes, not on every look). It returns err.
func (a *agent) queue(ctx context.Context, o msg.PullOrder, prev msg.ImagePull, had bool, err error, log *slog.Logger) error {
	scope := ""
	if w, ok := errors.AsType[*WaitError](err); ok {
		scope = w.Scope
	}
	a.metrics.full.WithLabelValues(scope).Inc()
	a.mu.Lock()
	w := a.waiters[o.ID()]
	if w == nil {
		w = &waiter{}
		a.waiters[o.ID()] = w
	}
	w.waiting, w.seen = true, time.Now()
	a.pruneLocked(w.seen)
	a.mu.Unlock()
	why := err.Error()
	if !had || prev.Phase != msg.PullPending || prev.Message != why {
		log.InfoContext(ctx, "waiting for a pull slot", "reason", why)
		p := msg.ImagePull{Image: o.Image, Phase: msg.PullPending, Attempts: o.Attempt, Message: why}
		if had {
			p.Started = prev.Started
		}
		if rerr := a.record(ctx, o.PullTarget, p); rerr != nil {
			log.WarnContext(ctx, "recording the wait failed", "err", rerr)
		}
	}
	return err
}

// requeue sends o, waiting for a slot (err), back to its queue: it is
// delivered again after about QueueRetry.
func (a *agent) requeue(o msg.PullOrder, err error) error {
	a.mu.Lock()
	if w := a.waiters[o.ID()]; w != nil {
		w.naks++
	}
	a.mu.Unlock()
	return msg.Retry(err, a.queueDelay(o.Deadline))
}

// waits are the Waiters of one order waiting in hand, by scope. While it
// waits, the order holds a place of the agent's waiting room (Waiting).
type waits struct {
	a  *agent
	id string
	fw FreeWaiter
	by map[string]Waiter
}

// wait keeps o, refused by the full limit of err, in hand until a slot of
// that limit may be free (a Waiter's wake, or about QueueRetry without),
// then reports true: the order is tried again at once. It reports false
// when the order must go back to its queue instead: the Limiter cannot
// wake it, the waiting room is full, or the process is stopping. The
// order's deadline ends the wait too (its next try fails it).
func (w *waits) wait(ctx context.Context, o msg.PullOrder, err error) bool {
	full, ok := errors.AsType[*WaitError](err)
	if !ok || w.fw == nil || ctx.Err() != nil {
		return false
	}
	select {
	case w.a.room <- struct{}{}:
	default:
		return false
	}
	defer func() { <-w.a.room }()
	wt := w.by[full.Scope]
	if wt == nil {
		if wt, err = w.fw.WaitFree(full); err != nil {
			return false
		}
		if w.by == nil {
			w.by = map[string]Waiter{}
		}
		w.by[full.Scope] = wt
	}
	w.a.inHand(w.id, true)
	defer w.a.inHand(w.id, false)
	dctx, cancel := context.WithDeadline(ctx, o.Deadline)
	defer cancel()
	_, err = wt.Wait(dctx, w.a.queueDelay(o.Deadline))
	return ctx.Err() == nil && (err == nil || dctx.Err() != nil)
}

// close ends the order's waits.
func (w *waits) close() {
	for _, wt := range w.by {
		wt.Close()
	}
}

// inHand marks whether the order id waits in this agent's hand.
func (a *agent) inHand(id string, in bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.waiters[id]; w != nil {
		w.inHand, w.seen = in, time.Now()
	}
}

// queueDelay is QueueRetry with jitter (half to one and a half of it), so
// that orders waiting together do not all come back at once, and never
// past the deadline.
func (a *agent) queueDelay(deadline time.Time) time.Duration {
	d := a.o.QueueRetry/2 + rand.N(a.o.QueueRetry)
	if left := time.Until(deadline); left < d {
		d = max(left, 10*time.Millisecond)
	}
	return d
}

// started marks the order as no longer waiting: it holds its slots.
func (a *agent) started(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.waiters[id]; w != nil {
		w.waiting, w.seen = false, time.Now()
	}
}

// tries is how many deliveries of the order were tries at it (deliveries
// less those that found a limit full), from 1.
func (a *agent) tries(id string, deliveries int) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if w := a.waiters[id]; w != nil {
		return max(deliveries-w.naks, 1)
	}
	return deliveries
}

// forget drops what the agent remembers of an order that ended here.
func (a *agent) forget(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.waiters, id)
}

// queued counts the orders waiting for a slot now: those waiting in hand,
// and those that went back to the queue and were delivered since (an
// order taken over by another agent, or removed from the queue, stops
// counting after waitStale). It also drops orders not seen for
// forgetAfter.
func (a *agent) queued() float64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return float64(a.pruneLocked(time.Now()))
}

func (a *agent) pruneLocked(now time.Time) int {
	waitStale := a.o.AckWait + 4*a.o.QueueRetry
	forgetAfter := a.o.AckWait + 2*retryMax
	n := 0
	for id, w := range a.waiters {
		age := now.Sub(w.seen)
		switch {
		case w.inHand:
			n++
		case age > forgetAfter:
			delete(a.waiters, id)
		case w.waiting && age <= waitStale:
			n++
		}
	}
	return n
}
