package msg

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Errors of BundleStore. A missing or corrupted chunk is never an answer:
// the reader reports it and tries again (a node catching up, a refresh
// under way), the writer of a kept bundle stores it again.
var (
	// ErrNotStored: nothing is stored under the name.
	ErrNotStored = errors.New("not in the bundle store")
	// ErrChunkMissing: a chunk the object lists is not in the store.
	ErrChunkMissing = errors.New("chunk missing from the bundle store")
	// ErrChunkCorrupt: a chunk's content does not match its hash.
	ErrChunkCorrupt = errors.New("chunk does not match its hash")
)

// Schemas of what BundleStore writes.
const (
	// SchemaStored describes a stored object: its kind and the chunks of
	// its content, the last message of its description subject.
	SchemaStored = "weft.stored.v1"
	// SchemaBundleManifest is a bundle without file content: each file's
	// path, kind, name, size and chunks.
	SchemaBundleManifest = "weft.bundlemanifest.v1"
)

// Kinds of stored objects.
const (
	StoredBundle = "bundle"
	StoredConfig = "config"
)

// StoredObject is the description of an object in ObjectBundles: the
// SHA-256 (hex) of each chunk of its content, in order. The content of a
// bundle is its BundleManifest; of a configuration, the encoded Config.
type StoredObject struct {
	Name   string   `json:"name"`
	Kind   string   `json:"kind"`
	Size   int      `json:"size"`
	Chunks []string `json:"chunks"`
}

func (StoredObject) Schema() string { return SchemaStored }

func (o StoredObject) Validate() error {
	if err := need("name", o.Name, "kind", o.Kind); err != nil {
		return err
	}
	for _, c := range o.Chunks {
		if !isChunkHash(c) {
			return fmt.Errorf("%w: chunk reference %q is not a SHA-256", ErrInvalid, c)
		}
	}
	return nil
}

// BundleManifest is a bundle whose files name their content by chunks.
type BundleManifest struct {
	Target string         `json:"target"`
	Base   string         `json:"base"`
	Main   string         `json:"main"`
	Hash   string         `json:"hash"`
	Files  []ManifestFile `json:"files"`
}

// ManifestFile is one file of a BundleManifest.
type ManifestFile struct {
	Path   string   `json:"path"`
	Kind   string   `json:"kind"`
	Name   string   `json:"name"`
	Size   int      `json:"size"`
	Chunks []string `json:"chunks"`
}

func (BundleManifest) Schema() string { return SchemaBundleManifest }

func (m BundleManifest) Validate() error {
	if err := need("target", m.Target, "hash", m.Hash); err != nil {
		return err
	}
	for _, f := range m.Files {
		for _, c := range f.Chunks {
			if !isChunkHash(c) {
				return fmt.Errorf("%w: file %q: chunk reference %q is not a SHA-256", ErrInvalid, f.Path, c)
			}
		}
	}
	return nil
}

func isChunkHash(s string) bool {
	if len(s) != 2*sha256.Size {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') && (c < 'A' || c > 'F') {
			return false
		}
	}
	return true
}

// StoredSubject is the subject of the description of the object name in
// ObjectBundles: where nats.go's object store keeps an object's
// description, so an object stored whole by an older weft is found there
// too.
func StoredSubject(name string) string {
	return "$O." + ObjectBundles + ".M." + base64.URLEncoding.EncodeToString([]byte(name))
}

// ChunkSubject is the subject of the chunk with SHA-256 hash (hex) in
// ObjectBundles.
func ChunkSubject(hash string) string { return "$O." + ObjectBundles + ".C.sha256." + hash }

// Defaults of BundleStore.
const (
	// DefaultChunkCache bounds the chunks a BundleStore keeps in memory
	// after reading them, until it reads a bundle larger than two thirds
	// of it. A reader reads nearly the same bundle each time, so the
	// chunks of a few bundles are all it reads again; each reading
	// service of a process has its own store.
	DefaultChunkCache = 8 << 20
	// DefaultWrittenChunks bounds how many chunks a BundleStore remembers
	// having stored.
	DefaultWrittenChunks = 1 << 16
	// manifestCacheRefs bounds the chunk references of the decoded
	// manifests a BundleStore keeps (about 80 bytes each): a bundle of
	// 10 MB has some 7,000.
	manifestCacheRefs = 1 << 17
	// storeStateEvery: how long the store's first and last sequence, read
	// from the stream, are taken as current.
	storeStateEvery = time.Second
	// chunkReaders: chunks read at once; chunkWriters: chunks written
	// and not yet acknowledged at once.
	chunkReaders = 16
	chunkWriters = 256
)

