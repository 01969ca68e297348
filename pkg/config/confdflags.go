package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
	"sigs.k8s.io/yaml"
)

// ConfdSettings are confd's settings (`weft confd`), with confd's names
// and meanings: they come from the command line (confd's flags), then
// CONFD_* environment variables (the flag's name in upper case, '-' made
// '_': CONFD_BACKEND, CONFD_NODE as a comma-separated list,
// CONFD_CLIENT_CAKEYS for -client-ca-keys), then confd's TOML file
// (-config-file, default /etc/confd/confd.toml; skipped when it does not
// exist, as confd does), then confd's
// defaults. Weft turns them into a configuration (Weft): one value source
// for the backend and one confd target for the confdir.
type ConfdSettings struct {
	Backend       string     `toml:"backend"`
	ConfDir       string     `toml:"confdir"`
	Interval      int        `toml:"interval"`
	Watch         bool       `toml:"watch"`
	Noop          bool       `toml:"noop"`
	SyncOnly      bool       `toml:"sync-only"`
	KeepStageFile bool       `toml:"keep-stage-file"`
	Prefix        string     `toml:"prefix"`
	Nodes         stringList `toml:"nodes"`
	Scheme        string     `toml:"scheme"`
	ClientCert    string     `toml:"client_cert"`
	ClientKey     string     `toml:"client_key"`
	ClientCaKeys  string     `toml:"client_cakeys"`
	Username      string     `toml:"username"`
	Password      string     `toml:"password"`
	Table         string     `toml:"table"`
	Separator     string     `toml:"separator"`
	File          stringList `toml:"file"`
	LogLevel      string     `toml:"log-level"`
	// BatchInterval: a resource renders this many seconds after the first
	// change of its keys, with every change of those seconds, so that a
	// burst renders each resource it touches once (0: at each change).
	BatchInterval int `toml:"batch-interval"`

	// OneTime and ConfigFile come from the command line or the
	// environment only.
	OneTime    bool   `toml:"-"`
	ConfigFile string `toml:"-"`
}

// DefaultConfdFile is confd's configuration file, read when it exists and
// -config-file names no other.
const DefaultConfdFile = "/etc/confd/confd.toml"

// confdDefaults are confd's defaults.
func confdDefaults() ConfdSettings {
	return ConfdSettings{Backend: "etcd", ConfDir: "/etc/confd", Interval: 600, Scheme: "http"}
}

// ConfdBackend is how weft reads one of confd's backends: the value source
// type, and confd's default node when none is given.
type ConfdBackend struct {
	Source      string
	DefaultNode string
}

// ConfdBackends maps confd's -backend names to weft's value sources. Every
// backend name weft knows is here, and only here.
var ConfdBackends = map[string]ConfdBackend{
	"env":    {Source: SourceEnv},
	"file":   {Source: SourceFile},
	"etcd":   {Source: SourceEtcd, DefaultNode: "http://127.0.0.1:2379"}, // etcd's v3 API, as etcdv3
	"etcdv3": {Source: SourceEtcd, DefaultNode: "127.0.0.1:2379"},
	"redis":  {Source: SourceRedis, DefaultNode: "127.0.0.1:6379"},
	// weft's own: a NATS KV bucket named by -table.
	"natskv": {Source: SourceNATSKV},
	// Read by the consul and zookeeper sources of package kv.
	"consul":    {Source: SourceConsul, DefaultNode: "127.0.0.1:8500"},
	"zookeeper": {Source: SourceZookeeper, DefaultNode: "127.0.0.1:2181"},
}

// ConfdPasswordEnv is the variable the value source reads the password
// from (Source.PasswordEnv); a password given by flag or file is put there.
const ConfdPasswordEnv = "CONFD_PASSWORD"

