package renderer

import (
	"context"
	"sync"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// catchUpWait bounds how long a render waits for the change feed to catch
// up: a feed that is slow or gone delays a render by at most this much.
const catchUpWait = 500 * time.Millisecond

// progress is the stream sequence of the last change feed message
// handled, and a way to wait for it to reach a sequence.
type progress struct {
	mu    sync.Mutex
	seq   uint64
	moved chan struct{} // closed when seq grows
}

// advance records that the message at seq has been handled (whatever the
// outcome: a failed one is retried later, not waited for).
func (p *progress) advance(seq uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if seq <= p.seq {
		return
	}
	p.seq = seq
	if p.moved != nil {
		close(p.moved)
		p.moved = nil
	}
}

// wait returns once a message at seq or later has been handled, or with
// ctx's error.
func (p *progress) wait(ctx context.Context, seq uint64) error {
	for {
		p.mu.Lock()
		if p.seq >= seq {
			p.mu.Unlock()
			return nil
		}
		if p.moved == nil {
			p.moved = make(chan struct{})
		}
		moved := p.moved
		p.mu.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// catchUp waits, at most catchUpWait, until every change the feed has
// delivered so far has been applied to the index: the changes that
// arrived while the previous render held the index then all go into the
// next render, instead of one render each. It asks the server what the
// feed delivered (one round trip) and, while more is pending on the
// server, asks again once that much is handled. It cannot fail a render:
// an unanswered question renders at once.
func (r *renderer) catchUp(ctx context.Context) {
	if r.feed == "" {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, catchUpWait)
	defer cancel()
	for {
		c, err := r.env.JS.Consumer(ctx, msg.StreamChanges, r.feed)
		if err != nil {
			return
		}
		info := c.CachedInfo()
		if r.handled.wait(ctx, info.Delivered.Stream) != nil || info.NumPending == 0 {
			return
		}
	}
}
