package confdir

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
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

// OutputFormats are the values output_format accepts.
var OutputFormats = []string{"json", "toml", "xml", "yaml", "yml"}

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

// Spec is one template resource as its conf.d file says.
type Spec struct {
	TargetSpec
	// File is the conf.d file the resource was read from.
	File string
	// Src is the template as the file names it; Template is its path
	// under the templates folder TemplateDir.
	Src         string
	Template    string
	TemplateDir string
	// Keys are the keys as written. Prefix is the effective prefix: the
	// global one and the resource's, joined, absolute and clean ("/" for
	// none).
	Keys   []string
	Prefix string
	// Debounce is how long the maintained confd waits after a change
	// before it renders (0: not set).
	Debounce time.Duration
	// Backend is the [backend] table of the maintained confd (a backend
	// for this resource alone) as written, nil when absent.
	Backend map[string]any
	// UnknownKeys are the keys of the file that mean nothing to confd,
	// which ignores them (a misspelt "check-cmd", say), as dotted TOML
	// keys.
	UnknownKeys []string

	selectors []string
}

// Selects reports whether the value named name (a full path such as
// "/myapp/database/url") is one the resource's template sees: it is
// prefix+key, or below it, for one of the resource's keys. Matching is by
// whole segments: the key "/app" selects "/app" and "/app/x", not
// "/apple". A resource with no keys selects nothing, as in confd.
func (s Spec) Selects(name string) bool {
	for _, sel := range s.selectors {
		if name == sel || strings.HasPrefix(name, sel) && (sel == "/" || name[len(sel)] == '/') {
			return true
		}
	}
	return false
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

// Load reads the template resources of the confdir dir with the global
// prefix (see the package documentation). It returns every Spec that
// loaded and, when some did not, an error joining one *ConfigError per bad
// file (each matches ErrConfig).
func Load(dir, prefix string) ([]Spec, error) {
	files, err := Files(dir)
	if err != nil {
		return nil, err
	}
	tmplDir := TemplateDir(dir)
	var (
		out  []Spec
		errs []error
	)
	for _, f := range files {
		s, err := LoadFile(f, tmplDir, prefix)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, s)
	}
	return out, errors.Join(errs...)
}

// Files lists the template resource files of the confdir dir, in the order
// Load reads them.
func Files(dir string) ([]string, error) {
	return resourceFiles(filepath.Join(dir, "conf.d"))
}

// TemplateDir is the folder of the confdir dir that holds the templates.
func TemplateDir(dir string) string { return filepath.Join(dir, "templates") }

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

// LoadFile reads one template resource file whose template lives under
// tmplDir, with the global prefix.
func LoadFile(file, tmplDir, prefix string) (Spec, error) {
	rf := resourceFile{Template: templateTable{Uid: -1, Gid: -1}}
	md, err := toml.DecodeFile(file, &rf)
	if err != nil {
		return Spec{}, tomlError(file, err)
	}
	t := rf.Template
	s := Spec{
		File:    file,
		Src:     t.Src,
		Keys:    t.Keys,
		Prefix:  joinPrefix(prefix, t.Prefix),
		Backend: rf.Backend,
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
		s.UnknownKeys = append(s.UnknownKeys, k.String())
	}
	if errs := s.fill(t); len(errs) > 0 {
		return Spec{}, errors.Join(errs...)
	}
	for _, k := range t.Keys {
		s.selectors = append(s.selectors, path.Join(s.Prefix, k))
	}
	// As confd: src is joined to the templates folder, whatever it holds.
	s.Template, s.TemplateDir = filepath.Join(tmplDir, t.Src), tmplDir
	if _, err := os.Stat(s.Template); err != nil {
		return Spec{}, &ConfigError{File: file, Field: "src", Err: fmt.Errorf("missing template %s: %w", s.Template, err)}
	}
	return s, nil
}

// fill checks the fields of t that need more than decoding and sets what
// they give on s; it returns one *ConfigError per bad field.
func (s *Spec) fill(t templateTable) []error {
	var errs []error
	bad := func(field string, err error) {
		errs = append(errs, &ConfigError{File: s.File, Field: field, Err: err})
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
			s.Mode, s.ModeSet = os.FileMode(m).Perm(), true
		}
	}
	if t.Uid < -1 {
		bad("uid", fmt.Errorf("must be 0 or more, got %d", t.Uid))
	}
	if t.Gid < -1 {
		bad("gid", fmt.Errorf("must be 0 or more, got %d", t.Gid))
	}
	if t.OutputFormat != "" && !slices.Contains(OutputFormats, t.OutputFormat) {
		bad("output_format", fmt.Errorf("unknown format %q (supported: %s)", t.OutputFormat, strings.Join(OutputFormats, ", ")))
	}
	for _, d := range []struct {
		field string
		in    string
		out   *time.Duration
	}{
		{"min_reload_interval", t.MinReloadInterval, &s.MinReloadInterval},
		{"debounce", t.Debounce, &s.Debounce},
		{"check_cmd_timeout", t.CheckCmdTimeout, &s.CheckCmdTimeout},
		{"reload_cmd_timeout", t.ReloadCmdTimeout, &s.ReloadCmdTimeout},
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
	return errs
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
