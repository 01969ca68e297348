package deployer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/services/deployer/driver/dataplane"
	"github.com/weftio/weft/services/deployer/driver/files"
	"github.com/weftio/weft/services/deployer/driver/runtime"
)

// Outcome is what a driver did with a bundle.
type Outcome struct {
	Written, Removed []string
	Reloaded         bool
	ReloadReason     string
	RuntimeOps       []string
	Detail           string // command output, reload detail: for the log
}

// Applier delivers a bundle to one instance. Its errors are classified by
// refused: a refusal (the instance's check failed, a reload was rejected)
// is an outcome, recorded and not retried; anything else is retried.
type Applier interface {
	Apply(ctx context.Context, b msg.Bundle) (Outcome, error)
	Refused(err error) bool
}

// newApplier builds the driver of a target's deploy section; main is the
// bundle path of the target's main file (the files driver's {{.src}}).
func newApplier(target, main string, d config.Deploy) (Applier, error) {
	if d.Driver == config.DriverDataplane {
		return newDataplaneApplier(target, d)
	}
	mode, err := d.FileMode()
	if err != nil {
		return nil, fmt.Errorf("deployer: target %s: %w", target, err)
	}
	// Both drivers create dest when they deliver, and a dest that cannot
	// be made is then a failed deploy, reported and retried.
	switch d.Driver {
	case config.DriverFiles:
		drv, err := files.New(files.Options{
			Dest: d.Dest, Owner: d.Owner, Group: d.Group, Mode: mode, KeyMode: keyMode(mode), KeepMode: d.KeepMode,
			KeepStaged: d.KeepStaged,
			CheckCmd:   d.CheckCmd, ReloadCmd: d.ReloadCmd, MinReloadInterval: d.MinReloadInterval.D(),
			CmdTimeout: d.CmdTimeout.D(), Main: main, Name: d.Name,
		})
		if err != nil {
			return nil, fmt.Errorf("deployer: target %s: %w", target, err)
		}
		return filesApplier{drv}, nil
	case config.DriverRuntime:
		drv, err := runtime.New(runtime.Options{
			Dir: d.Dest, HAProxyDir: d.HAProxyDir, MasterSocket: d.MasterSocket, AdminSocket: d.AdminSocket, Mode: mode, KeyMode: keyMode(mode),
		})
		if err != nil {
			return nil, fmt.Errorf("deployer: target %s: %w", target, err)
		}
		return runtimeApplier{drv}, nil
	}
	return nil, fmt.Errorf("deployer: target %s: unknown driver %q", target, d.Driver)
}

// keyMode is the permission of key material for a configured mode: the
// mode when it gives others nothing, else (or when unset) the drivers'
// default, 0600. Key material is never world-readable.
func keyMode(mode os.FileMode) os.FileMode {
	if mode&0o007 != 0 {
		return 0
	}
	return mode
}

type filesApplier struct{ d *files.Driver }

func (a filesApplier) Apply(ctx context.Context, b msg.Bundle) (Outcome, error) {
	fs := make([]files.File, len(b.Files))
	for i, f := range b.Files {
		fs[i] = files.File{Path: f.Path, Content: f.Content, Secret: f.Secret()}
	}
	res, err := a.d.Apply(ctx, fs)
	o := Outcome{Written: res.Written, Removed: res.Removed, Reloaded: res.Reloaded, Detail: res.CheckOutput + res.ReloadOutput}
	if res.Reloaded {
		o.ReloadReason = "files-changed"
	}
	return o, err
}

func (filesApplier) Refused(err error) bool {
	return errors.Is(err, files.ErrCheckFailed) || errors.Is(err, files.ErrReloadFailed) ||
		errors.Is(err, files.ErrConflict) || errors.Is(err, files.ErrBadPath)
}

type runtimeApplier struct{ d *runtime.Driver }

func (a runtimeApplier) Apply(ctx context.Context, b msg.Bundle) (Outcome, error) {
	fs := make([]runtime.File, len(b.Files))
	for i, f := range b.Files {
		fs[i] = runtime.File{Path: f.Path, Content: f.Content, Secret: f.Secret()}
	}
	res, err := a.d.Apply(ctx, fs)
	return Outcome{Written: res.Written, Removed: res.Removed, Reloaded: res.Reloaded, ReloadReason: res.ReloadReason,
		RuntimeOps: res.RuntimeOps, Detail: res.ReloadDetail + res.RuntimeError}, err
}

// Stats is HAProxy's view of its proxies and servers (runtime.ErrNoView
// without an admin socket).
func (a runtimeApplier) Stats(ctx context.Context) ([]runtime.Stat, error) { return a.d.Stats(ctx) }

func (runtimeApplier) Refused(err error) bool {
	return errors.Is(err, runtime.ErrReloadFailed) || errors.Is(err, runtime.ErrConflict) || errors.Is(err, runtime.ErrBadPath)
}

func newDataplaneApplier(target string, d config.Deploy) (Applier, error) {
	password := d.Dataplane.Password
	if d.Dataplane.PasswordFile != "" {
		b, err := os.ReadFile(d.Dataplane.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("deployer: target %s: dataplane password: %w", target, err)
		}
		password = strings.TrimRight(string(b), "\r\n")
	}
	drv, err := dataplane.New(dataplane.Options{URL: d.Dataplane.URL, User: d.Dataplane.User, Password: password})
	if err != nil {
		return nil, fmt.Errorf("deployer: target %s instance %s: %w", target, d.Instance, err)
	}
	return dataplaneApplier{drv}, nil
}

type dataplaneApplier struct{ d *dataplane.Driver }

func (a dataplaneApplier) Apply(ctx context.Context, b msg.Bundle) (Outcome, error) {
	fs := make([]dataplane.File, len(b.Files))
	for i, f := range b.Files {
		fs[i] = dataplane.File{Path: f.Path, Content: f.Content}
	}
	res, err := a.d.Apply(ctx, fs)
	return Outcome{Written: res.Written, Removed: res.Removed, Reloaded: res.Reloaded, ReloadReason: res.ReloadReason,
		RuntimeOps: res.RuntimeOps, Detail: res.ReloadDetail + res.RuntimeError}, err
}

func (dataplaneApplier) Refused(err error) bool { return dataplane.Refused(err) }
