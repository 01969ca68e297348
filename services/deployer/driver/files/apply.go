package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"
)

// modeBits are the bits of a file's mode compared with Options.Mode.
const modeBits = fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky

// Apply delivers the bundle into Dest; see the package documentation for the
// contract. The bundle is validated before anything else (ErrBadPath).
func (d *Driver) Apply(ctx context.Context, files []File) (Result, error) {
	if err := checkBundle(files); err != nil {
		return Result{}, err
	}
	main, err := d.mainFile(files)
	if err != nil {
		return Result{}, err
	}
	if err := d.lock(ctx); err != nil {
		return Result{}, err
	}
	defer d.unlock()

	root, err := d.openDest()
	if err != nil {
		return Result{}, err
	}
	defer root.Close()

	m, raw, err := readManifest(root, d.names)
	if err != nil {
		return Result{}, err
	}
	p, err := d.plan(root, files, m)
	if err != nil {
		return Result{}, err
	}
	res := Result{Unchanged: len(p.unchanged)}

	var next manifest
	if len(p.changed) == 0 && len(p.stale) == 0 {
		// Nothing to deliver; the manifest may still need to adopt files
		// that were already as wanted, or forget files that are gone, and
		// a killed process may have left its staging directory.
		d.removeLeftovers(root)
		next = p.nextManifest(m, nil, nil, m.Dirs)
		next.ReloadPending = m.ReloadPending && d.opts.ReloadCmd != ""
		if err := writeManifest(root, d.names, next, raw); err != nil {
			return res, err
		}
	} else {
		next, err = d.deliver(ctx, root, files, main, p, m, &res)
		if err != nil {
			return res, err
		}
	}
	if !next.ReloadPending {
		return res, nil
	}
	return res, d.reload(ctx, root, next, &res)
}

// Drift returns, sorted, the bundle paths whose file in Dest is missing or
// differs from the bundle in content, mode or (when set) owner: the paths an
// Apply of the same bundle would write. It changes nothing. It waits for a
// running Apply to finish.
func (d *Driver) Drift(files []File) ([]string, error) {
	if err := checkBundle(files); err != nil {
		return nil, err
	}
	d.sem <- struct{}{}
	defer d.unlock()

	root, err := os.OpenRoot(d.opts.Dest)
	if errors.Is(err, fs.ErrNotExist) {
		drifted := make([]string, len(files))
		for i, f := range files {
			drifted[i] = f.Path
		}
		slices.Sort(drifted)
		return drifted, nil
	}
	if err != nil {
		return nil, fmt.Errorf("files: open destination: %w", err)
	}
	defer root.Close()

	buf := make([]byte, 32<<10)
	var drifted []string
	for _, f := range files {
		st, err := d.compare(root, f, buf)
		if err != nil {
			return nil, err
		}
		if st != stateSame {
			drifted = append(drifted, f.Path)
		}
	}
	slices.Sort(drifted)
	return drifted, nil
}

// openDest opens Dest, creating it (and its parents) with DirMode when it
// is missing: a destination removed behind the driver's back is delivered
// again, not an error.
func (d *Driver) openDest() (*os.Root, error) {
	if err := os.MkdirAll(d.opts.Dest, d.opts.DirMode); err != nil {
		return nil, fmt.Errorf("files: create destination: %w", err)
	}
	root, err := os.OpenRoot(d.opts.Dest)
	if err != nil {
		return nil, fmt.Errorf("files: open destination: %w", err)
	}
	return root, nil
}

// mainFile returns the bundle path passed to the check command.
func (d *Driver) mainFile(files []File) (string, error) {
	if d.opts.Main == "" {
		if len(files) == 0 {
			return "", nil
		}
		return files[0].Path, nil
	}
	for _, f := range files {
		if f.Path == d.opts.Main {
			return f.Path, nil
		}
	}
	return "", fmt.Errorf("%w: Main %q is not in the bundle", ErrConfig, d.opts.Main)
}

type diskState int

const (
	stateSame    diskState = iota
	stateDiffers           // missing, or other content, mode, owner or file type
	stateDir               // a directory is where the file goes
)

