// Package kube is the Kubernetes API server as a weft source
// (source.Source): it watches the configured resource types, core types and
// custom resources alike, one goroutine per type: a paginated list, then a
// watch from the listing's resource version. It caches no object (the store
// keeps key -> hash, revision): each page goes to the sink as it arrives, so
// memory does not grow with the number of objects.
//
// # Types
//
// Each watched type names an api_version and a kind; discovery maps them to
// a resource. A kind the server does not serve is reported as a problem
// naming the type and kind, the type is reported empty and synced with that
// problem, and the lookup is retried every Options.Retry, so a type whose
// CustomResourceDefinition is installed later starts being watched then.
// When a watched type's resource goes away (its CRD is deleted), the type
// goes back to being looked up. A type's namespace, label selector and field
// selector limit what is watched; a namespace on a cluster-scoped kind is
// ignored.
//
// # What is reported
//
// For each type, its complete set listed in pages of 500 (Limit and
// Continue): reported page by page when the sink is a source.PageSink (the
// sink deletes what no page held once the last came), else with one
// Replace; then Synced with no problems; then every add and update the
// watch delivers as Upsert and every delete as Delete. A watch that ends is
// taken up again from the last resource version seen (bookmarks keep it
// current); one whose version expired lists again, which also covers
// deletes missed meanwhile. Every Options.Resync, each type is listed again
// the same way: the safety net against a missed event. All calls for one type come from one goroutine, in
// order; different types report concurrently.
//
// An object is its unstructured content (plain map[string]any data) with
// the Options.Strip fields removed; store.Object.ResourceVersion is its
// metadata.resourceVersion and Origin the API server's address. Objects are
// the sink's: it may keep or change them.
//
// A type whose store mode is on-demand (big Secrets) is reported with its
// apiVersion, kind and metadata only, without the
// kubectl.kubernetes.io/last-applied-configuration annotation (which copies
// the whole object); Secrets keep their type, and Secrets and ConfigMaps
// list the names of their data and binaryData keys, sorted, under dataKeys.
// Their data is never reported and never held. Fetch reads
// one object in full from the API server, stripped the same way, and keeps
// it for Options.FetchTTL.
//
// # Errors
//
// Run returns an error only when called twice at once; it returns nil once
// ctx is done, after every type's goroutine has stopped. An error listing or
// watching a type is reported with Problem and retried with backoff (1 s,
// doubling up to Options.Retry); a type that has not listed yet and meets an error that retrying
// will not fix on its own (forbidden, unauthorized, a bad selector) is
// marked synced with that problem, so that the rest of the configuration can
// render, and is replaced in full once it lists. A sink error is reported
// and the type is listed into the sink again after a short wait.
package kube
