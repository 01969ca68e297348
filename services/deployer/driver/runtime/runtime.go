package runtime

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"time"
)

// Sentinel errors; every error returned by the package that falls in one of
// these classes wraps the sentinel.
var (
	// ErrBadPath: a bundle path is absolute, not clean, contains "..", is
	// reserved by the driver, is given twice, or is both a file and a
	// directory.
	ErrBadPath = errors.New("runtime: bad path")
	// ErrConfig: the Options are invalid, or the bundle lacks the main
	// configuration file.
	ErrConfig = errors.New("runtime: invalid options")
	// ErrConflict: something that is not a regular file (a directory, or
	// a file where the bundle needs a directory) is in the way of the
	// bundle's layout in Dir; nothing was changed.
	ErrConflict = errors.New("runtime: destination conflict")
	// ErrUnreachable: the master socket could not be used (HAProxy is not
	// running, or the path is wrong). Files may have been written; the
	// reload they need is recorded and done by the next Apply.
	ErrUnreachable = errors.New("runtime: haproxy master socket unreachable")
	// ErrReloadFailed: a reload was sent but HAProxy did not start a worker
	// on the new configuration within ReloadTimeout (it rejected the
	// configuration, or is too slow). The previous worker keeps serving; the
	// reload is recorded as pending and retried by the next Apply.
	ErrReloadFailed = errors.New("runtime: reload failed")
)

// Reload reasons, in Result.ReloadReason.
const (
	// ReasonInitial: the driver has no record of what it delivered (first
	// Apply in Dir) and the bundle differs from what is on disk.
	ReasonInitial = "initial"
	// ReasonPending: an earlier Apply changed files or runtime state and did
	// not finish (reload failed or interrupted, runtime commands cut short),
	// so what HAProxy runs is unknown.
	ReasonPending = "pending"
	// ReasonDrift: a file the driver delivered was changed or removed on
	// disk by someone else.
	ReasonDrift = "drift"
	// ReasonStructure: haproxy.cfg changed in a way the Runtime API cannot
	// apply (anything but the address, port, weight and state of existing
	// servers).
	ReasonStructure = "structure"
	// ReasonNewFile: a file that is not on disk yet, or a map or
	// certificate file that the running HAProxy has not loaded.
	ReasonNewFile = "new-file"
	// ReasonFileChanged: a changed file that HAProxy only reads when it
	// loads its configuration (error pages, ACL files, Lua, CA files ...).
	ReasonFileChanged = "file-changed"
	// ReasonRuntimeFailed: a Runtime API command was refused; the bundle
	// was delivered by a reload instead.
	ReasonRuntimeFailed = "runtime-failed"
	// ReasonRuntimeDisabled: Options.DisableRuntime is set, or no admin
	// socket is configured, and the bundle changed.
	ReasonRuntimeDisabled = "runtime-disabled"
	// ReasonRuntimeDrift: the files were as wanted but a running server
	// was not (changed through the Runtime API by someone else), and
	// HAProxy refused a command that would set it back.
	ReasonRuntimeDrift = "runtime-drift"
)

// Defaults for Options.
const (
	DefaultMain                         = "haproxy.cfg"
	DefaultMode           fs.FileMode   = 0o644
	DefaultKeyMode        fs.FileMode   = 0o600
	DefaultDirMode        fs.FileMode   = 0o755
	DefaultReloadTimeout  time.Duration = 30 * time.Second
	DefaultCommandTimeout time.Duration = 10 * time.Second
)

// File is one file of a bundle.
type File struct {
	// Path is relative to Dir and slash-separated, e.g. "maps/host.map".
	Path    string
	Content []byte
	// Secret marks key material (a certificate with its private key, any
	// file holding one): it is written with Options.KeyMode.
	Secret bool
}

// Options configure a Driver.
type Options struct {
	// Dir is the folder HAProxy reads haproxy.cfg, maps/, files/ and certs/
	// from, as this process sees it; required. Apply creates it (with
	// DirMode) when it is missing. A relative path is made absolute by New.
	Dir string
	// HAProxyDir is the same folder as HAProxy's configuration names it
	// (the bundle's base), when HAProxy sees the shared volume at another
	// path; default Dir. Map and certificate paths reported by HAProxy are
	// matched to bundle paths through it; a relative path reported by
	// HAProxy is taken as relative to it.
	HAProxyDir string
	// Main is the bundle path of the HAProxy configuration; default
	// "haproxy.cfg". Every bundle must contain it.
	Main string
	// MasterSocket is the unix socket of HAProxy's master CLI (-S);
	// required.
	MasterSocket string
	// AdminSocket is the unix socket of a worker's CLI at level admin
	// ("stats socket ... level admin"). Without it every change reloads.
	AdminSocket string
	// ReloadTimeout bounds a reload, from the command to the new worker
	// answering (default 30s).
	ReloadTimeout time.Duration
	// CommandTimeout bounds each exchange with a socket (default 10s).
	CommandTimeout time.Duration
	// Mode is the permission of delivered files (default 0644); DirMode
	// that of directories the driver creates (default 0755, must include
	// 0700).
	Mode    fs.FileMode
	DirMode fs.FileMode
	// KeyMode is the permission of the files marked Secret (default
	// 0600); it must not give others any access.
	KeyMode fs.FileMode
	// DisableRuntime makes every change a reload.
	DisableRuntime bool
}

