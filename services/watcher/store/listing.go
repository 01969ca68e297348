package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Listing is one complete listing of some types written page by page, so that a
// source need not hold the whole set at once: Put writes each page as it
// arrives (pipelined, as an Apply's writes are), Finish deletes what the
// bucket holds of the types that no page named. It keeps only the keys seen.
// A listing whose pages did not all arrive is dropped unfinished: it has
// written its pages and deleted nothing.
type Listing struct {
	s       *Store
	types   []string
	initial bool
	seen    map[string]struct{}
	res     Result
	errs    []error
}

// BeginTypes starts a complete listing of types; initial marks the writes
// of the source's first listing.
func (s *Store) BeginTypes(types []string, initial bool) *Listing {
	l := &Listing{s: s, types: types, initial: initial, seen: map[string]struct{}{},
		res: Result{Counts: map[string]int{}, PutByType: map[string]int{}, DeletedByType: map[string]int{}}}
	for _, t := range types {
		l.res.Counts[t] = 0
	}
	return l
}

// Put writes each of objects (each of one of the listing's types) whose content
// changed. A failed write is returned, and again by Finish, so the listing
// is reported failed as a whole and the source lists again.
func (l *Listing) Put(ctx context.Context, objects []Object) (Result, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if err := l.s.ensureLoaded(ctx); err != nil {
		l.errs = append(l.errs, err)
		return Result{}, err
	}
	byType := map[string][]Object{}
	for _, o := range objects {
		l.seen[keyOf(l.s.source, o)] = struct{}{}
		l.res.Counts[o.Type]++
		byType[o.Type] = append(byType[o.Type], o)
	}
	var res Result
	var errs []error
	for _, typ := range l.types {
		put, unchanged, perrs := l.s.putAll(ctx, byType[typ], l.initial)
		res.Put += put
		res.Unchanged += unchanged
		l.res.PutByType[typ] += put
		errs = append(errs, perrs...)
		delete(byType, typ)
	}
	for typ := range byType {
		errs = append(errs, fmt.Errorf("store: %s is not a type of this listing (%s)", typ, strings.Join(l.types, ", ")))
	}
	l.res.Put += res.Put
	l.res.Unchanged += res.Unchanged
	err := errors.Join(errs...)
	if err != nil {
		l.errs = append(l.errs, err)
	}
	return res, err
}

// Finish deletes the objects of the types that no page held, as Apply
// does, and returns what the whole listing did, with the errors of its
// Puts.
func (l *Listing) Finish(ctx context.Context) (Result, error) {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if err := l.s.ensureLoaded(ctx); err != nil {
		return l.res, errors.Join(append(l.errs, err)...)
	}
	errs := l.errs
	for _, typ := range l.types {
		n, perrs := l.s.prune(ctx, []string{typ}, func(key string) bool {
			_, ok := l.seen[key]
			return ok
		})
		l.res.Deleted += n
		l.res.DeletedByType[typ] += n
		errs = append(errs, perrs...)
	}
	return l.res, errors.Join(errs...)
}