// BundleStoreOption configures a BundleStore.
type BundleStoreOption func(*BundleStore)

// WithChunkCache bounds the bytes of chunks kept after reading them, and
// apart the bytes of the bundles last loaded (0: none kept). By default
// the bound is DefaultChunkCache or, once a bundle larger than that was
// read, one and a half times the largest bundle read: a cache smaller than
// the bundle read again and again would keep none of it; bundles loaded
// are kept up to the largest's size.
func WithChunkCache(bytes int) BundleStoreOption {
	return func(s *BundleStore) {
		s.cache = newLRU[string, []byte](bytes, func(b []byte) int { return len(b) })
		s.loaded = newLRU[string, Bundle](bytes, bundleSize)
		s.cacheFixed = true
	}
}

func bundleSize(b Bundle) int {
	n := 0
	for _, f := range b.Files {
		n += len(f.Content)
	}
	return n
}

// BundleStore stores bundles and candidate configurations in ObjectBundles
// by content. An object is a description (StoredObject, under
// StoredSubject of its name) listing the chunks of its content; a bundle's
// content is its manifest, listing the chunks of each file. Files and
// manifests are cut by ChunkEnds and each chunk is stored once under its
// SHA-256 (ChunkSubject), so bundles that differ by a line share all but a
// chunk or two.
//
// Writing, a chunk this store wrote or read is not written again while it
// is fresh: younger than a quarter of the store's age limit and at least half
// the size cap of writes away from the cap (which discards the oldest
// messages), so neither limit takes it before it is written again. Any
// other chunk is written with a rollup of its subject: once in the stream
// however many times written. The chunks are written concurrently and
// acknowledged before the description that names them.
//
// Reading, chunks are checked against their hash and kept in a bounded
// cache, and the bundles loaded last by the chunks of their manifest: a
// later load of one reads only its description. A file of several chunks
// that any store of the process joined lately is taken as joined, its
// chunks not read but kept in the cache as its parts (the process's
// stages share it). Loads of one name at once read it once, so a stage
// that will need a bundle starts loading it early (Prefetch). The object a name
// stored whole by an older weft (a bundle's or configuration's JSON in
// nats.go's object store format) still loads.
//
// A BundleStore is safe for concurrent use; it uses the JetStream context
// it is given for every request, and creates none of its own.
type BundleStore struct {
	js         jetstream.JetStream
	cache      *lru[string, []byte]
	cacheFixed bool // WithChunkCache: the cache does not grow with bundles
	written    *lru[string, placement]
	// manifests holds decoded manifests by the chunks of their content
	// (contentKey): read-only once in.
	manifests *lru[string, BundleManifest]
	// loaded holds the bundles loaded last (as many bytes as the largest
	// one), by the chunks of their manifest: read-only once in. A fleet's
	// orders load one bundle once.
	loaded *lru[string, Bundle]
	// loading holds the loads in flight by name: a second load of a name
	// waits for the first.
	loading map[string]*bundleLoad

	mu     sync.Mutex
	stream jetstream.Stream
	obs    jetstream.ObjectStore
	state  storeState
	// cut holds, by target, how the files of the last bundle put for it
	// were cut, so the next put cuts and hashes only what changed.
	cut map[string]map[string]cutFile
}

// cutFile is a file's content as PutBundle cut it: the end and hash of
// each chunk.
type cutFile struct {
	content []byte
	ends    []int
	refs    []string
}

// placement is where and when a chunk was written.
type placement struct {
	seq uint64
	at  time.Time
}

// storeState is what the stream says of its bounds.
type storeState struct {
	read        time.Time
	first, last uint64
	bytes       uint64
	maxAge      time.Duration
	maxBytes    int64 // 0: no size cap
}

// NewBundleStore returns a store over ObjectBundles reached through js.
func NewBundleStore(js jetstream.JetStream, opts ...BundleStoreOption) *BundleStore {
	s := &BundleStore{js: js}
	s.cache = newLRU[string, []byte](DefaultChunkCache, func(b []byte) int { return len(b) })
	s.written = newLRU[string, placement](DefaultWrittenChunks, func(placement) int { return 1 })
	s.manifests = newLRU[string, BundleManifest](manifestCacheRefs, func(m BundleManifest) int {
		n := 1
		for _, f := range m.Files {
			n += len(f.Chunks)
		}
		return n
	})
	s.cut = map[string]map[string]cutFile{}
	s.loaded = newLRU[string, Bundle](0, bundleSize)
	s.loading = map[string]*bundleLoad{}
	for _, o := range opts {
		o(s)
	}
	return s
}

