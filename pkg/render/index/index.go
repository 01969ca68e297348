// Package index is the renderer's in-memory view of watched resources.
//
// An Index holds one Store per watched type. Each Store keeps the current
// object for every id, ordered by id, and secondary indexes built from the
// type's index_by field paths (package fieldpath): one map for the full key
// tuple and one for every prefix of it, so GetIndexed is a single map lookup
// whether it is given all keys or only the leading ones. A field that is
// missing (or null) indexes as "".
//
// Revisions: every Upsert and Delete carries the source revision of the
// write (for example a NATS KV revision; for a delete, the revision of the
// delete or purge marker itself, never one derived from another write). A
// change whose revision is not newer than the one already applied for that
// id is ignored, so redelivered and duplicate changes alter nothing. An
// upsert of the content already stored (the same JSON) takes its revision
// but is no change: it reports false and reaches no observer.
// Deletions leave a tombstone with their revision, so an older upsert
// delivered late cannot resurrect the object, and any later write, whose
// revision is strictly higher, wins. Forget removes an id a reader found
// no write of at all, at the revision the Index holds it. Revision reports
// the highest revision applied to the whole Index.
//
// Observers: Observe registers a function that receives a Change for every
// Upsert and Delete that altered the Index, with the object's index key
// tuples before and after, so that a cache of derived results can drop
// exactly what the change affects. An observer runs in the writer's
// goroutine after the change is visible to Store methods and before any Read
// section can start, so no reader sees the change before every observer
// has; it may call Store methods but must not call Upsert, Delete or Read.
//
// Storage: the Index keeps each object as its JSON, which holds no
// pointers for the garbage collector to follow and is a fraction of the
// size of the decoded tree. Readers get plain map[string]any / []any trees
// as Decode makes them (integers as int, which templates print as Jinja2
// does), decoded on first use and shared, through a weak reference, until
// the next garbage collection: renders that follow each other with no
// collection between decode an object they all read once, and a tree no
// reader holds is not kept. Two reads of one revision are equal but need
// not be the same map. The Index never modifies a tree it handed out, and
// readers must not modify what they get. Content is compared by its JSON:
// an upsert is no change when its JSON is byte for byte the stored one. A
// writer that has the JSON (the renderer, from its bucket) puts it as it
// is; one with a tree has it encoded. Items and Changes carry the stored
// *Object of their revision, decoded only when asked for.
//
// Concurrency: any number of readers and one writer. Writers (Upsert,
// Delete) take the write lock; every read method takes the read lock and
// returns data the writer never touches again (slices are fresh copies).
// Each read is consistent on its own; a reader that needs several reads to
// see one revision (a whole render) wraps them in Read, which holds writers
// off until it returns.
package index

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unique"
	"weak"

	"github.com/weftio/weft/pkg/config/fieldpath"
)

// ErrSpec is matched (errors.Is) by every error New returns.
var ErrSpec = errors.New("invalid index spec")

// Spec declares one watched type and the field paths it is indexed by.
type Spec struct {
	Type    string
	IndexBy []string
}

// Index is the set of Stores for all watched types. Create it with New.
type Index struct {
	// gate serialises Read sections against writers: writers hold it
	// exclusively, Read holds it shared. Store methods never touch it, so a
	// Read section can call them without recursive locking.
	gate sync.RWMutex
	// mu guards all Store contents and rev.
	mu     sync.RWMutex
	stores map[string]*Store
	types  []string
	rev    uint64
	// observers are called by the writer; Observe appends under gate.
	observers []func(Change)
}

// Change is one Upsert or Delete that altered the Index.
type Change struct {
	Type string
	ID   string
	Rev  uint64
	// Old and New are the object before and after the change; nil when
	// absent (New of a deletion, Old of a creation).
	Old, New *Object
	// OldKeys and NewKeys are the object's index key tuples (one key per
	// index_by path) before and after; nil when the object is absent.
	OldKeys, NewKeys []string
}

