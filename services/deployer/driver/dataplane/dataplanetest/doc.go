// Package dataplanetest is an in-memory HAProxy Dataplane API v3 for tests,
// on an httptest.Server, that checks every request it receives and every
// answer it sends against the API's OpenAPI specification: the one shipped
// in client-native v6's module (SpecModule, SpecFile), read from the module
// cache through "go list -m", converted from Swagger 2.0 to OpenAPI 3 and
// enforced with kin-openapi's openapi3filter (parameters, bodies, basic
// authentication, statuses, content types and answer schemas). What does not
// match is recorded (Violations), and the test that started the Server fails
// when it ends unless the violations were cleared. It listens on a free
// port of 127.0.0.1, or on Options.Addr: Servers on different loopback
// addresses (127.0.0.2, 127.0.0.3, ...) can share one port, as the
// Dataplane APIs of Pods do.
//
// The Server keeps the raw configuration with a version counter (a post with
// another version is refused with 409), the map, certificate and general
// storages (also written under Dir, so that a configuration can name them),
// the runtime state (servers, loaded maps and their entries, loaded
// certificates) and the reloads. Its answers follow those of Dataplane API
// v3.4.2 as observed (the list is in the dataplane package's documentation):
// a posted configuration is stored as client-native's parser rewrites it
// (Normalize), with "# _md5hash" and "# _version" lines; every post is
// checked with "haproxy -W -c" when Options.HAProxy is set (or fails by
// FailNextCheck) and refused with a 400 when it fails; errors of the raw
// endpoint are the JSON error model although the specification says
// text/plain; storage names are sanitized as the API does ("a.b.map" is
// "a_b.map", ".map" is added to a map's name) and a file the configuration
// names cannot be deleted (409); a stored certificate is described without
// a fingerprint. Posting the configuration without skip_reload, or replacing
// a storage file without it, reloads: the reload fails when FailNextReload
// asked for it or when "haproxy -W -c" rejects the configuration on disk,
// and then the last configuration that loaded is put back (the version
// stays); otherwise the runtime state is loaded afresh from the
// configuration. A reload's first look shows it "in_progress" without its
// id; the list shows the failed reloads, newest first, then the last one
// that succeeded. BumpVersionAfterReads moves the version behind a reader's
// back, to provoke conflicts. Counts tells how many reloads and runtime
// calls were made.
//
// Only the operations a deploy driver needs are served; any other operation
// of the specification answers 404 (and one outside it is a violation).
package dataplanetest
