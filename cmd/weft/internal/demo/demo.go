// Package demo runs a weft configuration against a real HAProxy on
// 127.0.0.1 so that a person can send HTTP through it (`weft up --demo`,
// which `make run` uses).
//
// Prepare accepts a loaded configuration with exactly one target whose
// haproxy_config template binds a literal address ("bind 127.0.0.1:18080")
// and a global section. Run then, in a temporary folder that it removes
// when it returns:
//
//   - writes the runtime configuration: the same configuration with the
//     target delivered by the runtime driver (master and admin sockets in
//     the folder, its check and reload commands dropped) and an admin
//     stats socket added to the global section of its template;
//   - serves an echo backend, answering its own name, on every address and
//     port that the EndpointSlices under the configuration's manifests
//     folders name, following edits of those manifests;
//   - starts HAProxy in master-worker mode on a bootstrap configuration
//     written as the target's haproxy.cfg, bound to the target's address
//     (an address already taken is an error);
//   - calls weft with the runtime configuration's path and a fresh data
//     folder, until ctx is done or weft returns.
//
// When Run returns, HAProxy (master and workers) has exited, every
// backend is closed and the temporary folder is removed; the folder of a
// weft that was killed is removed by the next Run (RemoveStale). If HAProxy exits on its own first, Run stops weft and
// returns an error wrapping ErrHAProxyExited.
package demo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sync/errgroup"
)

// Options of Run.
type Options struct {
	// Plan is what Prepare found in the configuration.
	Plan *Plan
	// HAProxy is the path of the haproxy binary (haproxycheck.Find finds
	// it as the validator does).
	HAProxy string
	// Log receives what the demo does and HAProxy's output.
	Log *slog.Logger
}

// Weft runs weft on the configuration file at config with JetStream data in
// dataDir until ctx is done.
type Weft func(ctx context.Context, config, dataDir string) error

// tempPrefix names the demo's temporary folders; ownerFile, in each, holds
// the process id of the weft that made it.
const (
	tempPrefix = "weft-demo-"
	ownerFile  = "weft.pid"
)

// Run runs the demo (see the package documentation).
func Run(ctx context.Context, o Options, weft Weft) (err error) {
	RemoveStale(o.Log, os.TempDir())
	dir, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	cfgPath := filepath.Join(dir, "weft.yaml")
	if err := o.Plan.WriteConfig(cfgPath, filepath.Join(dir, "master.sock"), filepath.Join(dir, "admin.sock")); err != nil {
		return err
	}
	return run(ctx, o, dir, func(ctx context.Context) error {
		return weft(ctx, cfgPath, filepath.Join(dir, "data"))
	})
}

// RemoveStale removes the demo folders under tmp whose weft is gone
// (killed, so it could not remove its own). A folder without an owner
// file, or whose owner runs, is left alone.
func RemoveStale(log *slog.Logger, tmp string) {
	dirs, _ := filepath.Glob(filepath.Join(tmp, tempPrefix+"*"))
	for _, dir := range dirs {
		b, err := os.ReadFile(filepath.Join(dir, ownerFile))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 0 || pid == os.Getpid() || running(pid) {
			continue
		}
		if err := os.RemoveAll(dir); err != nil {
			log.Warn("the folder of a weft that was killed could not be removed", "dir", dir, "pid", pid, "err", err)
			continue
		}
		log.Info("removed the folder of a weft that was killed", "dir", dir, "pid", pid)
	}
}

// run starts the backends and HAProxy, then weft, and stops all three
// when one of them ends or ctx is done.
func run(ctx context.Context, o Options, dir string, weft func(context.Context) error) error {
	plan := o.Plan
	backends, err := StartBackends(o.Log, plan.Manifests)
	if err != nil {
		return err
	}
	defer backends.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	g, gctx := errgroup.WithContext(ctx)
	hp, err := StartHAProxy(gctx, HAProxyOptions{
		Bin: o.HAProxy, Dir: plan.Dest, Listen: plan.Listen, Log: o.Log,
		MasterSocket: filepath.Join(dir, "master.sock"), AdminSocket: filepath.Join(dir, "admin.sock"),
	})
	if err != nil {
		return err
	}
	o.Log.Info("HAProxy serves the target; weft delivers it with the runtime driver", "target", plan.Target,
		"addr", plan.Listen, "pid", hp.Pid, "config", filepath.Join(plan.Dest, "haproxy.cfg"), "master_socket", hp.MasterSocket, "admin_socket", hp.AdminSocket)
	// Whichever ends first ends the others.
	for _, f := range []func() error{hp.Wait, func() error { return backends.Follow(gctx) }, func() error { return weft(gctx) }} {
		g.Go(func() error { defer cancel(); return f() })
	}
	return g.Wait()
}