// PutBundle stores b under name (its hash when name is empty). b.Hash is
// taken as it is (NewBundle and DecodeBundle set or check it); a bundle
// whose hash does not match its files fails to load.
func (s *BundleStore) PutBundle(ctx context.Context, name string, b Bundle) error {
	if err := b.structure(); err != nil {
		return fmt.Errorf("store bundle %s: %w", b.Hash, err)
	}
	if name == "" {
		name = b.Hash
	}
	s.mu.Lock()
	prev := s.cut[b.Target]
	s.mu.Unlock()
	next := make(map[string]cutFile, len(b.Files)+1)
	chunks := map[string][]byte{}
	m := BundleManifest{Target: b.Target, Base: b.Base, Main: b.Main, Hash: b.Hash, Files: make([]ManifestFile, len(b.Files))}
	for i, f := range b.Files {
		c := f.cutOr(prev[f.Path])
		next[f.Path] = c.add(chunks)
		m.Files[i] = ManifestFile{Path: f.Path, Kind: f.Kind, Name: f.Name, Size: len(f.Content), Chunks: c.refs}
	}
	// One chunk reference a line, so the manifest's own chunks are
	// shared by manifests that differ by a few references. The manifest
	// is kept under a key no file path has.
	data, err := encodeManifest(m)
	if err != nil {
		return err
	}
	const manifestKey = ""
	mc := cutAgain(prev[manifestKey], data)
	next[manifestKey] = mc.add(chunks)
	s.mu.Lock()
	s.cut[b.Target] = next
	s.mu.Unlock()
	return s.put(ctx, StoredObject{Name: name, Kind: StoredBundle, Size: len(data), Chunks: mc.refs}, chunks)
}

// cutAgain cuts data into chunks (ChunkEnds) and hashes them, taking the
// cuts and hashes of the chunks it shares with prev (the same file as
// last cut) from prev: only what changed is cut and hashed.
func cutAgain(prev cutFile, data []byte) cutFile {
	if prev.ends != nil && bytes.Equal(prev.content, data) {
		prev.content = data
		return prev
	}
	ends, same := rechunk(prev.content, prev.ends, data)
	c := cutFile{content: data, ends: ends, refs: make([]string, len(ends))}
	start := 0
	for i, end := range ends {
		if j := same[i]; j >= 0 {
			c.refs[i] = prev.refs[j]
		} else {
			sum := sha256.Sum256(data[start:end])
			c.refs[i] = hex.EncodeToString(sum[:])
		}
		start = end
	}
	return c
}

// add adds c's chunks to chunks by hash and returns c.
func (c cutFile) add(chunks map[string][]byte) cutFile {
	start := 0
	for i, end := range c.ends {
		chunks[c.refs[i]] = c.content[start:end]
		start = end
	}
	return c
}

// PutConfig stores the candidate configuration c under ConfigObject.
func (s *BundleStore) PutConfig(ctx context.Context, c Config) error {
	data, err := Encode(c)
	if err != nil {
		return err
	}
	chunks := map[string][]byte{}
	return s.put(ctx, StoredObject{Name: ConfigObject(c.Hash), Kind: StoredConfig, Size: len(data), Chunks: addChunks(chunks, data)}, chunks)
}

// addChunks cuts data into chunks, adds them to chunks by hash and
// returns their hashes in order.
func addChunks(chunks map[string][]byte, data []byte) []string {
	refs := []string{}
	start := 0
	for _, end := range ChunkEnds(data) {
		sum := sha256.Sum256(data[start:end])
		h := hex.EncodeToString(sum[:])
		chunks[h] = data[start:end]
		refs = append(refs, h)
		start = end
	}
	return refs
}

// decodeIndented decodes a message envelope ({"schema", "body"}) as
// json.MarshalIndent(v, "", "") writes it, or any other spacing of it.
func decodeIndented[T Message](data []byte, m T) error {
	env := struct {
		Schema string `json:"schema"`
		Body   T      `json:"body"`
	}{Body: m}
	if err := json.Unmarshal(data, &env); err != nil {
		return fmt.Errorf("decode %s: %w: %w", m.Schema(), ErrMalformed, err)
	}
	if env.Schema != m.Schema() {
		return fmt.Errorf("decode %s: %w: schema %q", m.Schema(), ErrUnknownVersion, env.Schema)
	}
	return m.Validate()
}

