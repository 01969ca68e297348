package engine

import (
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// valuesView is what templates see as `values`: the values map, recording
// which names a render reads so that a change of one value re-renders only
// the targets that read it. Listing all values (items, keys, values) marks
// the render as depending on every value. It is a struct, not a map, so
// that no access can bypass the recording.
type valuesView struct {
	m  objectMap
	mu *sync.Mutex
	rd *valuesRead
}

type valuesRead struct {
	names map[string]bool
	all   bool
}

func newValuesView(m map[string]any) valuesView {
	return valuesView{m: objectMap(m), mu: &sync.Mutex{}, rd: &valuesRead{names: map[string]bool{}}}
}

func (v valuesView) read(name string) {
	v.mu.Lock()
	v.rd.names[name] = true
	v.mu.Unlock()
}

func (v valuesView) readAll() {
	v.mu.Lock()
	v.rd.all = true
	v.mu.Unlock()
}

// String prints the values as a dict does.
func (v valuesView) String() string {
	v.readAll()
	return exec.AsValue(map[string]any(v.m)).String()
}

// GetAttribute implements exec.AttributeGetter.
func (v valuesView) GetAttribute(name string) (*exec.Value, bool) {
	switch name {
	case "items", "keys", "values":
		v.readAll()
		return v.m.GetAttribute(name)
	case "get":
		return exec.AsValue(func(args *exec.VarArgs) (any, error) {
			if len(args.Args) >= 1 {
				v.read(args.Args[0].String())
			}
			get, _ := v.m.GetAttribute("get")
			return get.Interface().(func(*exec.VarArgs) (any, error))(args)
		}), true
	}
	v.read(name)
	return v.m.GetAttribute(name)
}

// GetItem implements exec.ItemGetter: values['name'].
func (v valuesView) GetItem(key any) (*exec.Value, bool) {
	if k, ok := key.(string); ok {
		v.read(k)
	}
	return v.m.GetItem(key)
}

// result returns the names read, sorted, and whether every value was read.
func (v valuesView) result() ([]string, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	names := make([]string, 0, len(v.rd.names))
	for n := range v.rd.names {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, v.rd.all
}

// reads records what one fragment entry read through `resources` while it
// rendered: objects by id, get_indexed lookups by type and key tuple, and
// whole types. Values are recorded by the entry's valuesView. An entry
// renders on one goroutine, so reads needs no lock.
type reads struct {
	objects smallSet[objRef]
	lookups smallSet[lookupRef]
	types   smallSet[string]
}

// objRef is an object read by id.
type objRef struct{ typ, id string }

// lookupRef is a get_indexed lookup: the type and the encoded key tuple.
type lookupRef struct{ typ, keys string }

func (r *reads) object(typ, id string) { r.objects.add(objRef{typ, id}) }
func (r *reads) typ(typ string)        { r.types.add(typ) }
func (r *reads) lookup(typ string, keys []string) {
	r.lookups.add(lookupRef{typ, encodeKeys(keys)})
}

// encodeKeys encodes a key tuple unambiguously (each key preceded by its
// length), so tuples of different lengths never collide.
func encodeKeys(keys []string) string {
	n := 0
	for _, k := range keys {
		n += len(k) + 4
	}
	b := make([]byte, 0, n)
	for _, k := range keys {
		b = strconv.AppendInt(b, int64(len(k)), 10)
		b = append(b, ':')
		b = append(b, k...)
	}
	return string(b)
}

// deps are the reads of one rendered entry, in the form the cache indexes.
type deps struct {
	objects   []objRef
	lookups   []lookupRef
	types     []string
	values    []string
	allValues bool
}

func (r *reads) deps(v valuesView) deps {
	d := deps{objects: r.objects.list(), lookups: r.lookups.list(), types: r.types.list()}
	d.values, d.allValues = v.result()
	if len(d.values) == 0 {
		d.values = nil
	}
	return d
}

// smallSet is a set that stays a slice while small (most entries read a
// handful of things) and becomes a map when it grows.
type smallSet[K comparable] struct {
	few  []K
	many map[K]struct{}
}

const smallSetMax = 16

func (s *smallSet[K]) add(k K) {
	if s.many != nil {
		s.many[k] = struct{}{}
		return
	}
	for _, x := range s.few {
		if x == k {
			return
		}
	}
	if len(s.few) < smallSetMax {
		s.few = append(s.few, k)
		return
	}
	s.many = make(map[K]struct{}, 2*smallSetMax)
	for _, x := range s.few {
		s.many[x] = struct{}{}
	}
	s.many[k] = struct{}{}
	s.few = nil
}

// list returns the members (nil when empty).
func (s *smallSet[K]) list() []K {
	if s.many == nil {
		return s.few
	}
	out := make([]K, 0, len(s.many))
	for k := range s.many {
		out = append(out, k)
	}
	return out
}

// depIndex maps each thing a render read (an object by id, a get_indexed
// lookup, a whole type, a value by name, all values) to the readers that
// read it: fragment entries or outputs. The cache holds it under its lock.
type depIndex[T comparable] struct {
	byObject  map[objRef]map[T]struct{}
	byLookup  map[lookupRef]map[T]struct{}
	byType    map[string]map[T]struct{}
	byValue   map[string]map[T]struct{}
	allValues map[T]struct{}
}

func newDepIndex[T comparable]() depIndex[T] {
	return depIndex[T]{
		byObject:  map[objRef]map[T]struct{}{},
		byLookup:  map[lookupRef]map[T]struct{}{},
		byType:    map[string]map[T]struct{}{},
		byValue:   map[string]map[T]struct{}{},
		allValues: map[T]struct{}{},
	}
}

func addReader[K, T comparable](m map[K]map[T]struct{}, k K, r T) {
	s := m[k]
	if s == nil {
		s = map[T]struct{}{}
		m[k] = s
	}
	s[r] = struct{}{}
}

func removeReader[K, T comparable](m map[K]map[T]struct{}, k K, r T) {
	if s := m[k]; s != nil {
		delete(s, r)
		if len(s) == 0 {
			delete(m, k)
		}
	}
}

// register adds r as a reader of everything in d; unregister removes it.
func (x *depIndex[T]) register(r T, d *deps) {
	for _, o := range d.objects {
		addReader(x.byObject, o, r)
	}
	for _, l := range d.lookups {
		addReader(x.byLookup, l, r)
	}
	for _, t := range d.types {
		addReader(x.byType, t, r)
	}
	for _, v := range d.values {
		addReader(x.byValue, v, r)
	}
	if d.allValues {
		x.allValues[r] = struct{}{}
	}
}

func (x *depIndex[T]) unregister(r T, d *deps) {
	for _, o := range d.objects {
		removeReader(x.byObject, o, r)
	}
	for _, l := range d.lookups {
		removeReader(x.byLookup, l, r)
	}
	for _, t := range d.types {
		removeReader(x.byType, t, r)
	}
	for _, v := range d.values {
		removeReader(x.byValue, v, r)
	}
	delete(x.allValues, r)
}

// affected calls mark for every reader a change affects: for a value, its
// readers and the readers of all values; for an object, the readers of the
// object by id, of its whole type, and of every get_indexed lookup on its
// type that is a prefix of its old or new key tuple (the lookups it
// matched or now matches).
func (x *depIndex[T]) affected(ch Change, mark func(T)) {
	each := func(s map[T]struct{}) {
		for r := range s {
			mark(r)
		}
	}
	if ch.Value != "" {
		each(x.byValue[ch.Value])
		each(x.allValues)
		return
	}
	each(x.byObject[objRef{ch.Type, ch.ID}])
	each(x.byType[ch.Type])
	if len(x.byLookup) == 0 {
		return
	}
	for k := 1; k <= len(ch.OldKeys); k++ {
		each(x.byLookup[lookupRef{ch.Type, encodeKeys(ch.OldKeys[:k])}])
	}
	if !slices.Equal(ch.OldKeys, ch.NewKeys) {
		for k := 1; k <= len(ch.NewKeys); k++ {
			each(x.byLookup[lookupRef{ch.Type, encodeKeys(ch.NewKeys[:k])}])
		}
	}
}

// valueNames adds the names of the values any reader read to names, and
// reports whether a reader read all of them.
func (x *depIndex[T]) valueNames(names map[string]bool) bool {
	for n := range x.byValue {
		names[n] = true
	}
	return len(x.allValues) > 0
}

// readsType reports whether d read anything of typ.
func (d *deps) readsType(typ string) bool {
	if slices.Contains(d.types, typ) {
		return true
	}
	for _, o := range d.objects {
		if o.typ == typ {
			return true
		}
	}
	for _, l := range d.lookups {
		if l.typ == typ {
			return true
		}
	}
	return false
}
