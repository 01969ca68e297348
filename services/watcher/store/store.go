// Package store writes a source's objects into the resources bucket. It is
// level-based: Apply takes the complete desired set of one source, compares
// it with what the bucket holds, and writes only the difference. Each write
// is a compare-and-set on the key's last revision, published to the bucket's
// stream with the caller's trace context in its headers, so replicas that
// apply the same set write each change once: the loser of a compare-and-set
// re-reads the key, finds the same content and moves on. Announcing the
// writes as change messages is the relay's job (package relay), which
// follows the bucket's stream, so a writer that dies right after a write
// loses nothing.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config/fieldpath"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/telemetry"
)

// ErrContended is a write that lost its compare-and-set again and again:
// other replicas of the source keep writing the key with what they see.
// The source writes it again on its next pass.
var ErrContended = errors.New("the key keeps changing under us (other replicas are writing it)")

// Object is one desired object of a source.
type Object struct {
	Type            string
	Namespace, Name string
	ResourceVersion string
	Origin          string
	Body            map[string]any
}

// KV is the part of jetstream.KeyValue the store reads through.
type KV interface {
	WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error)
}

// Stream is the part of the bucket's stream the store writes through.
type Stream interface {
	GetLastMsgForSubject(ctx context.Context, subject string) (*jetstream.RawStreamMsg, error)
}

// Publisher writes to the bucket's stream.
type Publisher interface {
	PublishMsg(ctx context.Context, m *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error)
}

// AsyncPublisher writes to the bucket's stream without waiting for each
// acknowledgement. A Publisher that is one too (jetstream.JetStream) gets
// the writes of an Apply pipelined: up to Window in flight at once.
type AsyncPublisher interface {
	PublishMsgAsync(m *nats.Msg, opts ...jetstream.PublishOpt) (jetstream.PubAckFuture, error)
}

// Window is the most writes of one Apply in flight at once.
const Window = 512

// AckWait is how long a pipelined write waits for its acknowledgement
// before it counts as unanswered (nats.ErrTimeout): written again on the
// source's next pass.
const AckWait = 30 * time.Second

// Result counts what one Apply did.
type Result struct {
	Put, Deleted, Unchanged int
	Counts                  map[string]int // desired objects by type
	// PutByType and DeletedByType split Put and Deleted by type (set by
	// a Listing only).
	PutByType, DeletedByType map[string]int
}

type entry struct {
	hash string
	rev  uint64
}

// Store applies one source's objects. Safe for concurrent use; Applies are
// serialized.
type Store struct {
	source string
	types  []string
	strip  []fieldpath.Path
	kv     KV
	stream Stream
	pub    Publisher

	mu     sync.Mutex
	loaded bool
	known  map[string]entry // key -> what the bucket holds, as last seen
	counts map[string]int   // live keys in known, by type
}

// New returns a store for source, owning the keys of the given types; strip
// lists the fields removed from every object before it is hashed.
func New(source string, types []string, strip []fieldpath.Path, kv KV, stream Stream, pub Publisher) (*Store, error) {
	if source == "" || kv == nil || stream == nil || pub == nil {
		return nil, errors.New("store: source, bucket, stream and publisher are required")
	}
	return &Store{source: source, types: types, strip: strip, kv: kv, stream: stream, pub: pub, known: map[string]entry{}, counts: map[string]int{}}, nil
}

// load reads what the bucket holds for this source's types.
func (s *Store) load(ctx context.Context) error {
	if len(s.types) == 0 {
		s.loaded = true
		return nil
	}
	filters := make([]string, len(s.types))
	for i, t := range s.types {
		filters[i] = msg.ResourcePrefix(s.source, t) + ">"
	}
	w, err := msg.Watch(ctx, s.kv, filters, jetstream.IgnoreDeletes())
	if err != nil {
		return fmt.Errorf("store: watch %s: %w", s.source, err)
	}
	defer msg.StopWatch(w)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-w.Updates():
			if e == nil {
				s.loaded = true
				return nil
			}
			var r msg.Resource
			if err := msg.Decode(e.Value(), &r); err != nil {
				// An unreadable entry is rewritten by the next Apply.
				s.remember(e.Key(), entry{rev: e.Revision()})
				continue
			}
			s.remember(e.Key(), entry{hash: r.Hash, rev: e.Revision()})
		}
	}
}

