package validator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
)

// beat keeps a heartbeat for every kind this replica serves in the leases
// bucket, renewed every third of ttl, and deletes them when ctx ends so the
// kinds stop being expected at once on a clean stop.
func beat(ctx context.Context, kv jetstream.KeyValue, replica string, kinds []string, ttl time.Duration, log *slog.Logger) error {
	put := func() {
		for _, k := range kinds {
			data, err := msg.Encode(msg.Heartbeat{Kind: k, Replica: replica, At: time.Now().UTC()})
			if err == nil {
				_, err = kv.Put(ctx, msg.KindHeartbeatKey(k, replica), data)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("heartbeat not written", "kind", k, "err", err)
			}
		}
	}
	put()
	t := time.NewTicker(ttl / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			// ctx is done: delete with a fresh, bounded one.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
			for _, k := range kinds {
				_ = kv.Delete(dctx, msg.KindHeartbeatKey(k, replica))
			}
			cancel()
			return nil
		case <-t.C:
			put()
		}
	}
}

// registry follows the kinds' heartbeats.
type registry struct {
	ttl   time.Duration
	ready chan struct{}

	mu   sync.Mutex
	seen map[string]time.Time // heartbeat key -> when it was written
}

func newRegistry(ttl time.Duration) *registry {
	return &registry{ttl: ttl, ready: make(chan struct{}), seen: map[string]time.Time{}}
}

// follow watches the heartbeat keys until ctx is done.
// A watch that ends (the NATS node serving it went away) is started again;
// heartbeats expire by their own TTL meanwhile, so none is missed for long.
func (r *registry) follow(ctx context.Context, kv jetstream.KeyValue, log *slog.Logger) error {
	delay := 100 * time.Millisecond
	for {
		err := r.watch(ctx, kv)
		if ctx.Err() != nil {
			return nil
		}
		log.WarnContext(ctx, "heartbeat watch ended; watching again", "err", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (r *registry) watch(ctx context.Context, kv jetstream.KeyValue) error {
	w, err := msg.Watch(ctx, kv, []string{msg.KindHeartbeatPrefix + ">"})
	if err != nil {
		return fmt.Errorf("validator: watch heartbeats: %w", err)
	}
	defer msg.StopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-w.Updates():
			if !ok {
				return errors.New("validator: heartbeat watch closed")
			}
			r.update(e)
		}
	}
}

func (r *registry) update(e jetstream.KeyValueEntry) {
	if e == nil { // the initial values are in
		select {
		case <-r.ready:
		default:
			close(r.ready)
		}
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Operation() != jetstream.KeyValuePut {
		delete(r.seen, e.Key())
		return
	}
	r.seen[e.Key()] = e.Created()
}

// live returns the kinds with a heartbeat younger than the TTL, sorted,
// once the initial values are read.
func (r *registry) live(ctx context.Context) ([]string, error) {
	select {
	case <-r.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var kinds []string
	for key, at := range r.seen {
		if k, ok := msg.KindOfHeartbeatKey(key); ok && time.Since(at) < r.ttl && !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	slices.Sort(kinds)
	return kinds, nil
}

// expected returns the kinds a target's bundles must be checked by.
func (r *registry) expected(ctx context.Context, v config.Validate) ([]string, error) {
	if v.Expect != config.ExpectRegistered {
		return v.Kinds, nil
	}
	live, err := r.live(ctx)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(v.Kinds)
	for _, k := range live {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}
