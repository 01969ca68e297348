// Package source defines what every watcher source implements and what it
// is given. A Source reads one place of state (a folder of manifests, a
// Kubernetes API server, a key-value store) and reports it to a Sink; the
// Sink (the watcher) stores it, announces changes and marks initial sync.
//
// Contract for a Source: Run reports each type's first complete listing with
// Replace (or page by page with ReplacePages, which gives a PageSink the
// pages as they are read and any other Sink one Replace per type) and then
// Synced, then follows changes with Upsert and Delete (or
// further Replaces: a periodic full re-read is the safety net against a
// missed event), until ctx is done, when it returns nil. Run returns an
// error only when the source cannot work at all (bad configuration,
// unreachable for good); passing trouble is reported with Problem and
// retried by the source. Calls to the Sink may come from several
// goroutines.
//
// Object sources report objects of the configured watched types. Value
// sources report values: objects of the type config.ValuesType built with
// Value, seen by templates as values.<name>.
package source

import (
	"cmp"
	"context"
	"iter"
	"slices"
	"strings"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/services/watcher/store"
)

// Sink receives what a source reads.
type Sink interface {
	// Replace sets the complete set of one type's objects.
	Replace(ctx context.Context, typ string, objects []store.Object) error
	// Upsert stores one object (only written when its content changed).
	Upsert(ctx context.Context, o store.Object) error
	// Delete removes one object.
	Delete(ctx context.Context, typ, namespace, name string) error
	// Synced marks the first complete listing of typ; problems are the
	// things the listing could not read (shown in the sync status).
	Synced(ctx context.Context, typ string, problems []string) error
	// Problem reports passing trouble: logged, counted and kept in status.
	Problem(ctx context.Context, err error)
}

// PageSink is a Sink that takes a complete listing page by page, so that a
// source listing many objects need not hold them all at once.
type PageSink interface {
	// ReplacePages sets the complete set of the objects of types: those of
	// every page pages yields (each object of one of types). Each page is
	// stored as it comes; what no page held is deleted once the last has
	// come. A page yielded with an error ends the listing: that error is
	// returned and nothing is deleted.
	ReplacePages(ctx context.Context, types []string, pages iter.Seq2[[]store.Object, error]) error
}

// ReplacePages reports a complete listing of types to sink page by page
// when it is a PageSink, else gathered into one Replace per type, in the
// order of types. It returns the first error of pages or of the sink.
func ReplacePages(ctx context.Context, sink Sink, types []string, pages iter.Seq2[[]store.Object, error]) error {
	if p, ok := sink.(PageSink); ok {
		return p.ReplacePages(ctx, types, pages)
	}
	byType := map[string][]store.Object{}
	for page, err := range pages {
		if err != nil {
			return err
		}
		for _, o := range page {
			byType[o.Type] = append(byType[o.Type], o)
		}
	}
	for _, typ := range types {
		objs := byType[typ]
		slices.SortFunc(objs, func(a, b store.Object) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
		if err := sink.Replace(ctx, typ, objs); err != nil {
			return err
		}
	}
	return nil
}

// Source is one place of state.
type Source interface {
	Run(ctx context.Context, sink Sink) error
}

// Value builds the object that carries one value of a value source: name is
// what templates use (values.<name>), value its text; extra fields (where
// the value came from) are kept beside it.
func Value(name, value string, extra map[string]any) store.Object {
	body := map[string]any{"name": name, "value": value}
	for k, v := range extra {
		if k != "name" && k != "value" {
			body[k] = v
		}
	}
	return store.Object{Type: config.ValuesType, Name: name, Body: body}
}