// Item is one stored object, its id and the revision it was stored at.
type Item struct {
	ID  string
	Rev uint64
	obj *Object
}

// Object returns the item's object, decoded (see the package
// documentation on storage).
func (it Item) Object() map[string]any { return it.obj.Map() }

// JSON returns the item's object as the Index keeps it; the caller must
// not modify it.
func (it Item) JSON() []byte { return it.obj.raw }

// Stored returns the item's object as the Index keeps it: one Object per
// stored revision, so it names that revision's content.
func (it Item) Stored() *Object { return it.obj }

// Store holds the objects of one type. It is what templates see as
// resources.<type>. All methods are safe for concurrent use with the
// Index's writer.
type Store struct {
	typ     string
	indexBy []fieldpath.Path
	mu      *sync.RWMutex

	entries map[string]*entry
	ids     []string // sorted ids of live objects
	// tombstones records the revision at which an id was deleted.
	tombstones map[string]uint64
	// prefixes[k] maps the encoded first k+1 index keys to the sorted ids
	// of the objects with those keys.
	prefixes []map[string][]string
	// changes counts the Upserts and Deletes applied to this Store.
	changes uint64
}

type entry struct {
	rev  uint64
	obj  *Object
	keys []string // the object's index key values, one per index_by path
}

// Object is one revision of a stored object: its JSON, and the tree
// decoded from it, kept until the next collection. It never changes.
type Object struct {
	raw  []byte
	mu   sync.Mutex
	memo weak.Pointer[tree]
}

type tree struct{ m map[string]any }

// newObject keeps raw, with m (what Decode made of raw) as its tree for
// now.
func newObject(raw []byte, m map[string]any) *Object {
	o := &Object{raw: raw}
	o.memo = weak.Make(&tree{m})
	return o
}

// ObjectOf is tree as the Index keeps it (encoded, and decoded again), or
// an error when tree does not encode as JSON.
func ObjectOf(tree map[string]any) (*Object, error) {
	o, _, err := Put{Object: tree}.stored()
	return o, err
}

// JSON returns the object as the Index keeps it; the caller must not
// modify it.
func (o *Object) JSON() []byte { return o.raw }

// Map returns the object's tree, decoding its JSON again when the last
// tree was collected. The JSON was decoded when it was stored, so it
// decodes again.
func (o *Object) Map() map[string]any {
	o.mu.Lock()
	defer o.mu.Unlock()
	if t := o.memo.Value(); t != nil {
		return t.m
	}
	m, err := Decode(o.raw)
	if err != nil {
		// Unreachable: the same bytes decoded when they were stored.
		panic(fmt.Sprintf("index: stored object no longer decodes: %v", err))
	}
	o.memo = weak.Make(&tree{m})
	return m
}

// New builds an empty Index for the given types, compiling every index_by
// expression. An empty or duplicate type name or a malformed expression is
// an error naming the type and the expression.
func New(specs []Spec) (*Index, error) {
	ix := &Index{stores: make(map[string]*Store, len(specs))}
	for _, sp := range specs {
		if sp.Type == "" {
			return nil, fmt.Errorf("%w: empty type name", ErrSpec)
		}
		if _, dup := ix.stores[sp.Type]; dup {
			return nil, fmt.Errorf("%w: type %q declared twice", ErrSpec, sp.Type)
		}
		st := &Store{
			typ:        sp.Type,
			mu:         &ix.mu,
			entries:    map[string]*entry{},
			tombstones: map[string]uint64{},
		}
		for _, expr := range sp.IndexBy {
			p, err := fieldpath.Parse(expr)
			if err != nil {
				return nil, fmt.Errorf("%w: type %q: index_by %q: %w", ErrSpec, sp.Type, expr, err)
			}
			st.indexBy = append(st.indexBy, p)
			st.prefixes = append(st.prefixes, map[string][]string{})
		}
		ix.stores[sp.Type] = st
		ix.types = append(ix.types, sp.Type)
	}
	sort.Strings(ix.types)
	return ix, nil
}

