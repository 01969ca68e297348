package confd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/weftio/weft/pkg/config/confdir"
)

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

// DefaultMode is the mode confd gives a new file when the resource sets
// none (an existing file keeps its mode).
const DefaultMode = confdir.DefaultMode

// TargetSpec is what deploying a resource's output takes (see
// confdir.TargetSpec).
type TargetSpec = confdir.TargetSpec

// Resource is one template resource: a conf.d file (its confdir.Spec) and
// its parsed template. Copies share the parsed template and are safe to
// render concurrently.
type Resource struct {
	confdir.Spec

	tmpl   *template.Template
	static template.FuncMap
	set    *settings
}

// Target returns the deploy side of the resource.
func (r Resource) Target() TargetSpec { return r.TargetSpec }

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
	inc := &includer{dir: r.TemplateDir, static: r.static}
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

// LoadConfdir reads the template resources of a confd confdir: every file
// whose name ends in "toml" under <dir>/conf.d (recursively, in lexical
// order, following symbolic links to files), each with its template under
// <dir>/templates parsed. It returns every resource that loaded and, when
// some did not, an error joining one *ConfigError per bad file (each
// matches ErrConfig), as confd goes on with the good ones. A missing
// conf.d is an error.
func LoadConfdir(dir string, opts ...Option) ([]Resource, error) {
	set := newSettings(opts)
	files, err := confdir.Files(dir)
	if err != nil {
		return nil, err
	}
	var (
		out  []Resource
		errs []error
	)
	for _, f := range files {
		spec, err := confdir.LoadFile(f, confdir.TemplateDir(dir), set.prefix)
		if err == nil {
			var r Resource
			if r, err = set.compile(spec); err == nil {
				out = append(out, r)
				continue
			}
		}
		errs = append(errs, err)
	}
	return out, errors.Join(errs...)
}

// Compile parses the template of one resource read by confdir (whose
// prefix already holds the global one: WithPrefix is ignored here). A
// template that cannot be read or parsed is a *ConfigError on src.
func Compile(spec confdir.Spec, opts ...Option) (Resource, error) {
	return newSettings(opts).compile(spec)
}

func newSettings(opts []Option) *settings {
	set := &settings{
		resolver: net.DefaultResolver,
		getenv:   os.Getenv,
		now:      time.Now,
		hostname: os.Hostname,
	}
	for _, o := range opts {
		o(set)
	}
	return set
}

// compile parses spec's template with every function name defined; each
// render lays its own store, DNS and include functions over these.
func (set *settings) compile(spec confdir.Spec) (Resource, error) {
	static := staticFuncs(set)
	proto := template.FuncMap{}
	for k, v := range boundFuncs(context.Background(), NewStore(), set.resolver, &includer{}) {
		proto[k] = v
	}
	fail := func(err error) (Resource, error) {
		return Resource{}, &ConfigError{File: spec.File, Field: "src", Err: err}
	}
	content, err := os.ReadFile(spec.Template)
	if err != nil {
		return fail(fmt.Errorf("missing template %s: %w", spec.Template, err))
	}
	tmpl, err := template.New(filepath.Base(spec.Template)).Funcs(static).Funcs(proto).Parse(string(content))
	if err != nil {
		return fail(newTemplateError(spec.Template, err))
	}
	return Resource{Spec: spec, tmpl: tmpl, static: static, set: set}, nil
}
