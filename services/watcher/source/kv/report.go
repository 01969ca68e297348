package kv

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// entry is one value and where it came from.
type entry struct {
	value string
	// data, when set, is the value as JSON (a structured value such as a
	// Consul service's instances); value is then unused.
	data  string
	key   string // the backend's key
	field string // the Redis hash field, "" otherwise
	// origin tells apart keys of different kinds in one source (a Consul
	// service and a KV key); "" for keys of the store.
	origin string
}

func (e entry) compare(o entry) int {
	return cmp.Or(cmp.Compare(e.origin, o.origin), cmp.Compare(e.key, o.key), cmp.Compare(e.field, o.field))
}

// ref names the backend key the entry comes from, unique across origins.
func (e entry) ref() string { return ref(e.origin, e.key) }

func ref(origin, key string) string {
	if origin == "" {
		return key
	}
	return origin + "\x00" + key
}

func (e entry) String() string {
	switch {
	case e.origin != "":
		return fmt.Sprintf("%s %q", e.origin, e.key)
	case e.field != "":
		return fmt.Sprintf("%q field %q", e.key, e.field)
	}
	return fmt.Sprintf("%q", e.key)
}

// listing is the result of one full read.
type listing struct {
	typ      string
	vals     map[string]entry
	problems []error
}

func newListing(typ string, size int) *listing {
	return &listing{typ: typ, vals: make(map[string]entry, size)}
}

// add records the value named name; when two keys give one name, the one
// that sorts first is kept and the other reported.
func (l *listing) add(name string, e entry) {
	old, dup := l.vals[name]
	if !dup {
		l.vals[name] = e
		return
	}
	keep, drop := old, e
	if e.compare(old) < 0 {
		keep, drop = e, old
	}
	l.vals[name] = keep
	l.problem(fmt.Errorf("%s: %w: %s and %s both give the value %q; %s is used", l.typ, ErrInvalidData, keep, drop, name, keep))
}

func (l *listing) problem(err error) { l.problems = append(l.problems, err) }

// reporter tells the sink what one source holds, remembering what it told.
type reporter struct {
	sink   source.Sink
	typ    string
	synced bool
	cur    map[string]entry
	// byKey indexes cur by backend key; built on first need after a Replace.
	byKey map[string][]string
	// reported are the texts of the last listing's problems, so that a
	// re-read reports only new ones.
	reported map[string]bool
	// batch, when not nil, collects the upserts of setKey until flush:
	// written at once when the sink can.
	batch []store.Object
}

// batchSink is a sink that stores many objects at once faster than one by
// one.
type batchSink interface {
	UpsertAll(ctx context.Context, objects []store.Object) error
}

// startBatch makes setKey collect its upserts until flush.
func (r *reporter) startBatch() {
	if r.batch == nil {
		r.batch = []store.Object{}
	}
}

// flush writes the collected upserts, the last of each name, and stops
// collecting. A failed write leaves the reporter ahead of the sink: the
// caller reads the source again in full.
func (r *reporter) flush(ctx context.Context) error {
	objs := r.batch
	r.batch = nil
	if len(objs) == 0 {
		return nil
	}
	last := make(map[string]int, len(objs))
	for i, o := range objs {
		last[o.Name] = i
	}
	kept := objs[:0]
	for i, o := range objs {
		if last[o.Name] == i {
			kept = append(kept, o)
		}
	}
	if b, ok := r.sink.(batchSink); ok && len(kept) > 1 {
		if err := b.UpsertAll(ctx, kept); err != nil {
			return fmt.Errorf("%s: upsert %d values: %w", r.typ, len(kept), err)
		}
		return nil
	}
	var errs []error
	for _, o := range kept {
		if err := r.sink.Upsert(ctx, o); err != nil {
			errs = append(errs, fmt.Errorf("%s: upsert %q: %w", r.typ, o.Name, err))
		}
	}
	return errors.Join(errs...)
}

func newReporter(sink source.Sink, typ string) *reporter {
	return &reporter{sink: sink, typ: typ, cur: map[string]entry{}}
}

func (r *reporter) object(name string, e entry) store.Object {
	extra := map[string]any{"key": e.key, "source": r.typ}
	if e.field != "" {
		extra["field"] = e.field
	}
	if e.origin != "" {
		extra[e.origin] = e.key
	}
	o := source.Value(name, e.value, extra)
	if e.data != "" {
		// The data was written by json.Marshal: it decodes.
		var v any
		if err := json.Unmarshal([]byte(e.data), &v); err == nil {
			o.Body["value"] = v
		}
	}
	return o
}

