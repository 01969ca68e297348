package files

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/weftio/weft/pkg/svc/pause"
)

// Sentinel errors; every error returned by the package that falls in one of
// these classes wraps the sentinel.
var (
	// ErrBadPath: a bundle path is absolute, not clean, contains "..", is
	// reserved by the driver, is given twice, or is both a file and a
	// directory.
	ErrBadPath = errors.New("files: bad path")
	// ErrConfig: the Options (or the bundle's relation to them, such as a
	// Main file missing from the bundle) are invalid.
	ErrConfig = errors.New("files: invalid options")
	// ErrCheckFailed: the check command rejected the staged bundle, or could
	// not be run; Dest was not touched.
	ErrCheckFailed = errors.New("files: check_cmd failed")
	// ErrReloadFailed: the files were installed but the reload command
	// failed, or was not run because the context ended while waiting for
	// the minimum reload interval.
	ErrReloadFailed = errors.New("files: reload_cmd failed")
	// ErrConflict: something in Dest that the driver does not own is in the
	// way of the bundle's layout (a directory where a file goes, or a file
	// where a directory goes); Dest was not touched.
	ErrConflict = errors.New("files: destination conflict")
)

// Defaults for Options.
const (
	DefaultMode       fs.FileMode   = 0o644
	DefaultKeyMode    fs.FileMode   = 0o600
	DefaultDirMode    fs.FileMode   = 0o755
	DefaultCmdTimeout time.Duration = 30 * time.Second
)

// File is one file of a bundle.
type File struct {
	// Path is relative to Dest and slash-separated, e.g. "maps/hosts.map".
	Path    string
	Content []byte
	// Secret marks key material (a certificate with its private key, any
	// file holding one): it is delivered with Options.KeyMode.
	Secret bool
}

// Options configure a Driver.
type Options struct {
	// Dest is the folder the bundle is delivered into; required. Apply
	// creates it (with DirMode) when it is missing. A relative path is made
	// absolute by New.
	Dest string
	// Owner and Group are names or numeric ids given to every delivered file
	// and every directory the driver creates; empty leaves them as is.
	Owner, Group string
	// Mode is the permission of delivered files (default 0644); DirMode that
	// of directories the driver creates (default 0755, must include 0700).
	// Only permission bits are allowed.
	Mode    fs.FileMode
	DirMode fs.FileMode
	// KeepMode: a file already in Dest keeps its permission bits when new
	// content replaces it, and only a new file gets Mode (confd's way with
	// a resource that sets no mode). Files marked Secret always get KeyMode.
	KeepMode bool
	// KeyMode is the permission of the files marked Secret (default
	// 0600); it must not give others any access.
	KeyMode fs.FileMode
	// CheckCmd validates the staged bundle before anything is installed. It
	// is a text/template: {{.src}} is the staged Main file and {{.dir}} the
	// staging directory, both absolute.
	CheckCmd string
	// ReloadCmd runs after files changed.
	ReloadCmd string
	// MinReloadInterval is the least time between the end of a successful
	// reload and the start of the next one; Apply waits out the remainder.
	MinReloadInterval time.Duration
	// CmdTimeout bounds each command (default 30s).
	CmdTimeout time.Duration
	// Main is the bundle path given to CheckCmd as {{.src}}; default: the
	// first file of the bundle passed to Apply.
	Main string
	// KeepStaged (confd's -keep-stage-file) leaves, after each delivery
	// that staged files, a copy of each staged file that was to be
	// installed beside its place in Dest, named KeptName(path), whether
	// CheckCmd passed or refused it (a refused file's copy is written
	// only where its folder already exists). A copy has the file's mode
	// and owner and replaces the previous one; the driver never removes
	// copies, and writing one is best effort.
	KeepStaged bool
	// Name, when set, names the driver's manifest (".weft-manifest-<Name>.json")
	// and staging entries (".weft-stage-<Name>.*") in Dest, so that several
	// drivers with different names can deliver different files into one
	// Dest. Letters, digits, '-' and '_' only.
	Name string
}

// Result describes what Apply did. On error it still describes what was done
// before the error.
type Result struct {
	// Written are the paths installed (new content, mode or owner), sorted.
	Written []string
	// Removed are the paths removed because they left the bundle, sorted.
	Removed []string
	// Unchanged counts the bundle files that were already as wanted.
	Unchanged int
	// Reloaded reports a successful run of ReloadCmd.
	Reloaded bool
	// CheckOutput and ReloadOutput are the commands' combined output,
	// trimmed to a sane size.
	CheckOutput, ReloadOutput string
}

