package manifests

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// Source is a folder of manifests as a weft source (source.Source). It
// follows the folder with Watcher.RunDeltas and keeps, per file, the last
// good objects: the first pass, and any pass after a failed write,
// reports each watched type's complete set with Replace; every later pass
// reports only the objects of the files that changed, with Upsert (many at
// once when the sink can) and Delete, so an edit costs what it changed,
// whatever the size of the folder. Each pass ends with Synced and the
// folder's current problems.
//
// A file that stops parsing (or holds one identity twice) keeps its last
// good objects: its error is reported, its objects stay. When files hold
// the same identity, the file first in path order wins and the others'
// copies are reported as duplicates.
type Source struct {
	dir    string
	rescan time.Duration
	types  []string
	typeOf func(apiVersion, kind string) (string, bool)
	opts   []Option

	mu       sync.Mutex
	files    map[string]*fileState      // by path
	claims   map[objectKey][]string     // files holding each identity, in path order
	dirErrs  []ParseError               // problems of the folder's directories
	reported map[objectKey]store.Object // what the sink holds, when replaced is set
	replaced bool                       // the sink holds reported: deltas will do
}

// objectKey names an object as the sink does.
type objectKey struct{ typ, namespace, name string }

// fileState is what the source keeps of one file: its last good objects
// and its current problems.
type fileState struct {
	good map[objectKey]held
	errs []ParseError
}

// held is one object of a file, with where it was found.
type held struct {
	obj       store.Object
	doc, line int
}

// NewSource returns a source over dir reporting the given types; typeOf maps
// an object's apiVersion and kind to its watched type. opts configure its
// Watcher.
func NewSource(dir string, rescan time.Duration, types []string, typeOf func(apiVersion, kind string) (string, bool), opts ...Option) *Source {
	return &Source{dir: dir, rescan: rescan, types: types, typeOf: typeOf, opts: opts,
		files: map[string]*fileState{}, claims: map[objectKey][]string{}}
}

// Run watches the folder until ctx is done.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	w, err := NewWatcher(s.dir, append([]Option{WithRescan(s.rescan)}, s.opts...)...)
	if err != nil {
		return err
	}
	return w.RunDeltas(ctx, func(ctx context.Context, d Delta) error { return s.report(ctx, d, sink, false) })
}

// Resync re-reads the whole folder now and reports every type's complete
// set.
func (s *Source) Resync(ctx context.Context, sink source.Sink) error {
	x := newIndex(s.dir, nil)
	if err := x.full(nil); err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	return s.report(ctx, x.delta(true), sink, true)
}

// report takes in a delta and stores what it changed through sink. It
// fails when a write failed, so that the watcher calls again soon; the
// next report then replaces every type's set.
func (s *Source) report(ctx context.Context, d Delta, sink source.Sink, replace bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	touched := s.take(ctx, d, sink)
	var err error
	if replace || !s.replaced {
		err = s.replaceAll(ctx, sink)
	} else {
		err = s.reportChanges(ctx, touched, sink)
	}
	if err != nil {
		s.replaced = false
		return err // called again soon; no sync marker from a failed write
	}
	problems := s.problems()
	var failed error
	for _, typ := range s.types {
		if err := sink.Synced(ctx, typ, problems); err != nil {
			sink.Problem(ctx, err)
			failed = err
		}
	}
	return failed
}

// take records the files of d and returns the identities whose objects may
// have changed. Problems found in d are reported to sink.
func (s *Source) take(ctx context.Context, d Delta, sink source.Sink) map[objectKey]bool {
	touched := map[objectKey]bool{}
	if d.Full {
		for path := range s.files {
			if _, ok := d.Files[path]; !ok {
				s.setGood(path, nil, touched)
				delete(s.files, path)
			}
		}
	}
	for _, pe := range d.DirErrors {
		sink.Problem(ctx, pe)
	}
	s.dirErrs = d.DirErrors
	for path, fc := range d.Files {
		if fc == nil {
			s.setGood(path, nil, touched)
			delete(s.files, path)
			continue
		}
		good, errs := s.objectsOf(fc)
		f := s.files[path]
		if f == nil {
			f = &fileState{}
			s.files[path] = f
		}
		f.errs = errs
		for _, pe := range errs {
			sink.Problem(ctx, fmt.Errorf("not loaded; the last good objects of %s stay: %w", pe.File, pe))
		}
		if len(errs) == 0 {
			s.setGood(path, good, touched)
		}
	}
	for k := range touched {
		if paths := s.claims[k]; len(paths) > 1 {
			for _, pe := range s.duplicates(k, paths) {
				sink.Problem(ctx, pe)
			}
		}
	}
	return touched
}

// objectsOf converts a file's watched objects; an identity held twice is
// one of its problems.
func (s *Source) objectsOf(fc *FileContent) (map[objectKey]held, []ParseError) {
	errs := slices.Clone(fc.Errors)
	good := make(map[objectKey]held, len(fc.Objects))
	for _, o := range fc.Objects {
		typ, ok := s.typeOf(o.APIVersion, o.Kind)
		if !ok {
			continue
		}
		k := objectKey{typ, o.Namespace, o.Name}
		if first, dup := good[k]; dup {
			errs = append(errs, ParseError{File: o.File, Doc: o.Doc, Line: o.Line,
				Err: fmt.Errorf("duplicate %s: already defined in %s", o, location(o.File, first.doc, first.line))})
			continue
		}
		rv, _ := nested(o.Body, "metadata", "resourceVersion").(string)
		good[k] = held{obj: store.Object{Type: typ, Namespace: o.Namespace, Name: o.Name, ResourceVersion: rv, Origin: o.File, Body: o.Body}, doc: o.Doc, line: o.Line}
	}
	return good, errs
}