// put writes the chunks that are not fresh, then the description.
func (s *BundleStore) put(ctx context.Context, obj StoredObject, chunks map[string][]byte) error {
	st, err := s.storeState(ctx, false)
	if err != nil {
		return fmt.Errorf("store %s: %w", obj.Name, err)
	}
	now := time.Now()
	var todo []string
	for h := range chunks {
		if p, ok := s.written.get(h); !ok || !st.fresh(p, now) {
			todo = append(todo, h)
		}
	}
	slices.Sort(todo)
	if err := s.writeChunks(ctx, todo, func(h string) ([]byte, error) { return chunks[h], nil }); err != nil {
		return fmt.Errorf("store %s: %w", obj.Name, err)
	}
	data, err := Encode(obj)
	if err != nil {
		return err
	}
	if _, err := s.publish(ctx, StoredSubject(obj.Name), data); err != nil {
		return fmt.Errorf("store %s: %w", obj.Name, err)
	}
	return nil
}

// writeChunks writes the chunks hashes name (content from get), at most
// chunkWriters unacknowledged at a time, each replacing any copy before
// it, and waits for every acknowledgement.
func (s *BundleStore) writeChunks(ctx context.Context, hashes []string, get func(string) ([]byte, error)) error {
	type pending struct {
		hash string
		fut  jetstream.PubAckFuture
	}
	var window []pending
	var errs []error
	wait := func(p pending) bool {
		select {
		case ack := <-p.fut.Ok():
			s.wrote(p.hash, ack.Sequence)
		case err := <-p.fut.Err():
			errs = append(errs, fmt.Errorf("write chunk %s: %w", p.hash, err))
		case <-ctx.Done():
			errs = append(errs, ctx.Err())
			return false
		}
		return true
	}
	for _, h := range hashes {
		if len(window) == chunkWriters {
			if !wait(window[0]) {
				return errors.Join(errs...)
			}
			window = window[1:]
		}
		data, err := get(h)
		if err != nil {
			errs = append(errs, err)
			break
		}
		m := nats.NewMsg(ChunkSubject(h))
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
		m.Data = data
		f, err := s.js.PublishMsgAsync(m)
		if err != nil {
			errs = append(errs, fmt.Errorf("write chunk %s: %w", h, err))
			break
		}
		window = append(window, pending{h, f})
	}
	for _, p := range window {
		if !wait(p) {
			break
		}
	}
	return errors.Join(errs...)
}

// publish writes data to subject, replacing what was there.
func (s *BundleStore) publish(ctx context.Context, subject string, data []byte) (*jetstream.PubAck, error) {
	m := nats.NewMsg(subject)
	m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	m.Header.Set(HeaderSchema, SchemaStored)
	m.Data = data
	ack, err := s.js.PublishMsg(ctx, m)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.state.last = max(s.state.last, ack.Sequence)
	s.mu.Unlock()
	return ack, nil
}

func (s *BundleStore) wrote(hash string, seq uint64) {
	s.written.put(hash, placement{seq: seq, at: time.Now()})
	s.mu.Lock()
	s.state.last = max(s.state.last, seq)
	s.mu.Unlock()
}

// fresh reports whether a message written at p stays in the stream a good
// while yet: younger than a quarter of the age limit, and at least half
// the size cap of writes away from being discarded.
func (st storeState) fresh(p placement, now time.Time) bool { return st.freshBy(p, now, 0.5) }

// freshBy is fresh with a margin: younger than (1-margin)/2 of the age
// limit, and at least margin of the size cap of writes (estimated from the
// stream's bytes and sequences) away from being discarded. A refresh
// rewrites what is not fresh by 3/4 once something is not fresh by 1/2, so
// that its own writes, which bring the rest nearer to the cap, leave what
// it did not rewrite fresh.
func (st storeState) freshBy(p placement, now time.Time, margin float64) bool {
	if st.maxAge > 0 && now.Sub(p.at) > time.Duration(float64(st.maxAge)*(1-margin)/2) {
		return false
	}
	if p.seq < st.first {
		return false
	}
	if st.maxBytes <= 0 || p.seq >= st.last || st.last <= st.first {
		return true
	}
	// Bytes written before p that the cap discards first, then p.
	before := float64(p.seq-st.first) / float64(st.last-st.first) * float64(st.bytes)
	return float64(st.maxBytes-int64(st.bytes))+before >= margin*float64(st.maxBytes)
}

