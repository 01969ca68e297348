package confd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/user"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/template"
	"time"

	"github.com/BurntSushi/toml"
)

// DefaultMode is the mode confd gives a new file when the resource sets
// none (an existing file keeps its mode).
const DefaultMode os.FileMode = 0o644

// outputFormats are the values output_format accepts.
var outputFormats = []string{"json", "toml", "xml", "yaml", "yml"}

// Option changes how LoadConfdir loads and how its resources render.
type Option func(*settings)

type settings struct {
	prefix   string
	resolver Resolver
	getenv   func(string) string
	now      func() time.Time
	hostname func() (string, error)
}

// WithPrefix sets the global prefix, confd's `prefix` setting (confd.toml,
// --prefix, CONFD_PREFIX). It comes before every resource's own prefix:
// global "/production" and resource prefix "myapp" read the keys under
// "/production/myapp".
func WithPrefix(prefix string) Option {
	return func(s *settings) { s.prefix = prefix }
}

// WithResolver sets what answers lookupIP, lookupIPV4, lookupIPV6 and
// lookupSRV (default net.DefaultResolver).
func WithResolver(r Resolver) Option {
	return func(s *settings) {
		if r != nil {
			s.resolver = r
		}
	}
}

// WithGetenv sets what getenv reads (default os.Getenv).
func WithGetenv(getenv func(string) string) Option {
	return func(s *settings) {
		if getenv != nil {
			s.getenv = getenv
		}
	}
}

// WithClock sets what datetime returns (default time.Now).
func WithClock(now func() time.Time) Option {
	return func(s *settings) {
		if now != nil {
			s.now = now
		}
	}
}

// WithHostname sets what hostname returns (default os.Hostname).
func WithHostname(hostname func() (string, error)) Option {
	return func(s *settings) {
		if hostname != nil {
			s.hostname = hostname
		}
	}
}

// getenvFunc is the template function getenv: the variable's value, or
// the first default (or "") when it is unset or empty.
func (s *settings) getenvFunc() func(key string, def ...string) string {
	return func(key string, def ...string) string {
		if v := s.getenv(key); v != "" {
			return v
		}
		if len(def) > 0 {
			return def[0]
		}
		return ""
	}
}

// TargetSpec is what deploying a resource's output takes: where it goes,
// who owns it, its mode, and the commands around it.
type TargetSpec struct {
	// Dest is the file the output is written to.
	Dest string
	// Owner and Group are user and group names; UID and GID numeric ids,
	// -1 when not set. An id wins over a name; with neither, confd uses
	// the effective ids of its own process. Ownership resolves them.
	Owner string
	Group string
	UID   int
	GID   int
	// Mode is the file's permission bits, when ModeSet. When the resource
	// sets no mode, confd keeps the mode of an existing dest and uses
	// DefaultMode for a new one.
	Mode    os.FileMode
	ModeSet bool
	// CheckCmd runs (with /bin/sh -c) against the staged file before it
	// replaces Dest; a non-zero exit keeps the old file. ReloadCmd runs
	// after Dest was replaced. Both are Go templates: CheckCommand and
	// ReloadCommand expand them.
	CheckCmd  string
	ReloadCmd string
	// Timeouts for the commands (0: none) and the shortest time between
	// two reloads (0: no limit).
	CheckCmdTimeout   time.Duration
	ReloadCmdTimeout  time.Duration
	MinReloadInterval time.Duration
	// OutputFormat, when set (json, toml, xml, yaml or yml), is the syntax
	// the output must have to be deployed.
	OutputFormat string
}

// CheckCommand expands CheckCmd with {{.src}} as the staged file's path.
func (t TargetSpec) CheckCommand(stagePath string) (string, error) {
	return expandCommand("check_cmd", t.CheckCmd, map[string]string{"src": stagePath})
}

// ReloadCommand expands ReloadCmd with {{.src}} as the staged file's path
// and {{.dest}} as Dest's.
func (t TargetSpec) ReloadCommand(stagePath, dest string) (string, error) {
	return expandCommand("reload_cmd", t.ReloadCmd, map[string]string{"src": stagePath, "dest": dest})
}

