// Package manifests reads a folder of Kubernetes manifests (YAML or JSON) as
// a source of objects, so that weft runs with no cluster at all.
//
// # What a snapshot contains
//
// Scan walks a directory recursively and returns a Snapshot: every object
// found in its *.yaml, *.yml and *.json files (extensions matched without
// regard to case), and every problem found on the way.
//
//   - Hidden files and directories (a name starting with ".") are skipped, and
//     so are editor temporary files and directories: names ending in "~",
//     ".swp", ".swo" or ".swx", and "#name#" auto-save files. The directory
//     passed to Scan is always read, whatever its name.
//   - Symbolic links to files are followed, so a mounted ConfigMap (whose
//     entries are links into a hidden "..data" directory) reads as expected.
//     Symbolic links to directories are not followed.
//   - A YAML file may hold many documents separated by "---" lines (or
//     ended by "..." lines). Empty, comment-only and null documents are
//     skipped. A JSON file may hold one value or a stream of values, each a
//     document. Documents are numbered from 1 in the order they appear,
//     counting only those that are not skipped, and each one's first line is
//     recorded.
//   - A document of kind "List" is expanded into its items.
//   - Every object has an apiVersion, a kind and a metadata.name. Namespace
//     is metadata.namespace as written: a cluster-scoped object, or a
//     namespaced one that does not name its namespace, has Namespace "". No
//     defaulting happens, since the scope of a kind is not known without an
//     API server.
//   - Body is the whole object as plain JSON data, as encoding/json decodes
//     into an any: map[string]any, []any, float64, string, bool and nil.
//     Integers such as ports stay integers when Body is encoded to JSON again
//     (integers beyond 2^53 lose precision, as with any float64).
//   - Each Scan builds new values: a snapshot shares nothing with another.
//     The snapshots of one Watcher share the objects of the files it did
//     not read again: an object's Body is the same map until its file is
//     read anew.
//
// # Ordering and identity
//
// An object's identity is (apiVersion, kind, namespace, name). Files are
// read in lexical order of their paths and documents in file order; when an
// identity occurs twice, the first occurrence wins and the second is
// reported as an error that names both places. Snapshot.Objects is sorted by
// identity, so two scans of the same folder give the same snapshot.
//
// # Error reporting
//
// A problem with one file, document or object never hides the rest of the
// folder: it is recorded in Snapshot.Errors as a ParseError that carries the
// file, the document number and the document's first line, and every other
// object still loads. Line numbers inside a YAML or JSON syntax error count
// from the document's first line. Every ParseError matches
// ErrInvalidManifest with errors.Is, and unwraps to its cause. Files larger
// than 64 MiB are reported rather than read. Scan itself returns an error
// only when the directory cannot be read.
//
// # Watching
//
// A Watcher keeps a snapshot current. Its Run method calls a callback with
// the initial scan, then again after every burst of filesystem changes
// (coalesced by a debounce interval; on Linux, a burst that ends with a
// file closed after writing, or moved into place, is read a millisecond
// later: see WithDebounce) and on every periodic
// re-scan (see WithRescan), which catches anything the change notifications
// missed. Every call carries a complete snapshot, never a delta, but the
// Watcher reads only what changed: a file a notification names as written,
// and the directories a notification names as changed (a file or directory
// created, removed or renamed, a ConfigMap volume's "..data" link swapped),
// where each file is read only if its size, modification time or inode
// differ from when it was read. The periodic re-scan lists every directory
// and compares the same way. WithReadHook counts the reads. RunDeltas
// hands over only the files read or gone since its last call (a Delta) and
// keeps no object afterwards: Source follows a folder that way. With
// WithChunks, a full Delta (every file) comes in chunks of files in path
// order, each read when the callback takes it; Source stores its first
// complete listing that way, a chunk at a time (source.ReplacePages). The
// callback is called from the goroutine that called Run, one call at a time.
// Run returns nil when its context is cancelled, and an error only if file
// notifications cannot be started or the directory itself can no longer be
// read; a subdirectory that cannot be watched is reported in Snapshot.Errors
// and still read by every scan.
package manifests