// compare tells how the file in Dest relates to f.
func (d *Driver) compare(root *os.Root, f File, buf []byte) (diskState, error) {
	fi, err := root.Lstat(f.Path)
	switch {
	case err == nil:
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		return stateDiffers, nil
	default:
		return 0, fmt.Errorf("files: stat %s: %w", f.Path, err)
	}
	switch {
	case fi.IsDir():
		return stateDir, nil
	case !fi.Mode().IsRegular(),
		(!d.opts.KeepMode || f.Secret) && fi.Mode()&modeBits != d.modeOf(f),
		fi.Size() != int64(len(f.Content)),
		!d.ownerMatches(fi):
		return stateDiffers, nil
	}
	same, err := sameContent(root, f.Path, f.Content, buf)
	if err != nil {
		return 0, fmt.Errorf("files: read %s: %w", f.Path, err)
	}
	if same {
		return stateSame, nil
	}
	return stateDiffers, nil
}

func (d *Driver) ownerMatches(fi fs.FileInfo) bool {
	if d.uid < 0 && d.gid < 0 {
		return true
	}
	uid, gid, ok := fileOwner(fi)
	if !ok {
		return false
	}
	return (d.uid < 0 || uid == d.uid) && (d.gid < 0 || gid == d.gid)
}

// sameContent compares a file with want, reading it in chunks of len(buf).
func sameContent(root *os.Root, name string, want, buf []byte) (bool, error) {
	f, err := root.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	for {
		n, err := f.Read(buf)
		if n > 0 {
			if n > len(want) || !bytes.Equal(buf[:n], want[:n]) {
				return false, nil
			}
			want = want[n:]
		}
		if errors.Is(err, io.EOF) {
			return len(want) == 0, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// plan is what an Apply has to do.
type plan struct {
	changed   []int    // indices of the files to install, in path order
	unchanged []string // bundle paths already as wanted
	// stale are owned files that left the bundle, removed after the
	// installation.
	stale []string
	// precleanFiles and precleanDirs are owned entries that are in the way
	// of the new layout, removed just before the installation (directories
	// deepest first).
	precleanFiles, precleanDirs []string
	// gone are owned files that left the bundle and are no longer in Dest.
	gone []string

	ownedDirs map[string]bool
	needDirs  map[string]bool // directories the bundle's paths need
}

func (d *Driver) plan(root *os.Root, files []File, m manifest) (*plan, error) {
	p := &plan{ownedDirs: make(map[string]bool, len(m.Dirs)), needDirs: map[string]bool{}}
	bundle := make(map[string]bool, len(files))
	for _, f := range files {
		bundle[f.Path] = true
		for _, a := range ancestors(f.Path) {
			p.needDirs[a] = true
		}
	}
	for _, dir := range m.Dirs {
		p.ownedDirs[dir] = true
	}

	stale := map[string]bool{}
	for _, s := range m.Files {
		if bundle[s] {
			continue
		}
		fi, err := root.Lstat(s)
		switch {
		case err == nil && !fi.IsDir():
			stale[s] = true
		case err == nil, errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
			// Gone, or replaced by a directory that is not the driver's.
			p.gone = append(p.gone, s)
		default:
			return nil, fmt.Errorf("files: stat %s: %w", s, err)
		}
	}

	order := make([]int, len(files))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(files[a].Path, files[b].Path) })

	precleaned := map[string]bool{}
	buf := make([]byte, 32<<10)
	for _, i := range order {
		f := files[i]
		st, err := d.compare(root, f, buf)
		if err != nil {
			return nil, err
		}
		switch st {
		case stateSame:
			p.unchanged = append(p.unchanged, f.Path)
			continue
		case stateDir:
			fsList, dirs, err := removableTree(root, f.Path, stale, p.ownedDirs)
			if err != nil {
				return nil, err
			}
			for _, s := range fsList {
				if !precleaned[s] {
					precleaned[s] = true
					p.precleanFiles = append(p.precleanFiles, s)
				}
			}
			p.precleanDirs = append(p.precleanDirs, dirs...)
		case stateDiffers:
			a, err := blockingAncestor(root, f.Path, stale)
			if err != nil {
				return nil, err
			}
			if a != "" && !precleaned[a] {
				precleaned[a] = true
				p.precleanFiles = append(p.precleanFiles, a)
			}
		}
		p.changed = append(p.changed, i)
	}
	deepestFirst(p.precleanDirs)

	for _, s := range m.Files {
		if stale[s] && !precleaned[s] {
			p.stale = append(p.stale, s)
		}
	}
	slices.Sort(p.stale)
	return p, nil
}

// blockingAncestor checks that the directories above name are directories or
// can be created. It returns a stale owned file that must be removed first, if
// one is where a directory goes.
func blockingAncestor(root *os.Root, name string, stale map[string]bool) (string, error) {
	for _, a := range ancestors(name) {
		fi, err := root.Lstat(a)
		if errors.Is(err, fs.ErrNotExist) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("files: stat %s: %w", a, err)
		}
		if fi.IsDir() {
			continue
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			if ti, err := root.Stat(a); err == nil && ti.IsDir() {
				continue
			}
		}
		if stale[a] {
			return a, nil
		}
		return "", fmt.Errorf("%w: %s needs %s to be a directory, and the file there is not the driver's", ErrConflict, name, a)
	}
	return "", nil
}

