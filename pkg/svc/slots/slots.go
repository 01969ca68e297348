// Package slots holds concurrency limits across any number of replicas:
// "at most 10 pulls at once in the cluster, 2 per node, 4 per registry
// host". A Limit of n in a scope is n keys of the leases bucket
// (msg.SlotKey(scope, 0..n-1)); a piece of work holds a slot by creating
// one of them (compare-and-set) with a TTL of its own, renews it every
// third of the TTL, and frees it by deleting it. Nothing is counted in
// memory, so killing any replica at any moment never frees or adds a slot.
//
// The contract:
//
//   - At any instant, at most n owners hold a slot of a Limit of n. A
//     holder whose renewals get no answer (a timeout, a NATS node gone)
//     keeps its slots while their TTL lasts, counted from the start of the
//     last renewal that landed, and Lost is closed by its end; the bucket
//     counts the same TTL from when it stored that renewal, later, so the
//     key outlives the holder's belief and nobody else can take the slot
//     before. The window in which two owners both act on one slot is
//     therefore only: the time the caller takes to stop its work once Lost
//     is closed, plus, for a slot adopted from an earlier holder (whose age
//     is read from the key's server timestamp), by how much the NATS
//     server's clock runs ahead of the holder's.
//   - A dead holder's slot is free TTL after its last renewal that landed,
//     by itself; or at once to the same owner: owner names the work, not
//     the process, and Acquire adopts a key naming its owner (another
//     replica taking over work that still runs keeps its slots rather than
//     taking new ones). Two live Helds of one owner share its slots, so at
//     most one should exist at a time.
//   - Acquire takes one slot of every limit or none: a full limit (every
//     slot held by another owner, each answered) releases what was taken
//     and returns a *FullError (errors.Is ErrFull) naming the scope; a slot
//     that got no answer is not taken as full: ErrUnavailable. Slots are
//     tried starting at hash(owner) mod n, so owners spread over the keys.
//   - A write whose reply was lost may have landed: a key it left naming
//     the owner is adopted by the owner's next Acquire, or expires after
//     its TTL. A scope can run short of slots for a TTL, never over.
//   - Work refused with ErrFull waits with a Waiter of the full limit: it
//     returns as soon as a slot of the scope is freed (released, or expired
//     after its holder died: the bucket leaves a delete marker where a key's
//     TTL ended, which the scope's watch sees), or after the caller's poll
//     interval. Waking is a hint; Acquire decides who gets the slot.
package slots

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/lease"
)

// DefaultTTL is how long a slot outlives its holder's last renewal.
const DefaultTTL = 10 * time.Second

var (
	// ErrFull: every slot of a limit is held by another owner.
	ErrFull = errors.New("slots: limit reached")
	// ErrUnavailable: the leases bucket did not answer for some slot, and
	// no other slot of the limit was free.
	ErrUnavailable = errors.New("slots: the leases bucket did not answer")
	// ErrInvalid: a bad option, owner or limit.
	ErrInvalid = errors.New("slots: invalid argument")
	// ErrLost: a held slot was taken by another owner, or its TTL ended
	// without a renewal landing.
	ErrLost = errors.New("slots: slot lost")
)

// FullError names the limit that is full. errors.Is(err, ErrFull).
type FullError struct {
	Scope string
	N     int
}

func (e *FullError) Error() string {
	return fmt.Sprintf("%v: all %d slots of %s are held", ErrFull, e.N, e.Scope)
}

// Is makes a *FullError match ErrFull.
func (e *FullError) Is(target error) bool { return target == ErrFull }

// Limit is at most N holders at once in Scope (see msg.CheckSlotScope;
// msg.ClusterSlotScope, msg.NodeSlotScope, msg.RegistrySlotScope).
type Limit struct {
	Scope string
	N     int
}

func (l Limit) check() error {
	if err := msg.CheckSlotScope(l.Scope); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if l.N < 1 {
		return fmt.Errorf("%w: limit %s must be at least 1, got %d", ErrInvalid, l.Scope, l.N)
	}
	return nil
}