// Upsert stores obj as the current state of id in typ at revision rev.
// It returns false, changing nothing, when typ is unknown or rev is not
// newer than the revision already applied for id (including a deletion).
// obj must be a JSON tree; the Index keeps its encoding (see the package
// documentation), so one that does not encode is not stored either.
func (ix *Index) Upsert(typ, id string, rev uint64, obj map[string]any) bool {
	return ix.Put(Put{Type: typ, ID: id, Rev: rev, Object: obj})
}

// Put is Upsert of one Put, which may carry the object's JSON.
func (ix *Index) Put(p Put) bool {
	st := ix.stores[p.Type]
	if st == nil {
		return false
	}
	p, err := ix.Prepare(p)
	if err != nil {
		return false
	}
	ix.gate.Lock()
	defer ix.gate.Unlock()
	c, ok := ix.upsert(st, p.ID, p.Rev, p.obj, p.keys, true)
	if ok {
		ix.notify(c)
	}
	return ok
}

// upsert stores o, whose index keys are keys; lock says whether to take
// mu (UpsertMany holds it).
func (ix *Index) upsert(st *Store, id string, rev uint64, o *Object, keys []string, lock bool) (Change, bool) {
	if lock {
		ix.mu.Lock()
		defer ix.mu.Unlock()
	}
	if !st.newer(id, rev) {
		return Change{}, false
	}
	if old := st.entries[id]; old != nil && bytes.Equal(old.obj.raw, o.raw) {
		// Written again with the same content: a newer revision, no change.
		old.rev = rev
		ix.bump(rev)
		return Change{}, false
	}
	c := Change{Type: st.typ, ID: id, Rev: rev, New: o, NewKeys: keys}
	st.changes++
	if old := st.entries[id]; old != nil {
		c.Old, c.OldKeys = old.obj, old.keys
		if !slices.Equal(old.keys, keys) {
			st.unindex(id, old.keys)
			st.index(id, keys)
		}
		old.rev, old.obj, old.keys = rev, o, keys
	} else {
		delete(st.tombstones, id)
		st.entries[id] = &entry{rev: rev, obj: o, keys: keys}
		st.ids = insertSorted(st.ids, id)
		st.index(id, keys)
	}
	ix.bump(rev)
	return c, true
}

// Put is one object for Put and UpsertMany: its JSON, or its tree, or both.
type Put struct {
	Type, ID string
	Rev      uint64
	// JSON is the object as JSON, kept as it is (the caller must not
	// modify it afterwards). Without it, Object is encoded.
	JSON []byte
	// Object is the object's tree. With JSON, it must be what Decode makes
	// of JSON (a caller that decoded it already spares the Index doing it
	// again); it may be left nil.
	Object map[string]any

	// Set by Prepare: what the Index keeps, and its index keys in it.
	obj  *Object
	keys []string
	by   *Index
}

// Prepare does for p, ahead of Put or UpsertMany and outside their lock,
// what they would: encode or decode the object and read its index keys.
// Decoders running at once can each prepare theirs. The Put returned holds
// the object as the Index keeps it, not its tree, so a caller that gathers
// many holds their JSON only. An object that neither decodes (JSON) nor
// encodes (Object) is an error; a type the Index does not have is not
// (Put and UpsertMany ignore it).
func (ix *Index) Prepare(p Put) (Put, error) {
	if p.obj != nil && p.by == ix {
		return p, nil
	}
	o, m := p.obj, map[string]any(nil)
	if o != nil {
		m = o.Map() // prepared by another Index: its keys here
	} else {
		var err error
		if o, m, err = p.stored(); err != nil {
			return Put{}, err
		}
	}
	if st := ix.stores[p.Type]; st != nil {
		p.keys = st.keysOf(m)
	}
	p.JSON, p.Object, p.obj, p.by = o.raw, nil, o, ix
	return p, nil
}

