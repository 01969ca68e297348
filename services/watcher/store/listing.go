package store

import (
	"context"
	"errors"
)

// Listing is one complete listing of a type written page by page, so that a
// source need not hold the whole set at once: Put writes each page as it
// arrives (pipelined, as an Apply's writes are), Finish deletes what the
// bucket holds of the type that no page named. It keeps only the keys seen.
// A listing whose pages did not all arrive is dropped unfinished: it has
// written its pages and deleted nothing.
type Listing struct {
	s       *Store
	typ     string
	initial bool
	seen    map[string]struct{}
	res     Result
	errs    []error
}

// BeginType starts a complete listing of typ; initial marks the writes of
// the source's first listing.
func (s *Store) BeginType(typ string, initial bool) *Listing {
	return &Listing{s: s, typ: typ, initial: initial, seen: map[string]struct{}{}, res: Result{Counts: map[string]int{typ: 0}}}
}

// Put writes each of objects (all of the listing's type) whose content
// changed. A failed write is returned, and again by Finish, so the listing
// is reported failed as a whole and the source lists again.
func (l *Listing) Put(ctx context.Context, objects []Object) (Result, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if err := l.s.ensureLoaded(ctx); err != nil {
		l.errs = append(l.errs, err)
		return Result{}, err
	}
	for _, o := range objects {
		l.seen[keyOf(l.s.source, o)] = struct{}{}
		l.res.Counts[o.Type]++
	}
	var res Result
	var errs []error
	res.Put, res.Unchanged, errs = l.s.putAll(ctx, objects, l.initial)
	l.res.Put += res.Put
	l.res.Unchanged += res.Unchanged
	err := errors.Join(errs...)
	if err != nil {
		l.errs = append(l.errs, err)
	}
	return res, err
}

// Finish deletes the objects of the type that no page held, as Apply
// does, and returns what the whole listing did, with the errors of its
// Puts.
func (l *Listing) Finish(ctx context.Context) (Result, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if err := l.s.ensureLoaded(ctx); err != nil {
		return l.res, errors.Join(append(l.errs, err)...)
	}
	n, errs := l.s.prune(ctx, []string{l.typ}, func(key string) bool {
		_, ok := l.seen[key]
		return ok
	})
	l.res.Deleted += n
	return l.res, errors.Join(append(l.errs, errs...)...)
}