// Slots acquires slots of limits in the leases bucket.
type Slots struct {
	kv      lease.KV
	pub     lease.Publisher
	ttl     time.Duration
	observe func(scope string, delta int)
	frees   *frees
}

// Option configures Slots.
type Option func(*Slots) error

// WithTTL sets how long a slot outlives its holder's last renewal
// (DefaultTTL); at most msg.LeaseTTL, the bucket's own limit.
func WithTTL(ttl time.Duration) Option {
	return func(s *Slots) error {
		if ttl <= 0 || ttl > msg.LeaseTTL {
			return fmt.Errorf("%w: TTL must be in (0, %v], got %v", ErrInvalid, msg.LeaseTTL, ttl)
		}
		s.ttl = ttl
		return nil
	}
}

// WithObserver calls observe with +1 for each slot this process takes and
// -1 for each it frees, loses or abandons, per scope: the input of a gauge
// of held slots (summed over replicas, the slots in use).
func WithObserver(observe func(scope string, delta int)) Option {
	return func(s *Slots) error {
		if observe == nil {
			return fmt.Errorf("%w: observer is nil", ErrInvalid)
		}
		s.observe = observe
		return nil
	}
}

// bucketNamer is how New checks it was given the leases bucket
// (jetstream.KeyValue is one).
type bucketNamer interface{ Bucket() string }

