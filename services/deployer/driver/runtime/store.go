package runtime

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/weftio/weft/services/deployer/driver/internal/bundlepath"
)

const (
	// manifestName is the file in Dir recording what the driver owns.
	manifestName = ".weft-runtime.json"
	// tmpPrefix starts every temporary file the driver creates.
	tmpPrefix       = ".weft-tmp-"
	manifestVersion = 1
)

// checkPath reports whether p is usable as a bundle path (bundlepath.Reason)
// and not one of the driver's names.
func checkPath(p string) error {
	reason := bundlepath.Reason(p)
	if reason == "" {
		if p == manifestName {
			reason = "reserved for the driver"
		}
		for e := range strings.SplitSeq(p, "/") {
			if strings.HasPrefix(e, tmpPrefix) {
				reason = "reserved for the driver"
			}
		}
	}
	if reason != "" {
		return fmt.Errorf("%w: %q: %s", ErrBadPath, p, reason)
	}
	return nil
}

// checkBundle validates every path, and that no path is given twice or is
// both a file and a directory.
func checkBundle(files []File) error {
	paths := make([]string, len(files))
	for i, f := range files {
		if err := checkPath(f.Path); err != nil {
			return err
		}
		paths[i] = f.Path
	}
	if p, why := bundlepath.Conflict(paths); p != "" {
		return fmt.Errorf("%w: %q: %s", ErrBadPath, p, why)
	}
	return nil
}

// ancestors returns the directories above p, outermost first.
func ancestors(p string) []string { return bundlepath.Ancestors(p) }

func hashOf(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// hashMemo remembers the last content hashed for each path with its hash
// (hashOf), so the file written last and read back from disk to look for
// drift is compared, not hashed again: on a large haproxy.cfg, hashing
// costs several times a compare. The content is held as given: read only.
type hashMemo struct {
	mu   sync.Mutex
	last map[string]hashed
}

type hashed struct {
	content []byte
	hash    string
}

// of returns hashOf(content), remembered under path.
func (h *hashMemo) of(path string, content []byte) string {
	h.mu.Lock()
	last, ok := h.last[path]
	h.mu.Unlock()
	if ok && bytes.Equal(last.content, content) {
		return last.hash
	}
	sum := hashOf(content)
	h.mu.Lock()
	if h.last == nil {
		h.last = map[string]hashed{}
	}
	h.last[path] = hashed{content: content, hash: sum}
	h.mu.Unlock()
	return sum
}

// manifest records what the driver owns in Dir and what it believes HAProxy
// runs.
type manifest struct {
	Version int `json:"version"`
	// Files maps every file the driver delivered to the SHA-256 of the
	// content it wrote.
	Files map[string]string `json:"files"`
	// Dirs are the directories the driver created.
	Dirs []string `json:"dirs,omitempty"`
	// Pending is set while HAProxy may not run what is on disk: from before
	// the first change (file or runtime command) until the change is
	// complete. It holds the reason of the change.
	Pending string `json:"pending,omitempty"`
}

// readManifest loads the manifest; found is false when there is none.
func readManifest(root *os.Root) (m manifest, found bool, err error) {
	raw, err := root.ReadFile(manifestName)
	if errors.Is(err, fs.ErrNotExist) {
		return manifest{Version: manifestVersion, Files: map[string]string{}}, false, nil
	}
	if err != nil {
		return manifest{}, false, fmt.Errorf("runtime: read manifest: %w", err)
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return manifest{}, false, fmt.Errorf("runtime: read manifest %s: %w (remove it to let the driver start over with a reload)", manifestName, err)
	}
	if m.Version != manifestVersion {
		return manifest{}, false, fmt.Errorf("runtime: read manifest %s: unsupported version %d", manifestName, m.Version)
	}
	if m.Files == nil {
		m.Files = map[string]string{}
	}
	for p := range m.Files {
		if err := checkPath(p); err != nil {
			return manifest{}, false, fmt.Errorf("runtime: read manifest %s: %w", manifestName, err)
		}
	}
	for _, p := range m.Dirs {
		if err := checkPath(p); err != nil {
			return manifest{}, false, fmt.Errorf("runtime: read manifest %s: %w", manifestName, err)
		}
	}
	return m, true, nil
}

func (m manifest) clone() manifest {
	c := m
	c.Files = make(map[string]string, len(m.Files))
	for k, v := range m.Files {
		c.Files[k] = v
	}
	c.Dirs = slices.Clone(m.Dirs)
	return c
}

// writeManifest replaces the manifest atomically.
func (d *Driver) writeManifest(root *os.Root, m manifest) error {
	m.Version = manifestVersion
	slices.Sort(m.Dirs)
	m.Dirs = slices.Compact(m.Dirs)
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("runtime: encode manifest: %w", err)
	}
	// Not fsynced: the manifest only has to survive a crash of this
	// process, which the page cache shared with HAProxy sees through. After
	// a power loss HAProxy restarts from the files, and a manifest that
	// lost its last update makes the next Apply see drift or a pending
	// change, and reload.
	if err := writeAtomic(root, manifestName, append(b, '\n'), 0o644, false); err != nil {
		return fmt.Errorf("runtime: write manifest: %w", err)
	}
	return nil
}

