// Package debounce coalesces bursts of events into few actions. With the
// leading edge on, the first event after a quiet period fires at once; every
// event within Wait of the previous one postpones a single trailing fire to
// Wait after the last event. A burst of any length thus costs at most two
// fires (one at each edge) and a lone event costs one. With a maximum wait,
// a stream of events that never pauses for Wait still fires at least once
// per MaxWait, counted from the first event the trailing fire covers.
// PokeMore marks an event the caller knows is followed by more (a queued
// backlog): it never takes the leading edge, so a queued burst fires once. Fire
// runs on a timer goroutine, never concurrently with itself.
package debounce

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// Debouncer coalesces Pokes into calls of fire.
type Debouncer struct {
	wait    time.Duration
	maxWait time.Duration
	leading bool
	fire    func()

	mu      sync.Mutex
	timer   *time.Timer
	last    time.Time // last poke
	pending time.Time // first poke not covered by a fire yet (zero: none)
	firing  sync.Mutex
	stopped bool
}

// Option adjusts a Debouncer.
type Option func(*Debouncer) error

// WithMaxWait bounds how long a trailing fire can be postponed by a stream
// of events: at most d after the first event it covers. d must not be
// shorter than the wait; 0 means no bound.
func WithMaxWait(d time.Duration) Option {
	return func(db *Debouncer) error {
		if d < 0 {
			return fmt.Errorf("debounce: negative max wait %s", d)
		}
		if d > 0 && d < db.wait {
			return fmt.Errorf("debounce: max wait %s is shorter than the wait %s", d, db.wait)
		}
		db.maxWait = d
		return nil
	}
}

// New returns a Debouncer; wait must not be negative.
func New(wait time.Duration, leading bool, fire func(), opts ...Option) (*Debouncer, error) {
	if wait < 0 {
		return nil, errors.New("debounce: negative wait")
	}
	if fire == nil {
		return nil, errors.New("debounce: nil fire")
	}
	d := &Debouncer{wait: wait, leading: leading, fire: fire}
	for _, o := range opts {
		if err := o(d); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// Poke records an event.
func (d *Debouncer) Poke() { d.poke(d.leading) }

// PokeMore records an event that the caller knows more events follow (a
// backlog it has not read yet): it never fires the leading edge, so a burst
// that is already queued costs one fire.
func (d *Debouncer) PokeMore() { d.poke(false) }

func (d *Debouncer) poke(leading bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	now := time.Now()
	quiet := d.timer == nil && (d.last.IsZero() || now.Sub(d.last) >= d.wait)
	d.last = now
	if quiet && leading {
		go d.run()
		// Open a window: events within it produce one trailing fire.
		d.timer = time.AfterFunc(d.wait, d.closeWindow)
		return
	}
	if d.pending.IsZero() {
		d.pending = now
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timer = time.AfterFunc(d.delay(now), d.trailing)
}

// delay is how long the trailing fire waits from now: the wait, cut short
// so that the first pending event waits no longer than maxWait.
func (d *Debouncer) delay(now time.Time) time.Duration {
	if d.maxWait == 0 {
		return d.wait
	}
	return max(min(d.wait, d.pending.Add(d.maxWait).Sub(now)), 0)
}

// closeWindow ends a leading-edge window in which nothing else happened.
func (d *Debouncer) closeWindow() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.timer = nil
}

func (d *Debouncer) trailing() {
	d.mu.Lock()
	d.timer = nil
	d.pending = time.Time{}
	stopped := d.stopped
	d.mu.Unlock()
	if !stopped {
		d.run()
	}
}

func (d *Debouncer) run() {
	d.firing.Lock()
	defer d.firing.Unlock()
	d.fire()
}

// Stop cancels a pending fire and ignores later Pokes.
func (d *Debouncer) Stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stopped = true
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
}
