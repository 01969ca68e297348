package msg

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestStoreStateFresh(t *testing.T) {
	now := time.Now()
	day := 24 * time.Hour
	full := storeState{first: 1001, last: 2000, bytes: 1000, maxBytes: 1000, maxAge: 8 * day}
	half := storeState{first: 1, last: 500, bytes: 500, maxBytes: 1000, maxAge: 8 * day}
	for _, tc := range []struct {
		name   string
		st     storeState
		p      placement
		fresh  bool // by 1/2
		fresh4 bool // by 3/4
	}{
		{"new, stream full", full, placement{seq: 1990, at: now}, true, true},
		{"newer half, stream full", full, placement{seq: 1600, at: now}, true, false},
		{"older half, stream full", full, placement{seq: 1400, at: now}, false, false},
		{"discarded", full, placement{seq: 900, at: now}, false, false},
		{"oldest, stream half full", half, placement{seq: 1, at: now}, true, false},
		{"newest, stream half full", half, placement{seq: 499, at: now}, true, true},
		{"written after the state was read", full, placement{seq: 2100, at: now}, true, true},
		{"a day old", full, placement{seq: 1990, at: now.Add(-day - time.Minute)}, true, false},
		{"three days old", full, placement{seq: 1990, at: now.Add(-3 * day)}, false, false},
		{"no cap, no age limit", storeState{first: 1, last: 1 << 20, bytes: 1 << 40}, placement{seq: 1, at: now.Add(-100 * day)}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.st.fresh(tc.p, now); got != tc.fresh {
				t.Errorf("fresh = %v, want %v", got, tc.fresh)
			}
			if got := tc.st.freshBy(tc.p, now, 0.75); got != tc.fresh4 {
				t.Errorf("fresh by 3/4 = %v, want %v", got, tc.fresh4)
			}
		})
	}
}

// A reader whose cache is smaller than the bundle it reads grows it to
// hold the bundle (else each read would find none of it cached); one made
// WithChunkCache keeps its bound.
func TestChunkCacheGrowsWithBundles(t *testing.T) {
	js := provisionedJS(t)
	ctx := context.Background()
	var cfg []byte
	for i := range 20000 {
		cfg = fmt.Appendf(cfg, "backend be_%d\n  server s1 10.0.%d.%d:80 check\n", i, i/250, i%250)
	}
	b, err := NewBundle("web", "", "haproxy.cfg", []BundleFile{{Path: "haproxy.cfg", Kind: FileConfig, Content: cfg}})
	if err != nil {
		t.Fatal(err)
	}
	if err := NewBundleStore(js).PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	chunks := len(ChunkEnds(cfg))
	for _, tc := range []struct {
		name      string
		store     *BundleStore
		wantAtMin int // chunks cached at least
		wantAtMax int
	}{
		{"grows", func() *BundleStore {
			s := NewBundleStore(js)
			s.cache = newLRU[string, []byte](64<<10, func(b []byte) int { return len(b) })
			return s
		}(), chunks, chunks + 100}, // and the manifest's
		{"fixed", NewBundleStore(js, WithChunkCache(64<<10)), 1, 64 << 10 / ChunkMin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.store.LoadBundle(ctx, b.Hash); err != nil {
				t.Fatal(err)
			}
			if n := tc.store.cache.len(); n < tc.wantAtMin || n > tc.wantAtMax {
				t.Fatalf("%d chunks cached of %d, want %d to %d", n, chunks, tc.wantAtMin, tc.wantAtMax)
			}
		})
	}
}

// provisionedJS is a JetStream of an embedded server with every weft
// stream and store.
func provisionedJS(t *testing.T) jetstream.JetStream {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := Provision(context.Background(), js, 1); err != nil {
		t.Fatal(err)
	}
	return js
}