// storeState reads the stream's bounds at most every storeStateEvery
// (now when force).
func (s *BundleStore) storeState(ctx context.Context, force bool) (storeState, error) {
	str, err := s.streamOf(ctx)
	if err != nil {
		return storeState{}, err
	}
	s.mu.Lock()
	st := s.state
	s.mu.Unlock()
	if !force && time.Since(st.read) < storeStateEvery {
		return st, nil
	}
	info, err := str.Info(ctx)
	if err != nil {
		return storeState{}, fmt.Errorf("bundle store: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = storeState{
		read:     time.Now(),
		first:    info.State.FirstSeq,
		last:     max(info.State.LastSeq, s.state.last),
		bytes:    info.State.Bytes,
		maxAge:   info.Config.MaxAge,
		maxBytes: max(info.Config.MaxBytes, 0),
	}
	return s.state, nil
}

func (s *BundleStore) streamOf(ctx context.Context) (jetstream.Stream, error) {
	s.mu.Lock()
	str := s.stream
	s.mu.Unlock()
	if str != nil {
		return str, nil
	}
	str, err := s.js.Stream(ctx, ObjectStream(ObjectBundles))
	if err != nil {
		return nil, fmt.Errorf("bundle store: %w", err)
	}
	s.mu.Lock()
	s.stream = str
	s.mu.Unlock()
	return str, nil
}

// LoadBundle reads the bundle stored under name (its hash, or a dry run's
// name) and checks that it is consistent. Errors wrap ErrNotStored,
// ErrChunkMissing, ErrChunkCorrupt or a decoding error. The files'
// content may be shared with other loads of the same bundle: read it only.
// Loads of one name at once read it once; a bundle loaded lately costs
// only the read of its description.
func (s *BundleStore) LoadBundle(ctx context.Context, name string) (Bundle, error) {
	s.mu.Lock()
	l, waiting := s.loading[name]
	if !waiting {
		l = &bundleLoad{done: make(chan struct{})}
		s.loading[name] = l
	}
	s.mu.Unlock()
	if !waiting {
		l.b, l.err = s.loadBundle(ctx, name)
		s.mu.Lock()
		delete(s.loading, name)
		s.mu.Unlock()
		close(l.done)
		return l.b, l.err
	}
	select {
	case <-l.done:
	case <-ctx.Done():
		return Bundle{}, fmt.Errorf("bundle %s: %w", name, ctx.Err())
	}
	if l.err != nil && ctx.Err() == nil && (errors.Is(l.err, context.Canceled) || errors.Is(l.err, context.DeadlineExceeded)) {
		return s.loadBundle(ctx, name) // the first load's caller gave up, not this one
	}
	b := l.b
	b.Files = slices.Clone(b.Files)
	return b, l.err
}

// Prefetch starts loading the bundle stored under name, so that a load of
// it elsewhere in the process (another stage's handler) finds it loaded or
// joins the load in flight instead of waiting for round trips of its own.
// The returned func waits for the load to end; call it before the caller's
// own work ends, so no load outlives it. An error is left to the load that
// needs the bundle to report.
func (s *BundleStore) Prefetch(ctx context.Context, name string) (wait func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = s.LoadBundle(ctx, name)
	}()
	return func() { <-done }
}

// bundleLoad is a load of a bundle in flight: done is closed once b and
// err are set.
type bundleLoad struct {
	done chan struct{}
	b    Bundle
	err  error
}

func (s *BundleStore) loadBundle(ctx context.Context, name string) (Bundle, error) {
	obj, whole, err := s.describe(ctx, name, StoredBundle)
	if err != nil {
		return Bundle{}, err
	}
	if whole != nil {
		b, err := DecodeBundle(whole)
		if err != nil {
			return Bundle{}, fmt.Errorf("bundle %s: %w", name, err)
		}
		return b, nil
	}
	key := contentKey(obj.Chunks)
	if b, ok := s.loaded.get(key); ok {
		b.Files = slices.Clone(b.Files)
		return b, nil
	}
	m, err := s.manifest(ctx, obj)
	if err != nil {
		return Bundle{}, err
	}
	size := 0
	for _, f := range m.Files {
		size += f.Size
	}
	if !s.cacheFixed {
		s.cache.atLeast(size + size/2)
		s.loaded.atLeast(size)
	}
	// A file of several chunks another load in the process joined
	// lately is taken whole, its chunks kept in this store's cache as
	// if read (a next bundle then reads only the chunks it changed);
	// only the other files' chunks are read.
	var refs []string
	keys := make([]string, len(m.Files))
	prior := make([]*joinedFile, len(m.Files))
	for i, f := range m.Files {
		if len(f.Chunks) > 1 {
			joined.atLeast(2 * f.Size)
			keys[i] = contentKey(f.Chunks)
			if j, ok := joined.get(keys[i]); ok {
				prior[i] = &j
				s.cacheChunks(f.Chunks, j)
				continue
			}
		}
		refs = append(refs, f.Chunks...)
	}
	chunks, err := s.chunks(ctx, refs)
	if err != nil {
		return Bundle{}, fmt.Errorf("bundle %s: %w", name, err)
	}
	b := Bundle{Target: m.Target, Base: m.Base, Main: m.Main, Hash: m.Hash, Files: make([]BundleFile, len(m.Files))}
	for i, f := range m.Files {
		var content []byte
		var ends []int
		if j := prior[i]; j != nil {
			content, ends = j.content, j.ends
		} else {
			content, ends = joinChunks(f.Chunks, f.Size, chunks)
			if keys[i] != "" {
				joined.put(keys[i], joinedFile{content: content, ends: ends})
			}
		}
		// Each chunk was checked against its hash: the file's digest
		// is taken from them (ComputeHash reads no content).
		b.Files[i] = BundleFile{Path: f.Path, Kind: f.Kind, Name: f.Name, Content: content,
			cut: &cutFile{content: content, ends: ends, refs: f.Chunks}}
	}
	if err := b.Consistent(); err != nil {
		return Bundle{}, fmt.Errorf("bundle %s: %w", name, err)
	}
	s.loaded.put(key, b)
	b.Files = slices.Clone(b.Files)
	return b, nil
}

