// Package dataplane is the deployer's driver for an HAProxy managed by the
// HAProxy Dataplane API v3. One Driver talks to one API (Options.URL, with
// HTTP basic authentication) and delivers each bundle with the fewest
// reloads: what HAProxy can change while running goes through the API's
// runtime endpoints, and the rest costs exactly one reload.
//
// # Bundle layout
//
// A bundle holds the configuration (Options.Main, "haproxy.cfg") and files
// directly inside three folders that stand for the API's three flat
// storages: MapsDir ("maps", the map storage), CertsDir ("certs", the
// certificate storage) and GeneralDir ("files", the general storage). A file
// is stored under its base name; any other path is refused with ErrBadPath,
// and so is a name the API would store under another name, where the
// configuration would not find it: the API keeps only letters, digits, "_"
// and "-" around one extension ("a.b.map" becomes "a_b.map") and adds ".map"
// to a map's name without it.
// The configuration names the files where the API keeps them (its maps_dir,
// ssl_certs_dir and general_storage_dir), so the target's base must be the
// API's storage layout. The driver owns those storages: a stored file that
// is not in the bundle is removed once the bundle is delivered.
//
// # What goes through the runtime endpoints, and what reloads
//
// Every Apply reads the state from the API, so drift (a change made through
// the API by someone else) is repaired by the next Apply: the stored
// configuration with its version (GET /services/haproxy/configuration/raw),
// the latest reload, and the storages with the content of the files the
// bundle has (certificates are compared by size and the SHA-256 fingerprint
// of their leaf certificate, which is what the API reports).
//
// Both configurations are parsed with client-native's configuration parser
// (whole-line comments, including the API's "# _version" line, do not
// count). When the only differences are the address, port, weight and
// "disabled"/"enabled" state of servers that exist on both sides (literal
// ip:port addresses; a weight missing counts as 1 and a state missing as
// enabled, unless a default-server line sets them), each changed server is
// set with one PUT /services/haproxy/runtime/backends/{backend}/servers/{name}
// (address, port, weight, admin_state ready or maint).
//
// A changed map that HAProxy has loaded (GET /services/haproxy/runtime/maps)
// is patched with the runtime entry endpoints (POST, PUT and DELETE on
// /services/haproxy/runtime/maps/{name}/entries): additions and changes
// before removals. When the entries cannot reproduce the file (duplicate
// keys, or an order that matters, because the map is used with a match other
// than map/map_str, map_beg and map_ip, and the patch, which appends added
// entries, would change it) the map is delivered by a reload. A changed
// certificate HAProxy has loaded (GET /services/haproxy/runtime/ssl_certs) is
// replaced with PUT /services/haproxy/runtime/ssl_certs/{name}.
//
// After the runtime changes, the storage files are written with
// skip_reload=true (map and certificate storage take the content as text,
// general storage as a form; new files are created with a form upload), and
// the configuration is posted with skip_reload=true, so that what the API
// stores is the bundle and a later reload loses nothing. Files that changed
// but that the configuration does not name are stored without a reload.
//
// Anything else reloads once, with the reason in Result.ReloadReason:
// "structure", "file-changed" (a general file the configuration names, a map
// or certificate HAProxy has not loaded, a map the entries cannot
// reproduce), "pending" (the API's latest reload failed), "runtime-failed"
// (a runtime endpoint refused a change; Result.RuntimeError has its answer)
// or "runtime-disabled" (Options.DisableRuntime).
//
// # One reload: the raw configuration
//
// The reload path writes the storage files first, all with
// skip_reload=true, then posts the whole configuration to
// POST /services/haproxy/configuration/raw?version=N, which is the one
// reload. The specification does not let a transaction carry a raw
// configuration (that endpoint takes no transaction_id), and expressing an
// arbitrary rendered configuration through the structured endpoints would
// mean translating every section and keyword; the raw post is one request,
// is versioned like a transaction commit, and costs one reload.
//
// # Versions, reloads and errors
//
// Writes carry the version read at the start. A 409 (someone else wrote in
// between) restarts the delivery from a fresh read, at most
// MaxConflictRetries times; then Apply returns ErrVersionConflict. The
// runtime changes are idempotent (they set values), so a restart repeats
// nothing harmful.
//
// A 202 answer carries a Reload-ID; the driver polls
// GET /services/haproxy/reloads/{id} every PollInterval until it is
// "succeeded" or "failed", within ReloadTimeout (ErrReloadTimeout). A failed
// reload is ErrReloadFailed, with HAProxy's answer in Result.ReloadDetail:
// the previous worker keeps serving, and the next Apply sees the failed
// reload and reloads again. Files that left the bundle are removed only
// after a successful delivery.
//
// Refused tells which errors are outcomes (ErrReloadFailed, ErrBadPath,
// ErrConfig) and not to be retried; ErrUnreachable, ErrAPI,
// ErrVersionConflict and ErrReloadTimeout are worth a retry. Calls of Apply
// on one Driver are serialized; two Drivers must not deliver to the same API.
package dataplane
