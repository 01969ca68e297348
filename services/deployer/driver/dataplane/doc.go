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
// bundle has. The API does not serve a stored certificate back, nor a
// fingerprint of it: a certificate is the same when its size and what the
// API reports of it (serial, validity, subject, issuers, names) are.
//
// Both configurations are parsed with client-native's configuration parser
// (whole-line comments, including the API's "# _md5hash" and "# _version"
// lines, do not count). The API stores its parser's rewrite of what it is
// given (two spaces of indentation, the unnamed defaults section named
// "unnamed_defaults_1"), so a configuration that reads the same is not
// posted again. When the only differences are the address, port, weight and
// "disabled"/"enabled" state of servers that exist on both sides (literal
// ip:port addresses; a weight missing counts as 1 and a state missing as
// enabled, unless a default-server line sets them), each changed server is
// set with one PUT /services/haproxy/runtime/backends/{backend}/servers/{name}
// (address, port, weight, admin_state ready or maint).
//
// A changed map that HAProxy has loaded (GET /services/haproxy/runtime/maps)
// is patched with the runtime entry endpoints (POST, PUT and DELETE on
// /services/haproxy/runtime/maps/{name}/entries, the map named by its storage
// name, e.g. "host.map"): additions and changes before removals. When the entries cannot reproduce the file (duplicate
// keys, or an order that matters, because the map is used with a match other
// than map/map_str, map_beg and map_ip, and the patch, which appends added
// entries, would change it) the map is delivered by a reload. A changed
// certificate HAProxy has loaded (GET /services/haproxy/runtime/ssl_certs) is
// replaced with PUT /services/haproxy/runtime/ssl_certs/{name}, the
// certificate named by the path HAProxy loaded it from, escaped into one path
// segment ("%2Fetc%2Fhaproxy%2Fssl%2Fsite.pem").
//
// After the runtime changes, the storage files are written with
// skip_reload=true (map and certificate storage take the content as text,
// general storage as a form; new files are created with a form upload), and
// the configuration is posted with skip_reload=true, so that what the API
// stores is the bundle and a later reload loses nothing. Files that changed
// but that the configuration does not name are stored without a reload.
//
// Only what the configuration and the storages hold is compared: a runtime
// change made by someone else through the runtime endpoints alone (a
// server's weight, a map entry) is not seen, and stays until a reload.
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
// The API checks every posted configuration with haproxy -c, with or
// without a reload, and refuses one that fails with a 400 before storing it:
// ErrRejected, with HAProxy's messages in Result.ReloadDetail; nothing was
// reloaded.
//
// A 202 answer carries a Reload-ID; the driver polls
// GET /services/haproxy/reloads/{id} every PollInterval until it is
// "succeeded" or "failed", within ReloadTimeout (ErrReloadTimeout). The API
// reloads on a timer (its reload_delay, 5 s by default), one reload for
// everything asked meanwhile; until then the reload shows "in_progress". A
// failed reload is ErrReloadFailed, with HAProxy's answer in
// Result.ReloadDetail: the previous worker keeps serving, the API puts the
// last configuration that loaded back in place (the version does not go
// back), and the next Apply sees the failed reload and reloads again. The
// API lists the failed reloads before the last one that succeeded, so the
// latest reload is the one whose id ends with the largest number. Files that
// left the bundle are removed only after a successful delivery (the API
// refuses to delete a file the configuration names, with a 409).
//
// Refused tells which errors are outcomes (ErrReloadFailed, ErrRejected,
// ErrBadPath, ErrConfig) and not to be retried; ErrUnreachable, ErrAPI,
// ErrVersionConflict and ErrReloadTimeout are worth a retry. Calls of Apply
// on one Driver are serialized; two Drivers must not deliver to the same API.
//
// # Checked against the real API
//
// The driver was run against Dataplane API v3.4.2 (client-native v6.4.1,
// the module this package and its double use) built from source, with
// HAProxy 2.6 in master-worker mode behind it (the API's runtime client on
// the admin stats socket: with HAProxy 2.6 its master CLI does not take the
// "set severity-output" the API sends first; reloads by a reload command,
// since the master CLI reload the API would use needs HAProxy 2.7). What was
// observed, and what dataplanetest answers the same way:
//
//   - GET /services/haproxy/configuration/raw answers the file with a
//     Configuration-Version header (and Configuration-Checksum once the API
//     wrote it); a post answers the stored text, which is the parser's
//     rewrite with "# _md5hash=..." and "# _version=N" lines on top.
//   - A post with a stale version is a 409 with the JSON error model
//     ("version mismatch: version in configuration file is 9, given version
//     is 8") and the current version in Configuration-Version; a post
//     haproxy -c refuses is a 400 with the JSON error model. The
//     specification says text/plain for both.
//   - A post without skip_reload answers 202 with a Reload-ID header
//     ("2026-11-21-3"); the reload shows {"status":"in_progress"} (without
//     its id) until it ran, then its id, status and reload_timestamp (and
//     response when it failed). skip_reload=true answers 201.
//   - Map storage: POST (form) 201 with the model; PUT with the text and
//     skip_reload=true 204; GET one serves the content. General storage the
//     same, PUT as a form. Certificate storage: POST with skip_reload=true
//     201 and PUT with the text 200, both with the model; GET one the model
//     without a fingerprint; DELETE with skip_reload=true 204. Deleting a
//     file the configuration names: 409.
//   - GET /services/haproxy/runtime/maps names each loaded map's storage_name
//     ("host.map") and file; entries are added (201), set (200) and deleted
//     (204) by that name. GET /services/haproxy/runtime/ssl_certs names each
//     certificate by its full path in storage_name; PUT by that path, escaped,
//     answers 200 with an empty body. PUT
//     /services/haproxy/runtime/backends/{backend}/servers/{name} with
//     address, port, weight and admin_state answers 200 with the server's
//     runtime state; none of these reloads.
package dataplane