// joinedFile is the content of a file of several chunks, joined, and
// where each chunk ends in it.
type joinedFile struct {
	content []byte
	ends    []int
}

// joined holds the files of several chunks that loads in this process
// joined last, by their chunks (contentKey), for every BundleStore: the
// stages of one process (weft up's validator and deployer, each with its
// own store) load the same bundle one after the other, and at 1,000
// Ingresses joining its main file a second time was a quarter of what a
// change allocated (BENCHMARKS.md). A key names the content exactly
// (each chunk is checked against its hash when read), so a store finds
// there only what it would have joined itself, whatever it can still
// read; contents are read only, as every loaded file's is. It keeps twice
// the largest such file loaded: the bundle two stages load, and the next.
var joined = newLRU[string, joinedFile](0, func(j joinedFile) int { return cap(j.content) })

// cacheChunks puts in the store's chunk cache each chunk refs names, as
// the part of j's content it is (no copy).
func (s *BundleStore) cacheChunks(refs []string, j joinedFile) {
	start := 0
	for k, ref := range refs {
		s.cache.put(ref, j.content[start:j.ends[k]:j.ends[k]])
		start = j.ends[k]
	}
}

// joinChunks returns the content made of the chunks refs in order, and
// where each ends in it. A content of one chunk is that chunk's bytes, not
// a copy: most files of a bundle are, and they are read only.
func joinChunks(refs []string, size int, chunks map[string][]byte) ([]byte, []int) {
	ends := make([]int, len(refs))
	if len(refs) == 1 {
		content := chunks[refs[0]]
		ends[0] = len(content)
		return content[:len(content):len(content)], ends
	}
	content := make([]byte, 0, size)
	for k, c := range refs {
		content = append(content, chunks[c]...)
		ends[k] = len(content)
	}
	return content, ends
}

// LoadConfig reads the candidate configuration with hash.
func (s *BundleStore) LoadConfig(ctx context.Context, hash string) (Config, error) {
	var c Config
	obj, data, err := s.describe(ctx, ConfigObject(hash), StoredConfig)
	if err != nil {
		return c, err
	}
	if data == nil {
		if data, err = s.content(ctx, obj); err != nil {
			return c, err
		}
	}
	if err := Decode(data, &c); err != nil {
		return c, fmt.Errorf("configuration %s: %w", hash, err)
	}
	return c, nil
}

// manifest reads the manifest a bundle's description names, decoded once
// for every description that names the same chunks. The manifest is
// shared: read it only.
func (s *BundleStore) manifest(ctx context.Context, obj StoredObject) (BundleManifest, error) {
	key := contentKey(obj.Chunks)
	if m, ok := s.manifests.get(key); ok {
		return m, nil
	}
	var m BundleManifest
	data, err := s.content(ctx, obj)
	if err != nil {
		return m, err
	}
	if err := decodeManifest(data, &m); err != nil {
		return m, fmt.Errorf("bundle %s: %w", obj.Name, err)
	}
	s.manifests.put(key, m)
	return m, nil
}

// contentKey names the content that is the chunks refs in order: each is
// the SHA-256 of its bytes, checked when read, so equal keys are equal
// content.
func contentKey(refs []string) string {
	h := sha256.New()
	for _, r := range refs {
		h.Write([]byte(r))
	}
	return string(h.Sum(nil))
}

