package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/pmezard/go-difflib/difflib"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc"
	"github.com/weftio/weft/services/deployer/driver/files"
)

// pendingDiff shows what delivering a confd resource's bundle would change
// (weft confd -noop): the unified diff between its dest and the bundle's
// main file, on out. With keep, the rendered file is also left beside its
// dest, as confd's staged file would be.
type pendingDiff struct {
	cfg  *config.Config
	keep bool
	out  io.Writer
}

// show prints the pending change of target's bundle hash, and reports
// whether there is one; a target that is no confd resource shows nothing.
func (d *pendingDiff) show(ctx context.Context, store *msg.BundleStore, target, hash string) (bool, error) {
	tg, ok := d.cfg.Targets[target]
	if !ok || tg.ConfdResource == nil {
		return false, nil
	}
	dest := tg.ConfdResource.Dest
	b, err := store.LoadBundle(ctx, hash)
	if err != nil {
		return false, fmt.Errorf("%s: %w", dest, err)
	}
	var rendered []byte
	for _, f := range b.Files {
		if f.Path == tg.MainFile() {
			rendered = f.Content
		}
	}
	current, err := os.ReadFile(dest)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("%s: %w", dest, err)
	}
	if d.keep {
		stage := filepath.Join(filepath.Dir(dest), files.KeptName(filepath.Base(dest)))
		if err := os.WriteFile(stage, rendered, 0o600); err != nil {
			return false, fmt.Errorf("%s: keep the rendered file: %w", dest, err)
		}
	}
	if bytes.Equal(current, rendered) {
		return false, nil
	}
	diff, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(current)), B: difflib.SplitLines(string(rendered)),
		FromFile: dest, ToFile: dest + " (rendered)", Context: 3,
	})
	if err != nil {
		return false, fmt.Errorf("%s: %w", dest, err)
	}
	fmt.Fprintf(d.out, "%s has pending changes\n%s", dest, diff)
	return true, nil
}

// noopRun is `weft confd -noop` without -onetime: it follows the status
// bucket and, each time a resource has a new bundle the validator
// accepted, shows its pending change and logs it ("noop: would change",
// with the dest); nothing is written and no command is run. It logs "noop:
// every resource rendered" once each resource has had a bundle accepted.
type noopRun struct {
	diff *pendingDiff
	// shown is the bundle hash last shown, by target.
	shown map[string]string
}

func (n *noopRun) run(ctx context.Context, env svc.Env, _ *config.Config) error {
	store := msg.NewBundleStore(env.JS)
	n.shown = map[string]string{}
	announced := false
	return followStatus(ctx, env, "noop", func(rep msg.StatusReport) error {
		for _, t := range rep.Targets {
			n.report(ctx, env, store, t)
		}
		if !announced && len(n.shown) == n.resources() {
			announced = true
			env.Log.Info("noop: every resource rendered; showing what changes from now on", "resources", len(n.shown))
		}
		return nil
	})
}

// resources counts the confd resources of the configuration.
func (n *noopRun) resources() int {
	count := 0
	for _, t := range n.diff.cfg.Targets {
		if t.ConfdResource != nil {
			count++
		}
	}
	return count
}

// report shows the pending change of t's bundle once it is accepted, once
// per bundle.
func (n *noopRun) report(ctx context.Context, env svc.Env, store *msg.BundleStore, t msg.TargetReport) {
	r, v := t.Render, t.Validation
	if r == nil || r.BundleHash == "" || v == nil || v.BundleHash != r.BundleHash || v.Undecided || !v.OK {
		return
	}
	if n.shown[t.Target] == r.BundleHash {
		return
	}
	changed, err := n.diff.show(ctx, store, t.Target, r.BundleHash)
	if err != nil {
		env.Log.Warn("noop: showing the pending change", "target", t.Target, "err", err)
		return
	}
	n.shown[t.Target] = r.BundleHash
	if changed {
		env.Log.Info("noop: would change", "target", t.Target, "dest", n.diff.cfg.Targets[t.Target].ConfdResource.Dest)
	}
}
