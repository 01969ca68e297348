package slots

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/pause"
)

// Waiting for a free slot. A caller refused with a *FullError waits with a
// Waiter of the full limit instead of asking again in a loop: the Waiter
// returns as soon as a slot of the scope is seen freed (released, or
// expired after its holder died), and at the latest after the caller's
// poll interval, so a free slot the watch missed is found by the next
// Acquire anyway.
//
// A process has one KV watch per scope somebody waits on (msg.SlotFilter),
// shared by all its Waiters of that scope and stopped a while after the
// last one closed. From it the process keeps which slots of the scope are
// held: a put holds a slot, a delete, a purge or the marker the bucket
// leaves where a key's TTL ended frees it. What the watch says is only a
// hint: the slots are taken by Acquire's compare-and-set, so Waiters of any
// number of processes woken together for one slot get it once.

// DefaultLinger is how long a scope's watch outlives its last Waiter, so
// that work waiting again soon does not start a new one.
const DefaultLinger = 30 * time.Second

// watchRetry bounds the delay before a failed or ended watch is started
// again.
const (
	watchRetryMin = 100 * time.Millisecond
	watchRetryMax = 5 * time.Second
)

// errWatchEnded: the watch's updates stopped (its subscription closed).
var errWatchEnded = errors.New("slots: the watch of the scope ended")

// watcher is the part of the leases bucket Waiters watch it with
// (jetstream.KeyValue is one). Slots over a bucket without it have
// Waiters that only poll.
type watcher interface {
	Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// WithLinger sets how long a scope's watch outlives its last Waiter
// (DefaultLinger).
func WithLinger(d time.Duration) Option {
	return func(s *Slots) error {
		if d < 0 {
			return fmt.Errorf("%w: linger must not be negative, got %v", ErrInvalid, d)
		}
		s.frees.linger = d
		return nil
	}
}

// WithLogger sets where a watch that fails (and is started again) is
// reported; by default nowhere, the Waiters then only poll.
func WithLogger(log *slog.Logger) Option {
	return func(s *Slots) error {
		if log == nil {
			return fmt.Errorf("%w: logger is nil", ErrInvalid)
		}
		s.frees.log = log
		return nil
	}
}

// frees keeps, for each scope somebody waits on, which of its slots are
// held, as one watch of the bucket shows them.
type frees struct {
	w      watcher // nil: no watch, Waiters poll
	linger time.Duration
	log    *slog.Logger

	mu     sync.Mutex
	scopes map[string]*scopeView
}

func newFrees(kv any) *frees {
	f := &frees{linger: DefaultLinger, log: slog.New(slog.DiscardHandler), scopes: map[string]*scopeView{}}
	if w, ok := kv.(watcher); ok {
		f.w = w
	}
	return f
}

// scopeView is what the watch of one scope shows. Fields under frees.mu.
type scopeView struct {
	scope   string
	waiters int
	ready   bool         // held reflects the watch (false before its first values, and while it is started again)
	held    map[int]bool // slot index -> held
	gen     uint64       // counts changes of ready and held
	changed chan struct{}
	cancel  context.CancelFunc
	idle    *time.Timer // stops the watch once nobody waited for linger
}

// signalLocked records a change: Waiters look again.
func (v *scopeView) signalLocked() {
	v.gen++
	close(v.changed)
	v.changed = make(chan struct{})
}

// freeLocked reports whether the view shows a slot of a limit of n free.
func (v *scopeView) freeLocked(n int) bool {
	held := 0
	for i, h := range v.held {
		if h && i < n {
			held++
		}
	}
	return held < n
}

// join registers a Waiter of scope, starting the scope's watch if none
// runs.
func (f *frees) join(scope string) *scopeView {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.scopes[scope]
	if v == nil {
		v = &scopeView{scope: scope, held: map[int]bool{}, changed: make(chan struct{})}
		f.scopes[scope] = v
		if f.w != nil {
			ctx, cancel := context.WithCancel(context.Background())
			v.cancel = cancel
			go f.run(ctx, v)
		}
	}
	if v.idle != nil {
		v.idle.Stop()
		v.idle = nil
	}
	v.waiters++
	return v
}

// leave unregisters a Waiter of v; the watch stops after linger without
// another.
func (f *frees) leave(v *scopeView) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v.waiters--; v.waiters > 0 {
		return
	}
	if f.linger == 0 {
		f.stopLocked(v)
		return
	}
	v.idle = time.AfterFunc(f.linger, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if v.waiters == 0 {
			f.stopLocked(v)
		}
	})
}

