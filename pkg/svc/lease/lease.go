// Package lease lets one replica at a time hold a key of the leases bucket:
// the renderer replica that renders a target, the deployer replica that
// applies to an instance. Holding is a compare-and-set: a replica creates
// the key when it is absent and renews it (an update on the revision it
// wrote) every third of the TTL; the bucket expires a key its holder
// stopped renewing, so a dead replica's lease passes to another within one
// TTL.
//
// A renewal that fails without a verdict (a timeout, a NATS node gone, no
// responders) does not drop the lease: the bucket keeps the key for a TTL
// after the last write that landed, so the holder keeps it until then and
// retries quickly. A write whose reply was lost may still have landed: a
// conflict on renewal, or "exists" on create, is answered by reading the
// key, and a key that names this owner is adopted at the revision read
// (renewed at once if its TTL is over by this replica's clock). So a lease
// is lost only to another owner's write or to the TTL, never to one failed
// request.
//
// Under Run, two replicas can, for at most the time a renewal takes to
// fail, both believe they hold a lease, so work under a lease must stay
// safe when done twice (rendering is: same state, same bundle hash,
// versions are compare-and-set). Keep closes that window: it bounds each
// renewal by what is left of the TTL and reports the loss by its end.
// Run keeps a lease for as long as a replica runs, and may give it up
// (yield) while the replica cannot do the work; Try, Keep and Release hold
// one for a single piece of work.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// Publisher writes a renewal with a TTL of its own (jetstream.JetStream).
type Publisher interface {
	PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// KV is the part of the leases bucket a lease needs.
type KV interface {
	Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error)
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// Lease is one key a replica tries to hold.
type Lease struct {
	kv    KV
	key   string
	owner string
	ttl   time.Duration
	every time.Duration
	now   func() time.Time
	// With a key TTL: renewals are published to subject with the TTL.
	pub     Publisher
	subject string

	mu    sync.Mutex
	held  bool
	rev   uint64
	until time.Time // held is good until then without another renewal
}

// Option configures a Lease.
type Option func(*Lease) error

// WithKeyTTL makes the key expire ttl after each write of it, whatever the
// bucket's TTL (the bucket must allow per-message TTLs): pub publishes the
// renewals to subject, the key's subject in the bucket's stream.
func WithKeyTTL(pub Publisher, subject string) Option {
	return func(l *Lease) error {
		if pub == nil || subject == "" {
			return errors.New("lease: a key TTL needs a publisher and the key's subject")
		}
		l.pub, l.subject = pub, subject
		return nil
	}
}

// WithClock sets the clock a lease measures its TTL with (tests).
func WithClock(now func() time.Time) Option {
	return func(l *Lease) error {
		if now == nil {
			return errors.New("lease: clock is nil")
		}
		l.now = now
		return nil
	}
}

// New returns a lease on key for owner, renewed every ttl/3. owner must be
// unique to this process: a key naming it is taken as this lease's own.
func New(kv KV, key, owner string, ttl time.Duration, opts ...Option) (*Lease, error) {
	if kv == nil || key == "" || owner == "" {
		return nil, errors.New("lease: bucket, key and owner are required")
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("lease: the bucket needs a TTL, got %v", ttl)
	}
	l := &Lease{kv: kv, key: key, owner: owner, ttl: ttl, every: ttl / 3, now: time.Now}
	for _, o := range opts {
		if err := o(l); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Held reports whether this replica holds the lease now.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// Run tries to take and keep the lease until ctx is done, calling changed on
// every gain and loss; on return it releases a held lease so another
// replica takes over at once. While yield returns true (nil: never), the
// replica cannot do the lease's work: it releases a held lease and does
// not try to take it.
func (l *Lease) Run(ctx context.Context, yield func() bool, changed func(held bool)) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			if l.Held() {
				l.release()
				changed(false)
			}
			return nil
		case <-t.C:
		}
		was := l.Held()
		var now bool
		var settled bool
		if yield != nil && yield() {
			l.release()
			now, settled = false, true
		} else {
			now, settled = l.Try(ctx)
		}
		if now != was {
			changed(now)
		}
		next := l.every
		if !settled {
			// No verdict: retry soon, well within what is left of the TTL.
			next = min(l.every/4, time.Second)
		}
		t.Reset(next)
	}
}

// Try makes one attempt to take or renew the lease. It reports whether the
// lease is held now, and whether the attempt had a verdict (false: the
// bucket did not answer, and a held lease is kept while its TTL lasts).
// A create (the lease not held) that found the key held, whose holder then
// freed it before it was read, is made again (up to createRaces times):
// the bucket answered, and the key is free. A renewal is not: a lease
// whose key is gone was lost.
func (l *Lease) Try(ctx context.Context) (held, settled bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	creating := !l.held
	for race := 0; ; race++ {
		start := l.now()
		rev, err := l.write(ctx)
		switch {
		case err == nil:
			l.held, l.rev, l.until = true, rev, start.Add(l.ttl)
			return true, true
		case errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) || msg.IsWrongLastSequence(err):
			// Someone wrote the key since: maybe this owner, by a write
			// whose reply was lost.
			held, settled, gone := l.adopt(ctx)
			if !gone || !creating || race == createRaces || ctx.Err() != nil {
				return held, settled
			}
		default:
			return l.keep(), false
		}
	}
}