// stored returns what the Index keeps of p and its tree.
func (p Put) stored() (*Object, map[string]any, error) {
	raw, m := p.JSON, p.Object
	if len(raw) == 0 {
		b, err := json.Marshal(p.Object)
		if err != nil {
			return nil, nil, fmt.Errorf("encode object %s: %w", p.ID, err)
		}
		// The tree of the encoding, not the caller's: every later read
		// decodes the same bytes, and must find the same values.
		raw, m = b, nil
	}
	if m == nil {
		var err error
		if m, err = Decode(raw); err != nil {
			return nil, nil, fmt.Errorf("object %s: %w", p.ID, err)
		}
	}
	return newObject(raw, m), m, nil
}

// UpsertMany applies puts as Upsert applies each (same revision rules,
// same Changes to the observers, in the order of puts) under one write,
// and returns how many changed the Index. It is the way to fill an Index
// from a snapshot: objects new to a Store are appended and its id lists
// sorted once at the end, where Upsert inserts each in order.
//
// A put whose object neither decodes (JSON) nor encodes (Object) is not
// applied.
func (ix *Index) UpsertMany(puts []Put) int {
	ready := make([]Put, 0, len(puts))
	for _, p := range puts {
		if p, err := ix.Prepare(p); err == nil {
			ready = append(ready, p)
		}
	}
	ix.gate.Lock()
	defer ix.gate.Unlock()
	changes := ix.upsertMany(ready)
	for _, c := range changes {
		ix.notify(c)
	}
	return len(changes)
}

// upsertMany applies prepared puts.
func (ix *Index) upsertMany(puts []Put) []Change {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	changes := make([]Change, 0, len(puts))
	// The Stores with ids appended by this call: how long each list was
	// before (-1 for the id list, level and prefix key for the others).
	unsorted := map[*Store]map[listRef]int{}
	for _, p := range puts {
		st := ix.stores[p.Type]
		if st == nil || !st.newer(p.ID, p.Rev) {
			continue
		}
		if st.entries[p.ID] != nil {
			// Already stored: as Upsert, on sorted lists.
			if levels := unsorted[st]; levels != nil {
				ix.sortStore(st, levels)
				delete(unsorted, st)
			}
			if c, ok := ix.upsert(st, p.ID, p.Rev, p.obj, p.keys, false); ok {
				changes = append(changes, c)
			}
			continue
		}
		keys := p.keys
		delete(st.tombstones, p.ID)
		st.entries[p.ID] = &entry{rev: p.Rev, obj: p.obj, keys: keys}
		lists := unsorted[st]
		if lists == nil {
			lists = map[listRef]int{{level: -1}: len(st.ids)}
			unsorted[st] = lists
		}
		st.ids = append(st.ids, p.ID)
		for k := range st.prefixes {
			pk := prefixKey(keys[:k+1])
			ref := listRef{k, pk}
			if _, ok := lists[ref]; !ok {
				lists[ref] = len(st.prefixes[k][pk])
			}
			st.prefixes[k][pk] = append(st.prefixes[k][pk], p.ID)
		}
		st.changes++
		ix.bump(p.Rev)
		changes = append(changes, Change{Type: st.typ, ID: p.ID, Rev: p.Rev, New: p.obj, NewKeys: keys})
	}
	for st, levels := range unsorted {
		ix.sortStore(st, levels)
	}
	return changes
}

// listRef names one sorted id list of a Store: its ids (level -1) or the
// list of a prefix key at a level.
type listRef struct {
	level int
	key   string
}

// sortStore sorts the lists of st that ids were appended to, each from
// the length it had before: the appended ids are sorted and merged in.
func (ix *Index) sortStore(st *Store, lists map[listRef]int) {
	for ref, from := range lists {
		if ref.level < 0 {
			st.ids = mergeTail(st.ids, from)
		} else {
			st.prefixes[ref.level][ref.key] = mergeTail(st.prefixes[ref.level][ref.key], from)
		}
	}
}