// stopLocked stops v's watch and forgets it.
func (f *frees) stopLocked(v *scopeView) {
	if f.scopes[v.scope] != v {
		return
	}
	delete(f.scopes, v.scope)
	if v.cancel != nil {
		v.cancel()
	}
}

// run watches v's scope until ctx is done, starting the watch again after
// it fails or ends.
func (f *frees) run(ctx context.Context, v *scopeView) {
	delay := watchRetryMin
	for {
		start := time.Now()
		err := f.watch(ctx, v)
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		if v.ready {
			v.ready = false
			v.signalLocked()
		}
		if v.waiters == 0 {
			// Nobody waits: no need to keep a broken watch for linger.
			f.stopLocked(v)
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
		if time.Since(start) > watchRetryMax {
			delay = watchRetryMin // it had worked a while
		}
		f.log.Warn("watching the slots of a scope for frees failed; waiting pulls poll until it is back", "scope", v.scope, "err", err, "retry_in", delay)
		if pause.For(ctx, delay) != nil {
			return
		}
		delay = min(2*delay, watchRetryMax)
	}
}

// watch runs one watch of v's scope: it reads the slots' last values,
// then applies every change, until ctx is done or the watch ends.
func (f *frees) watch(ctx context.Context, v *scopeView) error {
	kw, err := f.w.Watch(ctx, msg.SlotFilter(v.scope), jetstream.MetaOnly())
	if err != nil {
		return fmt.Errorf("watch %s: %w", msg.SlotFilter(v.scope), err)
	}
	defer msg.StopWatch(kw)
	initial := map[int]bool{} // the last values, until the watch says it gave them all
	for {
		var e jetstream.KeyValueEntry
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e, ok = <-kw.Updates():
		}
		switch {
		case !ok:
			return errWatchEnded
		case e == nil:
			f.mu.Lock()
			if initial != nil {
				v.held, v.ready, initial = initial, true, nil
				v.signalLocked()
			}
			f.mu.Unlock()
			continue
		}
		_, i, err := msg.ParseSlotKey(e.Key())
		if err != nil {
			continue // not a slot key: nothing to wait for
		}
		held := e.Operation() == jetstream.KeyValuePut
		if initial != nil {
			initial[i] = held
			continue
		}
		f.mu.Lock()
		if v.held[i] != held {
			v.held[i] = held
			v.signalLocked()
		}
		f.mu.Unlock()
	}
}

// Waiter waits for a slot of one limit to be freed. Make one with
// Slots.Waiter once Acquire found the limit full, call Wait before each
// next Acquire, and Close it when done waiting. A Waiter is for one
// goroutine.
type Waiter struct {
	f     *frees
	v     *scopeView
	n     int
	woke  bool   // Wait returned before
	gen   uint64 // the view's changes when Wait returned last
	close sync.Once
}

// Waiter returns a Waiter for a slot of l. It shares the process's watch
// of l's scope, starting it if none runs.
func (s *Slots) Waiter(l Limit) (*Waiter, error) {
	if err := l.check(); err != nil {
		return nil, err
	}
	return &Waiter{f: s.frees, v: s.frees.join(l.Scope), n: l.N}, nil
}

// Wait returns true as soon as the watch shows a slot of the limit free,
// false once poll passed without (the caller then asks Acquire anyway),
// or ctx's error. The first Wait returns at once if a slot is free by the
// watch already (freed since the Acquire that found the limit full);
// later ones only after a change seen since the Wait before, so a slot
// the watch shows free but another took first (the watch had not shown it
// yet) does not make them return again and again.
func (w *Waiter) Wait(ctx context.Context, poll time.Duration) (bool, error) {
	t := time.NewTimer(poll)
	defer t.Stop()
	f := w.f
	for {
		f.mu.Lock()
		ready, free, gen, changed := w.v.ready, w.v.freeLocked(w.n), w.v.gen, w.v.changed
		f.mu.Unlock()
		if ready && free && (!w.woke || gen > w.gen) {
			w.woke, w.gen = true, gen
			return true, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-t.C:
			w.woke, w.gen = true, gen
			return false, nil
		case <-changed:
		}
	}
}

// Close ends the Waiter's share of the scope's watch.
func (w *Waiter) Close() {
	w.close.Do(func() { w.f.leave(w.v) })
}