// Apply makes the bucket hold exactly objects for this source, across all
// its types. initial marks the writes of the source's first listing.
func (s *Store) Apply(ctx context.Context, objects []Object, initial bool) (Result, error) {
	return s.apply(ctx, s.types, objects, initial)
}

// ApplyType makes the bucket hold exactly objects for one type of this
// source (a complete listing of that type), leaving other types alone.
func (s *Store) ApplyType(ctx context.Context, typ string, objects []Object, initial bool) (Result, error) {
	return s.apply(ctx, []string{typ}, objects, initial)
}

// Upsert writes one object if its content changed; it reports whether it
// wrote.
func (s *Store) Upsert(ctx context.Context, o Object, initial bool) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ensureLoaded(ctx); err != nil {
		return false, err
	}
	return s.put(ctx, msg.ResourceKey(s.source, o.Type, o.Namespace, o.Name), o, initial)
}

// Remove deletes one object; it reports whether it wrote a delete marker.
func (s *Store) Remove(ctx context.Context, typ, namespace, name string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ensureLoaded(ctx); err != nil {
		return false, err
	}
	key := msg.ResourceKey(s.source, typ, namespace, name)
	if _, ok := s.known[key]; !ok {
		return false, nil
	}
	return s.delete(ctx, key)
}

func (s *Store) ensureLoaded(ctx context.Context) error {
	if s.loaded {
		return nil
	}
	return s.load(ctx)
}

func (s *Store) apply(ctx context.Context, types []string, objects []Object, initial bool) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ensureLoaded(ctx); err != nil {
		return Result{}, err
	}
	res := Result{Counts: map[string]int{}}
	for _, t := range types {
		res.Counts[t] = 0
	}
	want := make(map[string]bool, len(objects))
	for _, o := range objects {
		want[keyOf(s.source, o)] = true
		res.Counts[o.Type]++
	}
	var errs []error
	res.Put, res.Unchanged, errs = s.putAll(ctx, objects, initial)
	deleted, derrs := s.prune(ctx, types, func(key string) bool { return want[key] })
	res.Deleted = deleted
	return res, errors.Join(append(errs, derrs...)...)
}

// prune deletes every known key of types that want does not keep.
func (s *Store) prune(ctx context.Context, types []string, want func(key string) bool) (deleted int, errs []error) {
	prefixes := make([]string, len(types))
	for i, t := range types {
		prefixes[i] = msg.ResourcePrefix(s.source, t)
	}
	for key := range s.known {
		if want(key) || !hasAnyPrefix(key, prefixes) {
			continue
		}
		ok, err := s.delete(ctx, key)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if ok {
			deleted++
		}
	}
	return deleted, errs
}

// keyOf is the resource key of o.
func keyOf(source string, o Object) string {
	return msg.ResourceKey(source, o.Type, o.Namespace, o.Name)
}

// UpsertAll writes each of objects whose content changed, pipelined as an
// Apply's writes are, and deletes nothing. Result.Counts is not set.
func (s *Store) UpsertAll(ctx context.Context, objects []Object, initial bool) (Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ensureLoaded(ctx); err != nil {
		return Result{}, err
	}
	var res Result
	var errs []error
	res.Put, res.Unchanged, errs = s.putAll(ctx, objects, initial)
	return res, errors.Join(errs...)
}

// putAll writes each of objects whose content changed: pipelined when the
// publisher publishes asynchronously, else one at a time.
func (s *Store) putAll(ctx context.Context, objects []Object, initial bool) (put, unchanged int, errs []error) {
	async, pipelined := s.pub.(AsyncPublisher)
	var inflight []*pending
	settle := func(p *pending) {
		changed, err := s.settle(ctx, p, initial)
		switch {
		case err != nil:
			errs = append(errs, err)
		case changed:
			put++
		default:
			unchanged++
		}
	}
	for _, o := range objects {
		key := msg.ResourceKey(s.source, o.Type, o.Namespace, o.Name)
		if !pipelined {
			changed, err := s.put(ctx, key, o, initial)
			settle(&pending{changed: changed, err: err})
			continue
		}
		p := s.start(ctx, async, key, o, initial)
		if p.future == nil {
			settle(p) // unchanged, or failed before it was sent
			continue
		}
		inflight = append(inflight, p)
		if len(inflight) >= Window {
			settle(inflight[0])
			inflight = inflight[1:]
		}
	}
	for _, p := range inflight {
		settle(p)
	}
	return put, unchanged, errs
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}

