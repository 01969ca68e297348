package manifests

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
)

// maxFileSize is the largest manifest file read; larger files are reported.
const maxFileSize = 64 << 20

// errNotDir is returned when the path to scan is not a directory.
var errNotDir = errors.New("not a directory")

// Scan reads every manifest under dir. The error is non-nil only when dir
// itself cannot be read; every other problem is in Snapshot.Errors.
func Scan(dir string) (Snapshot, error) {
	snap, _, err := scan(dir, nil)
	if err != nil {
		return Snapshot{}, fmt.Errorf("manifests: %w", err)
	}
	return snap, nil
}

// scan walks dir, calling onDir (when not nil) for each directory before
// reading it, and returns the snapshot and the directories it walked.
func scan(dir string, onDir func(path string) error) (Snapshot, []string, error) {
	root := filepath.Clean(dir)
	info, err := os.Stat(root)
	if err != nil {
		return Snapshot{}, nil, err
	}
	if !info.IsDir() {
		return Snapshot{}, nil, fmt.Errorf("%s: %w", root, errNotDir)
	}
	w := walker{onDir: onDir}
	if err := w.walk(root, true); err != nil {
		return Snapshot{}, nil, err
	}
	slices.SortFunc(w.files, comparePaths)
	return assemble(readAll(w.files), w.errs), w.dirs, nil
}

// walker collects the manifest files and directories of a tree.
type walker struct {
	onDir func(path string) error
	files []string
	dirs  []string
	errs  []ParseError
}

func (w *walker) walk(dir string, root bool) error {
	if w.onDir != nil {
		if err := w.onDir(dir); err != nil {
			if !root && errors.Is(err, fs.ErrNotExist) {
				return nil // removed since its parent was read
			}
			w.errs = append(w.errs, ParseError{File: dir, Err: fmt.Errorf("watch directory: %w", err)})
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		switch {
		case root:
			return err
		case errors.Is(err, fs.ErrNotExist) && len(entries) == 0:
			return nil // removed since its parent was read
		}
		w.errs = append(w.errs, ParseError{File: dir, Err: fmt.Errorf("read directory: %w", err)})
	}
	w.dirs = append(w.dirs, dir)
	for _, e := range entries {
		name := e.Name()
		if skipName(name) {
			continue
		}
		path := filepath.Join(dir, name)
		typ := e.Type()
		if typ&fs.ModeSymlink != 0 {
			fi, err := os.Stat(path)
			if err != nil {
				if isManifestName(name) {
					w.errs = append(w.errs, ParseError{File: path, Err: fmt.Errorf("read: %w", err)})
				}
				continue
			}
			if fi.IsDir() {
				continue // links to directories are not followed
			}
			typ = fi.Mode().Type()
		}
		switch {
		case typ.IsDir():
			if err := w.walk(path, false); err != nil {
				return err
			}
		case typ.IsRegular() && isManifestName(name):
			w.files = append(w.files, path)
		}
	}
	return nil
}

// skipName reports whether a file or directory is hidden or an editor's
// temporary file.
func skipName(name string) bool {
	return strings.HasPrefix(name, ".") || isTempName(name)
}

// isTempName reports whether name is an editor's backup, swap or auto-save
// file.
func isTempName(name string) bool {
	switch {
	case strings.HasPrefix(name, ".#"),
		strings.HasSuffix(name, "~"),
		strings.HasSuffix(name, ".swp"),
		strings.HasSuffix(name, ".swo"),
		strings.HasSuffix(name, ".swx"),
		len(name) > 1 && strings.HasPrefix(name, "#") && strings.HasSuffix(name, "#"):
		return true
	}
	return false
}

func isManifestName(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// comparePaths orders paths lexically, with "/" as the separator on every
// platform.
func comparePaths(a, b string) int {
	return strings.Compare(filepath.ToSlash(a), filepath.ToSlash(b))
}

// fileResult is what one file holds.
type fileResult struct {
	objs []Object
	errs []ParseError
}

// readAll reads and parses files in parallel; results keep the order of
// files.
func readAll(files []string) []fileResult {
	results := make([]fileResult, len(files))
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range min(runtime.GOMAXPROCS(0), len(files)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				results[i] = readFile(files[i])
			}
		})
	}
	wg.Wait()
	return results
}

func readFile(path string) fileResult {
	data, err := readLimited(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Removed since its directory was read, as editors do with their
		// backup files: it is simply not part of this snapshot.
		return fileResult{}
	}
	if err != nil {
		return fileResult{errs: []ParseError{{File: path, Err: err}}}
	}
	objs, errs := parseFile(path, data)
	return fileResult{objs: objs, errs: errs}
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	defer f.Close()
	size := 0
	if info, err := f.Stat(); err == nil && info.Size() <= maxFileSize {
		size = int(info.Size())
	}
	// One byte more than the size, so that the read that finds the end
	// does not grow the buffer; a file that grows meanwhile still reads
	// whole, up to the limit.
	data := make([]byte, 0, size+1)
	r := io.LimitReader(f, maxFileSize+1)
	for {
		n, err := r.Read(data[len(data):cap(data)])
		data = data[:len(data)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read: %w", err)
		}
		if len(data) == cap(data) {
			data = append(data, 0)[:len(data)]
		}
	}
	if len(data) > maxFileSize {
		return nil, fmt.Errorf("file is larger than %d MiB", maxFileSize>>20)
	}
	return data, nil
}

// assemble merges the files' results in file order: the first object with
// an identity wins, later ones become errors.
func assemble(results []fileResult, walkErrs []ParseError) Snapshot {
	var snap Snapshot
	snap.Errors = walkErrs
	n := 0
	for _, r := range results {
		n += len(r.objs)
	}
	snap.Objects = make([]Object, 0, n)
	seen := make(map[identity]Object, n)
	for _, r := range results {
		snap.Errors = append(snap.Errors, r.errs...)
		for _, o := range r.objs {
			id := identity{o.APIVersion, o.Kind, o.Namespace, o.Name}
			if first, dup := seen[id]; dup {
				snap.Errors = append(snap.Errors, ParseError{
					File: o.File, Doc: o.Doc, Line: o.Line,
					Err: fmt.Errorf("duplicate %s: already defined in %s", id, location(first.File, first.Doc, first.Line)),
				})
				continue
			}
			seen[id] = o
			snap.Objects = append(snap.Objects, o)
		}
	}
	slices.SortFunc(snap.Objects, compareObjects)
	slices.SortStableFunc(snap.Errors, func(a, b ParseError) int {
		return cmp.Or(comparePaths(a.File, b.File), cmp.Compare(a.Doc, b.Doc), cmp.Compare(a.Line, b.Line))
	})
	return snap
}
