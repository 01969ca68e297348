package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/weftio/weft/pkg/svc/telemetry"
	"github.com/weftio/weft/services/deployer/driver/internal/mapfile"
)

// Apply delivers the bundle; see the package documentation for the
// contract. The bundle is validated before anything else (ErrBadPath,
// ErrConfig).
func (d *Driver) Apply(ctx context.Context, files []File) (Result, error) {
	res := Result{Reloads: -1}
	if err := checkBundle(files); err != nil {
		return res, err
	}
	if !slices.ContainsFunc(files, func(f File) bool { return f.Path == d.opts.Main }) {
		return res, fmt.Errorf("%w: the bundle has no %s", ErrConfig, d.opts.Main)
	}
	if err := d.lock(ctx); err != nil {
		return res, err
	}
	defer d.unlock()

	root, err := d.openDir()
	if err != nil {
		return res, err
	}
	defer root.Close()

	_, span := telemetry.Step(ctx, "runtime plan")
	m, found, p, err := d.planAll(root, files, &res)
	span.End()
	if err != nil {
		return res, err
	}

	if len(p.changed) == 0 && len(p.stale) == 0 && len(p.drifted) == 0 && m.Pending == "" {
		return res, d.applyNothing(ctx, root, p, m, found, &res)
	}

	sctx, span := telemetry.Step(ctx, "runtime decide")
	reason, detail, ops, err := d.decide(sctx, p, m, found)
	span.End()
	if err != nil {
		return res, err
	}
	if reason == "" {
		done, err := d.applyRuntime(ctx, root, p, m, ops, &res)
		if done || err != nil {
			return res, err
		}
		reason, detail = ReasonRuntimeFailed, res.RuntimeError
	}
	res.ReloadReason, res.ReloadDetail = reason, detail
	if reason == ReasonRuntimeFailed {
		res.RuntimeError = detail
	}
	return res, d.applyReload(ctx, root, p, m, reason, &res)
}

// planAll reads the manifest and plans the Apply, then sets the mode of
// the unchanged files back where it differs: HAProxy does not see
// permissions, so a file with the right content and the wrong mode (a key
// left world-readable) is fixed in place.
func (d *Driver) planAll(root *os.Root, files []File, res *Result) (manifest, bool, *plan, error) {
	m, found, err := readManifest(root)
	if err != nil {
		return m, found, nil, err
	}
	t := newTree(root)
	defer t.close()
	p, err := d.plan(t, files, m)
	if err != nil {
		return m, found, nil, err
	}
	res.Unchanged = len(p.unchanged)
	return m, found, p, d.fixModes(t, p, res)
}

// applyNothing finishes an Apply whose files are all as wanted: the
// manifest adopts files already in place, and the running servers are set
// back to the configuration if someone changed them (drift.go).
func (d *Driver) applyNothing(ctx context.Context, root *os.Root, p *plan, m manifest, found bool, res *Result) error {
	next := p.nextManifest(m)
	if !found || !maps.Equal(next.Files, m.Files) {
		if err := d.writeManifest(root, next); err != nil {
			return err
		}
	}
	if d.runtimeEnabled() {
		done, refused, err := d.repairServers(ctx, p.content(d.opts.Main))
		res.RuntimeOps = done
		switch {
		case ctx.Err() != nil:
			return fmt.Errorf("runtime: %w", ctx.Err())
		case err != nil:
			// What runs cannot be read. The files are as wanted, and a
			// reload for that alone would repeat on every Apply: it is
			// said in the result, not failed.
			res.RuntimeError = err.Error()
		case refused != "":
			res.ReloadReason, res.ReloadDetail, res.RuntimeError = ReasonRuntimeDrift, refused, refused
			return d.applyReload(ctx, root, p, next, ReasonRuntimeDrift, res)
		}
	}
	var err error
	res.Reloads, err = d.reloadCount(ctx)
	return err
}