// ParseConfd reads confd's settings from args, the environment (getenv)
// and confd's file, in confd's order of precedence. Usage goes to usage.
func ParseConfd(args []string, getenv func(string) string, usage io.Writer) (ConfdSettings, error) {
	s := confdDefaults()
	fs := confdFlagSet(&s, usage)
	// The command line is read first, for -config-file and to know what
	// it sets; its values are applied last, over file and environment.
	given := map[string][]string{}
	rec := flag.NewFlagSet(fs.Name(), flag.ContinueOnError)
	rec.SetOutput(io.Discard)
	fs.VisitAll(func(f *flag.Flag) {
		rec.Var(&recorder{name: f.Name, into: given, boolean: isBool(f)}, f.Name, f.Usage)
	})
	if err := rec.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(usage)
			fs.Usage()
		}
		return s, err
	}
	if rec.NArg() > 0 {
		return s, fmt.Errorf("unexpected arguments %q", rec.Args())
	}
	file := DefaultConfdFile
	if v := getenv("CONFD_CONFIG_FILE"); v != "" {
		file = v
	}
	if v, ok := given["config-file"]; ok {
		file = v[len(v)-1]
	}
	if err := s.readFile(file); err != nil {
		return s, err
	}
	s.ConfigFile = file
	for _, name := range sortedFlags(fs) {
		env := "CONFD_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if name == "client-ca-keys" {
			env = "CONFD_CLIENT_CAKEYS" // confd's own name
		}
		v := getenv(env)
		if v == "" || name == "config-file" {
			continue
		}
		if name == "node" || name == "file" {
			resetList(&s, name)
			for _, item := range strings.Split(v, ",") {
				if err := fs.Set(name, strings.TrimSpace(item)); err != nil {
					return s, fmt.Errorf("%s=%q: %w", env, v, err)
				}
			}
			continue
		}
		if err := fs.Set(name, v); err != nil {
			return s, fmt.Errorf("%s=%q: %w", env, v, err)
		}
	}
	for _, name := range sortedKeys(given) {
		if name == "node" || name == "file" {
			resetList(&s, name)
		}
		for _, v := range given[name] {
			if err := fs.Set(name, v); err != nil {
				return s, fmt.Errorf("-%s %q: %w", name, v, err)
			}
		}
	}
	return s, s.check()
}

func confdFlagSet(s *ConfdSettings, usage io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("weft confd", flag.ContinueOnError)
	fs.SetOutput(usage)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), "usage: weft confd [flags]\n\n"+
			"Keep the files of a confd confdir (conf.d/*.toml, templates/) up to date from a\n"+
			"backend, with confd's flags and meanings: flags over CONFD_* variables over\n"+
			"-config-file (TOML) over confd's defaults. -onetime makes one pass and exits\n"+
			"non-zero when a resource failed. Under systemd (Type=notify) it says READY=1\n"+
			"once every resource is delivered.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&s.Backend, "backend", s.Backend, "backend to use: "+strings.Join(sortedKeys(ConfdBackends), ", "))
	fs.StringVar(&s.ConfDir, "confdir", s.ConfDir, "confd conf directory (conf.d/*.toml and templates/)")
	fs.StringVar(&s.ConfigFile, "config-file", DefaultConfdFile, "the confd config file (TOML)")
	fs.IntVar(&s.Interval, "interval", s.Interval, "seconds between full reads of the backend (with -watch: the safety net against a missed change)")
	fs.BoolVar(&s.Watch, "watch", s.Watch, "follow the backend's changes as they happen (without it: read it every -interval)")
	fs.IntVar(&s.BatchInterval, "batch-interval", s.BatchInterval, "render a resource this many seconds after the first change of its keys, with every change meanwhile (0: at each change)")
	fs.BoolVar(&s.OneTime, "onetime", false, "run once and exit: render every resource, run check and reload commands, exit non-zero on any failure")
	fs.BoolVar(&s.Noop, "noop", s.Noop, "only show pending changes: the diff of each resource, nothing written, no command run")
	fs.BoolVar(&s.SyncOnly, "sync-only", s.SyncOnly, "sync without check_cmd and reload_cmd")
	fs.BoolVar(&s.KeepStageFile, "keep-stage-file", s.KeepStageFile, "keep each resource's staged file beside its dest, as .<name>.weft-stage")
	fs.StringVar(&s.Prefix, "prefix", s.Prefix, "key path prefix")
	fs.Func("node", "backend node (repeat for several)", func(v string) error { s.Nodes = append(s.Nodes, v); return nil })
	fs.StringVar(&s.Scheme, "scheme", s.Scheme, "the backend URI scheme of nodes given without one (http or https)")
	fs.StringVar(&s.ClientCert, "client-cert", s.ClientCert, "the client cert")
	fs.StringVar(&s.ClientKey, "client-key", s.ClientKey, "the client key")
	fs.StringVar(&s.ClientCaKeys, "client-ca-keys", s.ClientCaKeys, "client ca keys")
	fs.StringVar(&s.Username, "username", s.Username, "the username to authenticate as")
	fs.StringVar(&s.Password, "password", s.Password, "the password to authenticate with")
	fs.StringVar(&s.Table, "table", s.Table, "the NATS KV bucket (with -backend natskv)")
	fs.StringVar(&s.Separator, "separator", s.Separator, "the separator to replace '/' with in keys (with -backend redis)")
	fs.Func("file", "the YAML file of values (with -backend file; repeat for several)", func(v string) error { s.File = append(s.File, v); return nil })
	fs.StringVar(&s.LogLevel, "log-level", s.LogLevel, "debug, info, warn or error")
	return fs
}

