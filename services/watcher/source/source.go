// Package source defines what every watcher source implements and what it
// is given. A Source reads one place of state (a folder of manifests, a
// Kubernetes API server, a key-value store) and reports it to a Sink; the
// Sink (the watcher) stores it, announces changes and marks initial sync.
//
// Contract for a Source: Run reports each type's first complete listing with
// Replace and then Synced, then follows changes with Upsert and Delete (or
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
	"context"

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