// readDisk returns the content of a bundle path in Dir; exists is false when
// there is no regular file there. A directory there, or a file where one of
// its parents goes, is an ErrConflict. A file the driver wrote whose stamp
// is the one it had right after the write is not read again (diskMemo).
func (d *Driver) readDisk(t *tree, name string) (content []byte, exists bool, err error) {
	fi, err := t.lstat(name)
	if err != nil || fi == nil {
		return nil, false, err
	}
	if !fi.Mode().IsRegular() {
		if fi.IsDir() {
			return nil, false, fmt.Errorf("%w: %s is a directory", ErrConflict, name)
		}
		return nil, false, nil
	}
	if b, ok := d.disk.get(name, fi); ok {
		return b, true, nil
	}
	b, err := t.readFile(name)
	if err != nil {
		return nil, false, err
	}
	return b, true, nil
}

// diskMemo remembers, for each file the driver wrote, its content and its
// stamp (device, inode, size, modification and change times) right after
// the write, so that planning takes a file whose stamp has not changed
// since for that content instead of reading it back: reading every file
// of a large bundle back was most of an Apply's planning. Any write,
// rename over, chmod or truncation by someone else changes the stamp
// (the change time at least), and the file is read. What the stamp cannot
// tell is a change in place, to the same size, within the filesystem's
// timestamp granularity after the driver's own write; that is seen at the
// next write. Content is held as given: read only.
type diskMemo struct {
	mu   sync.Mutex
	last map[string]onDisk
}

type onDisk struct {
	content []byte
	stamp   stamp
}

