package manifests

import (
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

// Source is a folder of manifests as a weft source (source.Source). The
// first scan, and any scan after a failed write, reports each watched
// type's complete set with Replace; every later scan reports only the
// objects that changed, with Upsert and Delete. Each scan ends with Synced
// and the folder's current problems. A file that stops parsing keeps its
// last good objects: its error is reported, its objects stay.
type Source struct {
	dir    string
	rescan time.Duration
	types  []string
	typeOf func(apiVersion, kind string) (string, bool)
	opts   []Option

	mu       sync.Mutex
	lastGood map[string][]store.Object  // by file: objects of the last good parse
	reported map[objectKey]store.Object // what the sink holds, when replaced is set
	replaced bool                       // the sink holds reported: deltas will do
}

// objectKey names an object as the sink does.
type objectKey struct{ typ, namespace, name string }

// NewSource returns a source over dir reporting the given types; typeOf maps
// an object's apiVersion and kind to its watched type. opts configure its
// Watcher.
func NewSource(dir string, rescan time.Duration, types []string, typeOf func(apiVersion, kind string) (string, bool), opts ...Option) *Source {
	return &Source{dir: dir, rescan: rescan, types: types, typeOf: typeOf, opts: opts, lastGood: map[string][]store.Object{}}
}

// Run watches the folder until ctx is done.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	w, err := NewWatcher(s.dir, append([]Option{WithRescan(s.rescan)}, s.opts...)...)
	if err != nil {
		return err
	}
	return w.Run(ctx, func(ctx context.Context, snap Snapshot) error { return s.report(ctx, snap, sink, false) })
}

// Resync re-reads the whole folder now and reports every type's complete
// set.
func (s *Source) Resync(ctx context.Context, sink source.Sink) error {
	snap, err := Scan(s.dir)
	if err != nil {
		return err
	}
	return s.report(ctx, snap, sink, true)
}

// report stores a snapshot through sink. It fails when a write failed, so
// that the watcher scans and reports again soon; the next report then
// replaces every type's set.
func (s *Source) report(ctx context.Context, snap Snapshot, sink source.Sink, replace bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	broken := map[string]bool{}
	var problems []string
	for _, pe := range snap.Errors {
		broken[pe.File] = true
		problems = append(problems, pe.Error())
		sink.Problem(ctx, fmt.Errorf("not loaded; the last good objects of %s stay: %w", pe.File, pe))
	}
	s.keepGood(snap, broken)
	byType := map[string][]store.Object{}
	for _, objs := range s.lastGood {
		for _, o := range objs {
			byType[o.Type] = append(byType[o.Type], o)
		}
	}
	for typ, objs := range byType {
		byType[typ] = dedupe(objs)
	}
	var err error
	if replace || !s.replaced {
		err = s.replaceAll(ctx, byType, sink)
	} else {
		err = s.reportChanges(ctx, byType, sink)
	}
	if err != nil {
		s.replaced = false
		return err // scanned and tried again soon; no sync marker from a failed write
	}
	var failed error
	for _, typ := range s.types {
		if err := sink.Synced(ctx, typ, problems); err != nil {
			sink.Problem(ctx, err)
			failed = err
		}
	}
	return failed
}

// keepGood records the objects of every file of snap that parsed, and
// forgets files that are gone.
func (s *Source) keepGood(snap Snapshot, broken map[string]bool) {
	byFile := map[string][]store.Object{}
	for _, o := range snap.Objects {
		typ, ok := s.typeOf(o.APIVersion, o.Kind)
		if !ok {
			continue
		}
		rv, _ := nested(o.Body, "metadata", "resourceVersion").(string)
		byFile[o.File] = append(byFile[o.File], store.Object{Type: typ, Namespace: o.Namespace, Name: o.Name, ResourceVersion: rv, Origin: o.File, Body: o.Body})
	}
	for file, objs := range byFile {
		if !broken[file] {
			s.lastGood[file] = objs
		}
	}
	for file := range s.lastGood {
		if _, ok := byFile[file]; !ok && !broken[file] {
			delete(s.lastGood, file) // gone, or holds nothing watched
		}
	}
}

// replaceAll reports every type's complete set.
func (s *Source) replaceAll(ctx context.Context, byType map[string][]store.Object, sink source.Sink) error {
	reported := map[objectKey]store.Object{}
	for _, typ := range s.types {
		if err := sink.Replace(ctx, typ, byType[typ]); err != nil {
			sink.Problem(ctx, err)
			return err
		}
		for _, o := range byType[typ] {
			reported[objectKey{o.Type, o.Namespace, o.Name}] = o
		}
	}
	s.reported, s.replaced = reported, true
	return nil
}

// reportChanges reports the objects that differ from those last reported:
// an object whose file was not read again is the same value as before and
// is skipped without being hashed.
func (s *Source) reportChanges(ctx context.Context, byType map[string][]store.Object, sink source.Sink) error {
	want := make(map[objectKey]bool, len(s.reported))
	for _, typ := range s.types {
		for _, o := range byType[typ] {
			k := objectKey{o.Type, o.Namespace, o.Name}
			want[k] = true
			if old, ok := s.reported[k]; ok && sameObject(old, o) {
				continue
			}
			if err := sink.Upsert(ctx, o); err != nil {
				sink.Problem(ctx, err)
				return err
			}
			s.reported[k] = o
		}
	}
	for k := range s.reported {
		if want[k] {
			continue
		}
		if err := sink.Delete(ctx, k.typ, k.namespace, k.name); err != nil {
			sink.Problem(ctx, err)
			return err
		}
		delete(s.reported, k)
	}
	return nil
}

// sameObject reports whether two objects are the same value read from the
// same file: their bodies are one map.
func sameObject(a, b store.Object) bool {
	return a.Origin == b.Origin && a.ResourceVersion == b.ResourceVersion &&
		reflect.ValueOf(a.Body).UnsafePointer() == reflect.ValueOf(b.Body).UnsafePointer()
}

// dedupe keeps one object per identity, the first by origin (a broken
// file's last good objects may have moved to another file meanwhile).
func dedupe(objs []store.Object) []store.Object {
	slices.SortStableFunc(objs, func(a, b store.Object) int {
		if c := strings.Compare(a.Namespace, b.Namespace); c != 0 {
			return c
		}
		if c := strings.Compare(a.Name, b.Name); c != 0 {
			return c
		}
		return strings.Compare(a.Origin, b.Origin)
	})
	return slices.CompactFunc(objs, func(a, b store.Object) bool {
		return a.Namespace == b.Namespace && a.Name == b.Name
	})
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
