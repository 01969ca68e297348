package controller

import (
	"context"
	"sync"
	"time"

	"github.com/weftio/weft/pkg/svc/slots"
)

// DefaultSlotPoll is Config.SlotPoll's default.
const DefaultSlotPoll = 10 * time.Second

// slotWaits look again at the PrePullImages whose pull Jobs wait for a
// full limit as soon as a slot of that limit is freed: one goroutine per
// limit waited on, with a slots.Waiter (sharing the process's watch of
// the scope), wakes every PrePullImage that waits on it, whose next look
// tries the slots again (their compare-and-set decides who gets one). A
// free the watch misses is found by the look the deferral asked for,
// SlotPoll later.
type slotWaits struct {
	slots *slots.Slots
	poll  time.Duration
	wake  func(namespace, name string)
	ctx   context.Context
	stop  context.CancelFunc

	mu     sync.Mutex
	limits map[slots.Limit]map[[2]string]bool // PrePullImages waiting, by limit
}

func newSlotWaits(s *slots.Slots, poll time.Duration, wake func(namespace, name string)) *slotWaits {
	ctx, cancel := context.WithCancel(context.Background())
	return &slotWaits{slots: s, poll: poll, wake: wake, ctx: ctx, stop: cancel, limits: map[slots.Limit]map[[2]string]bool{}}
}

// add wakes namespace/name when a slot of the full limit is freed.
func (w *slotWaits) add(namespace, name string, full *slots.FullError) {
	l := slots.Limit{Scope: full.Scope, N: full.N}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ctx.Err() != nil {
		return
	}
	if images, ok := w.limits[l]; ok {
		images[[2]string{namespace, name}] = true
		return
	}
	waiter, err := w.slots.Waiter(l)
	if err != nil {
		return // an invalid limit: Acquire refuses it before it is ever full
	}
	w.limits[l] = map[[2]string]bool{{namespace, name}: true}
	go w.run(l, waiter)
}

// run wakes the PrePullImages waiting on l at each free (or poll) until
// none waits.
func (w *slotWaits) run(l slots.Limit, waiter *slots.Waiter) {
	defer waiter.Close()
	for {
		if _, err := waiter.Wait(w.ctx, w.poll); err != nil {
			return
		}
		w.mu.Lock()
		images := w.limits[l]
		if len(images) == 0 {
			delete(w.limits, l)
			w.mu.Unlock()
			return
		}
		w.limits[l] = map[[2]string]bool{}
		w.mu.Unlock()
		for k := range images {
			w.wake(k[0], k[1])
		}
	}
}

// close stops every wait.
func (w *slotWaits) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stop()
}
