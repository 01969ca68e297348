// Package debounce coalesces bursts of events into few actions. With the
// leading edge on, the first event after a quiet period fires at once; every
// event within Wait of the previous one postpones a single trailing fire to
// Wait after the last event. A burst of any length thus costs at most two
// fires (one at each edge) and a lone event costs one. Fire runs on a timer
// goroutine, never concurrently with itself.
package debounce

import (
	"errors"
	"sync"
	"time"
)

// Debouncer coalesces Pokes into calls of fire.
type Debouncer struct {
	wait    time.Duration
	leading bool
	fire    func()

	mu      sync.Mutex
	timer   *time.Timer
	last    time.Time // last poke
	firing  sync.Mutex
	stopped bool
}

// New returns a Debouncer; wait must not be negative.
func New(wait time.Duration, leading bool, fire func()) (*Debouncer, error) {
	if wait < 0 {
		return nil, errors.New("debounce: negative wait")
	}
	if fire == nil {
		return nil, errors.New("debounce: nil fire")
	}
	return &Debouncer{wait: wait, leading: leading, fire: fire}, nil
}

// Poke records an event.
func (d *Debouncer) Poke() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	now := time.Now()
	quiet := d.timer == nil && (d.last.IsZero() || now.Sub(d.last) >= d.wait)
	d.last = now
	if quiet && d.leading {
		go d.run()
		// Open a window: events within it produce one trailing fire.
		d.timer = time.AfterFunc(d.wait, d.closeWindow)
		return
	}
	if d.timer != nil {
		d.timer.Stop()
	}
	d.timer = time.AfterFunc(d.wait, d.trailing)
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
