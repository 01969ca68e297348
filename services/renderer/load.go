package renderer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/sync/errgroup"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
)

// loadBuffer is how many entries wait between the watch and the decoders,
// and between the decoders and the index.
const loadBuffer = 1024

// errWatchEnded is a watch of the bucket that closed before it delivered
// every current value.
var errWatchEnded = errors.New("the watch of the resources bucket ended before its current values were read")

// load reads the sync markers and then the whole resources bucket. In that
// order: a source writes its objects before its marker, so every object of
// a marker seen here is in the bucket by the time it is read.
func (r *renderer) load(ctx context.Context) error {
	all, last, err := r.readBucket(ctx)
	if err != nil {
		return fmt.Errorf("renderer: load: %w", err)
	}
	r.ix.UpsertMany(all)
	r.loaded, r.seen = last, last
	r.checkSynced()
	return nil
}

// readBucket reads the sync markers and then every current value of the
// resources bucket, decoded; last is the bucket's last revision read
// before its values, so every key's value read is its last write up to
// last, or a later one.
func (r *renderer) readBucket(ctx context.Context) (all []index.Put, last uint64, err error) {
	keys, err := r.status.ListKeysFiltered(ctx, "sync.>")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, 0, fmt.Errorf("sync markers: %w", err)
	}
	if keys != nil {
		for k := range keys.Keys() {
			e, err := r.status.Get(ctx, k)
			if err != nil {
				continue
			}
			var st msg.SyncStatus
			if msg.Decode(e.Value(), &st) == nil {
				// Only raised: a read behind one already taken (another
				// NATS node's copy) does not lower what must be seen.
				k := st.Source + "." + st.Type
				r.markers[k] = max(r.markers[k], st.Revision)
			}
		}
	}
	stream, err := r.env.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	if err != nil {
		return nil, 0, err
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	w, err := msg.Watch(ctx, r.kv, []string{jetstream.AllKeys}, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, 0, err
	}
	defer msg.StopWatch(w)
	all, err = r.readAll(ctx, w.Updates())
	if err != nil {
		return nil, 0, err
	}
	return all, info.State.LastSeq, nil
}

// readWhole reads the whole resources bucket into the index: every key at
// its value's revision, and every key the index holds that the bucket no
// longer has deleted at the revision read before the values. The changes
// up to that revision are then known in the index (onChange skips them),
// and rendering opens if the sync markers read are all covered.
func (r *renderer) readWhole(ctx context.Context) error {
	start := time.Now()
	all, last, err := r.readBucket(ctx)
	if err != nil {
		return err
	}
	present := make(map[[2]string]bool, len(all))
	for _, p := range all {
		present[[2]string{p.Type, p.ID}] = true
	}
	r.ix.UpsertMany(all)
	for _, typ := range r.ix.Types() {
		for _, it := range r.ix.Store(typ).Items() {
			if !present[[2]string{typ, it.ID}] && it.Rev <= last {
				r.ix.Delete(typ, it.ID, last)
			}
		}
	}
	r.loaded = max(r.loaded, last)
	r.env.Log.Info("read the whole resources bucket: every source has synced", "objects", len(all), "revision", last, "took", time.Since(start))
	if last > r.seen {
		r.seen = last
	}
	r.checkSynced()
	return nil
}

// syncWhole, before the first sync, reads the bucket whole (readWhole)
// once every expected marker is in and a marker or a change left to it
// (skipped) is beyond what the index has seen. At a start beside
// the sources every object first comes as a change, and reading each
// change's key, a round trip each, held the first render back by seconds
// at a few thousand objects; one read of the bucket takes a fraction.
func (r *renderer) syncWhole(ctx context.Context) error {
	select {
	case <-r.synced:
		return nil
	default:
	}
	behind := r.skipped > r.seen
	for k := range r.expected {
		rev, ok := r.markers[k]
		if !ok {
			return nil
		}
		behind = behind || rev > r.seen
	}
	if !behind {
		r.checkSynced()
		return nil
	}
	if err := r.readWhole(ctx); err != nil {
		return msg.Retry(fmt.Errorf("read the resources bucket: %w", err), time.Second)
	}
	return nil
}

// readAll decodes the current values a watch delivers (up to its nil
// marker) and prepares them for the index: one goroutine reads the watch,
// one per CPU decodes (a snapshot
// has each key once, so the order they are decoded in does not matter; the
// index takes them in one write, sorting its id lists once). A watch that
// ends early gives nothing.
func (r *renderer) readAll(ctx context.Context, updates <-chan jetstream.KeyValueEntry) ([]index.Put, error) {
	g, ctx := errgroup.WithContext(ctx)
	raw := make(chan jetstream.KeyValueEntry, loadBuffer)
	g.Go(func() error {
		defer close(raw)
		for {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case e, ok := <-updates:
				switch {
				case !ok:
					return errWatchEnded
				case e == nil:
					return nil
				}
				select {
				case raw <- e:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		}
	})
	decoded := make(chan index.Put, loadBuffer)
	var workers sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		workers.Go(func() {
			for e := range raw {
				p, ok := r.follow.decodeEntry(e)
				if !ok {
					continue
				}
				// Its index keys read here, on every CPU; what waits
				// for the index holds the object's JSON, not its tree.
				p, err := r.ix.Prepare(p)
				if err != nil {
					continue // unreachable: decodeEntry decoded it
				}
				select {
				case decoded <- p:
				case <-ctx.Done():
				}
			}
		})
	}
	go func() {
		workers.Wait()
		close(decoded)
	}()
	var all []index.Put
	for p := range decoded {
		all = append(all, p)
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	return all, nil
}