// content reads the content of obj from its chunks.
func (s *BundleStore) content(ctx context.Context, obj StoredObject) ([]byte, error) {
	chunks, err := s.chunks(ctx, obj.Chunks)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", obj.Kind, obj.Name, err)
	}
	data := make([]byte, 0, obj.Size)
	for _, c := range obj.Chunks {
		data = append(data, chunks[c]...)
	}
	return data, nil
}

// describe reads the description of name: a StoredObject, or (whole) the
// content of an object stored whole by an older weft.
func (s *BundleStore) describe(ctx context.Context, name, kind string) (StoredObject, []byte, error) {
	var obj StoredObject
	m, err := s.lastMsg(ctx, StoredSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return obj, nil, fmt.Errorf("%s %s: %w", kind, name, ErrNotStored)
	}
	if err != nil {
		return obj, nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	if m.Header.Get(HeaderSchema) != SchemaStored {
		whole, err := s.whole(ctx, name)
		if err != nil {
			return obj, nil, fmt.Errorf("%s %s: %w", kind, name, err)
		}
		return obj, whole, nil
	}
	if err := Decode(m.Data, &obj); err != nil {
		return obj, nil, fmt.Errorf("%s %s: %w", kind, name, err)
	}
	if obj.Kind != kind {
		return obj, nil, fmt.Errorf("%s %s: %w: stored as a %s", kind, name, ErrInvalid, obj.Kind)
	}
	return obj, nil, nil
}

// whole reads an object nats.go's object store wrote.
func (s *BundleStore) whole(ctx context.Context, name string) ([]byte, error) {
	s.mu.Lock()
	obs := s.obs
	s.mu.Unlock()
	if obs == nil {
		var err error
		if obs, err = s.js.ObjectStore(ctx, ObjectBundles); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.obs = obs
		s.mu.Unlock()
	}
	data, err := obs.GetBytes(ctx, name)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil, ErrNotStored
	}
	return data, err
}

func (s *BundleStore) lastMsg(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error) {
	str, err := s.streamOf(ctx)
	if err != nil {
		return nil, err
	}
	return str.GetLastMsgForSubject(ctx, subject)
}

// chunks returns the content of each chunk refs names, from the cache or
// the store (several at once), each checked against its hash.
func (s *BundleStore) chunks(ctx context.Context, refs []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(refs))
	var miss []string
	for _, h := range refs {
		if _, ok := out[h]; ok {
			continue
		}
		if b, ok := s.cache.get(h); ok {
			out[h] = b
			continue
		}
		out[h] = nil
		miss = append(miss, h)
	}
	if len(miss) == 0 {
		return out, nil
	}
	got := make([][]byte, len(miss))
	errs := make([]error, len(miss))
	sem := make(chan struct{}, chunkReaders)
	var wg sync.WaitGroup
	for i, h := range miss {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			got[i], errs[i] = s.readChunk(ctx, h)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for i, h := range miss {
		out[h] = got[i]
		s.cache.put(h, got[i])
	}
	return out, nil
}

func (s *BundleStore) readChunk(ctx context.Context, h string) ([]byte, error) {
	m, err := s.lastMsg(ctx, ChunkSubject(h))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil, fmt.Errorf("%w: %s", ErrChunkMissing, h)
	}
	if err != nil {
		return nil, fmt.Errorf("read chunk %s: %w", h, err)
	}
	sum := sha256.Sum256(m.Data)
	if hex.EncodeToString(sum[:]) != h {
		return nil, fmt.Errorf("%w: %s", ErrChunkCorrupt, h)
	}
	s.placed(h, placement{seq: m.Sequence, at: m.Time})
	return m.Data, nil
}

// placed records where a chunk read was found, as if this store had
// written it there: a chunk read and fresh is neither written again by a
// put nor by a refresh. A placement known already and newer stays.
func (s *BundleStore) placed(h string, p placement) {
	if known, ok := s.written.get(h); ok && known.seq >= p.seq {
		return
	}
	s.written.put(h, p)
}

