// Package confd is weft's second template engine: confd's template
// resources and templates (Go text/template with confd's functions), so
// that a confd user points weft at an existing confdir and gets the same
// files.
//
// # Contract
//
// LoadConfdir(dir) reads every template resource of a confdir, as confd
// does (the TOML side is package pkg/config/confdir, which weft's
// configuration also uses; Compile parses the template of one
// confdir.Spec): the files under <dir>/conf.d whose name ends in "toml"
// (recursively, in lexical order), each a [template] table with src, dest,
// keys, prefix, owner, group, uid, gid, mode, check_cmd, reload_cmd and the
// maintained confd's output_format, min_reload_interval, debounce,
// check_cmd_timeout and reload_cmd_timeout; src names a file under
// <dir>/templates. Each template is parsed once, at load. A file that does
// not decode, lacks src or dest, has a field of the wrong form, or whose
// template is missing or does not parse (unknown function, syntax) is a
// *ConfigError naming the file, the field and, when known, the line;
// LoadConfdir still returns every resource that loaded, with one error
// joining the others. WithPrefix is confd's global prefix.
//
// Resource.Render(values) renders one resource. values is flat: full key
// paths to values ("/myapp/database/url" -> "db:5432"), as weft's value
// sources name them. The template sees only the keys its resource selects
// (prefix + each of keys, and everything below it, by whole path
// segments), named relative to the prefix as confd names them
// ("/database/url" under prefix "/myapp"), with nil as dot. For the same
// data it produces the bytes confd produces: same functions with the same
// signatures, sorting and edge cases (each documented where it is
// defined), same text/template, same error texts. Rendering is safe to run
// concurrently; a Resource is immutable after LoadConfdir.
//
// A render that fails is a *TemplateError naming the template file and
// line; its Err is text/template's error, whose text is confd's:
//
//	template: app.tmpl:2:9: executing "app.tmpl" at <getv "/nope">: error calling getv: key does not exist: /nope
//
// Resource.Target (the embedded TargetSpec) is what the deployer needs:
// dest, ownership, mode, check_cmd and reload_cmd (CheckCommand and
// ReloadCommand expand their {{.src}} and {{.dest}} as confd does),
// command timeouts, the minimum reload interval and the output format.
// Resource.Selects tells which value names a resource depends on.
//
// # Functions
//
// The store functions (over the keys the resource sees): exists, get,
// gets, getv (with a default), getvs, ls, lsdir; see Store. confd's own:
// base, dir, split, join, toUpper, toLower, contains, replace, trimSuffix,
// json, jsonArray, map, getenv (with a default), datetime, fileExists,
// base64Encode, base64Decode, parseBool, atoi, reverse, sortByLength,
// sortKVByLength, add, sub, mul, div, mod, seq, lookupIP, lookupIPV4,
// lookupIPV6, lookupSRV, lookupIfaceIPV4, lookupIfaceIPV6, hostname,
// include; the maintained confd's utility layer: default, ternary,
// coalesce, empty, toJson, fromJson, toPrettyJson, indent, nindent, quote,
// squote, regexMatch, regexFind, regexReplaceAll, trimPrefix, repeat,
// nospace, snakecase, camelcase, kebabcase, dict, list, hasKey, keys,
// values, append, pluck, sha256sum; and text/template's builtins (index,
// len, slice, printf, eq, and, ...).
//
// Where confd's two lines differ, weft follows the maintained confd
// (github.com/abtreece/confd), whose architecture weft takes: the global
// prefix is joined before the resource's prefix (confd 0.16 replaced it),
// seq counts down when first > last (0.16: empty), reverse copies (0.16:
// in place), div and mod by zero are errors (0.16: a panic, which
// text/template also reports as an error).
//
// # What weft does not do as confd does
//
//   - Keys are selected by whole path segments ("/app" never selects
//     "/apple"), as weft's value sources select them; several of confd's
//     backends compare plain string prefixes.
//   - Prefixes are joined and cleaned with path.Join, so a global prefix
//     of "/" or one with doubled slashes behaves like its clean form.
//   - Directories of conf.d whose name starts with ".." (the versioned
//     copies inside a Kubernetes ConfigMap volume) are skipped, so each
//     resource is loaded once, not twice.
//   - The main template is parsed at load: an edited template takes effect
//     at the next LoadConfdir (included templates are read at each render).
//   - Owner and group names are not looked up at load (weft may render on
//     another machine than it deploys on): TargetSpec.Ownership does it.
//   - getenv, hostname, datetime and the DNS functions can be replaced
//     (WithGetenv, WithHostname, WithClock, WithResolver) for tests.
package confd