// Driver delivers bundles into one destination folder. It is safe for
// concurrent use; calls are serialized.
type Driver struct {
	opts     Options
	names    names
	uid, gid int // -1: leave as is
	check    *template.Template

	// sem serializes Apply and Drift; it guards the fields below.
	sem        chan struct{}
	lastReload time.Time
	// waitFor blocks for d or until ctx ends; tests replace it to control
	// the minimum reload interval.
	waitFor func(ctx context.Context, d time.Duration) error
	// afterInstall, when tests set it, runs once the changed files are in
	// place, before anything else is recorded: where a process killed
	// mid-deploy leaves Dest at its most changed.
	afterInstall func()
}

// New validates opts, fills in the defaults and returns a Driver.
func New(opts Options) (*Driver, error) {
	if strings.TrimSpace(opts.Dest) == "" {
		return nil, fmt.Errorf("%w: Dest is required", ErrConfig)
	}
	dest, err := filepath.Abs(opts.Dest)
	if err != nil {
		return nil, fmt.Errorf("%w: Dest %q: %w", ErrConfig, opts.Dest, err)
	}
	opts.Dest = dest

	if opts.Mode == 0 {
		opts.Mode = DefaultMode
	}
	if opts.Mode&^fs.ModePerm != 0 {
		return nil, fmt.Errorf("%w: Mode %v: only permission bits are allowed", ErrConfig, opts.Mode)
	}
	if opts.KeyMode == 0 {
		opts.KeyMode = DefaultKeyMode
	}
	if opts.KeyMode&^fs.ModePerm != 0 || opts.KeyMode&0o007 != 0 {
		return nil, fmt.Errorf("%w: KeyMode %v: only permission bits are allowed, and key material must not be world-readable", ErrConfig, opts.KeyMode)
	}
	if opts.DirMode == 0 {
		opts.DirMode = DefaultDirMode
	}
	if opts.DirMode&^fs.ModePerm != 0 || opts.DirMode&0o700 != 0o700 {
		return nil, fmt.Errorf("%w: DirMode %v: only permission bits are allowed, and the owner needs rwx", ErrConfig, opts.DirMode)
	}
	if opts.MinReloadInterval < 0 {
		return nil, fmt.Errorf("%w: MinReloadInterval %s is negative", ErrConfig, opts.MinReloadInterval)
	}
	if opts.CmdTimeout == 0 {
		opts.CmdTimeout = DefaultCmdTimeout
	}
	if opts.CmdTimeout < 0 {
		return nil, fmt.Errorf("%w: CmdTimeout %s is negative", ErrConfig, opts.CmdTimeout)
	}
	if opts.Main != "" {
		if err := checkPath(opts.Main); err != nil {
			return nil, fmt.Errorf("%w: Main: %w", ErrConfig, err)
		}
	}

	n, err := newNames(opts.Name)
	if err != nil {
		return nil, err
	}
	d := &Driver{opts: opts, names: n, sem: make(chan struct{}, 1), waitFor: pause.For}
	if d.uid, err = resolveID("owner", opts.Owner); err != nil {
		return nil, err
	}
	if d.gid, err = resolveID("group", opts.Group); err != nil {
		return nil, err
	}

	d.opts.CheckCmd = strings.TrimSpace(opts.CheckCmd)
	d.opts.ReloadCmd = strings.TrimSpace(opts.ReloadCmd)
	if d.opts.CheckCmd != "" {
		t, err := template.New("check_cmd").Option("missingkey=error").Parse(d.opts.CheckCmd)
		if err != nil {
			return nil, fmt.Errorf("%w: CheckCmd: %w", ErrConfig, err)
		}
		if err := t.Execute(&strings.Builder{}, checkVars("/src", "/dir")); err != nil {
			return nil, fmt.Errorf("%w: CheckCmd: %w", ErrConfig, err)
		}
		d.check = t
	}
	return d, nil
}

// Options returns the options in effect, defaults filled in.
func (d *Driver) Options() Options { return d.opts }

// modeOf is the permission f is delivered with.
func (d *Driver) modeOf(f File) fs.FileMode {
	if f.Secret {
		return d.opts.KeyMode
	}
	return d.opts.Mode
}

// kept is the permission of the file at f.Path in root when KeepMode keeps
// it, and false when f gets modeOf(f).
func (d *Driver) kept(root *os.Root, f File) (fs.FileMode, bool) {
	if !d.opts.KeepMode || f.Secret {
		return 0, false
	}
	fi, err := root.Lstat(f.Path)
	if err != nil || !fi.Mode().IsRegular() {
		return 0, false
	}
	return fi.Mode().Perm(), true
}

func checkVars(src, dir string) map[string]string {
	return map[string]string{"src": shellQuote(src), "dir": shellQuote(dir)}
}

func (d *Driver) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case d.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *Driver) unlock() { <-d.sem }