func expandCommand(field, cmd string, data map[string]string) (string, error) {
	if cmd == "" {
		return "", nil
	}
	tmpl, err := template.New(strings.ReplaceAll(field, "_", "")).Parse(cmd)
	if err != nil {
		return "", fmt.Errorf("invalid %s template: %w", field, err)
	}
	var buf bytes.Buffer
	if err := tmpl.Execute(&buf, data); err != nil {
		return "", fmt.Errorf("%s: %w", field, err)
	}
	return buf.String(), nil
}

// Ownership resolves the owner of Dest as confd does, on the machine that
// calls it: UID if set, else Owner looked up by name, else the effective
// uid of the process; the same for GID, Group and the effective gid.
func (t TargetSpec) Ownership() (uid, gid int, err error) {
	uid, gid = t.UID, t.GID
	if uid == -1 {
		if t.Owner == "" {
			uid = os.Geteuid()
		} else {
			u, err := user.Lookup(t.Owner)
			if err != nil {
				return 0, 0, fmt.Errorf("cannot find owner's UID: %w", err)
			}
			if uid, err = strconv.Atoi(u.Uid); err != nil {
				return 0, 0, fmt.Errorf("owner %q has uid %q: %w", t.Owner, u.Uid, err)
			}
		}
	}
	if gid == -1 {
		if t.Group == "" {
			gid = os.Getegid()
		} else {
			g, err := user.LookupGroup(t.Group)
			if err != nil {
				return 0, 0, fmt.Errorf("cannot find group's GID for group %q: %w", t.Group, err)
			}
			if gid, err = strconv.Atoi(g.Gid); err != nil {
				return 0, 0, fmt.Errorf("group %q has gid %q: %w", t.Group, g.Gid, err)
			}
		}
	}
	return uid, gid, nil
}

// Resource is one template resource: a conf.d file and its template.
// Copies share the parsed template and are safe to render concurrently.
type Resource struct {
	TargetSpec
	// File is the conf.d file the resource was read from.
	File string
	// Src is the template as the file names it; Template is its path
	// under the templates folder.
	Src      string
	Template string
	// Keys are the keys as written. Prefix is the effective prefix: the
	// global one (WithPrefix) and the resource's, joined, absolute and
	// clean ("/" for none).
	Keys   []string
	Prefix string
	// Debounce is how long the maintained confd waits after a change
	// before it renders (0: not set).
	Debounce time.Duration
	// Backend is the [backend] table of the maintained confd (a backend
	// for this resource alone) as written, nil when absent. Render uses
	// whatever values it is given.
	Backend map[string]any
	// UnknownKeys are the keys of the file that mean nothing to confd,
	// which ignores them (a misspelt "check-cmd", say), as dotted TOML
	// keys.
	UnknownKeys []string

	selectors []string
	tmpl      *template.Template
	static    template.FuncMap
	set       *settings
	tmplDir   string
}

// Target returns the deploy side of the resource.
func (r Resource) Target() TargetSpec { return r.TargetSpec }

// Selects reports whether the value named name (a full path such as
// "/myapp/database/url") is one the resource's template sees: it is
// prefix+key, or below it, for one of the resource's keys. Matching is by
// whole segments: the key "/app" selects "/app" and "/app/x", not
// "/apple". A resource with no keys selects nothing, as in confd.
func (r Resource) Selects(name string) bool {
	for _, sel := range r.selectors {
		if name == sel || strings.HasPrefix(name, sel) && (sel == "/" || name[len(sel)] == '/') {
			return true
		}
	}
	return false
}

