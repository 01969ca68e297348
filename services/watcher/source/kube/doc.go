// Package kube is the Kubernetes API server as a weft source
// (source.Source): it watches the configured resource types, core types and
// custom resources alike, with client-go dynamic informers, one per type.
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
// For each type, once its informer has listed everything: Replace with the
// complete set, then Synced with no problems; then every add and update as
// Upsert and every delete (including deletes only seen as a tombstone after
// a re-list) as Delete. Every Options.Resync, each type is listed again
// straight from the API server and reported with Replace: the safety net
// against a missed event. All calls for one type come from one goroutine, in
// order; different types report concurrently.
//
// An object is its unstructured content (plain map[string]any data) with
// the Options.Strip fields removed; store.Object.ResourceVersion is its
// metadata.resourceVersion and Origin the API server's address. Objects are
// copies: the sink may keep or change them.
//
// A type whose store mode is on-demand (big Secrets) is reported with its
// apiVersion, kind and metadata only, without the
// kubectl.kubernetes.io/last-applied-configuration annotation (which copies
// the whole object); Secrets keep their type, and Secrets and ConfigMaps
// list the names of their data and binaryData keys, sorted, under dataKeys.
// Their data is never reported and never held by the informers. Fetch reads
// one object in full from the API server, stripped the same way, and keeps
// it for Options.FetchTTL.
//
// # Errors
//
// Run returns an error only when called twice at once; it returns nil once
// ctx is done, after every informer has stopped. An error listing or
// watching a type is reported with Problem, and the informer retries with
// backoff; a type that has not listed yet and meets an error that retrying
// will not fix on its own (forbidden, unauthorized, a bad selector) is
// marked synced with that problem, so that the rest of the configuration can
// render, and is replaced in full once it lists. A sink error is reported
// and the type's complete set is replaced again after a short wait.
package kube
