package controller

import (
	"context"
	"sync"
	"time"
)

// wakeups look again at a PrePullImage at a given time (a backoff or TTL
// ends), one timer per PrePullImage, the earliest winning.
type wakeups struct {
	fire func(ctx context.Context, namespace, name string)
	due  chan [2]string
	stop chan struct{} // closed when run returns

	mu     sync.Mutex
	timers map[[2]string]wakeup
}

type wakeup struct {
	at    time.Time
	timer *time.Timer
}

func newWakeups(fire func(ctx context.Context, namespace, name string)) *wakeups {
	return &wakeups{fire: fire, due: make(chan [2]string, 64), stop: make(chan struct{}), timers: map[[2]string]wakeup{}}
}

// at looks at namespace/name at t, unless a look is due sooner.
func (w *wakeups) at(namespace, name string, t time.Time) {
	key := [2]string{namespace, name}
	w.mu.Lock()
	defer w.mu.Unlock()
	if cur, ok := w.timers[key]; ok {
		if !cur.at.After(t) {
			return
		}
		cur.timer.Stop()
	}
	w.timers[key] = wakeup{at: t, timer: time.AfterFunc(time.Until(t), func() {
		w.mu.Lock()
		delete(w.timers, key)
		w.mu.Unlock()
		select {
		case w.due <- key:
		case <-w.stop:
		}
	})}
}

// run fires due looks until ctx is done.
func (w *wakeups) run(ctx context.Context) {
	defer func() {
		close(w.stop)
		w.mu.Lock()
		defer w.mu.Unlock()
		for k, t := range w.timers {
			t.timer.Stop()
			delete(w.timers, k)
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-w.due:
			w.fire(ctx, key[0], key[1])
		}
	}
}
