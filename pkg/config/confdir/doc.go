// Package confdir reads the template resources of a confd confdir: the
// TOML side of confd, without the templates' functions, so that weft's
// configuration can turn each resource into a target at load time and the
// renderer (pkg/render/confd) can build on the same parse.
//
// # Contract
//
// Load(dir, prefix) reads every file under <dir>/conf.d whose name ends in
// "toml" (recursively, in lexical order, following symbolic links to
// files, skipping directories whose name starts with ".."), each a
// [template] table with src, dest, keys, prefix, owner, group, uid, gid,
// mode, check_cmd, reload_cmd and the maintained confd's output_format,
// min_reload_interval, debounce, check_cmd_timeout and reload_cmd_timeout.
// src names a file under <dir>/templates, which must exist (Load does not
// parse it). A file that does not decode, lacks src or dest, has a field of
// the wrong form or names a missing template is a *ConfigError naming the
// file, the field and, when known, the line; Load still returns every Spec
// that loaded, with one error joining the others. A missing conf.d is an
// error wrapping fs.ErrNotExist.
//
// prefix is confd's global prefix; it comes before each resource's own
// (Spec.Prefix is both joined, absolute and clean). Spec.Selects says which
// value names (full key paths) the resource reads, by whole segments.
//
// TargetSpec is the deploy side of a resource: dest, ownership, mode,
// check_cmd and reload_cmd (CheckCommand and ReloadCommand expand their
// {{.src}} and {{.dest}} as confd does), timeouts, minimum reload interval
// and output format; CheckFormat checks output against the format.
package confdir