// Drift returns, sorted, the bundle paths whose file in Dir is missing or
// differs from the bundle: what an Apply of the same bundle would write. It
// changes nothing. It waits for a running Apply to finish.
func (d *Driver) Drift(files []File) ([]string, error) {
	if err := checkBundle(files); err != nil {
		return nil, err
	}
	d.sem <- struct{}{}
	defer d.unlock()

	root, err := os.OpenRoot(d.opts.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		// Every file is missing; Apply creates Dir.
		drifted := make([]string, len(files))
		for i, f := range files {
			drifted[i] = f.Path
		}
		slices.Sort(drifted)
		return drifted, nil
	}
	if err != nil {
		return nil, fmt.Errorf("runtime: open Dir: %w", err)
	}
	defer root.Close()
	t := newTree(root)
	defer t.close()
	var drifted []string
	for _, f := range files {
		disk, exists, err := d.readDisk(t, f.Path)
		if err != nil {
			return nil, err
		}
		if !exists || !bytes.Equal(disk, f.Content) || d.modeDiffers(t, f) {
			drifted = append(drifted, f.Path)
		}
	}
	slices.Sort(drifted)
	return drifted, nil
}

// Reloads returns the master's reload counter, from "show proc".
func (d *Driver) Reloads(ctx context.Context) (int, error) {
	return d.reloadCount(ctx)
}

// plan is what an Apply has to do.
type plan struct {
	hash  func(path string, content []byte) string // d.hashes.of
	files []File
	// changed are the indices of the files whose content on disk differs
	// or is missing, sorted by path with the main file last.
	changed []int
	// old is the content on disk of the changed files that exist.
	old       map[string][]byte
	unchanged []string
	// stale are owned files that left the bundle.
	stale []string
	// drifted are bundle paths the driver delivered whose content on disk
	// is no longer what it wrote.
	drifted []string
}

func (d *Driver) plan(t *tree, files []File, m manifest) (*plan, error) {
	p := &plan{hash: d.hashes.of, files: files, old: map[string][]byte{}}
	inBundle := make(map[string]bool, len(files))
	for i, f := range files {
		inBundle[f.Path] = true
		disk, exists, err := d.readDisk(t, f.Path)
		if err != nil {
			return nil, err
		}
		if h, owned := m.Files[f.Path]; owned && (!exists || d.hashes.of(f.Path, disk) != h) {
			p.drifted = append(p.drifted, f.Path)
		}
		if exists && bytes.Equal(disk, f.Content) {
			p.unchanged = append(p.unchanged, f.Path)
			continue
		}
		if exists {
			p.old[f.Path] = disk
		}
		p.changed = append(p.changed, i)
	}
	slices.SortFunc(p.changed, func(a, b int) int {
		am, bm := files[a].Path == d.opts.Main, files[b].Path == d.opts.Main
		switch {
		case am != bm && am:
			return 1
		case am != bm:
			return -1
		}
		return strings.Compare(files[a].Path, files[b].Path)
	})
	for _, s := range slices.Sorted(maps.Keys(m.Files)) {
		if inBundle[s] {
			continue
		}
		// Only a regular file is removed; anything else there is no
		// longer the driver's.
		if fi, err := t.lstat(s); err == nil && fi != nil && fi.Mode().IsRegular() {
			p.stale = append(p.stale, s)
		}
	}
	slices.Sort(p.drifted)
	return p, nil
}

// fixModes sets the permission of the unchanged files whose mode on disk
// is not the one they are delivered with, and adds them to res.Written.
func (d *Driver) fixModes(t *tree, p *plan, res *Result) error {
	unchanged := make(map[string]bool, len(p.unchanged))
	for _, u := range p.unchanged {
		unchanged[u] = true
	}
	for _, f := range p.files {
		if !unchanged[f.Path] || !d.modeDiffers(t, f) {
			continue
		}
		if err := t.root.Chmod(f.Path, d.modeOf(f)); err != nil {
			return fmt.Errorf("runtime: chmod %s: %w", f.Path, err)
		}
		res.Written = append(res.Written, f.Path)
	}
	slices.Sort(res.Written)
	return nil
}

// nextManifest is m owning the bundle, with its hashes, and the stale files
// m still lists (those that could not be removed), with nothing pending.
func (p *plan) nextManifest(m manifest) manifest {
	next := m.clone()
	next.Files = make(map[string]string, len(p.files)+len(p.stale))
	for _, s := range p.stale {
		if h, ok := m.Files[s]; ok {
			next.Files[s] = h
		}
	}
	for _, f := range p.files {
		next.Files[f.Path] = p.hash(f.Path, f.Content)
	}
	next.Pending = ""
	return next
}