// readFile decodes confd's TOML file over s; a file that is not there is
// skipped, as confd does (named or not). Unknown keys are refused.
func (s *ConfdSettings) readFile(file string) error {
	data, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("confd config file: %w", err)
	}
	md, err := toml.Decode(string(data), s)
	if err != nil {
		return fmt.Errorf("confd config file %s: %w", file, err)
	}
	if un := md.Undecoded(); len(un) > 0 {
		keys := make([]string, len(un))
		for i, k := range un {
			keys[i] = k.String()
		}
		return fmt.Errorf("confd config file %s: unknown keys %s", file, strings.Join(keys, ", "))
	}
	return nil
}

// check reports settings weft cannot carry out, naming them.
func (s ConfdSettings) check() error {
	var errs []error
	b, ok := ConfdBackends[s.Backend]
	if !ok {
		errs = append(errs, fmt.Errorf("-backend %q is not one weft reads (known: %s)", s.Backend, strings.Join(sortedKeys(ConfdBackends), ", ")))
	}
	if s.Interval <= 0 {
		errs = append(errs, fmt.Errorf("-interval %d: must be a positive number of seconds", s.Interval))
	}
	if s.BatchInterval < 0 {
		errs = append(errs, fmt.Errorf("-batch-interval %d: must not be negative", s.BatchInterval))
	}
	if s.Scheme != "http" && s.Scheme != "https" {
		errs = append(errs, fmt.Errorf("-scheme %q: must be http or https", s.Scheme))
	}
	if s.ClientCert != "" || s.ClientKey != "" || s.ClientCaKeys != "" {
		errs = append(errs, fmt.Errorf("-client-cert, -client-key, -client-ca-keys: weft's %s source has no client TLS settings", b.Source))
	}
	if s.Separator != "" {
		errs = append(errs, errors.New("-separator: weft's redis source reads keys as paths, with '/'"))
	}
	switch b.Source {
	case SourceFile:
		if len(s.File) == 0 {
			errs = append(errs, errors.New("-backend file needs -file"))
		}
	case SourceNATSKV:
		if s.Table == "" {
			errs = append(errs, errors.New("-backend natskv needs -table, the bucket"))
		}
	case SourceRedis:
		if len(s.nodes(b)) > 1 {
			errs = append(errs, fmt.Errorf("-node: weft's redis source reads one node, got %q", s.Nodes))
		}
	case SourceConsul:
		if len(s.nodes(b)) > 1 {
			errs = append(errs, fmt.Errorf("-node: weft's consul source reads one agent, got %q", s.Nodes))
		}
		if s.Username != "" || s.Password != "" {
			errs = append(errs, errors.New("-username, -password: weft's consul source authenticates with an ACL token, not basic auth: give the token in CONSUL_HTTP_TOKEN, or its file in CONSUL_HTTP_TOKEN_FILE, as for consul's own tools"))
		}
	}
	if lvl := s.LogLevel; lvl != "" && slogLevel(lvl) == "" {
		errs = append(errs, fmt.Errorf("-log-level %q: want debug, info, warn or error", lvl))
	}
	return errors.Join(errs...)
}

// nodes are the backend's nodes: the given ones, else confd's default.
func (s ConfdSettings) nodes(b ConfdBackend) []string {
	if len(s.Nodes) > 0 {
		return s.Nodes
	}
	if b.DefaultNode != "" {
		return []string{b.DefaultNode}
	}
	return nil
}

// SlogLevel is -log-level as weft's log levels name it (info when unset).
func (s ConfdSettings) SlogLevel() string {
	if s.LogLevel == "" {
		return "info"
	}
	return slogLevel(s.LogLevel)
}

func slogLevel(confd string) string {
	switch strings.ToLower(confd) {
	case "debug":
		return "debug"
	case "info":
		return "info"
	case "warn", "warning":
		return "warn"
	case "error", "fatal", "panic":
		return "error"
	}
	return ""
}

