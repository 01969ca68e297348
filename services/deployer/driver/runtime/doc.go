// Package runtime is the deployer's driver for an HAProxy (2.6 or later)
// that runs in master-worker mode and reads its configuration from a folder
// shared with weft (Options.Dir). It delivers each bundle with the fewest
// reloads: what HAProxy can change while running goes through the Runtime
// API, and only the rest costs one reload.
//
// # What goes through the Runtime API, and what reloads
//
// Apply compares the bundle with what is on disk, which is what HAProxy runs
// as long as the driver's record (the manifest) says so. It looks at the
// changed files:
//
//   - haproxy.cfg, when the only differences are in "server" lines of
//     existing backend or listen sections, at the same place and with the
//     same name (pre-allocated slots such as "server SRV_3 127.0.0.1:1
//     disabled"), and are limited to a literal ip:port address, "weight"
//     and "disabled"/"enabled": "set server <be>/<srv> addr <ip> port
//     <port>", "set server <be>/<srv> weight <w>" and "set server <be>/<srv>
//     state maint|ready". A missing weight counts as 1 and a missing state
//     as enabled, unless a default-server line sets them (then a weight or
//     state given on one side only is a structural change). Comments and
//     blank lines do not count as differences; conditional blocks (.if)
//     make every difference structural.
//   - a map file that the running worker has loaded ("show map" names it):
//     the entries are diffed and applied with "add map", "set map" and
//     "del map" (HAProxy keeps existing entries in place and appends added
//     ones). When that cannot reproduce the file (duplicate keys, or an
//     order that matters because the map is used with a first-match lookup:
//     anything but map/map_str, map_beg and map_ip, which HAProxy indexes
//     in trees) or the patch would be longer than the map, the map is
//     loaded whole into a new version and swapped in atomically ("prepare
//     map", "add map @<version>" with the entries as payload, "commit map
//     @<version>").
//   - a certificate that the running worker has loaded ("show ssl cert"
//     names it): "set ssl cert <path>" with the PEM, then "commit ssl cert
//     <path>".
//
// Anything else reloads, once, with the reason in Result.ReloadReason:
// "structure" (any other difference in haproxy.cfg), "new-file" (a file not
// on disk yet), "file-changed" (a changed file HAProxy only reads at load
// time: error pages, ACL files, CA files, a map or certificate it has not
// loaded), "drift" (a delivered file was changed on disk by someone else),
// "initial" (no record of an earlier delivery and the bundle differs from
// the disk), "pending" (an earlier Apply did not complete),
// "runtime-disabled" (no admin socket, or Options.DisableRuntime), and
// "runtime-failed" (HAProxy refused a runtime command; Result.RuntimeError
// has its answer) and "runtime-drift" (see below). Files that merely left
// the bundle are removed without a reload: HAProxy has them in memory, and
// a valid configuration no longer names them.
//
// When every file is already as the bundle wants, Apply still compares the
// running servers ("show servers state") with the configuration: an
// address, port or weight changed, or a server put in maintenance, made
// ready or drained through the Runtime API by someone else, is set back
// with the same commands a configuration change uses, with no reload
// (Result.RuntimeOps lists them); if HAProxy refuses one, Apply reloads
// with reason "runtime-drift". Map entries changed only through the
// Runtime API are not compared.
//
// The driver trusts that bundles are valid (the validator checks them); if
// HAProxy rejects a configuration on reload, its previous worker keeps
// serving, Apply returns ErrReloadFailed and the next Apply reloads again.
//
// # Order and atomicity
//
// Every file is written atomically: a temporary file in the same directory,
// fsynced, then renamed over the old one (and the directory fsynced), so
// HAProxy never reads a partial file. Atomicity is per file. The manifest is
// renamed into place the same way but not fsynced: it only has to survive a
// crash of weft, and if a power loss takes its last update, HAProxy restarts
// from the files anyway and the next Apply sees drift or a pending change
// and reloads.
//
// Runtime path: the manifest is first marked pending; the commands run in
// one admin session, servers first (a slot leaving service is put in
// maintenance before its address changes; one entering service gets its
// address and weight before it is made ready), then maps (additions and
// changes before removals), then certificates; then the changed files are
// written, haproxy.cfg last, so that a later reload loses nothing; then
// the files that left the bundle are removed and the manifest is cleared.
// If a command is refused, the runtime path stops there and the bundle is
// delivered by the reload path.
//
// Reload path: the manifest records the new files as owned and the reload
// as pending; the changed files are written, haproxy.cfg last; "reload" is
// sent on the master socket; then, since HAProxy 2.6's master answers
// "reload" before doing anything, the driver polls "show proc" until the
// master's reload counter moved, no failed reload is reported, a new worker
// runs and the previous ones are leaving, and the new worker answers "show
// info" on the admin socket (through the master when there is none), all
// within ReloadTimeout; then until the previous workers stopped listening
// (see Open connections). Only then are the files that left the bundle
// removed and the manifest cleared.
//
// An Apply interrupted at any point leaves the manifest pending, and the
// next Apply reloads: what HAProxy runs is then known again.
//
// # Open connections
//
// No deploy cuts an established connection (a WebSocket, any upgraded or
// long keep-alive connection). A server leaving service is put in
// maintenance, never "shutdown sessions": HAProxy sends it no new
// connection, and those it holds continue until the client or the server
// closes them. A slot whose address changes ("set server ... addr") keeps
// the connections opened to its previous address; HAProxy counts them
// against the slot (its cur_sess, and its maxconn if set) until they end.
// Slots are assigned by the configuration (the ingress and gateway
// libraries pack endpoints into their slots, SRV_1, SRV_2, ... and
// SRV_<ref>_1, ..., in address order, so one leaving moves those after
// it), not by the driver. A reload replaces the worker with a
// soft stop: the previous worker stops listening and serves the
// connections it holds until they end, or until the configuration's
// hard-stop-after. The reload waits for the previous workers only until
// each has left or reports ("show info" through the master: Stopping, and
// no listener but its link to the master) that it no longer listens, so a
// deploy never waits for long-lived connections, and runtime commands
// after it reach only the new worker.
//
// # Permissions
//
// Files are written with Options.Mode, and those marked Secret (key
// material: certificates with their private keys) with Options.KeyMode,
// 0600 unless set, never world-readable. A file whose content is as wanted
// but whose mode is not (a key left 0644) is set back in place, without a
// reload, and listed in Result.Written. A missing Dir is created first, so
// a folder removed behind the driver's back is delivered again (with a
// reload, since its record went with it).
//
// # What the driver owns in Dir
//
// The manifest ".weft-runtime.json" lists every file the driver delivered
// with the hash of what it wrote, and the directories it created. Only those
// files are removed when they leave the bundle, and directories only once
// empty. Temporary files are named ".weft-tmp-*". Bundle paths are relative
// and slash-separated; absolute paths, ".." and the driver's names are
// rejected with ErrBadPath, and a directory where a bundle file goes (or a
// file where it needs a directory) with ErrConflict, before anything
// changes. All file access goes through an os.Root.
//
// # Sockets
//
// The driver talks to the sockets with plain unix connections: one command
// per connection for queries (the write side is shut down after the command,
// which HAProxy's master CLI needs to answer), and one interactive ("prompt")
// connection for a batch of runtime commands. Options.HAProxyDir maps the
// paths HAProxy reports to bundle paths when HAProxy sees the shared folder
// at another path.
//
// # Statistics
//
// Stats reads "show stat" on the admin socket: each frontend's and
// backend's HTTP responses and 5xx among them since its worker started,
// and each server's status (the deployer's canaries judge by it). Without
// an admin socket it returns ErrNoView.
//
// # Serialization
//
// Calls of Apply and Drift on one Driver are serialized (Stats is a
// query and is not). Two Drivers or two
// processes must not deliver to the same HAProxy.
package runtime