// Store returns the store the template sees for values: every selected
// value (see Selects) named relative to the prefix, as confd names it:
// path.Join("/", strings.TrimPrefix(name, prefix)). With prefix "/myapp",
// "/myapp/database/url" is "/database/url" and "/myapp" itself is "/".
// When two names give one key (names that are not clean paths, or a key
// that leaves the prefix with ".."), the name that sorts first wins, so
// the result never depends on map order.
func (r Resource) Store(values map[string]string) *Store {
	n := 0
	for name := range values {
		if r.Selects(name) {
			n++
		}
	}
	s := &Store{m: make(map[string]KVPair, n)}
	for name, v := range values {
		if r.Selects(name) {
			key := r.storeKey(name)
			s.m[key] = KVPair{Key: key, Value: v}
		}
	}
	if len(s.m) == n {
		return s
	}
	// Some names gave the same key: decide each by the smallest name.
	from := make(map[string]string, n)
	for name, v := range values {
		if !r.Selects(name) {
			continue
		}
		key := r.storeKey(name)
		if prev, dup := from[key]; dup && prev < name {
			continue
		}
		from[key] = name
		s.m[key] = KVPair{Key: key, Value: v}
	}
	return s
}

// storeKey is confd's path.Join("/", strings.TrimPrefix(name, prefix)),
// without Join's allocation when the rest is already a clean path.
func (r Resource) storeKey(name string) string {
	rest := strings.TrimPrefix(name, r.Prefix)
	if strings.HasPrefix(rest, "/") {
		return path.Clean(rest)
	}
	return path.Join("/", rest)
}

// Render renders the template over values, a flat map of full key paths
// to values. See RenderContext.
func (r Resource) Render(values map[string]string) ([]byte, error) {
	return r.RenderContext(context.Background(), values)
}

// RenderContext renders the template over values (a flat map of full key
// paths to values, such as "/myapp/database/url"), as confd renders it
// after reading the same keys from its backend: the template sees the
// store of Store(values), confd's functions, and nil as dot. ctx bounds
// the DNS lookups. A failure is a *TemplateError naming the template and
// line.
func (r Resource) RenderContext(ctx context.Context, values map[string]string) (out []byte, err error) {
	if r.tmpl == nil {
		return nil, ErrNotLoaded
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("render %s: %w", r.Template, err)
	}
	defer func() {
		if p := recover(); p != nil {
			out, err = nil, &TemplateError{File: r.Template, Err: fmt.Errorf("panic while rendering: %v", p)}
		}
	}()
	store := r.Store(values)
	inc := &includer{dir: r.tmplDir, static: r.static}
	inc.bound = boundFuncs(ctx, store, r.set.resolver, inc)
	t, err := r.tmpl.Clone()
	if err != nil {
		return nil, &TemplateError{File: r.Template, Err: err}
	}
	t.Funcs(inc.bound)
	var buf bytes.Buffer
	if err := t.Execute(&buf, nil); err != nil {
		return nil, newTemplateError(r.Template, err)
	}
	return buf.Bytes(), nil
}

// StringValues turns name -> value pairs of any type into what Render
// takes: strings are kept, nil values dropped, anything else written with
// fmt.Sprint.
func StringValues(in map[string]any) map[string]string {
	out := make(map[string]string, len(in))
	for k, v := range in {
		switch v := v.(type) {
		case nil:
		case string:
			out[k] = v
		default:
			out[k] = fmt.Sprint(v)
		}
	}
	return out
}

// resourceFile is a conf.d file as confd decodes it.
type resourceFile struct {
	Template templateTable  `toml:"template"`
	Backend  map[string]any `toml:"backend"`
}

type templateTable struct {
	Src               string
	Dest              string
	Keys              []string
	Prefix            string
	Owner             string
	Group             string
	Uid               int
	Gid               int
	Mode              string
	CheckCmd          string `toml:"check_cmd"`
	ReloadCmd         string `toml:"reload_cmd"`
	OutputFormat      string `toml:"output_format"`
	MinReloadInterval string `toml:"min_reload_interval"`
	Debounce          string `toml:"debounce"`
	CheckCmdTimeout   string `toml:"check_cmd_timeout"`
	ReloadCmdTimeout  string `toml:"reload_cmd_timeout"`
}