// New returns Slots over kv, the leases bucket (msg.BucketLeases); pub
// publishes renewals with their TTL to its keys' subjects
// (msg.LeaseSubject).
func New(kv lease.KV, pub lease.Publisher, opts ...Option) (*Slots, error) {
	if kv == nil || pub == nil {
		return nil, fmt.Errorf("%w: the leases bucket and a publisher are required", ErrInvalid)
	}
	if b, ok := kv.(bucketNamer); ok && b.Bucket() != msg.BucketLeases {
		return nil, fmt.Errorf("%w: slots live in bucket %s, not %s", ErrInvalid, msg.BucketLeases, b.Bucket())
	}
	s := &Slots{kv: kv, pub: pub, ttl: DefaultTTL, observe: func(string, int) {}, frees: newFrees(kv)}
	for _, o := range opts {
		if err := o(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Acquire takes one slot of every limit for owner, a stable id of the work
// (not of the process), or none. Limits are taken smallest first, so a
// full one is met before larger ones are held. The slots are renewed until
// Release or Abandon; ctx bounds the acquiring only.
func (s *Slots) Acquire(ctx context.Context, owner string, limits ...Limit) (*Held, error) {
	if owner == "" {
		return nil, fmt.Errorf("%w: owner is empty", ErrInvalid)
	}
	if len(limits) == 0 {
		return nil, fmt.Errorf("%w: no limit", ErrInvalid)
	}
	order := slices.Clone(limits)
	for i, l := range order {
		if err := l.check(); err != nil {
			return nil, err
		}
		for _, o := range order[:i] {
			if o.Scope == l.Scope {
				return nil, fmt.Errorf("%w: scope %s given twice", ErrInvalid, l.Scope)
			}
		}
	}
	slices.SortStableFunc(order, func(a, b Limit) int { return a.N - b.N })
	h := &Held{owner: owner, observe: s.observe, lost: make(chan struct{})}
	for _, l := range order {
		sl, err := s.take(ctx, owner, l)
		if err != nil {
			for _, t := range h.slots {
				t.lease.Release()
			}
			return nil, err
		}
		h.slots = append(h.slots, sl)
	}
	h.keep()
	return h, nil
}

// retries is how many times take asks again about a slot after an attempt
// without a verdict.
const retries = 3

// take tries the slots of l from hash(owner) mod n until one is held.
// Once a slot was found held by another owner, the scope is busy: the next
// slots are read before a create is tried (one request for a held slot,
// against three for a create that conflicts).
func (s *Slots) take(ctx context.Context, owner string, l Limit) (*slot, error) {
	f := fnv.New32a()
	_, _ = f.Write([]byte(owner))
	start := int(f.Sum32() % uint32(l.N))
	unanswered, busy := 0, false
	for k := range l.N {
		i := (start + k) % l.N
		key := msg.SlotKey(l.Scope, i)
		if busy {
			other, err := s.heldByOther(ctx, key, owner)
			if err != nil {
				if ctx.Err() != nil {
					return nil, fmt.Errorf("slots: acquire %s: %w", l.Scope, ctx.Err())
				}
				unanswered++
				continue
			}
			if other {
				continue
			}
		}
		ls, err := lease.New(s.kv, key, owner, s.ttl, lease.WithKeyTTL(s.pub, msg.LeaseSubject(key)))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		held, settled := ls.Try(ctx)
		for retry := 0; !held && !settled && retry < retries && ctx.Err() == nil; retry++ {
			// No verdict: the bucket did not answer (a slot freed
			// between the create that found it held and the read of
			// its holder is created again within Try). Ask again.
			held, settled = ls.Try(ctx)
		}
		if held {
			return &slot{Slot: Slot{Scope: l.Scope, Index: i}, lease: ls}, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("slots: acquire %s: %w", l.Scope, err)
		}
		if settled {
			busy = true
		} else {
			unanswered++
		}
	}
	if unanswered > 0 {
		return nil, fmt.Errorf("%w: %d of the %d slots of %s, and the others are held", ErrUnavailable, unanswered, l.N, l.Scope)
	}
	return nil, &FullError{Scope: l.Scope, N: l.N}
}

// heldByOther reads key: true when another owner holds it; false when it
// is free or names owner (a create then takes or adopts it).
func (s *Slots) heldByOther(ctx context.Context, key, owner string) (bool, error) {
	e, err := s.kv.Get(ctx, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return string(e.Value()) != owner, nil
}

// Slot is one slot held.
type Slot struct {
	Scope string
	Index int
}

// Key is the slot's key in the leases bucket.
func (s Slot) Key() string { return msg.SlotKey(s.Scope, s.Index) }

type slot struct {
	Slot
	lease   *lease.Lease
	counted bool // reported to the observer, not yet taken back
}

// Held is one slot of each limit, renewed every third of the TTL until
// Release or Abandon.
type Held struct {
	owner   string
	observe func(scope string, delta int)
	slots   []*slot
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	lost    chan struct{}

	mu   sync.Mutex
	err  error // the first loss
	done bool  // released or abandoned
}

// keep starts renewing every slot.
func (h *Held) keep() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.mu.Lock()
	for _, s := range h.slots {
		s.counted = true
		h.observe(s.Scope, 1)
	}
	h.mu.Unlock()
	for _, s := range h.slots {
		h.wg.Go(func() { s.lease.Keep(ctx, func() { h.lose(s) }) })
	}
}

func (h *Held) lose(s *slot) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s.counted {
		s.counted = false
		h.observe(s.Scope, -1)
	}
	if h.err == nil {
		h.err = fmt.Errorf("%w: %s of %s (owner %s)", ErrLost, s.Key(), s.Scope, h.owner)
		close(h.lost)
	}
}

// Owner is the work the slots are held for.
func (h *Held) Owner() string { return h.owner }

// Slots are the slots held, one per limit, smallest limit first.
func (h *Held) Slots() []Slot {
	out := make([]Slot, len(h.slots))
	for i, s := range h.slots {
		out[i] = s.Slot
	}
	return out
}

// Lost is closed when any slot is lost (Err says which): the work must
// stop, since another owner may now hold that slot. The other slots are
// renewed until Release.
func (h *Held) Lost() <-chan struct{} { return h.lost }

// Err is nil while every slot is held, then an ErrLost naming the first
// slot lost.
func (h *Held) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Release stops renewing and frees every slot still held at once.
func (h *Held) Release() { h.stop(true) }

// Abandon stops renewing without freeing: the slots stay taken until their
// TTL ends, or until the owner's next Acquire adopts them. It is what a
// replica that stops while its work goes on elsewhere does.
func (h *Held) Abandon() { h.stop(false) }

func (h *Held) stop(free bool) {
	h.mu.Lock()
	if h.done {
		h.mu.Unlock()
		return
	}
	h.done = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
	if free {
		for _, s := range h.slots {
			s.lease.Release()
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, s := range h.slots {
		if s.counted {
			s.counted = false
			h.observe(s.Scope, -1)
		}
	}
}
