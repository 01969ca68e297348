package liveconfig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/svc"
)

// File is a configuration file that FollowFile follows.
type File struct {
	// Path is the file watched for changes.
	Path string
	// Read returns the configuration text; nil reads Path. (weft up
	// --demo derives the text it runs from the file at Path.)
	Read func() ([]byte, error)
	// Dir resolves relative paths of the configuration; empty: Path's
	// folder.
	Dir string
	// Running is the hash (Hash) of the text that runs now: the same text
	// again changes nothing.
	Running string
	// Reload asks for the file to be read again (SIGHUP).
	Reload <-chan os.Signal
	// Watch: a change of the file on disk is picked up without a signal.
	Watch bool
	// Timeout bounds each validation (default 10s).
	Timeout time.Duration
}

// settle is how long FollowFile waits after a change of the file for
// more: an editor saving writes, truncates or replaces it in several steps.
const settle = 200 * time.Millisecond

// FollowFile yields the configuration of f each time it is reloaded (on
// f.Reload, or a change of the file when f.Watch) and passes Check, until
// ctx is done. The file's folder is watched, not the file, so that a file
// replaced by a rename (as editors and Kubernetes' ConfigMap volumes do)
// is followed too. A text that cannot be read or parsed, or that Check
// rejects, is logged at ERROR and not yielded: the running configuration
// stays.
func FollowFile(ctx context.Context, env svc.Env, f File) (<-chan *config.Config, error) {
	abs, err := filepath.Abs(f.Path)
	if err != nil {
		return nil, fmt.Errorf("liveconfig: %w", err)
	}
	f.Path = abs
	if f.Read == nil {
		f.Read = func() ([]byte, error) { return os.ReadFile(abs) }
	}
	if f.Dir == "" {
		f.Dir = filepath.Dir(abs)
	}
	if f.Timeout == 0 {
		f.Timeout = 10 * time.Second
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	var fsw *fsnotify.Watcher
	if f.Watch {
		if fsw, err = fsnotify.NewWatcher(); err != nil {
			return nil, fmt.Errorf("liveconfig: watch %s: %w", abs, err)
		}
		if err := fsw.Add(filepath.Dir(abs)); err != nil {
			_ = fsw.Close()
			return nil, fmt.Errorf("liveconfig: watch %s: %w", filepath.Dir(abs), err)
		}
		events, errs = fsw.Events, fsw.Errors
	}
	out := make(chan *config.Config)
	go func() {
		defer close(out)
		if fsw != nil {
			defer fsw.Close()
		}
		timer := time.NewTimer(time.Hour)
		timer.Stop()
		defer timer.Stop()
		for {
			var why string
			select {
			case <-ctx.Done():
				return
			case sig := <-f.Reload:
				why = "signal " + sig.String()
			case ev, ok := <-events:
				if !ok {
					env.Log.Error("configuration file no longer watched; SIGHUP still reloads it", "path", abs)
					events, errs = nil, nil
					continue
				}
				if f.concerns(ev.Name) {
					timer.Reset(settle)
				}
				continue
			case err, ok := <-errs:
				if ok {
					env.Log.Warn("configuration file watch lost events; reading it again", "path", abs, "err", err)
					timer.Reset(settle)
				}
				continue
			case <-timer.C:
				why = "changed on disk"
			}
			cfg, ok := f.reload(ctx, env, why)
			if !ok {
				continue
			}
			select {
			case out <- cfg:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out, nil
}

// concerns reports whether a change of the watched folder's entry name
// can change the file: the file itself, or Kubernetes' "..data" symlink
// that a ConfigMap volume swaps.
func (f *File) concerns(name string) bool {
	base := filepath.Base(name)
	return base == filepath.Base(f.Path) || strings.HasPrefix(base, "..data")
}

// reload reads and checks the file; ok when its configuration is to run.
func (f *File) reload(ctx context.Context, env svc.Env, why string) (*config.Config, bool) {
	origin := "file " + f.Path + " (" + why + ")"
	data, err := f.Read()
	if errors.Is(err, os.ErrNotExist) && why == "changed on disk" {
		return nil, false // removed, or between an editor's steps: its return is an event too
	}
	if err != nil {
		env.Log.ErrorContext(ctx, "configuration not reloaded; the running one stays", "origin", origin, "err", err)
		return nil, false
	}
	text := string(data)
	if Hash(text) == f.Running {
		env.Log.InfoContext(ctx, "configuration unchanged", "origin", origin, "hash", f.Running)
		return nil, false
	}
	if _, err := Check(ctx, env, text, origin, f.Running, f.Timeout); err != nil {
		if !errors.Is(err, ErrRejected) { // a rejection is logged by Check
			env.Log.ErrorContext(ctx, "configuration not reloaded; the running one stays", "origin", origin, "err", err)
		}
		return nil, false
	}
	cfg, err := config.Parse(data, f.Dir)
	if err != nil { // Check parsed it already; a path relative to Dir can still differ
		env.Log.ErrorContext(ctx, "configuration not reloaded; the running one stays", "origin", origin, "err", err)
		return nil, false
	}
	f.Running = Hash(text)
	return cfg, true
}