// setGood makes good the last good objects of path (nil: none), and marks
// the identities it held or holds as touched.
func (s *Source) setGood(path string, good map[objectKey]held, touched map[objectKey]bool) {
	if f := s.files[path]; f != nil {
		for k := range f.good {
			if _, still := good[k]; !still {
				s.claims[k] = slices.DeleteFunc(s.claims[k], func(p string) bool { return p == path })
				if len(s.claims[k]) == 0 {
					delete(s.claims, k)
				}
			}
			touched[k] = true
		}
		if good == nil {
			f.good = nil
			return
		}
		for k := range good {
			if _, had := f.good[k]; !had {
				s.claim(k, path)
			}
			touched[k] = true
		}
		f.good = good
		return
	}
	for k := range good {
		s.claim(k, path)
		touched[k] = true
	}
	if good != nil {
		s.files[path] = &fileState{good: good}
	}
}

func (s *Source) claim(k objectKey, path string) {
	paths := s.claims[k]
	i, found := slices.BinarySearchFunc(paths, path, comparePaths)
	if !found {
		s.claims[k] = slices.Insert(paths, i, path)
	}
}

// winner is the object that stands for k: the one of the first file in
// path order holding it.
func (s *Source) winner(k objectKey) (store.Object, bool) {
	paths := s.claims[k]
	if len(paths) == 0 {
		return store.Object{}, false
	}
	h, ok := s.files[paths[0]].good[k]
	return h.obj, ok
}

// duplicates are the problems of an identity that several files hold.
func (s *Source) duplicates(k objectKey, paths []string) []ParseError {
	first := s.files[paths[0]].good[k]
	var out []ParseError
	for _, p := range paths[1:] {
		h := s.files[p].good[k]
		out = append(out, ParseError{File: p, Doc: h.doc, Line: h.line,
			Err: fmt.Errorf("duplicate %s %s/%s: already defined in %s", k.typ, k.namespace, k.name, location(paths[0], first.doc, first.line))})
	}
	return out
}

// problems lists the folder's current problems, ordered by file.
func (s *Source) problems() []string {
	all := slices.Clone(s.dirErrs)
	for _, f := range s.files {
		all = append(all, f.errs...)
	}
	for k, paths := range s.claims {
		if len(paths) > 1 {
			all = append(all, s.duplicates(k, paths)...)
		}
	}
	slices.SortStableFunc(all, func(a, b ParseError) int {
		return cmp.Or(comparePaths(a.File, b.File), cmp.Compare(a.Doc, b.Doc), strings.Compare(a.Error(), b.Error()))
	})
	var out []string
	for _, pe := range all {
		out = append(out, pe.Error())
	}
	return out
}

// replaceAll reports every type's complete set.
func (s *Source) replaceAll(ctx context.Context, sink source.Sink) error {
	byType := map[string][]store.Object{}
	reported := make(map[objectKey]store.Object, len(s.claims))
	for k := range s.claims {
		if o, ok := s.winner(k); ok {
			byType[k.typ] = append(byType[k.typ], o)
			reported[k] = o
		}
	}
	for _, typ := range s.types {
		slices.SortFunc(byType[typ], func(a, b store.Object) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
		if err := sink.Replace(ctx, typ, byType[typ]); err != nil {
			sink.Problem(ctx, err)
			return err
		}
	}
	s.reported, s.replaced = reported, true
	return nil
}

// reportChanges reports the touched identities whose object differs from
// the one last reported: an object whose file was not read again is the
// same value as before and is skipped without being hashed.
func (s *Source) reportChanges(ctx context.Context, touched map[objectKey]bool, sink source.Sink) error {
	var changed []store.Object
	var gone []objectKey
	for k := range touched {
		o, ok := s.winner(k)
		old, had := s.reported[k]
		switch {
		case !ok && had:
			gone = append(gone, k)
		case ok && (!had || !sameObject(old, o)):
			changed = append(changed, o)
		}
	}
	if err := upsertAll(ctx, sink, changed); err != nil {
		sink.Problem(ctx, err)
		return err
	}
	for _, o := range changed {
		s.reported[objectKey{o.Type, o.Namespace, o.Name}] = o
	}
	for _, k := range gone {
		if err := sink.Delete(ctx, k.typ, k.namespace, k.name); err != nil {
			sink.Problem(ctx, err)
			return err
		}
		delete(s.reported, k)
	}
	return nil
}

// batchSink is a sink that stores many objects at once faster than one by
// one.
type batchSink interface {
	UpsertAll(ctx context.Context, objects []store.Object) error
}

// upsertAll stores objects through sink, at once when it can.
func upsertAll(ctx context.Context, sink source.Sink, objects []store.Object) error {
	if len(objects) == 0 {
		return nil
	}
	if b, ok := sink.(batchSink); ok && len(objects) > 1 {
		return b.UpsertAll(ctx, objects)
	}
	for _, o := range objects {
		if err := sink.Upsert(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

// sameObject reports whether two objects are the same value read from the
// same file: their bodies are one map.
func sameObject(a, b store.Object) bool {
	return a.Origin == b.Origin && a.ResourceVersion == b.ResourceVersion &&
		reflect.ValueOf(a.Body).UnsafePointer() == reflect.ValueOf(b.Body).UnsafePointer()
}

func nested(obj map[string]any, keys ...string) any {
	var cur any = obj
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}