// write is Try's write: a renewal of a held lease, else a create.
func (l *Lease) write(ctx context.Context) (uint64, error) {
	switch {
	case l.held && l.pub != nil:
		return l.renew(ctx)
	case l.held:
		return l.kv.Update(ctx, l.key, []byte(l.owner), l.rev)
	case l.pub != nil:
		return l.kv.Create(ctx, l.key, []byte(l.owner), jetstream.KeyTTL(l.ttl))
	default:
		return l.kv.Create(ctx, l.key, []byte(l.owner))
	}
}

// createRaces bounds how many times Try creates the key again after the
// key it found held was gone when read.
const createRaces = 8

// renew is an Update of the key with its TTL: a publish on the revision
// this lease wrote last.
func (l *Lease) renew(ctx context.Context) (uint64, error) {
	ack, err := l.pub.PublishMsg(ctx, &nats.Msg{Subject: l.subject, Data: []byte(l.owner)},
		jetstream.WithExpectLastSequencePerSubject(l.rev), jetstream.WithMsgTTL(l.ttl))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// adopt reads the key after a conflict: a key naming this owner is this
// lease's, at the revision read. It also reports whether the key was gone
// (expired or released since the conflict).
func (l *Lease) adopt(ctx context.Context) (held, settled, gone bool) {
	e, err := l.kv.Get(ctx, l.key)
	switch {
	case err == nil && string(e.Value()) == l.owner:
		l.held, l.rev, l.until = true, e.Revision(), e.Created().Add(l.ttl)
		if !l.now().Before(l.until) {
			// Our write, but its TTL is over by our clock: the bucket
			// may drop it any moment and another owner take it. Held
			// only if a renewal on it lands now.
			held, settled = l.renewStale(ctx)
			return held, settled, false
		}
		return true, true, false
	case err == nil:
		// Another owner's.
		l.held = false
		return false, true, false
	case errors.Is(err, jetstream.ErrKeyNotFound):
		// Already gone: the next attempt creates it if nobody else does.
		l.held = false
		return false, false, true
	default:
		return l.keep(), false, false
	}
}

// renewStale renews an adopted key whose TTL is over by this lease's
// clock. A conflict means someone wrote it since: the next attempt reads
// it again.
func (l *Lease) renewStale(ctx context.Context) (held, settled bool) {
	start := l.now()
	var rev uint64
	var err error
	if l.pub != nil {
		rev, err = l.renew(ctx)
	} else {
		rev, err = l.kv.Update(ctx, l.key, []byte(l.owner), l.rev)
	}
	if err != nil {
		l.held = false
		return false, false
	}
	l.rev, l.until = rev, start.Add(l.ttl)
	return true, true
}

// keep decides a held lease after an attempt without a verdict: it stays
// held while the last write's TTL lasts.
func (l *Lease) keep() bool {
	if l.held && !l.now().Before(l.until) {
		l.held = false
	}
	return l.held
}

// Keep renews a lease taken with Try every third of its TTL until ctx is
// done, and calls lost (once) and returns if the lease is lost: taken by
// another owner, or its TTL over without a renewal landing. Each attempt
// is bounded by what is left of the TTL (counted from the start of the
// last write that landed, which is before the bucket counts it from), and
// attempts without a verdict are retried within it: so lost is called no
// later than the TTL's end, before the bucket lets another owner take the
// key, even while a renewal hangs unanswered.
func (l *Lease) Keep(ctx context.Context, lost func()) {
	t := time.NewTimer(l.next(true))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		held, settled := l.tryWithin(ctx)
		if !held {
			if ctx.Err() == nil {
				lost()
			}
			return
		}
		t.Reset(l.next(settled))
	}
}

// tryWithin is Try on a held lease bounded by what is left of its TTL; a
// lease whose TTL is over by now is lost without asking.
func (l *Lease) tryWithin(ctx context.Context) (held, settled bool) {
	l.mu.Lock()
	left := l.until.Sub(l.now())
	if l.held && left <= 0 {
		l.held = false
	}
	held = l.held
	l.mu.Unlock()
	if !held {
		return false, true
	}
	ctx, cancel := context.WithTimeout(ctx, left)
	defer cancel()
	return l.Try(ctx)
}

// next is how long Keep waits before the next attempt: a third of the TTL
// after a verdict, sooner after none; never past half of what is left of
// the TTL after a verdict (an adopted key may have little left), never
// past its end after none.
func (l *Lease) next(settled bool) time.Duration {
	l.mu.Lock()
	left := l.until.Sub(l.now())
	l.mu.Unlock()
	if settled {
		return max(min(l.every, left/2), 0)
	}
	return max(min(l.every/4, time.Second, left), 0)
}

// Release gives a held lease up at once (deleting the key at the revision
// this lease wrote), so that another replica can take it without waiting
// for the TTL.
func (l *Lease) Release() { l.release() }

func (l *Lease) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.held {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = l.kv.Delete(ctx, l.key, jetstream.LastRevision(l.rev))
	l.held = false
}
