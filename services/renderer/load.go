package renderer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"

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
	keys, err := r.status.ListKeysFiltered(ctx, "sync.>")
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return fmt.Errorf("renderer: sync markers: %w", err)
	}
	if keys != nil {
		for k := range keys.Keys() {
			e, err := r.status.Get(ctx, k)
			if err != nil {
				continue
			}
			var st msg.SyncStatus
			if msg.Decode(e.Value(), &st) == nil {
				r.markers[st.Source+"."+st.Type] = st.Revision
			}
		}
	}
	stream, err := r.env.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	if err != nil {
		return fmt.Errorf("renderer: load: %w", err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("renderer: load: %w", err)
	}
	w, err := msg.Watch(ctx, r.kv, []string{jetstream.AllKeys}, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("renderer: load: %w", err)
	}
	defer func() { _ = w.Stop() }()
	if err := r.readAll(ctx, w.Updates()); err != nil {
		return fmt.Errorf("renderer: load: %w", err)
	}
	r.seen = info.State.LastSeq
	r.checkSynced()
	return nil
}

// readAll puts the current values a watch delivers (up to its nil marker)
// into the index: one goroutine reads the watch, one per CPU decodes, and
// the index takes every decoded object in one write, sorting its id lists
// once (a snapshot has each key once, so the order they are decoded in
// does not matter). A watch that ends early puts nothing in the index.
func (r *renderer) readAll(ctx context.Context, updates <-chan jetstream.KeyValueEntry) error {
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
		return err
	}
	r.ix.UpsertMany(all)
	return nil
}
