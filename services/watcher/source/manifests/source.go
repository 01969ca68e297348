package manifests

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// Source is a folder of manifests as a weft source (source.Source). Every
// scan reports each watched type's complete set with Replace, then Synced
// with the folder's current problems. A file that stops parsing keeps its
// last good objects: its error is reported, its objects stay.
type Source struct {
	dir    string
	rescan time.Duration
	types  []string
	typeOf func(apiVersion, kind string) (string, bool)

	mu       sync.Mutex
	lastGood map[string][]store.Object // by file: objects of the last good parse
}

// NewSource returns a source over dir reporting the given types; typeOf maps
// an object's apiVersion and kind to its watched type.
func NewSource(dir string, rescan time.Duration, types []string, typeOf func(apiVersion, kind string) (string, bool)) *Source {
	return &Source{dir: dir, rescan: rescan, types: types, typeOf: typeOf, lastGood: map[string][]store.Object{}}
}

// Run watches the folder until ctx is done.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	w, err := NewWatcher(s.dir, WithRescan(s.rescan))
	if err != nil {
		return err
	}
	return w.Run(ctx, func(ctx context.Context, snap Snapshot) error { return s.report(ctx, snap, sink) })
}

// Resync re-reads the whole folder now.
func (s *Source) Resync(ctx context.Context, sink source.Sink) error {
	snap, err := Scan(s.dir)
	if err != nil {
		return err
	}
	return s.report(ctx, snap, sink)
}

// report stores a snapshot through sink. It fails when a write failed, so
// that the watcher scans and reports again soon.
func (s *Source) report(ctx context.Context, snap Snapshot, sink source.Sink) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	broken := map[string]bool{}
	var problems []string
	for _, pe := range snap.Errors {
		broken[pe.File] = true
		problems = append(problems, pe.Error())
		sink.Problem(ctx, fmt.Errorf("not loaded; the last good objects of %s stay: %w", pe.File, pe))
	}
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
	byType := map[string][]store.Object{}
	for _, objs := range s.lastGood {
		for _, o := range objs {
			byType[o.Type] = append(byType[o.Type], o)
		}
	}
	for _, typ := range s.types {
		if err := sink.Replace(ctx, typ, dedupe(byType[typ])); err != nil {
			sink.Problem(ctx, err)
			return err // scanned and tried again soon; no sync marker from a failed write
		}
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