// pending is one write of an Apply: sent and not yet acknowledged when
// future is set, otherwise decided (changed or err).
type pending struct {
	key, hash string
	version   string // the object's resource version
	value     []byte
	future    jetstream.PubAckFuture
	changed   bool
	err       error
}

// prepare strips and hashes o and encodes it; it returns a nil value when
// the bucket already holds that content.
func (s *Store) prepare(key string, o Object) (hash string, value []byte, err error) {
	for _, p := range s.strip {
		p.Delete(o.Body)
	}
	if hash, err = Hash(o.Body); err != nil {
		return "", nil, fmt.Errorf("store: %s: %w", key, err)
	}
	if cur, ok := s.known[key]; ok && cur.hash == hash {
		return hash, nil, nil
	}
	value, err = msg.Encode(msg.Resource{
		Source: s.source, Type: o.Type, Namespace: o.Namespace, Name: o.Name,
		ResourceVersion: o.ResourceVersion, Hash: hash, Origin: o.Origin, Object: o.Body,
	})
	if err != nil {
		return "", nil, fmt.Errorf("store: %s: %w", key, err)
	}
	return hash, value, nil
}

// start sends the write of o without waiting for its acknowledgement.
func (s *Store) start(ctx context.Context, pub AsyncPublisher, key string, o Object, initial bool) *pending {
	hash, value, err := s.prepare(key, o)
	if err != nil || value == nil {
		return &pending{key: key, err: err}
	}
	p := &pending{key: key, hash: hash, value: value, version: o.ResourceVersion}
	p.future, p.err = pub.PublishMsgAsync(s.putMessage(ctx, key, hash, o.ResourceVersion, value, s.known[key].rev, initial))
	if p.err != nil {
		p.err = fmt.Errorf("store: write %s: %w", key, p.err)
	}
	return p
}

// settle waits for a pipelined write's acknowledgement and records it. A
// write that lost its compare-and-set is decided again as put does.
func (s *Store) settle(ctx context.Context, p *pending, initial bool) (bool, error) {
	if p.future == nil {
		return p.changed, p.err
	}
	timer := time.NewTimer(AckWait)
	defer timer.Stop()
	select {
	case ack := <-p.future.Ok():
		s.remember(p.key, entry{hash: p.hash, rev: ack.Sequence})
		return true, nil
	case err := <-p.future.Err():
		if !isConflict(err) {
			return false, fmt.Errorf("store: write %s: %w", p.key, err)
		}
		cur, live, err := s.reread(ctx, p.key)
		if err != nil {
			return false, err
		}
		if live && cur.hash == p.hash {
			return false, nil
		}
		return s.commit(ctx, p.key, p.hash, p.version, p.value, cur, initial)
	case <-ctx.Done():
		return false, fmt.Errorf("store: write %s: %w", p.key, ctx.Err())
	case <-timer.C:
		return false, fmt.Errorf("store: write %s: no acknowledgement within %s: %w", p.key, AckWait, nats.ErrTimeout)
	}
}

func (s *Store) put(ctx context.Context, key string, o Object, initial bool) (bool, error) {
	hash, value, err := s.prepare(key, o)
	if err != nil || value == nil {
		return false, err
	}
	return s.commit(ctx, key, hash, o.ResourceVersion, value, s.known[key], initial)
}

// commit writes value with a compare-and-set on cur's revision; when
// another writer got there first it re-reads the key and decides again,
// up to three times.
func (s *Store) commit(ctx context.Context, key, hash, version string, value []byte, cur entry, initial bool) (bool, error) {
	for attempt := 0; attempt < 3; attempt++ {
		rev, err := s.write(ctx, s.putMessage(ctx, key, hash, version, value, cur.rev, initial))
		if err == nil {
			s.remember(key, entry{hash: hash, rev: rev})
			return true, nil
		}
		if !isConflict(err) {
			return false, fmt.Errorf("store: write %s: %w", key, err)
		}
		// Someone else wrote the key: re-read it and decide again.
		var live bool
		if cur, live, err = s.reread(ctx, key); err != nil {
			return false, err
		}
		if live && cur.hash == hash {
			return false, nil
		}
	}
	return false, fmt.Errorf("store: write %s: %w", key, ErrContended)
}