// Result describes what Apply did. On error it still describes what was done
// before the error.
type Result struct {
	// Written are the bundle paths written (new or changed content), or
	// whose permission was set back to the one they are delivered with,
	// sorted.
	Written []string
	// Removed are the paths removed because they left the bundle, sorted.
	Removed []string
	// Unchanged counts the bundle files that were already as wanted.
	Unchanged int
	// Reloaded reports a reload that HAProxy completed.
	Reloaded bool
	// ReloadReason is one of the Reason constants when a reload was needed
	// (also when it failed), and ReloadDetail says what caused it.
	ReloadReason, ReloadDetail string
	// RuntimeOps are the Runtime API commands HAProxy accepted, in order,
	// with bundle-relative paths, e.g.
	// "set server be_app/SRV_1 addr 10.0.0.1 port 8080" or
	// "add map maps/host.map a.example.com be_b".
	RuntimeOps []string
	// RuntimeError is HAProxy's answer to the command it refused, when
	// ReloadReason is ReasonRuntimeFailed.
	RuntimeError string
	// Reloads is the master's reload counter ("show proc") after Apply,
	// -1 when it could not be read.
	Reloads int
}

// Driver delivers bundles to one HAProxy. It is safe for concurrent use;
// calls of Apply and Drift are serialized.
type Driver struct {
	opts   Options
	master sockClient
	admin  sockClient
	sem    chan struct{}
	hashes hashMemo
	disk   diskMemo
	lines  lineFacts
}

// New validates opts, fills in the defaults and returns a Driver.
func New(opts Options) (*Driver, error) {
	if strings.TrimSpace(opts.Dir) == "" {
		return nil, fmt.Errorf("%w: Dir is required", ErrConfig)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("%w: Dir %q: %w", ErrConfig, opts.Dir, err)
	}
	opts.Dir = dir
	if opts.HAProxyDir == "" {
		opts.HAProxyDir = dir
	}
	if !filepath.IsAbs(opts.HAProxyDir) {
		return nil, fmt.Errorf("%w: HAProxyDir %q is not absolute", ErrConfig, opts.HAProxyDir)
	}
	opts.HAProxyDir = filepath.Clean(opts.HAProxyDir)
	if opts.Main == "" {
		opts.Main = DefaultMain
	}
	if err := checkPath(opts.Main); err != nil {
		return nil, fmt.Errorf("%w: Main: %w", ErrConfig, err)
	}
	if strings.TrimSpace(opts.MasterSocket) == "" {
		return nil, fmt.Errorf("%w: MasterSocket is required", ErrConfig)
	}
	if opts.ReloadTimeout == 0 {
		opts.ReloadTimeout = DefaultReloadTimeout
	}
	if opts.CommandTimeout == 0 {
		opts.CommandTimeout = DefaultCommandTimeout
	}
	if opts.ReloadTimeout < 0 || opts.CommandTimeout < 0 {
		return nil, fmt.Errorf("%w: negative timeout", ErrConfig)
	}
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
	return &Driver{
		opts:   opts,
		master: sockClient{path: opts.MasterSocket, timeout: opts.CommandTimeout},
		admin:  sockClient{path: opts.AdminSocket, timeout: opts.CommandTimeout},
		sem:    make(chan struct{}, 1),
	}, nil
}

// Options returns the options in effect, defaults filled in.
func (d *Driver) Options() Options { return d.opts }

// modeOf is the permission f is written with.
func (d *Driver) modeOf(f File) fs.FileMode {
	if f.Secret {
		return d.opts.KeyMode
	}
	return d.opts.Mode
}

// runtimeEnabled reports whether changes may go through the Runtime API.
func (d *Driver) runtimeEnabled() bool {
	return !d.opts.DisableRuntime && d.opts.AdminSocket != ""
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