// get returns the content remembered for name when fi has its stamp.
func (m *diskMemo) get(name string, fi fs.FileInfo) ([]byte, bool) {
	st, ok := stampOf(fi)
	if !ok {
		return nil, false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	last, ok := m.last[name]
	if !ok || last.stamp != st {
		return nil, false
	}
	return last.content, true
}

// wrote remembers content as what name holds, with the stamp it has now;
// without a stamp (an error, or a system without one) name is forgotten.
func (m *diskMemo) wrote(root *os.Root, name string, content []byte) {
	var st stamp
	fi, err := root.Lstat(name)
	ok := err == nil
	if ok {
		st, ok = stampOf(fi)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if !ok {
		delete(m.last, name)
		return
	}
	if m.last == nil {
		m.last = map[string]onDisk{}
	}
	m.last[name] = onDisk{content: content, stamp: st}
}

// writeFile writes a bundle file atomically, creating its directories.
func (d *Driver) writeFile(root *os.Root, m *manifest, f File) error {
	for _, a := range ancestors(f.Path) {
		err := root.Mkdir(a, d.opts.DirMode)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("runtime: create directory %s: %w", a, err)
		}
		if err := root.Chmod(a, d.opts.DirMode); err != nil {
			return fmt.Errorf("runtime: chmod directory %s: %w", a, err)
		}
		m.Dirs = append(m.Dirs, a)
	}
	if err := writeAtomic(root, f.Path, f.Content, d.modeOf(f), true); err != nil {
		return fmt.Errorf("runtime: write %s: %w", f.Path, err)
	}
	d.disk.wrote(root, f.Path, f.Content)
	return nil
}

// openDir opens Dir, creating it (and its parents) with DirMode when it is
// missing: a folder removed behind the driver's back is delivered again,
// not an error.
func (d *Driver) openDir() (*os.Root, error) {
	if err := os.MkdirAll(d.opts.Dir, d.opts.DirMode); err != nil {
		return nil, fmt.Errorf("runtime: create Dir: %w", err)
	}
	root, err := os.OpenRoot(d.opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("runtime: open Dir: %w", err)
	}
	return root, nil
}

// modeDiffers reports whether the file at name is there with another
// permission than f is written with.
func (d *Driver) modeDiffers(t *tree, f File) bool {
	fi, err := t.lstat(f.Path)
	return err == nil && fi != nil && fi.Mode().IsRegular() && fi.Mode().Perm() != d.modeOf(f)
}

// writeAtomic writes data to a temporary file in the directory of name,
// gives it mode and renames it to name: a reader sees the old or the new
// content, never a part. With durable, the file is fsynced before the rename
// and the directory after it, so that the new content also survives a power
// loss.
func writeAtomic(root *os.Root, name string, data []byte, mode fs.FileMode, durable bool) (err error) {
	dir := path.Dir(name)
	tmp := path.Join(dir, tmpPrefix+rand.Text())
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = root.Remove(tmp) // the write already failed; a leftover is removed by a later Apply
		}
	}()
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if durable {
		if err := f.Sync(); err != nil {
			_ = f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	// The umask may have narrowed the mode given to OpenFile.
	if err := root.Chmod(tmp, mode); err != nil {
		return err
	}
	if err := root.Rename(tmp, name); err != nil {
		return err
	}
	if durable {
		syncDir(root, dir)
	}
	return nil
}

// syncDir flushes a directory's entries; best effort, since some filesystems
// cannot sync a directory and the renames it makes durable have succeeded.
func syncDir(root *os.Root, dir string) {
	d, err := root.Open(dir)
	if err != nil {
		return
	}
	_ = d.Sync()
	_ = d.Close()
}

// removeLeftovers removes temporary files left by an interrupted write in the
// given directories; best effort.
func removeLeftovers(root *os.Root, dirs []string) {
	for _, dir := range dirs {
		f, err := root.Open(dir)
		if err != nil {
			continue
		}
		names, _ := f.Readdirnames(-1)
		_ = f.Close()
		for _, n := range names {
			if strings.HasPrefix(n, tmpPrefix) {
				_ = root.Remove(path.Join(dir, n))
			}
		}
	}
}

// removeStale removes owned files that left the bundle, then the directories
// the driver created that are empty now. It returns the removed paths.
func removeStale(root *os.Root, m *manifest, stale []string) ([]string, error) {
	var removed []string
	var errs []error
	for _, s := range stale {
		err := root.Remove(s)
		switch {
		case err == nil:
			removed = append(removed, s)
			delete(m.Files, s)
		case errors.Is(err, fs.ErrNotExist):
			delete(m.Files, s)
		default:
			errs = append(errs, fmt.Errorf("runtime: remove %s: %w", s, err))
		}
	}
	needed := map[string]bool{}
	for p := range m.Files {
		for _, a := range ancestors(p) {
			needed[a] = true
		}
	}
	dirs := slices.Clone(m.Dirs)
	// Deepest first, so that a parent is tried after its children.
	slices.SortFunc(dirs, func(a, b string) int {
		if n := strings.Count(b, "/") - strings.Count(a, "/"); n != 0 {
			return n
		}
		return strings.Compare(a, b)
	})
	for _, dir := range dirs {
		if needed[dir] {
			continue
		}
		// Remove fails on a directory that is not empty: what is left in
		// it is not the driver's, and it stays.
		if err := root.Remove(dir); err == nil || errors.Is(err, fs.ErrNotExist) {
			m.Dirs = slices.DeleteFunc(m.Dirs, func(s string) bool { return s == dir })
		}
	}
	slices.Sort(removed)
	return removed, errors.Join(errs...)
}