// ConfdTarget names the confd target of Weft's configuration; each
// resource of the confdir is the target "confd-<file>".
const ConfdTarget = "confd"

// Weft returns the weft.yaml text of the settings: one value source named
// after the backend (several for several -file), no prefix, read in full
// every -interval and, with -watch only, following changes in between;
// and the confd target of -confdir with -prefix, its resources rendered
// -batch-interval after the first change, with -sync-only without
// check_cmd and reload_cmd, with -keep-stage-file keeping their staged
// files.
func (s ConfdSettings) Weft() ([]byte, error) {
	b := ConfdBackends[s.Backend]
	rescan := (time.Duration(s.Interval) * time.Second).String()
	read := map[string]any{"name": s.Backend, "type": b.Source, "rescan": rescan}
	if !s.Watch {
		read["poll"] = true
	}
	src := maps.Clone(read)
	if s.Username != "" {
		src["username"] = s.Username
	}
	if s.Password != "" {
		src["password_env"] = ConfdPasswordEnv
	}
	nodes := s.nodes(b)
	var sources []map[string]any
	switch b.Source {
	case SourceFile:
		for i, f := range s.File {
			one := maps.Clone(read)
			one["path"] = f
			if len(s.File) > 1 {
				one["name"] = s.Backend + "-" + strconv.Itoa(i+1)
			}
			sources = append(sources, one)
		}
	case SourceEtcd:
		eps := make([]string, len(nodes))
		for i, n := range nodes {
			if !strings.Contains(n, "://") {
				n = s.Scheme + "://" + n
			}
			eps[i] = n
		}
		src["endpoints"] = eps
		sources = []map[string]any{src}
	case SourceRedis:
		addr, db, _ := strings.Cut(nodes[0], "/")
		src["address"] = addr
		if db != "" {
			n, err := strconv.Atoi(db)
			if err != nil {
				return nil, fmt.Errorf("-node %q: the database after / must be a number", nodes[0])
			}
			src["database"] = n
		}
		sources = []map[string]any{src}
	case SourceNATSKV:
		src["bucket"] = s.Table
		if len(nodes) > 0 {
			src["address"] = nodes[0]
		}
		sources = []map[string]any{src}
	case SourceConsul:
		addr := nodes[0]
		if s.Scheme == "https" && !strings.Contains(addr, "://") {
			addr = "https://" + addr
		}
		src["address"] = addr
		sources = []map[string]any{src}
	case SourceEnv:
		sources = []map[string]any{src}
	default:
		src["endpoints"] = nodes
		sources = []map[string]any{src}
	}
	confdir, err := filepath.Abs(s.ConfDir)
	if err != nil {
		return nil, err
	}
	target := map[string]any{"confd": map[string]any{"dir": confdir, "prefix": s.Prefix}}
	if s.BatchInterval > 0 {
		d := (time.Duration(s.BatchInterval) * time.Second).String()
		target["render"] = map[string]any{"debounce": d, "leading": false, "max_wait": d}
	}
	if s.SyncOnly {
		target["confd"].(map[string]any)["sync_only"] = true
	}
	if s.KeepStageFile {
		target["confd"].(map[string]any)["keep_stage_file"] = true
	}
	return yaml.Marshal(map[string]any{"sources": sources, "targets": map[string]any{ConfdTarget: target}})
}

// stringList is a TOML list of strings, or one string.
type stringList []string

func (l *stringList) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case string:
		*l = stringList{v}
	case []any:
		out := make(stringList, 0, len(v))
		for _, item := range v {
			s, ok := item.(string)
			if !ok {
				return fmt.Errorf("want strings, got %v", item)
			}
			out = append(out, s)
		}
		*l = out
	default:
		return fmt.Errorf("want a string or a list of strings, got %v", v)
	}
	return nil
}

// recorder records a flag's values in the order given.
type recorder struct {
	name    string
	into    map[string][]string
	boolean bool
}

func (r *recorder) String() string { return "" }
func (r *recorder) Set(v string) error {
	r.into[r.name] = append(r.into[r.name], v)
	return nil
}
func (r *recorder) IsBoolFlag() bool { return r.boolean }

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func sortedFlags(fs *flag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f.Name) })
	slices.Sort(out)
	return out
}

// resetList empties a list setting before a higher layer gives it.
func resetList(s *ConfdSettings, name string) {
	if name == "node" {
		s.Nodes = nil
	} else {
		s.File = nil
	}
}