// removableTree checks that the directory where the file name goes holds only
// what the driver owns and no longer needs, and returns its files and its
// directories.
func removableTree(root *os.Root, name string, stale, ownedDirs map[string]bool) (files, dirs []string, err error) {
	errForeign := errors.New("foreign entry")
	var foreign string
	err = fs.WalkDir(root.FS(), name, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if de.IsDir() {
			if !ownedDirs[p] {
				foreign = p
				return errForeign
			}
			dirs = append(dirs, p)
			return nil
		}
		if !stale[p] {
			foreign = p
			return errForeign
		}
		files = append(files, p)
		return nil
	})
	if errors.Is(err, errForeign) {
		return nil, nil, fmt.Errorf("%w: %s is a directory, and %s in it is not the driver's", ErrConflict, name, foreign)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("files: inspect %s: %w", name, err)
	}
	return files, dirs, nil
}

// nextManifest is m after the driver wrote written and stopped owning
// dropFiles (removed or vanished), with dirs as the directories it owns.
func (p *plan) nextManifest(m manifest, written, dropFiles, dirs []string) manifest {
	drop := make(map[string]bool, len(p.gone)+len(dropFiles))
	for _, s := range slices.Concat(p.gone, dropFiles) {
		drop[s] = true
	}
	var files []string
	for _, s := range m.Files {
		if !drop[s] {
			files = append(files, s)
		}
	}
	files = slices.Concat(files, written, p.unchanged)
	return manifest{Version: manifestVersion, Files: sortedCopy(files), Dirs: sortedCopy(dirs), ReloadPending: m.ReloadPending}
}

// deliver stages the bundle, checks it and installs it, and returns the
// manifest it wrote.
func (d *Driver) deliver(ctx context.Context, root *os.Root, files []File, main string, p *plan, m manifest, res *Result) (next manifest, err error) {
	d.removeLeftovers(root)
	// The staging directory and its subdirectories get the mode and owner of
	// the directories in Dest, so that a check command that drops privileges
	// sees the bundle as the program will.
	stage := d.names.stage + rand.Text()
	if created, err := d.mkdir(root, stage); err != nil || !created {
		if err == nil {
			err = fs.ErrExist
		}
		if created {
			_ = root.RemoveAll(stage) // best effort: the error above is the one to report
		}
		return m, fmt.Errorf("files: create staging dir: %w", err)
	}
	defer func() {
		if rerr := root.RemoveAll(stage); rerr != nil {
			err = errors.Join(err, fmt.Errorf("files: remove staging dir: %w", rerr))
		}
	}()

	if err := d.stageFiles(root, stage, files, p); err != nil {
		return m, err
	}
	if d.opts.KeepStaged {
		// Before the staging directory goes, whatever the outcome.
		defer d.keepStaged(root, stage, files, p)
	}
	if d.check != nil {
		dir := filepath.Join(d.opts.Dest, stage)
		src := ""
		if main != "" {
			src = filepath.Join(dir, filepath.FromSlash(main))
		}
		var cmd bytes.Buffer
		if err := d.check.Execute(&cmd, checkVars(src, dir)); err != nil {
			return m, fmt.Errorf("%w: render command: %w", ErrCheckFailed, err)
		}
		out, err := d.run(ctx, cmd.String())
		res.CheckOutput = out
		if err != nil {
			return m, fmt.Errorf("%w: %w%s", ErrCheckFailed, err, withOutput(out))
		}
	}

	// From here on Dest changes. The manifest first owns what is about to
	// be installed (files and the directories made for them) and owes the
	// reload, so that a process killed part way leaves both known to the
	// next Apply, even one that then finds every file in place.
	if err := writeManifest(root, d.names, d.intent(root, files, p, m), nil); err != nil {
		return m, err
	}
	// Whatever happens next, the manifest records what the driver then
	// owns.
	var removed, vanished []string
	dirs := slices.Clone(m.Dirs)
	installErr := d.install(root, stage, files, p, res, &removed, &dirs)
	if d.afterInstall != nil {
		d.afterInstall()
	}
	var removeErr error
	if installErr == nil {
		removeErr = d.removeStale(root, p, &removed, &vanished, &dirs)
	}
	slices.Sort(removed)
	res.Removed = removed

	next = p.nextManifest(m, res.Written, slices.Concat(removed, vanished), dirs)
	next.ReloadPending = d.opts.ReloadCmd != "" && (m.ReloadPending || len(res.Written) > 0 || len(res.Removed) > 0)
	writeErr := writeManifest(root, d.names, next, nil)
	return next, errors.Join(installErr, removeErr, writeErr)
}

