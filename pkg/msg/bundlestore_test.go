package msg_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
)

// provisioned is a JetStream with every weft stream and store.
func provisioned(t testing.TB, opts ...msg.ProvisionOption) jetstream.JetStream {
	t.Helper()
	js := jetStream(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := msg.Provision(ctx, js, 1, opts...); err != nil {
		t.Fatal(err)
	}
	return js
}

// storedBundle is a bundle of target with an haproxy.cfg of n backends,
// its line `line` (counted from the middle) set to an endpoint of its own.
func storedBundle(t testing.TB, target string, n, line int) msg.Bundle {
	t.Helper()
	cfg := configText(n)
	if line > 0 {
		mid := len(cfg) / 2
		ls, le := lineAt(cfg, mid)
		cfg = splice(cfg, ls, le, fmt.Sprintf("  server s0 10.200.%d.%d:8080 check weight 100\n", line/250, line%250))
	}
	b, err := msg.NewBundle(target, "/etc/haproxy", "haproxy.cfg", []msg.BundleFile{
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: cfg},
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte("a.example.com be_a\n")},
		{Path: "files/empty.http", Kind: msg.FileFile, Content: nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func streamBytes(t testing.TB, js jetstream.JetStream) uint64 { return streamState(t, js).Bytes }

// streamState is the state of the store's stream.
func streamState(t testing.TB, js jetstream.JetStream) jetstream.StreamState {
	t.Helper()
	s, err := js.Stream(context.Background(), msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State
}

func equalBundles(t *testing.T, got, want msg.Bundle) {
	t.Helper()
	if got.Hash != want.Hash || got.Target != want.Target || got.Base != want.Base || got.Main != want.Main || len(got.Files) != len(want.Files) {
		t.Fatalf("loaded %s/%s, want %s/%s", got.Target, got.Hash, want.Target, want.Hash)
	}
	for i := range got.Files {
		g, w := got.Files[i], want.Files[i]
		if g.Path != w.Path || g.Kind != w.Kind || g.Name != w.Name || !bytes.Equal(g.Content, w.Content) {
			t.Fatalf("file %d: %s differs from %s", i, g.Path, w.Path)
		}
	}
}

func TestBundleStoreRoundTrip(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	w := msg.NewBundleStore(js)
	a, b := storedBundle(t, "web", 3000, 0), storedBundle(t, "web", 3000, 7)
	if err := w.PutBundle(ctx, "", a); err != nil {
		t.Fatal(err)
	}
	before := streamBytes(t, js)
	if err := w.PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	// One endpoint changed in ~450 KB: a chunk of the file, a chunk of
	// the manifest and the description are new.
	if added := streamBytes(t, js) - before; added > 3*msg.ChunkMax {
		t.Errorf("the second bundle added %d bytes to the store", added)
	}
	for _, name := range []string{a.Hash, b.Hash} {
		got, err := msg.NewBundleStore(js).LoadBundle(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		want := a
		if name == b.Hash {
			want = b
		}
		equalBundles(t, got, want)
	}
	// A dry run's name, a configuration.
	if err := w.PutBundle(ctx, msg.DryRunObjectName("x"), a); err != nil {
		t.Fatal(err)
	}
	if got, err := w.LoadBundle(ctx, msg.DryRunObjectName("x")); err != nil || got.Hash != a.Hash {
		t.Fatalf("dry run: %v %v", got.Hash, err)
	}
	if names, err := w.Names(ctx); err != nil || !slices.Contains(names, msg.DryRunObjectName("x")) || !slices.Contains(names, a.Hash) {
		t.Fatalf("names %v, %v", names, err)
	}
	if err := w.Delete(ctx, msg.DryRunObjectName("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := w.LoadBundle(ctx, msg.DryRunObjectName("x")); !errors.Is(err, msg.ErrNotStored) {
		t.Fatalf("deleted dry run: %v, want ErrNotStored", err)
	}
	if names, err := w.Names(ctx); err != nil || slices.Contains(names, msg.DryRunObjectName("x")) {
		t.Fatalf("names after delete %v, %v", names, err)
	}
	if _, err := w.LoadBundle(ctx, a.Hash); err != nil {
		t.Fatalf("a bundle sharing the deleted one's chunks: %v", err)
	}
	cfg := msg.Config{YAML: "targets: {}\n"}
	cfg.Hash = sha256Hex([]byte(cfg.YAML))
	if err := w.PutConfig(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	if got, err := msg.NewBundleStore(js).LoadConfig(ctx, cfg.Hash); err != nil || got.YAML != cfg.YAML {
		t.Fatalf("config: %+v %v", got, err)
	}
	if _, err := w.LoadConfig(ctx, a.Hash); !errors.Is(err, msg.ErrNotStored) {
		t.Fatalf("a configuration never stored: %v, want ErrNotStored", err)
	}
	if _, err := w.LoadBundle(ctx, msg.ConfigObject(cfg.Hash)); !errors.Is(err, msg.ErrInvalid) {
		t.Fatalf("a configuration read as a bundle: %v, want ErrInvalid", err)
	}
}

func TestBundleStoreBrokenChunks(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	b := storedBundle(t, "web", 2000, 0)
	if err := msg.NewBundleStore(js).PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	str, err := js.Stream(ctx, msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		t.Fatal(err)
	}
	// The chunk that holds the middle of haproxy.cfg.
	cfg := b.Files[1].Content
	if b.Files[1].Path != "haproxy.cfg" {
		t.Fatalf("files %v", b.Refs())
	}
	var start int
	var chunk []byte
	for _, end := range msg.ChunkEnds(cfg) {
		if end > len(cfg)/2 {
			chunk = cfg[start:end]
			break
		}
		start = end
	}
	subject := msg.ChunkSubject(sha256Hex(chunk))
	for _, tc := range []struct {
		name   string
		break_ func(t *testing.T)
		want   error
	}{
		{"corrupted", func(t *testing.T) {
			m := nats.NewMsg(subject)
			m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
			m.Data = bytes.Replace(chunk, []byte("server"), []byte("SERVER"), 1)
			if _, err := js.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
		}, msg.ErrChunkCorrupt},
		{"missing", func(t *testing.T) {
			if err := str.Purge(ctx, jetstream.WithPurgeSubject(subject)); err != nil {
				t.Fatal(err)
			}
		}, msg.ErrChunkMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.break_(t)
			r := msg.NewBundleStore(js)
			if _, err := r.LoadBundle(ctx, b.Hash); !errors.Is(err, tc.want) {
				t.Fatalf("load: %v, want %v", err, tc.want)
			}
			if _, err := r.Refresh(ctx, b.Hash, time.Now()); !errors.Is(err, tc.want) {
				t.Fatalf("refresh: %v, want %v", err, tc.want)
			}
		})
	}
	// Stored again (a renderer rendering it again), it loads.
	if err := msg.NewBundleStore(js).PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	if _, err := msg.NewBundleStore(js).LoadBundle(ctx, b.Hash); err != nil {
		t.Fatal(err)
	}
	if _, err := msg.NewBundleStore(js).LoadBundle(ctx, "never-stored"); !errors.Is(err, msg.ErrNotStored) {
		t.Fatalf("never stored: %v, want ErrNotStored", err)
	}
}

// An object an older weft stored whole, by nats.go's object store, loads,
// is refreshed by chunks, and is deleted.
func TestBundleStoreWholeObjects(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	obs, err := js.ObjectStore(ctx, msg.ObjectBundles)
	if err != nil {
		t.Fatal(err)
	}
	b := storedBundle(t, "web", 1500, 0)
	data, err := msg.EncodeBundle(b)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, b.Hash, data); err != nil {
		t.Fatal(err)
	}
	cfg := msg.Config{YAML: "targets: {}\n"}
	cfg.Hash = sha256Hex([]byte(cfg.YAML))
	cdata, err := msg.Encode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.PutBytes(ctx, msg.ConfigObject(cfg.Hash), cdata); err != nil {
		t.Fatal(err)
	}
	s := msg.NewBundleStore(js)
	got, err := s.LoadBundle(ctx, b.Hash)
	if err != nil {
		t.Fatal(err)
	}
	equalBundles(t, got, b)
	if c, err := s.LoadConfig(ctx, cfg.Hash); err != nil || c.Hash != cfg.Hash {
		t.Fatalf("config: %v %v", c.Hash, err)
	}
	if wrote, err := s.Refresh(ctx, b.Hash, time.Now()); err != nil || !wrote {
		t.Fatalf("refresh: %v %v", wrote, err)
	}
	if got, err := msg.NewBundleStore(js).LoadBundle(ctx, b.Hash); err != nil || got.Hash != b.Hash {
		t.Fatalf("after refresh: %v", err)
	}
	if err := s.Delete(ctx, msg.ConfigObject(cfg.Hash)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.LoadConfig(ctx, cfg.Hash); !errors.Is(err, msg.ErrNotStored) {
		t.Fatalf("deleted whole object: %v, want ErrNotStored", err)
	}
}

// Under a size cap the oldest messages go; the bundle the deployer keeps
// (Refresh after every other bundle, as its prune does) stays whole, one
// nobody keeps goes.
func TestBundleStoreCapKeepsRefreshed(t *testing.T) {
	const limit = 4 << 20
	js := provisioned(t, msg.WithBundleStoreMaxBytes(limit))
	ctx := context.Background()
	renderer, deployer := msg.NewBundleStore(js), msg.NewBundleStore(js)
	kept, dropped := storedBundle(t, "kept", 2000, 0), storedBundle(t, "dropped", 2000, 1)
	// Distinct content: no chunk of dropped is shared with kept.
	dropped.Files[0].Content = []byte("dropped.example.com be_d\n")
	dropped.Files[1].Content = bytes.ReplaceAll(dropped.Files[1].Content, []byte("roundrobin"), []byte("leastconn"))
	dropped.Hash = dropped.ComputeHash()
	for _, b := range []msg.Bundle{kept, dropped} {
		if err := renderer.PutBundle(ctx, "", b); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 40 { // ~12 MB of other bundles through a 4 MB store
		other := storedBundle(t, fmt.Sprintf("other%d", i), 2000, 0)
		other.Files[1].Content = bytes.ReplaceAll(other.Files[1].Content, []byte("check"), fmt.Appendf(nil, "check inter %ds", i+1))
		other.Hash = other.ComputeHash()
		if err := renderer.PutBundle(ctx, "", other); err != nil {
			t.Fatal(err)
		}
		if _, err := deployer.Refresh(ctx, kept.Hash, time.Now()); err != nil {
			t.Fatalf("refresh after %d bundles: %v", i, err)
		}
		// What was just written is fresh.
		if wrote, err := deployer.Refresh(ctx, kept.Hash, time.Now()); err != nil || wrote {
			t.Fatalf("refresh again after %d bundles: wrote %v, %v", i, wrote, err)
		}
	}
	if b := streamBytes(t, js); b > limit {
		t.Errorf("the store holds %d bytes, over its cap %d", b, limit)
	}
	if _, err := msg.NewBundleStore(js).LoadBundle(ctx, kept.Hash); err != nil {
		t.Fatalf("kept bundle: %v", err)
	}
	if _, err := msg.NewBundleStore(js).LoadBundle(ctx, dropped.Hash); !errors.Is(err, msg.ErrNotStored) && !errors.Is(err, msg.ErrChunkMissing) {
		t.Fatalf("a bundle nobody keeps: %v, want it gone", err)
	}
}

// A store that read a bundle (a deployer that deployed it) knows where its
// chunks are: a refresh of it while they are fresh writes nothing. A store
// that never read it cannot tell, and writes it again.
func TestRefreshAfterLoadWritesNothing(t *testing.T) {
	js := provisioned(t, msg.WithBundleStoreMaxBytes(64<<20))
	ctx := context.Background()
	b := storedBundle(t, "web", 500, 0)
	if err := msg.NewBundleStore(js).PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		load  bool
		wrote bool
	}{
		{"loaded first", true, false},
		{"never read", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := msg.NewBundleStore(js)
			if tc.load {
				if _, err := s.LoadBundle(ctx, b.Hash); err != nil {
					t.Fatal(err)
				}
			}
			before := streamState(t, js).LastSeq
			wrote, err := s.Refresh(ctx, b.Hash, time.Now())
			if err != nil || wrote != tc.wrote {
				t.Fatalf("refresh: wrote %v, %v; want wrote %v", wrote, err, tc.wrote)
			}
			if written := streamState(t, js).LastSeq > before; written != tc.wrote {
				t.Fatalf("messages written: %v, want %v", written, tc.wrote)
			}
		})
	}
}

// Thousands of puts and loads leave no goroutine behind. nats.go's
// ObjectStore.Put makes a JetStream context per put whose reconnect
// listener goroutine, when scheduled after the put has cleaned the
// context up, waits on a nil channel for ever; BundleStore publishes
// through the caller's context.
func TestBundleStoreGoroutinesFlat(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	s := msg.NewBundleStore(js)
	put := func(i int) {
		b, err := msg.NewBundle("web", "/etc/haproxy", "haproxy.cfg", []msg.BundleFile{
			{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: fmt.Appendf(nil, "global\n# %d\n", i)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.PutBundle(ctx, "", b); err != nil {
			t.Fatal(err)
		}
		if _, err := s.LoadBundle(ctx, b.Hash); err != nil {
			t.Fatal(err)
		}
	}
	put(0) // the publisher's reply subscription, the stream's handle
	before := settledGoroutines(0)
	for i := 1; i <= 3000; i++ {
		put(i)
	}
	if after := settledGoroutines(before); after > before {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines grew from %d to %d over 3000 puts:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// settledGoroutines counts goroutines once the count is at most want or
// has stopped falling (polling for up to 10 s).
func settledGoroutines(want int) int {
	n := runtime.NumGoroutine()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && (want == 0 || n > want); {
		time.Sleep(100 * time.Millisecond)
		m := runtime.NumGoroutine()
		if want == 0 && m == n {
			return n
		}
		n = m
	}
	return n
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// A bundle of thousands of chunks, more than are written or read at once,
// round-trips.
func TestBundleStoreManyChunks(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	b := storedBundle(t, "big", 20000, 0) // ~3 MB, ~2,000 chunks
	if n := len(msg.ChunkEnds(b.Files[1].Content)); n < 1000 {
		t.Fatalf("only %d chunks", n)
	}
	if err := msg.NewBundleStore(js).PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	got, err := msg.NewBundleStore(js).LoadBundle(ctx, b.Hash)
	if err != nil {
		t.Fatal(err)
	}
	equalBundles(t, got, b)
}

// A bundle whose hash does not match its files is stored as it is and
// refused when loaded.
func TestBundleStoreHashMismatch(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	b := storedBundle(t, "web", 10, 0)
	b.Files[0].Content = []byte("b.example.com be_b\n")
	if err := msg.NewBundleStore(js).PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	if _, err := msg.NewBundleStore(js).LoadBundle(ctx, b.Hash); !errors.Is(err, msg.ErrInvalid) {
		t.Fatalf("load: %v, want ErrInvalid", err)
	}
}

func newStores(js jetstream.JetStream) (*msg.BundleStore, *msg.BundleStore) {
	return msg.NewBundleStore(js), msg.NewBundleStore(js)
}

// A store that puts a target's bundles one after another cuts and hashes
// only what changed since the last (rechunk): each bundle it puts is
// described exactly as a store that never put one describes it, and loads
// whole, through edits anywhere in the file, files added and emptied.
func TestBundleStorePutAfterPut(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	str, err := js.Stream(ctx, msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		t.Fatal(err)
	}
	description := func(name string) []byte {
		t.Helper()
		m, err := str.GetLastMsgForSubject(ctx, msg.StoredSubject(name))
		if err != nil {
			t.Fatal(err)
		}
		return m.Data
	}
	withFiles := func(b msg.Bundle, files ...msg.BundleFile) msg.Bundle {
		t.Helper()
		nb, err := msg.NewBundle(b.Target, b.Base, b.Main, append(slices.Clone(b.Files), files...))
		if err != nil {
			t.Fatal(err)
		}
		return nb
	}
	edited := func(b msg.Bundle, at float64, repl string) msg.Bundle {
		t.Helper()
		cfg := b.Files[1].Content
		s, e := lineAt(cfg, int(at*float64(len(cfg)-1)))
		files := slices.Clone(b.Files)
		files[1].Content = splice(cfg, s, e, repl)
		nb, err := msg.NewBundle(b.Target, b.Base, b.Main, files)
		if err != nil {
			t.Fatal(err)
		}
		return nb
	}
	base := storedBundle(t, "web", 3000, 0)
	steps := []struct {
		name string
		b    msg.Bundle
	}{
		{"first", base},
		{"a line in the middle", storedBundle(t, "web", 3000, 7)},
		{"another line in the middle", storedBundle(t, "web", 3000, 8)},
		{"the first line", edited(base, 0, "global # edited\n")},
		{"the last line", edited(base, 1, "  server s9 192.0.2.1:80\n")},
		{"lines inserted", edited(base, 0.3, string(configText(40)))},
		{"a file added", withFiles(base, msg.BundleFile{Path: "maps/path.map", Kind: msg.FileMap, Content: []byte("/a be_a\n")})},
		{"the same again", base},
		{"fewer backends", storedBundle(t, "web", 2000, 0)},
	}
	w := msg.NewBundleStore(js)
	for _, st := range steps {
		if err := w.PutBundle(ctx, "", st.b); err != nil {
			t.Fatal(err)
		}
		after := description(st.b.Hash)
		got, err := msg.NewBundleStore(js).LoadBundle(ctx, st.b.Hash)
		if err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		equalBundles(t, got, st.b)
		if err := msg.NewBundleStore(js).PutBundle(ctx, "", st.b); err != nil {
			t.Fatal(err)
		}
		if fresh := description(st.b.Hash); !bytes.Equal(after, fresh) {
			t.Errorf("%s: described as\n%s\nby the store that put the bundles before it, as\n%s\nby a new store", st.name, after, fresh)
		}
	}
}

// A store loads a bundle it loaded before from memory (a fleet's orders
// name one bundle), yet still by its name's current description: a name
// deleted or stored again is read as it is now.
func TestBundleStoreLoadsAgain(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	a, b := storedBundle(t, "web", 500, 0), storedBundle(t, "web", 500, 3)
	w, r := newStores(js)
	for _, x := range []msg.Bundle{a, b} {
		if err := w.PutBundle(ctx, "", x); err != nil {
			t.Fatal(err)
		}
	}
	first, err := r.LoadBundle(ctx, a.Hash)
	if err != nil {
		t.Fatal(err)
	}
	first.Files[0] = msg.BundleFile{Path: "changed-by-the-caller"}
	again, err := r.LoadBundle(ctx, a.Hash)
	if err != nil {
		t.Fatal(err)
	}
	equalBundles(t, again, a)
	// A dry run's name, loaded, then stored again with another bundle.
	name := msg.DryRunObjectName("again")
	for _, x := range []msg.Bundle{a, b} {
		if err := w.PutBundle(ctx, name, x); err != nil {
			t.Fatal(err)
		}
		got, err := r.LoadBundle(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		equalBundles(t, got, x)
	}
	if err := w.Delete(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := r.LoadBundle(ctx, name); !errors.Is(err, msg.ErrNotStored) {
		t.Fatalf("deleted, loaded again: %v, want ErrNotStored", err)
	}
}

// TestLoadBundleOnceAtATime: loads of one bundle at once make the
// requests of one load; loading a bundle loaded last again reads only its
// description, so a bundle gone from the stream is seen gone by every
// store, the one that loaded it too.
func TestLoadBundleOnceAtATime(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	b := storedBundle(t, "web", 400, 0)
	if err := msg.NewBundleStore(js).PutBundle(ctx, "", b); err != nil {
		t.Fatal(err)
	}
	requestsOf := jsRequests(t, js)
	load := func(s *msg.BundleStore) error {
		got, err := s.LoadBundle(ctx, b.Hash)
		if err == nil && got.Hash != b.Hash {
			err = fmt.Errorf("loaded %s, want %s", got.Hash, b.Hash)
		}
		return err
	}

	first := requestsOf(func() {
		if err := load(msg.NewBundleStore(js)); err != nil {
			t.Fatal(err)
		}
	})
	if first < 3 {
		t.Fatalf("a load made %d requests; want its description, manifest and chunks read", first)
	}
	at := msg.NewBundleStore(js)
	together := requestsOf(func() {
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				if err := load(at); err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	})
	// The 8 loads share one, or the later ones find it loaded and read the
	// description only.
	if together > first+7 {
		t.Errorf("8 loads at once made %d requests; one load makes %d", together, first)
	}
	if again := requestsOf(func() {
		if err := load(at); err != nil {
			t.Fatal(err)
		}
	}); again != 1 {
		t.Errorf("loading the bundle loaded last again made %d requests; want 1, its description", again)
	}
	str, err := js.Stream(ctx, msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		t.Fatal(err)
	}
	if err := str.Purge(ctx, jetstream.WithPurgeSubject(msg.StoredSubject(b.Hash))); err != nil {
		t.Fatal(err)
	}
	if err := load(at); !errors.Is(err, msg.ErrNotStored) {
		t.Errorf("the store that loaded the bundle loads it gone from the stream: %v, want ErrNotStored", err)
	}
}

// TestLoadBundleJoinsAFileOnceInAProcess: a second store in the process
// (another stage's) loading a bundle another store loaded finds its files
// of several chunks joined already: the same bytes, their chunks not read
// again; a file that changed is joined anew from its chunks.
func TestLoadBundleJoinsAFileOnceInAProcess(t *testing.T) {
	js := provisioned(t)
	ctx := context.Background()
	// Files no other test of the package stores: the joined files are
	// the process's.
	b := storedBundle(t, "web", 437, 0)
	changed := storedBundle(t, "web", 437, 7)
	for _, x := range []msg.Bundle{b, changed} {
		if err := msg.NewBundleStore(js).PutBundle(ctx, "", x); err != nil {
			t.Fatal(err)
		}
	}
	requestsOf := jsRequests(t, js)
	load := func(s *msg.BundleStore, want msg.Bundle) (got msg.Bundle, requests int64) {
		t.Helper()
		requests = requestsOf(func() {
			var err error
			if got, err = s.LoadBundle(ctx, want.Hash); err != nil {
				t.Fatal(err)
			}
		})
		if !bytes.Equal(mainFile(t, got), mainFile(t, want)) {
			t.Fatalf("loaded %s's main file differs from the one stored", want.Hash)
		}
		return got, requests
	}
	main := func(x msg.Bundle) *byte { return &mainFile(t, x)[0] }

	first, byFirst := load(msg.NewBundleStore(js), b)
	other := msg.NewBundleStore(js)
	second, bySecond := load(other, b)
	if main(first) != main(second) {
		t.Error("a second store joined the main file again")
	}
	if bySecond >= byFirst {
		t.Errorf("the second store's load made %d requests, the first's %d: want fewer, the main file's chunks not read", bySecond, byFirst)
	}
	// The second store keeps the chunks of the file it took joined, as
	// if it had read them: the changed bundle's load reads only the
	// chunks the change made, not the main file's all over.
	next, byNext := load(other, changed)
	if main(next) == main(first) {
		t.Error("a changed main file came from the file joined before")
	}
	if byNext*2 > byFirst {
		t.Errorf("the second store's load of a bundle with one line changed made %d requests, a load of all its chunks %d", byNext, byFirst)
	}
}

// jsRequests counts every JetStream request made on js's server from now
// on; the function it returns tells how many f made.
func jsRequests(t *testing.T, js jetstream.JetStream) func(f func()) int64 {
	t.Helper()
	var requests atomic.Int64
	sub, err := js.Conn().Subscribe("$JS.API.>", func(*nats.Msg) { requests.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	return func(f func()) int64 {
		t.Helper()
		if err := js.Conn().Flush(); err != nil {
			t.Fatal(err)
		}
		before := requests.Load()
		f()
		time.Sleep(50 * time.Millisecond) // the last requests reach the subscription
		return requests.Load() - before
	}
}

// mainFile is the content of b's main file.
func mainFile(t *testing.T, b msg.Bundle) []byte {
	t.Helper()
	for _, f := range b.Files {
		if f.Path == b.Main {
			return f.Content
		}
	}
	t.Fatalf("bundle %s has no main file %s", b.Hash, b.Main)
	return nil
}