// LoadConfdir reads the template resources of a confd confdir: every file
// whose name ends in "toml" under <dir>/conf.d (recursively, in lexical
// order, following symbolic links to files), each with its template under
// <dir>/templates parsed. It returns every resource that loaded and, when
// some did not, an error joining one *ConfigError per bad file (each
// matches ErrConfig), as confd goes on with the good ones. A missing
// conf.d is an error.
func LoadConfdir(dir string, opts ...Option) ([]Resource, error) {
	set := &settings{
		resolver: net.DefaultResolver,
		getenv:   os.Getenv,
		now:      time.Now,
		hostname: os.Hostname,
	}
	for _, o := range opts {
		o(set)
	}
	static := staticFuncs(set)
	// Parse with every name defined; each render lays its own store,
	// DNS and include functions over these.
	proto := template.FuncMap{}
	for k, v := range boundFuncs(context.Background(), NewStore(), set.resolver, &includer{}) {
		proto[k] = v
	}

	confDir := filepath.Join(dir, "conf.d")
	files, err := resourceFiles(confDir)
	if err != nil {
		return nil, err
	}
	tmplDir := filepath.Join(dir, "templates")
	var (
		out  []Resource
		errs []error
	)
	for _, f := range files {
		r, err := loadResource(f, tmplDir, set, static, proto)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}

// resourceFiles lists the files under root whose name matches "*toml"
// (confd's pattern), in lexical order. Directories whose name starts with
// ".." are skipped: they are the versioned copies of a Kubernetes volume
// (ConfigMap, Secret), whose files also appear through links at the top.
func resourceFiles(root string) ([]string, error) {
	if _, err := os.Stat(root); err != nil {
		return nil, fmt.Errorf("confdir %s: %w", filepath.Dir(root), err)
	}
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != root && strings.HasPrefix(d.Name(), "..") {
				return filepath.SkipDir
			}
			return nil
		}
		if ok, _ := filepath.Match("*toml", d.Name()); !ok {
			return nil
		}
		fi, err := os.Stat(p)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", root, err)
	}
	return files, nil
}