// intent is m owning, besides its own, the files deliver installs and the
// directories it creates for them, and owing a reload when there is a
// reload command.
func (d *Driver) intent(root *os.Root, files []File, p *plan, m manifest) manifest {
	next := m
	next.Files = slices.Clone(m.Files)
	next.Dirs = slices.Clone(m.Dirs)
	for _, i := range p.changed {
		next.Files = append(next.Files, files[i].Path)
		for _, a := range ancestors(files[i].Path) {
			if _, err := root.Lstat(a); errors.Is(err, fs.ErrNotExist) {
				next.Dirs = append(next.Dirs, a)
			}
		}
	}
	next.ReloadPending = d.opts.ReloadCmd != ""
	return next
}

// removeLeftovers removes staging entries left by an interrupted run. It is
// best effort: leftovers only cost space, and failing to remove them must not
// block a delivery.
func (d *Driver) removeLeftovers(root *os.Root) {
	dir, err := root.Open(".")
	if err != nil {
		return
	}
	names, _ := dir.Readdirnames(-1)
	_ = dir.Close()
	for _, name := range names {
		if d.names.ownsStage(name) {
			_ = root.RemoveAll(name)
		}
	}
}

// stageFiles writes the bundle into the staging directory with its final
// mode and owner: the whole bundle when there is a check command, else only
// the files that will be installed. Those are fsynced; the others only
// serve the check command and are never moved into Dest.
func (d *Driver) stageFiles(root *os.Root, stage string, files []File, p *plan) error {
	install := make(map[int]bool, len(p.changed))
	for _, i := range p.changed {
		install[i] = true
	}
	made := map[string]bool{}
	for i, f := range files {
		if d.check == nil && !install[i] {
			continue
		}
		for _, a := range ancestors(f.Path) {
			if made[a] {
				continue
			}
			if _, err := d.mkdir(root, stage+"/"+a); err != nil {
				return fmt.Errorf("files: stage %s: %w", f.Path, err)
			}
			made[a] = true
		}
		mode := d.modeOf(f)
		if m, ok := d.kept(root, f); ok {
			mode = m
		}
		if err := d.stageFile(root, stage+"/"+f.Path, f.Content, mode, install[i]); err != nil {
			return fmt.Errorf("files: stage %s: %w", f.Path, err)
		}
	}
	return nil
}

// keepStaged writes, for Options.KeepStaged, a copy of each file of the
// bundle that was to be installed at KeptName(path), through a file in the
// staging directory renamed into place. It is best effort: a copy that
// cannot be written, or whose folder does not exist (the check refused a
// file of a new folder), is skipped; so is a copy whose name is a path of
// the bundle.
func (d *Driver) keepStaged(root *os.Root, stage string, files []File, p *plan) {
	inBundle := make(map[string]bool, len(files))
	for _, f := range files {
		inBundle[f.Path] = true
	}
	tmp := stage + "/" + stagePrefix + "kept" // never a bundle path
	for _, i := range p.changed {
		f := files[i]
		kept := KeptName(f.Path)
		if inBundle[kept] {
			continue
		}
		if fi, err := root.Stat(path.Dir(kept)); err != nil || !fi.IsDir() {
			continue
		}
		mode := d.modeOf(f)
		if m, ok := d.kept(root, f); ok {
			mode = m
		}
		if err := d.stageFile(root, tmp, f.Content, mode, false); err != nil {
			_ = root.Remove(tmp)
			continue
		}
		if err := root.Rename(tmp, kept); err != nil {
			_ = root.Remove(tmp)
		}
	}
}