// replace gives the sink the complete listing, and marks the first one
// synced with its problems; later listings report their new problems.
func (r *reporter) replace(ctx context.Context, l *listing) error {
	names := make([]string, 0, len(l.vals))
	for name := range l.vals {
		names = append(names, name)
	}
	slices.Sort(names)
	objs := make([]store.Object, len(names))
	for i, name := range names {
		objs[i] = r.object(name, l.vals[name])
	}
	if err := r.sink.Replace(ctx, config.ValuesType, objs); err != nil {
		return fmt.Errorf("%s: replace: %w", r.typ, err)
	}
	r.cur, r.byKey = l.vals, nil
	texts := make([]string, len(l.problems))
	for i, p := range l.problems {
		texts[i] = p.Error()
	}
	if !r.synced {
		if err := r.sink.Synced(ctx, config.ValuesType, texts); err != nil {
			return fmt.Errorf("%s: synced: %w", r.typ, err)
		}
		r.synced = true
	} else {
		for i, p := range l.problems {
			if !r.reported[texts[i]] {
				r.sink.Problem(ctx, p)
			}
		}
	}
	r.reported = make(map[string]bool, len(texts))
	for _, t := range texts {
		r.reported[t] = true
	}
	return nil
}

func (r *reporter) index() {
	if r.byKey != nil {
		return
	}
	r.byKey = make(map[string][]string, len(r.cur))
	for name, e := range r.cur {
		r.byKey[e.ref()] = append(r.byKey[e.ref()], name)
	}
}

// setKey makes vals (by name) the values that the backend key k gives,
// with Upsert and Delete: names k gave before and not now are deleted.
// A name already given by another key stays with the key that sorts first.
func (r *reporter) setKey(ctx context.Context, k string, vals map[string]entry) error {
	return r.setRef(ctx, k, vals)
}

// setRef is setKey for the key of any origin: k is entry.ref().
func (r *reporter) setRef(ctx context.Context, k string, vals map[string]entry) error {
	r.index()
	var errs []error
	for _, name := range slices.Clone(r.byKey[k]) {
		if _, keep := vals[name]; keep {
			continue
		}
		if r.batch != nil {
			// An upsert of name collected earlier must not land after
			// its delete.
			if err := r.flush(ctx); err != nil {
				errs = append(errs, err)
			}
			r.startBatch()
		}
		if err := r.sink.Delete(ctx, config.ValuesType, "", name); err != nil {
			errs = append(errs, fmt.Errorf("%s: delete %q: %w", r.typ, name, err))
			continue
		}
		r.drop(name)
	}
	names := make([]string, 0, len(vals))
	for name := range vals {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		e := vals[name]
		old, ok := r.cur[name]
		if ok && old == e {
			continue
		}
		if ok && old.ref() != k {
			if e.compare(old) > 0 {
				r.sink.Problem(ctx, fmt.Errorf("%s: %w: %s and %s both give the value %q; %s is used", r.typ, ErrInvalidData, old, e, name, old))
				continue
			}
			r.sink.Problem(ctx, fmt.Errorf("%s: %w: %s and %s both give the value %q; %s is used", r.typ, ErrInvalidData, e, old, name, e))
		}
		if r.batch != nil {
			r.batch = append(r.batch, r.object(name, e))
		} else if err := r.sink.Upsert(ctx, r.object(name, e)); err != nil {
			errs = append(errs, fmt.Errorf("%s: upsert %q: %w", r.typ, name, err))
			continue
		}
		if ok {
			r.drop(name)
		}
		r.cur[name] = e
		r.byKey[e.ref()] = append(r.byKey[e.ref()], name)
	}
	return errors.Join(errs...)
}

// drop forgets name.
func (r *reporter) drop(name string) {
	e, ok := r.cur[name]
	if !ok {
		return
	}
	delete(r.cur, name)
	names := slices.DeleteFunc(r.byKey[e.ref()], func(n string) bool { return n == name })
	if len(names) == 0 {
		delete(r.byKey, e.ref())
	} else {
		r.byKey[e.ref()] = names
	}
}