// mergeTail sorts s whose first from elements are sorted already.
func mergeTail(s []string, from int) []string {
	tail := s[from:]
	slices.Sort(tail)
	if from == 0 || len(tail) == 0 || s[from-1] <= tail[0] {
		return s
	}
	out := make([]string, 0, len(s))
	head, tail := s[:from], slices.Clone(tail)
	for len(head) > 0 && len(tail) > 0 {
		if head[0] <= tail[0] {
			out, head = append(out, head[0]), head[1:]
		} else {
			out, tail = append(out, tail[0]), tail[1:]
		}
	}
	out = append(out, head...)
	return append(out, tail...)
}

// keysOf returns obj's index key tuple.
func (st *Store) keysOf(obj map[string]any) []string {
	keys := make([]string, len(st.indexBy))
	for i, p := range st.indexBy {
		keys[i] = KeyString(p.Lookup(obj))
	}
	return keys
}

// Delete removes id from typ at revision rev and reports whether an object
// was removed. A stale revision (not newer than the one applied for id) is
// ignored. Deleting an id that is not stored still records the revision, so
// a late older upsert of it is ignored too.
func (ix *Index) Delete(typ, id string, rev uint64) bool {
	st := ix.stores[typ]
	if st == nil {
		return false
	}
	ix.gate.Lock()
	defer ix.gate.Unlock()
	c, ok := ix.delete(st, id, rev)
	if ok {
		ix.notify(c)
	}
	return ok
}

func (ix *Index) delete(st *Store, id string, rev uint64) (Change, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !st.newer(id, rev) {
		return Change{}, false
	}
	return ix.tombstone(st, id, rev)
}

// remove is delete of an entry at its own revision (Forget); the writer
// holds gate, so the entry is still there.
func (ix *Index) remove(st *Store, id string, rev uint64) (Change, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.tombstone(st, id, rev)
}

// tombstone records id deleted at rev and removes its entry; mu is held.
func (ix *Index) tombstone(st *Store, id string, rev uint64) (Change, bool) {
	st.tombstones[id] = rev
	ix.bump(rev)
	old := st.entries[id]
	if old == nil {
		return Change{}, false
	}
	st.unindex(id, old.keys)
	delete(st.entries, id)
	st.ids = removeSorted(st.ids, id)
	st.changes++
	return Change{Type: st.typ, ID: id, Rev: rev, Old: old.obj, OldKeys: old.keys}, true
}

// Forget removes id from typ whatever its revision, for a reader that
// found no write of id left at all in the source; the tombstone keeps the
// revision id was stored at, so only a newer write brings it back. It
// reports whether an object was removed.
func (ix *Index) Forget(typ, id string) bool {
	st := ix.stores[typ]
	if st == nil {
		return false
	}
	ix.gate.Lock()
	defer ix.gate.Unlock()
	ix.mu.RLock()
	e := st.entries[id]
	ix.mu.RUnlock()
	if e == nil {
		return false
	}
	c, ok := ix.remove(st, id, e.rev)
	if ok {
		ix.notify(c)
	}
	return ok
}

// Observe registers fn to receive every Change from now on (see the
// package documentation for when it runs and what it may do).
func (ix *Index) Observe(fn func(Change)) {
	ix.gate.Lock()
	defer ix.gate.Unlock()
	ix.observers = append(ix.observers, fn)
}

// notify calls the observers; the caller holds gate but not mu, so they
// can use Store methods.
func (ix *Index) notify(c Change) {
	for _, fn := range ix.observers {
		fn(c)
	}
}

func (ix *Index) bump(rev uint64) {
	if rev > ix.rev {
		ix.rev = rev
	}
}

// Revision returns the highest revision applied so far (0 when none).
func (ix *Index) Revision() uint64 {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	return ix.rev
}

// Read calls fn while no writer can change the Index, passing the revision
// fn sees. Store methods may be used inside fn; Read must not be nested.
func (ix *Index) Read(fn func(rev uint64)) {
	ix.gate.RLock()
	defer ix.gate.RUnlock()
	fn(ix.Revision())
}