// delete removes key unless someone wrote it meanwhile; it reports whether
// it wrote a delete marker. On such a conflict it re-reads the key, so the
// next Apply decides on what the bucket holds now (and deletes it again if
// still unwanted); a failed write keeps the key known, so the next Apply
// deletes it again too.
func (s *Store) delete(ctx context.Context, key string) (bool, error) {
	_, err := s.write(ctx, s.message(ctx, key, nil, msg.KVOpDelete, s.known[key].rev, false))
	switch {
	case err == nil:
		s.forget(key)
		return true, nil
	case isConflict(err):
		if _, _, err := s.reread(ctx, key); err != nil {
			return false, err
		}
		return false, nil
	}
	return false, fmt.Errorf("store: delete %s: %w", key, err)
}

// write publishes m and returns its revision.
func (s *Store) write(ctx context.Context, m *nats.Msg) (uint64, error) {
	ack, err := s.pub.PublishMsg(ctx, m)
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// putMessage is the write of value, the encoded resource of the given
// hash and resource version, for key: message's, with the hash and version
// copied to headers for readers that need no more (the relay).
func (s *Store) putMessage(ctx context.Context, key, hash, version string, value []byte, last uint64, initial bool) *nats.Msg {
	m := s.message(ctx, key, value, "", last, initial)
	m.Header.Set(msg.HeaderResourceHash, hash)
	if version != "" {
		m.Header.Set(msg.HeaderResourceVersion, version)
	}
	return m
}

// message is the write of a value (or a delete marker when op is set) for
// key, expecting last as the key's current revision (0: none).
func (s *Store) message(ctx context.Context, key string, value []byte, op string, last uint64, initial bool) *nats.Msg {
	m := nats.NewMsg(msg.ResourceSubject(key))
	m.Data = value
	m.Header.Set(msg.HeaderExpectedLastSubjectSeq, strconv.FormatUint(last, 10))
	if op != "" {
		m.Header.Set(msg.HeaderKVOperation, op)
	} else {
		m.Header.Set(msg.HeaderSchema, msg.SchemaResource)
	}
	if initial {
		m.Header.Set(msg.HeaderInitial, "true")
	}
	telemetry.Inject(ctx, m.Header)
	return m
}

// reread returns what the bucket holds for key: its last revision (a delete
// marker's too, which a create must name) and whether it is a live value.
func (s *Store) reread(ctx context.Context, key string) (entry, bool, error) {
	m, err := s.stream.GetLastMsgForSubject(ctx, msg.ResourceSubject(key))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		s.forget(key)
		return entry{}, false, nil
	}
	if err != nil {
		return entry{}, false, fmt.Errorf("store: read %s: %w", key, err)
	}
	if op := m.Header.Get(msg.HeaderKVOperation); op == msg.KVOpDelete || op == msg.KVOpPurge {
		s.forget(key)
		return entry{rev: m.Sequence}, false, nil
	}
	var r msg.Resource
	_ = msg.Decode(m.Data, &r)
	cur := entry{hash: r.Hash, rev: m.Sequence}
	s.remember(key, cur)
	return cur, true, nil
}

func isConflict(err error) bool { return msg.IsWrongLastSequence(err) }

// Hash is the content hash of an object: sha256 of its canonical JSON
// (encoding/json sorts map keys).
func Hash(body map[string]any) (string, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// remember records what the bucket holds under key.
func (s *Store) remember(key string, e entry) {
	if _, ok := s.known[key]; !ok {
		s.counts[typeOf(key)]++
	}
	s.known[key] = e
}

// forget records that the bucket holds nothing under key.
func (s *Store) forget(key string) {
	if _, ok := s.known[key]; ok {
		s.counts[typeOf(key)]--
		delete(s.known, key)
	}
}

// typeOf is the type part of a resource key (<source>.<type>.<ns>.<name>).
func typeOf(key string) string {
	_, rest, _ := strings.Cut(key, ".")
	typ, _, _ := strings.Cut(rest, ".")
	return typ
}

// Count returns how many objects of typ the bucket holds for this source,
// as last seen: the objects this store wrote, read at its first use, or
// found written by another replica when a write of its own conflicted. It
// costs the same at any number of objects.
func (s *Store) Count(typ string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[typ]
}