func (d *Driver) stageFile(root *os.Root, name string, content []byte, mode fs.FileMode, sync bool) error {
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = func() error {
		if _, err := f.Write(content); err != nil {
			return err
		}
		if d.uid >= 0 || d.gid >= 0 {
			if err := f.Chown(d.uid, d.gid); err != nil {
				return err
			}
		}
		// Explicitly, so that the umask does not matter.
		if err := f.Chmod(mode); err != nil {
			return err
		}
		if sync {
			return f.Sync()
		}
		return nil
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// install removes what is in the way, then renames the changed files into
// place, creating missing directories.
func (d *Driver) install(root *os.Root, stage string, files []File, p *plan, res *Result, removed, dirs *[]string) error {
	for _, s := range p.precleanFiles {
		if err := root.Remove(s); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("files: remove %s: %w", s, err)
		}
		*removed = append(*removed, s)
	}
	for _, dir := range p.precleanDirs {
		if err := root.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("files: remove directory %s: %w", dir, err)
		}
		*dirs = slices.DeleteFunc(*dirs, func(s string) bool { return s == dir })
	}

	known := map[string]bool{}
	touched := map[string]bool{}
	for _, i := range p.changed {
		f := files[i]
		for _, a := range ancestors(f.Path) {
			if known[a] {
				continue
			}
			created, err := d.mkdir(root, a)
			if err != nil {
				return err
			}
			if created {
				*dirs = append(*dirs, a)
			}
			known[a] = true
		}
		if err := root.Rename(stage+"/"+f.Path, f.Path); err != nil {
			return fmt.Errorf("files: install %s: %w", f.Path, err)
		}
		res.Written = append(res.Written, f.Path)
		touched[path.Dir(f.Path)] = true
	}
	for dir := range touched {
		syncDir(root, dir)
	}
	return nil
}

// mkdir creates dir with DirMode and the owner, unless it exists.
func (d *Driver) mkdir(root *os.Root, dir string) (bool, error) {
	err := root.Mkdir(dir, d.opts.DirMode)
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("files: create directory %s: %w", dir, err)
	}
	if d.uid >= 0 || d.gid >= 0 {
		if err := root.Lchown(dir, d.uid, d.gid); err != nil {
			return true, fmt.Errorf("files: chown directory %s: %w", dir, err)
		}
	}
	if err := root.Chmod(dir, d.opts.DirMode); err != nil {
		return true, fmt.Errorf("files: chmod directory %s: %w", dir, err)
	}
	return true, nil
}

// removeStale removes the owned files that left the bundle, then the owned
// directories nothing needs any more once they are empty.
func (d *Driver) removeStale(root *os.Root, p *plan, removed, vanished, dirs *[]string) error {
	var errs []error
	for _, s := range p.stale {
		err := root.Remove(s)
		switch {
		case err == nil:
			*removed = append(*removed, s)
		case errors.Is(err, fs.ErrNotExist):
			*vanished = append(*vanished, s)
		default:
			errs = append(errs, fmt.Errorf("files: remove %s: %w", s, err))
		}
	}

	candidates := slices.DeleteFunc(slices.Clone(*dirs), func(dir string) bool { return p.needDirs[dir] })
	deepestFirst(candidates)
	for _, dir := range candidates {
		// Remove fails on a directory that is not empty: it then holds
		// something that is not the driver's, and stays.
		err := root.Remove(dir)
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			*dirs = slices.DeleteFunc(*dirs, func(s string) bool { return s == dir })
		}
	}
	return errors.Join(errs...)
}

// reload runs the reload command, no sooner than MinReloadInterval after the
// previous successful one, and records its success in the manifest.
func (d *Driver) reload(ctx context.Context, root *os.Root, m manifest, res *Result) error {
	if d.opts.MinReloadInterval > 0 && !d.lastReload.IsZero() {
		if wait := d.opts.MinReloadInterval - time.Since(d.lastReload); wait > 0 {
			if err := d.waitFor(ctx, wait); err != nil {
				return fmt.Errorf("%w: waiting out the minimum reload interval: %w", ErrReloadFailed, err)
			}
		}
	}
	out, err := d.run(ctx, d.opts.ReloadCmd)
	res.ReloadOutput = out
	if err != nil {
		return fmt.Errorf("%w: %w%s", ErrReloadFailed, err, withOutput(out))
	}
	d.lastReload = time.Now()
	res.Reloaded = true
	m.ReloadPending = false
	if err := writeManifest(root, d.names, m, nil); err != nil {
		return fmt.Errorf("files: record the reload: %w", err)
	}
	return nil
}