// Clone returns a copy of the Index as it is now, with no observer: the
// same stored objects (which never change), in stores of their own, so
// writes to either leave the other as it was.
func (ix *Index) Clone() *Index {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := &Index{stores: make(map[string]*Store, len(ix.stores)), types: slices.Clone(ix.types), rev: ix.rev}
	for typ, st := range ix.stores {
		c := &Store{
			typ:        st.typ,
			indexBy:    st.indexBy,
			mu:         &out.mu,
			entries:    make(map[string]*entry, len(st.entries)),
			ids:        slices.Clone(st.ids),
			tombstones: maps.Clone(st.tombstones),
			prefixes:   make([]map[string][]string, len(st.prefixes)),
			changes:    st.changes,
		}
		for id, e := range st.entries {
			c.entries[id] = &entry{rev: e.rev, obj: e.obj, keys: e.keys}
		}
		for k, level := range st.prefixes {
			c.prefixes[k] = make(map[string][]string, len(level))
			for key, ids := range level {
				c.prefixes[k][key] = slices.Clone(ids)
			}
		}
		out.stores[typ] = c
	}
	return out
}

// Counts returns the number of stored objects per type.
func (ix *Index) Counts() map[string]int {
	ix.mu.RLock()
	defer ix.mu.RUnlock()
	out := make(map[string]int, len(ix.stores))
	for typ, st := range ix.stores {
		out[typ] = len(st.ids)
	}
	return out
}

// Store returns the Store of typ, or nil when typ was not declared.
func (ix *Index) Store(typ string) *Store {
	return ix.stores[typ]
}

// Types returns the declared type names, sorted.
func (ix *Index) Types() []string {
	return slices.Clone(ix.types)
}

// Stores returns every Store keyed by type name, ready to be handed to
// templates as resources.
func (ix *Index) Stores() map[string]any {
	out := make(map[string]any, len(ix.stores))
	for typ, st := range ix.stores {
		out[typ] = st
	}
	return out
}

func (st *Store) newer(id string, rev uint64) bool {
	if e := st.entries[id]; e != nil {
		return rev > e.rev
	}
	if dead, ok := st.tombstones[id]; ok {
		return rev > dead
	}
	return true
}

func (st *Store) index(id string, keys []string) {
	for k := range st.prefixes {
		pk := prefixKey(keys[:k+1])
		st.prefixes[k][pk] = insertSorted(st.prefixes[k][pk], id)
	}
}

func (st *Store) unindex(id string, keys []string) {
	for k := range st.prefixes {
		pk := prefixKey(keys[:k+1])
		left := removeSorted(st.prefixes[k][pk], id)
		if len(left) == 0 {
			delete(st.prefixes[k], pk)
		} else {
			st.prefixes[k][pk] = left
		}
	}
}

// Type is the type name the Store holds.
func (st *Store) Type() string { return st.typ }

// IndexBy returns the index_by paths in canonical form.
func (st *Store) IndexBy() []string {
	out := make([]string, len(st.indexBy))
	for i, p := range st.indexBy {
		out[i] = p.String()
	}
	return out
}

// Len returns the number of stored objects.
func (st *Store) Len() int {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return len(st.ids)
}

// Get returns the object stored under id.
func (st *Store) Get(id string) (map[string]any, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	e := st.entries[id]
	if e == nil {
		return nil, false
	}
	return e.obj.Map(), true
}

// Item returns the object stored under id with its revision.
func (st *Store) Item(id string) (Item, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	e := st.entries[id]
	if e == nil {
		return Item{}, false
	}
	return Item{ID: id, Rev: e.rev, obj: e.obj}, true
}

// Changes returns how many Upserts and Deletes have altered the Store (each
// one that returned true, and so reached the observers, counts once).
func (st *Store) Changes() uint64 {
	st.mu.RLock()
	defer st.mu.RUnlock()
	return st.changes
}

// Revision returns the revision at which id was last upserted, or false
// when id is not stored.
func (st *Store) Revision(id string) (uint64, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	e := st.entries[id]
	if e == nil {
		return 0, false
	}
	return e.rev, true
}