// Delete removes the description of name; its chunks, which other objects
// may share, leave with the store's age and size limits.
func (s *BundleStore) Delete(ctx context.Context, name string) error {
	m, err := s.lastMsg(ctx, StoredSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	if m.Header.Get(HeaderSchema) != SchemaStored {
		if _, err := s.whole(ctx, name); errors.Is(err, ErrNotStored) {
			return nil
		}
		if err := s.obs.Delete(ctx, name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("delete %s: %w", name, err)
		}
		return nil
	}
	str, err := s.streamOf(ctx)
	if err != nil {
		return err
	}
	if err := str.Purge(ctx, jetstream.WithPurgeSubject(StoredSubject(name))); err != nil {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	return nil
}

// Refresh writes again what the bundle stored under name needs and the
// store could soon drop (its description, its manifest's chunks, its
// files' chunks), so a bundle that must be kept is never taken by the
// store's age limit or size cap: once a message it needs is no longer
// fresh (older than a quarter of the age limit, or less than half the cap
// of writes from being discarded), or is a chunk this store has neither
// written nor read (so it does not know where it is), what is not fresh by
// a wider margin is written again. A bundle stored whole by an older weft is stored
// again by chunks. Ages are taken at now. It reports whether it wrote
// anything; a chunk missing is an error (ErrChunkMissing).
func (s *BundleStore) Refresh(ctx context.Context, name string, now time.Time) (bool, error) {
	obj, whole, err := s.describe(ctx, name, StoredBundle)
	if err != nil {
		return false, err
	}
	if whole != nil {
		b, err := DecodeBundle(whole)
		if err != nil {
			return false, fmt.Errorf("bundle %s: %w", name, err)
		}
		return true, s.PutBundle(ctx, name, b)
	}
	m, err := s.manifest(ctx, obj)
	if err != nil {
		return false, err
	}
	st, err := s.storeState(ctx, true)
	if err != nil {
		return false, err
	}
	desc, err := s.lastMsg(ctx, StoredSubject(name))
	if err != nil {
		return false, fmt.Errorf("bundle %s: %w", name, err)
	}
	due := !st.fresh(placement{seq: desc.Sequence, at: desc.Time}, now)
	seen := map[string]bool{}
	var stale []string
	add := func(refs []string) {
		for _, h := range refs {
			if seen[h] {
				continue
			}
			seen[h] = true
			p, ok := s.written.get(h)
			due = due || !ok || !st.fresh(p, now)
			if !ok || !st.freshBy(p, now, 0.75) {
				stale = append(stale, h)
			}
		}
	}
	add(obj.Chunks)
	for _, f := range m.Files {
		add(f.Chunks)
	}
	if !due {
		return false, nil
	}
	if len(stale) > 0 {
		chunks, err := s.chunks(ctx, stale)
		if err != nil {
			return false, fmt.Errorf("bundle %s: %w", name, err)
		}
		if err := s.writeChunks(ctx, stale, func(h string) ([]byte, error) { return chunks[h], nil }); err != nil {
			return false, fmt.Errorf("bundle %s: %w", name, err)
		}
	}
	data, err := Encode(obj)
	if err != nil {
		return false, err
	}
	if _, err := s.publish(ctx, StoredSubject(name), data); err != nil {
		return false, fmt.Errorf("bundle %s: %w", name, err)
	}
	return true, nil
}

// Open checks that the store's stream exists (an error wrapping
// jetstream.ErrStreamNotFound when it does not: Provision makes it).
func (s *BundleStore) Open(ctx context.Context) error {
	_, err := s.streamOf(ctx)
	return err
}

// StoredAt returns when the object name was last stored (or stored again);
// an error wrapping ErrNotStored when nothing is.
func (s *BundleStore) StoredAt(ctx context.Context, name string) (time.Time, error) {
	m, err := s.lastMsg(ctx, StoredSubject(name))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return time.Time{}, fmt.Errorf("%s: %w", name, ErrNotStored)
	}
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", name, err)
	}
	if m.Header.Get(HeaderSchema) != SchemaStored {
		// nats.go's object description: a deleted object leaves one.
		var info jetstream.ObjectInfo
		if err := json.Unmarshal(m.Data, &info); err != nil {
			return time.Time{}, fmt.Errorf("%s: %w: %w", name, ErrMalformed, err)
		}
		if info.Deleted {
			return time.Time{}, fmt.Errorf("%s: %w", name, ErrNotStored)
		}
	}
	return m.Time, nil
}

// Names lists the names of the objects stored (deleted objects of an older
// weft, which leave a description, among them).
func (s *BundleStore) Names(ctx context.Context) ([]string, error) {
	str, err := s.streamOf(ctx)
	if err != nil {
		return nil, err
	}
	prefix := StoredSubject("")
	info, err := str.Info(ctx, jetstream.WithSubjectFilter(prefix+">"))
	if err != nil {
		return nil, fmt.Errorf("bundle store: %w", err)
	}
	var out []string
	for subj := range info.State.Subjects {
		name, err := base64.URLEncoding.DecodeString(strings.TrimPrefix(subj, prefix))
		if err != nil {
			return nil, fmt.Errorf("bundle store: description subject %q: %w", subj, err)
		}
		out = append(out, string(name))
	}
	slices.Sort(out)
	return out, nil
}
