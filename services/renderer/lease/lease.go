// Package lease decides which renderer replica renders a target: the one
// holding the target's key in the leases bucket. Holding is a
// compare-and-set: a replica creates the key when it is absent and renews it
// (an update on the revision it wrote) every third of the bucket's TTL; the
// bucket expires a key its holder stopped renewing, so a dead replica's
// lease passes to another within one TTL. Two replicas can, for at most the
// time a renewal takes to fail, both believe they hold a lease; rendering is
// idempotent (same state, same bundle hash; versions are compare-and-set),
// so that costs nothing but a render.
package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// KV is the part of the leases bucket a lease needs.
type KV interface {
	Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error)
	Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error)
	Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error
}

// Lease is one key a replica tries to hold.
type Lease struct {
	kv    KV
	key   string
	owner string
	every time.Duration

	mu   sync.Mutex
	held bool
	rev  uint64
}

// New returns a lease on key for owner, renewed every ttl/3.
func New(kv KV, key, owner string, ttl time.Duration) (*Lease, error) {
	if kv == nil || key == "" || owner == "" {
		return nil, errors.New("lease: bucket, key and owner are required")
	}
	if ttl <= 0 {
		return nil, fmt.Errorf("lease: the bucket needs a TTL, got %v", ttl)
	}
	return &Lease{kv: kv, key: key, owner: owner, every: ttl / 3}, nil
}

// Held reports whether this replica holds the lease now.
func (l *Lease) Held() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

// Run tries to take and keep the lease until ctx is done, calling changed on
// every gain and loss; on return it releases a held lease so another
// replica takes over at once.
func (l *Lease) Run(ctx context.Context, changed func(held bool)) error {
	t := time.NewTicker(l.every)
	defer t.Stop()
	for {
		was := l.Held()
		now := l.try(ctx)
		if now != was {
			changed(now)
		}
		select {
		case <-ctx.Done():
			l.release()
			return nil
		case <-t.C:
		}
	}
}

func (l *Lease) try(ctx context.Context) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	var rev uint64
	var err error
	if l.held {
		rev, err = l.kv.Update(ctx, l.key, []byte(l.owner), l.rev)
	} else {
		rev, err = l.kv.Create(ctx, l.key, []byte(l.owner))
	}
	l.held = err == nil
	l.rev = rev
	return l.held
}

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