// Keys returns the index key tuple of id (one key per index_by path), or
// false when id is not stored.
func (st *Store) Keys(id string) ([]string, bool) {
	st.mu.RLock()
	defer st.mu.RUnlock()
	e := st.entries[id]
	if e == nil {
		return nil, false
	}
	return slices.Clone(e.keys), true
}

// Items returns all stored objects ordered by id.
func (st *Store) Items() []Item {
	st.mu.RLock()
	defer st.mu.RUnlock()
	out := make([]Item, len(st.ids))
	for i, id := range st.ids {
		e := st.entries[id]
		out[i] = Item{ID: id, Rev: e.rev, obj: e.obj}
	}
	return out
}

// GetIndexed returns, ordered by id, the objects whose first len(keys)
// index_by values equal keys. With no keys it returns every object; with
// more keys than index_by paths it returns nothing. The lookup is one map
// access for the full tuple and for any prefix of it.
func (st *Store) GetIndexed(keys ...string) []map[string]any {
	items := st.GetIndexedItems(keys...)
	if len(items) == 0 {
		return nil
	}
	out := make([]map[string]any, len(items))
	for i, it := range items {
		out[i] = it.Object()
	}
	return out
}

// GetIndexedItems is GetIndexed as Items, the objects not decoded.
func (st *Store) GetIndexedItems(keys ...string) []Item {
	st.mu.RLock()
	defer st.mu.RUnlock()
	var ids []string
	switch {
	case len(keys) == 0:
		ids = st.ids
	case len(keys) > len(st.prefixes):
		return nil
	default:
		ids = st.prefixes[len(keys)-1][prefixKey(keys)]
	}
	if len(ids) == 0 {
		return nil
	}
	out := make([]Item, len(ids))
	for i, id := range ids {
		e := st.entries[id]
		out[i] = Item{ID: id, Rev: e.rev, obj: e.obj}
	}
	return out
}

// KeyString converts a looked-up field value to its index key: "" for a
// missing field or null, the string itself, decimal numbers without
// exponent or trailing zeros, "true"/"false", and compact JSON for maps and
// lists.
func KeyString(v any, found bool) string {
	if !found || v == nil {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case bool:
		return strconv.FormatBool(x)
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64)
	case float32:
		return strconv.FormatFloat(float64(x), 'f', -1, 32)
	case int:
		return strconv.Itoa(x)
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	case json.Number:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// prefixKey encodes a key tuple unambiguously: each key is preceded by its
// length, so no separator can be confused with key content.
func prefixKey(keys []string) string {
	if len(keys) == 1 {
		return keys[0]
	}
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(strconv.Itoa(len(k)))
		b.WriteByte(':')
		b.WriteString(k)
	}
	return b.String()
}

func insertSorted(s []string, id string) []string {
	i, found := slices.BinarySearch(s, id)
	if found {
		return s
	}
	return slices.Insert(s, i, id)
}

func removeSorted(s []string, id string) []string {
	i, found := slices.BinarySearch(s, id)
	if !found {
		return s
	}
	return slices.Delete(s, i, i+1)
}

// Normalize converts, in place, the numbers of a decoded JSON tree to int
// where they are whole: json.Number as produced by UseNumber, and float64
// as produced by a plain json.Unmarshal (which cannot tell 80 from 80.0).
// It returns the converted value; maps and slices are modified in place.
// Map keys are interned (package unique): objects of one kind repeat the
// same keys, and the decoder allocates each of them anew.
func Normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			// Assigning to an existing key stores the interned copy.
			x[unique.Make(k).Value()] = Normalize(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = Normalize(e)
		}
		return x
	case json.Number:
		if i, err := strconv.ParseInt(string(x), 10, 0); err == nil {
			return int(i)
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return string(x)
	case float64:
		if x == math.Trunc(x) && x >= math.MinInt64 && x < math.MaxInt64 && !math.IsInf(x, 0) {
			return int(x)
		}
		return x
	}
	return v
}
