// Package haproxycheck validates a rendered HAProxy bundle with the real
// `haproxy -c`, with the bundle laid out on disk the way it will be deployed.
//
// # Contract
//
// A bundle is a list of [File] values whose paths are relative and
// slash-separated ("haproxy.cfg", "maps/host.map", "files/400.http",
// "certs/site.pem"). Absolute paths, ".." components, empty paths, duplicate
// paths and a path that is both a file and a directory are rejected with an
// error wrapping [ErrBadPath] before anything touches the disk.
//
// [Checker.Check] writes the bundle into a fresh private temporary directory
// (mode 0700, files 0600, since bundles carry private keys), then runs
// `haproxy -c -f <tmp>/<main>` with that directory as the working directory, so
// relative paths in the config resolve inside the bundle.
//
// Path rewriting: a rendered config names its maps, error files and
// certificates by the absolute paths they will have once deployed under base
// (for example `map(/etc/haproxy/maps/host.map)` or `crt-base
// /etc/haproxy/certs` with base "/etc/haproxy"). In the main config, and only
// there, every occurrence of base that starts a path is replaced by the
// temporary directory: base followed by "/" and base standing alone as a whole
// path (`crt-base /etc/haproxy`). An occurrence counts only when it is not
// the tail of a longer path or name: "/opt/etc/haproxy/x" and
// "/etc/haproxy2/x" are left alone. Line numbers are unchanged. Other files
// are written byte for byte, so paths inside them (crt-list entries, for
// instance) should be relative to crt-base rather than absolute. An empty base
// disables rewriting; base must otherwise be an absolute directory other
// than "/".
//
// Results:
//
//   - Valid: haproxy exits 0. Check returns a nil error and the warnings
//     haproxy printed, if any (nil when there are none).
//   - Invalid: haproxy exits with status 1 (errors) or 2 (no error but the
//     config would not start, e.g. no listener) and reports at least one alert.
//     Check returns every problem (alerts and warnings) and an error wrapping
//     [ErrInvalid]. Retrying will not help; the bundle must change.
//   - Infrastructure failure: the binary is missing or vanished (the error also
//     wraps [ErrNoBinary]), the temporary directory cannot be created or
//     written, the context is cancelled or the timeout (see [WithTimeout])
//     expires, haproxy is killed by a signal, or it exits non-zero with an
//     unexpected status or without reporting any alert. The error does not
//     match [ErrInvalid], so the caller may retry. On cancellation and timeout
//     the whole haproxy process group is killed (SIGKILL) and reaped before
//     Check returns; the error wraps context.Canceled or
//     context.DeadlineExceeded.
//
// Problems: each [ALERT] and [WARNING] line haproxy prints becomes a [Problem].
// A location such as `parsing [<tmp>/haproxy.cfg:12] :` or `[<tmp>/haproxy.cfg:20] :`
// becomes File and Line; a line with no location keeps haproxy's words with
// File "" and Line 0. Indented continuation lines ("   | ...") are joined to
// the message they continue. Every temporary path, in File and in Message, is
// mapped back to its bundle-relative path, so no temporary path reaches a
// Problem. Untagged lines other than haproxy's success banners become problems
// too (alerts when haproxy failed, warnings otherwise). NOTICE and DIAG lines
// (version, executable path) are dropped, as are the closing summaries "Error(s)
// found in configuration file" and "Fatal errors found in configuration." when
// another alert already says what is wrong. Output beyond 1 MiB is truncated,
// which is reported as a final problem.
//
// Cleanup: the temporary directory is removed when Check returns, whatever the
// outcome. If the removal itself fails, that failure is returned too (joined
// with ErrInvalid for an invalid bundle, so the verdict is kept).
//
// Concurrency: a [Checker] is immutable after [New]; Check may be called from
// many goroutines at once, each call using its own temporary directory and its
// own haproxy process.
//
// # What HAProxy 2.6 checks during -c
//
// Found by running Debian's haproxy 2.6.12 against broken configs:
//
//   - Syntax of every section and keyword, argument types, sample fetches,
//     converters, ACLs and log-format strings.
//   - Every file the config loads at parse time must exist and parse: map and
//     ACL pattern files (typed maps such as map_ip have their entries checked,
//     reported as "at line N of file ..."), errorfile/errorfiles, `crt` files
//     and directories (PEM must parse and the key must match the certificate;
//     a certificate without its key is looked for in "<crt>.key"), ca-file,
//     crl-file, ssl-dh-param-file, SPOE filter configs and lua-load scripts.
//     Relative crt/ca paths are resolved through crt-base/ca-base, but those
//     directories themselves are not checked. Certificate expiry is not checked.
//   - lua-load scripts are executed: their top-level code runs during the check,
//     with the checker's privileges. A bundle must be trusted like any config.
//   - `user` and `group` names are looked up in the passwd and group databases of
//     the host running the check ("cannot find user id for ..."), so that host
//     needs the same accounts as the target; numeric `uid`/`gid` are not checked.
//   - Server addresses are resolved through libc DNS on the checking host
//     ("could not resolve address ...") unless the server's init-addr allows
//     `none`, which turns the failure into a warning. Hostnames in `bind` are
//     resolved too.
//   - References between proxies: static use_backend/default_backend targets
//     must exist ("Proxy 'fe': unable to find required use_backend: 'x'.", which
//     carries no line), http/tcp mode compatibility, duplicate proxy and server
//     names.
//   - A config with no listener exits 2 ("Configuration file has no error but
//     will not start (no listener) => exit(2).") and counts as invalid here.
//   - `${VAR}` expands from the checker's environment, and the local peer name
//     defaults to the checking host's hostname, so a peers section without a
//     matching peer is dropped with a warning.
//
// Not checked during -c: the chroot directory, pidfile, stats socket and unix
// bind socket directories, log targets, whether bind addresses and ports can
// be bound (nothing is bound: non-local addresses and privileged ports pass),
// resolvers' nameservers, nbthread/cpu-map against the CPUs, ulimit-n/maxconn
// against the limits, and dynamic use_backend names such as
// `use_backend be_%[req.hdr(host)]`, which are only resolved at run time.
package haproxycheck