// decide returns the reason to reload, or "" with the runtime commands that
// deliver the change without one.
func (d *Driver) decide(ctx context.Context, p *plan, m manifest, found bool) (reason, detail string, ops []op, err error) {
	switch {
	case m.Pending != "":
		return ReasonPending, "an earlier apply did not complete (" + m.Pending + ")", nil, nil
	case len(p.drifted) > 0:
		return ReasonDrift, "changed on disk: " + strings.Join(p.drifted, ", "), nil, nil
	case !found && len(p.changed) > 0:
		return ReasonInitial, "no record of an earlier delivery to " + d.opts.Dir, nil, nil
	}
	if len(p.changed) == 0 {
		// Only removals: HAProxy has the removed files in memory, and a
		// configuration that still named one would not be valid.
		return "", "", nil, nil
	}
	if !d.runtimeEnabled() {
		return ReasonRuntimeDisabled, "changed: " + strings.Join(p.changedPaths(), ", "), nil, nil
	}
	for _, i := range p.changed {
		if _, exists := p.old[p.files[i].Path]; !exists {
			return ReasonNewFile, p.files[i].Path, nil, nil
		}
	}

	var mainNew []byte
	var serverOps, mapOps, certOpsAll []op
	var others []File
	for _, i := range p.changed {
		f := p.files[i]
		if f.Path != d.opts.Main {
			others = append(others, f)
			continue
		}
		mainNew = f.Content
		changes, err := diffConfigKnowing(p.old[f.Path], f.Content, &d.lines)
		var se *structureError
		if errors.As(err, &se) {
			return ReasonStructure, d.opts.Main + ": " + se.detail, nil, nil
		}
		if err != nil {
			return "", "", nil, err
		}
		for _, c := range changes {
			serverOps = append(serverOps, c.ops()...)
		}
	}
	if len(others) > 0 {
		if mainNew == nil {
			mainNew = p.content(d.opts.Main)
		}
		loaded, err := d.loadedFiles(ctx)
		if cerr := ctx.Err(); cerr != nil {
			return "", "", nil, cerr
		}
		if err != nil {
			return ReasonRuntimeFailed, err.Error(), nil, nil
		}
		for _, f := range others {
			mapRefs, certRefs := loaded.maps[f.Path], loaded.certs[f.Path]
			switch {
			case len(mapRefs) > 0:
				oldM, newM := mapfile.Parse(p.old[f.Path]), mapfile.Parse(f.Content)
				for _, ref := range mapRefs {
					mp := diffMap(oldM, newM, mapfile.OrderMatters(mainNew, ref))
					mapOps = append(mapOps, mp.ops(ref, f.Path, newM)...)
				}
			case len(certRefs) > 0:
				for _, ref := range certRefs {
					certOpsAll = append(certOpsAll, certOps(ref, f.Path, f.Content)...)
				}
			default:
				return ReasonFileChanged, f.Path + " is not a map or certificate HAProxy has loaded", nil, nil
			}
		}
	}
	// Servers first, so that a map entry routing to a backend finds its
	// servers ready; certificates last.
	return "", "", slices.Concat(serverOps, mapOps, certOpsAll), nil
}

func (p *plan) changedPaths() []string {
	out := make([]string, 0, len(p.changed))
	for _, i := range p.changed {
		out = append(out, p.files[i].Path)
	}
	return out
}

// content returns the bundle content of a path.
func (p *plan) content(name string) []byte {
	for _, f := range p.files {
		if f.Path == name {
			return f.Content
		}
	}
	return nil
}

// loaded are the maps and certificates the running worker has loaded, by
// bundle path, with the names HAProxy knows them by.
type loaded struct {
	maps, certs map[string][]string
}

var showMapLine = regexp.MustCompile(`^\d+ \((.*)\) pattern loaded from file '`)

func (d *Driver) loadedFiles(ctx context.Context) (loaded, error) {
	l := loaded{maps: map[string][]string{}, certs: map[string][]string{}}
	out, err := d.admin.do(ctx, "show map")
	if err != nil {
		return l, &runtimeError{cmd: "show map", err: err}
	}
	for line := range strings.SplitSeq(out, "\n") {
		if sm := showMapLine.FindStringSubmatch(line); sm != nil {
			if rel, ok := d.bundlePathOf(sm[1]); ok {
				l.maps[rel] = append(l.maps[rel], sm[1])
			}
		}
	}
	out, err = d.admin.do(ctx, "show ssl cert")
	if err != nil {
		return l, &runtimeError{cmd: "show ssl cert", err: err}
	}
	for line := range strings.SplitSeq(out, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// An entry in an uncommitted transaction is shown with a '*'.
		ref := strings.TrimPrefix(line, "*")
		if rel, ok := d.bundlePathOf(ref); ok && !slices.Contains(l.certs[rel], ref) {
			l.certs[rel] = append(l.certs[rel], ref)
		}
	}
	return l, nil
}