func loadResource(file, tmplDir string, set *settings, static, proto template.FuncMap) (Resource, error) {
	fail := func(field string, err error) (Resource, error) {
		return Resource{}, &ConfigError{File: file, Field: field, Err: err}
	}
	rf := resourceFile{Template: templateTable{Uid: -1, Gid: -1}}
	md, err := toml.DecodeFile(file, &rf)
	if err != nil {
		return Resource{}, tomlError(file, err)
	}
	t := rf.Template
	r := Resource{
		File:    file,
		Src:     t.Src,
		Keys:    t.Keys,
		Prefix:  joinPrefix(set.prefix, t.Prefix),
		Backend: rf.Backend,
		set:     set,
		static:  static,
		tmplDir: tmplDir,
		TargetSpec: TargetSpec{
			Dest:         t.Dest,
			Owner:        t.Owner,
			Group:        t.Group,
			UID:          t.Uid,
			GID:          t.Gid,
			CheckCmd:     t.CheckCmd,
			ReloadCmd:    t.ReloadCmd,
			OutputFormat: t.OutputFormat,
		},
	}
	for _, k := range md.Undecoded() {
		if len(k) > 0 && k[0] == "backend" {
			continue
		}
		r.UnknownKeys = append(r.UnknownKeys, k.String())
	}

	var errs []error
	bad := func(field string, err error) {
		errs = append(errs, &ConfigError{File: file, Field: field, Err: err})
	}
	if t.Src == "" {
		bad("src", ErrEmptySrc)
	}
	if t.Dest == "" {
		bad("dest", ErrEmptyDest)
	}
	if t.Mode != "" {
		// confd parses with base 0: "0644" and "0o644" are octal, "0x1a4"
		// hex, and "644" decimal (0o1204). Only the permission bits reach
		// the file (os.Chmod of an os.FileMode), so the mode is those.
		m, err := strconv.ParseUint(t.Mode, 0, 32)
		if err != nil {
			bad("mode", fmt.Errorf("must be a number such as \"0644\", got %q: %w", t.Mode, err))
		} else {
			r.Mode, r.ModeSet = os.FileMode(m).Perm(), true
		}
	}
	if t.Uid < -1 {
		bad("uid", fmt.Errorf("must be 0 or more, got %d", t.Uid))
	}
	if t.Gid < -1 {
		bad("gid", fmt.Errorf("must be 0 or more, got %d", t.Gid))
	}
	if t.OutputFormat != "" && !slices.Contains(outputFormats, t.OutputFormat) {
		bad("output_format", fmt.Errorf("unknown format %q (supported: %s)", t.OutputFormat, strings.Join(outputFormats, ", ")))
	}
	for _, d := range []struct {
		field string
		in    string
		out   *time.Duration
	}{
		{"min_reload_interval", t.MinReloadInterval, &r.MinReloadInterval},
		{"debounce", t.Debounce, &r.Debounce},
		{"check_cmd_timeout", t.CheckCmdTimeout, &r.CheckCmdTimeout},
		{"reload_cmd_timeout", t.ReloadCmdTimeout, &r.ReloadCmdTimeout},
	} {
		if d.in == "" {
			continue
		}
		v, err := time.ParseDuration(d.in)
		if err != nil {
			bad(d.field, fmt.Errorf("invalid duration %q (Go syntax, such as \"30s\" or \"1m\"): %w", d.in, err))
			continue
		}
		*d.out = v
	}
	for _, c := range []struct{ field, cmd string }{{"check_cmd", t.CheckCmd}, {"reload_cmd", t.ReloadCmd}} {
		if _, err := template.New(c.field).Parse(c.cmd); err != nil {
			bad(c.field, fmt.Errorf("invalid command template: %w", err))
		}
	}
	if len(errs) > 0 {
		return Resource{}, errors.Join(errs...)
	}

	for _, k := range t.Keys {
		r.selectors = append(r.selectors, path.Join(r.Prefix, k))
	}
	// As confd: src is joined to the templates folder, whatever it holds.
	r.Template = filepath.Join(tmplDir, t.Src)
	content, err := os.ReadFile(r.Template)
	if err != nil {
		return fail("src", fmt.Errorf("missing template %s: %w", r.Template, err))
	}
	tmpl, err := template.New(filepath.Base(r.Template)).Funcs(static).Funcs(proto).Parse(string(content))
	if err != nil {
		return fail("src", newTemplateError(r.Template, err))
	}
	r.tmpl = tmpl
	return r, nil
}

// tomlLocation is how BurntSushi/toml starts its messages, syntax and
// type errors alike: `toml: line 3 (last key "template.mode"): ...`.
var tomlLocation = regexp.MustCompile(`^toml: line (\d+)(?: \(last key "([^"]*)"\))?`)

// fieldHints say what a field that failed to decode should look like.
var fieldHints = map[string]string{
	"mode": `a string, such as mode = "0644"`,
	"keys": `a list of strings, such as keys = ["/database"]`,
	"src":  `a string, such as src = "app.conf.tmpl"`,
	"dest": `a string, such as dest = "/etc/app/app.conf"`,
}

// tomlError names the line and, when the decoder says which key it was
// at, the field.
func tomlError(file string, err error) *ConfigError {
	ce := &ConfigError{File: file, Err: err}
	m := tomlLocation.FindStringSubmatch(err.Error())
	if m == nil {
		return ce
	}
	ce.Line, _ = strconv.Atoi(m[1])
	ce.Field = strings.TrimPrefix(m[2], "template.")
	msg := err.Error()
	if hint, ok := fieldHints[ce.Field]; ok &&
		(strings.Contains(msg, "incompatible types") || strings.Contains(msg, "Invalid integer")) {
		ce.Err = fmt.Errorf("%w (%s must be %s)", err, ce.Field, hint)
	}
	return ce
}

// joinPrefix is confd's hierarchical prefix: the global prefix, then the
// resource's, as one absolute, clean path; "/" when both are empty.
func joinPrefix(global, resource string) string {
	return path.Join("/", global, resource)
}