// bundlePathOf turns a path HAProxy reports into a bundle path.
func (d *Driver) bundlePathOf(ref string) (string, bool) {
	p := ref
	if !filepath.IsAbs(p) {
		p = filepath.Join(d.opts.HAProxyDir, p)
	}
	rel, err := filepath.Rel(d.opts.HAProxyDir, filepath.Clean(p))
	if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", false
	}
	return filepath.ToSlash(rel), true
}

// applyRuntime sends the commands, then writes the files. It returns false
// without an error when HAProxy refused a command (res.RuntimeError says
// which): the caller then reloads.
func (d *Driver) applyRuntime(ctx context.Context, root *os.Root, p *plan, m manifest, ops []op, res *Result) (bool, error) {
	next := m.clone()
	if len(ops) > 0 {
		// From the first command on, what HAProxy runs is neither the old
		// files nor the new ones until the files are written: an
		// interruption must make the next Apply reload.
		next.Pending = "runtime commands"
		_, span := telemetry.Step(ctx, "runtime pending")
		err := d.writeManifest(root, next)
		span.End()
		if err != nil {
			return false, err
		}
	}
	sctx, span := telemetry.Step(ctx, "runtime commands")
	done, err := d.runOps(sctx, ops)
	span.End()
	res.RuntimeOps = done
	if err != nil {
		if cerr := ctx.Err(); cerr != nil {
			return false, fmt.Errorf("runtime: %w (%w)", cerr, err)
		}
		res.RuntimeError = err.Error()
		return false, nil
	}
	_, span = telemetry.Step(ctx, "runtime write")
	err = d.writeRuntimeDone(root, p, next, res)
	span.End()
	if err != nil {
		return false, err
	}
	sctx, span = telemetry.Step(ctx, "runtime reload count")
	res.Reloads, err = d.reloadCount(sctx)
	span.End()
	return true, err
}

// writeRuntimeDone writes the files once the runtime commands took, removes
// the stale ones and records the delivery in the manifest.
func (d *Driver) writeRuntimeDone(root *os.Root, p *plan, next manifest, res *Result) error {
	if err := d.writeChanged(root, p, &next, res); err != nil {
		return err
	}
	removed, rmErr := removeStale(root, &next, p.stale)
	res.Removed = removed
	final := p.nextManifest(next)
	if err := d.writeManifest(root, final); err != nil {
		return errors.Join(rmErr, err)
	}
	return rmErr
}

// applyReload writes the files, reloads, then removes the files that left
// the bundle.
func (d *Driver) applyReload(ctx context.Context, root *os.Root, p *plan, m manifest, reason string, res *Result) error {
	next := m.clone()
	next.Pending = reason
	// The new files are owned before they are written, so that an
	// interruption never leaves a file the driver does not know about.
	for _, i := range p.changed {
		next.Files[p.files[i].Path] = d.hashes.of(p.files[i].Path, p.files[i].Content)
	}
	if err := d.writeManifest(root, next); err != nil {
		return err
	}
	if err := d.writeChanged(root, p, &next, res); err != nil {
		return err
	}
	// The directories created by writeChanged are recorded with the
	// pending state, so they are known even if the reload fails.
	if err := d.writeManifest(root, next); err != nil {
		return err
	}
	n, err := d.reload(ctx)
	if err != nil {
		return err
	}
	res.Reloaded, res.Reloads = true, n
	removed, rmErr := removeStale(root, &next, p.stale)
	res.Removed = removed
	final := p.nextManifest(next)
	if err := d.writeManifest(root, final); err != nil {
		return errors.Join(rmErr, err)
	}
	return rmErr
}

// writeChanged writes the changed files atomically, the main configuration
// last, so that when it is read the files it names are in place.
func (d *Driver) writeChanged(root *os.Root, p *plan, m *manifest, res *Result) error {
	dirs := []string{"."}
	for _, i := range p.changed {
		dirs = append(dirs, path.Dir(p.files[i].Path))
	}
	slices.Sort(dirs)
	removeLeftovers(root, slices.Compact(dirs))
	for _, i := range p.changed {
		f := p.files[i]
		if err := d.writeFile(root, m, f); err != nil {
			return err
		}
		res.Written = append(res.Written, f.Path)
	}
	slices.Sort(res.Written)
	return nil
}
