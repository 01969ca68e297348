package manifests

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"iter"
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
	x := newIndex(dir, nil)
	if err := x.full(nil); err != nil {
		return Snapshot{}, fmt.Errorf("manifests: %w", err)
	}
	return x.snapshot(), nil
}

// statKey is what tells a file apart from the one read before without
// reading it: its size, modification time and inode (a ConfigMap volume's
// "..data" swap points a link at a new file of the same size).
type statKey struct {
	size, mtime int64
	dev, ino    uint64
}

func keyOf(fi fs.FileInfo) statKey {
	k := statKey{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	k.dev, k.ino = fileID(fi)
	return k
}

// indexedFile is one manifest file as last read.
type indexedFile struct {
	key    statKey
	res    fileResult
	unread bool // listed for a full delta in chunks, read when its chunk is taken
}

// indexedDir is one directory as last listed: its manifest files, its
// subdirectories and the problems met listing it.
type indexedDir struct {
	files   map[string]*indexedFile // by path
	subdirs map[string]bool         // by path
	errs    []ParseError
}

// index is what is known of a folder: every directory and manifest file in
// it, and what each file held when last read. A pass re-lists directories
// and reads only the files whose size, modification time or inode changed
// since they were read, or that a notification named.
type index struct {
	root   string
	dirs   map[string]*indexedDir
	onRead func(path string) // called before each file is read; may be nil
	// known, when not nil, says for a file which documents need no parsing
	// (see Watcher.RunDeltas); it is asked for files read in part only.
	known   func(path string) func(sum uint64) bool
	changed map[string]bool // files read or gone since the last delta
	lean    bool            // a delta hands the files' content over: it is not kept
	// chunk, when positive (lean only), makes a full delta hand its files
	// over in chunks of that many, each read when taken; deferReads is set
	// for the pass whose delta is full, whose files are then not read.
	chunk      int
	deferReads bool
	// untaken is set while a full delta's chunks have not all been taken.
	untaken bool
}

func newIndex(dir string, onRead func(string)) *index {
	return &index{root: filepath.Clean(dir), dirs: map[string]*indexedDir{}, onRead: onRead, changed: map[string]bool{}}
}

// pass is one update of an index: the directories walked and the files to
// read.
type pass struct {
	x      *index
	onDir  func(path string) error // called before a directory is listed; may be nil
	force  map[string]bool         // files read whatever their stat says
	whole  map[string]bool         // files whose every document is parsed
	all    bool                    // every file is read, and parsed whole
	reads  []string
	keys   []statKey
	walked []string
}

// full re-lists every directory of the tree, calling onDir (when not nil)
// for each before listing it, and reads the files that changed. It fails
// only when the root cannot be read.
func (x *index) full(onDir func(string) error) error {
	return x.fullPass(onDir, map[string]bool{}, nil)
}

// fullPass is full that also reads the files in force, parsing those in
// whole whole; with a nil force it reads and parses every file whole.
func (x *index) fullPass(onDir func(string) error, force, whole map[string]bool) error {
	if err := x.checkRoot(); err != nil {
		return err
	}
	p := &pass{x: x, onDir: onDir, force: force, whole: whole, all: force == nil}
	if err := p.list(x.root, true); err != nil {
		return err
	}
	p.read()
	return nil
}

// update re-lists only the given directories (and walks whole any
// directory found that is not indexed yet), and reads the files among them
// that changed or are in force, parsing those in whole whole. It returns
// the directories walked.
func (x *index) update(dirs []string, force, whole map[string]bool, onDir func(string) error) ([]string, error) {
	if err := x.checkRoot(); err != nil {
		return nil, err
	}
	p := &pass{x: x, onDir: onDir, force: force, whole: whole}
	slices.SortFunc(dirs, comparePaths)
	listed := make(map[string]bool, len(dirs))
	for _, d := range dirs {
		if d != x.root && x.dirs[filepath.Dir(d)] == nil {
			continue // not in the tree (any more): its parent lists it if it is
		}
		listed[d] = true
		if err := p.list(d, false); err != nil {
			return nil, err
		}
	}
	for path := range force {
		if !listed[filepath.Dir(path)] {
			p.refile(path)
		}
	}
	p.read()
	return p.walked, nil
}

// refile queues one known file of a directory that is not listed again
// (its content was written) for reading. A file that is not known is left
// to the listing of its directory, which a creation or a rename causes.
func (p *pass) refile(path string) {
	d := p.x.dirs[filepath.Dir(path)]
	if d == nil || d.files[path] == nil {
		return
	}
	info, err := os.Stat(path)
	if err != nil || !info.Mode().IsRegular() {
		return // removed or replaced: its directory is listed on that notification
	}
	p.reads = append(p.reads, path)
	p.keys = append(p.keys, keyOf(info))
}

func (x *index) checkRoot() error {
	info, err := os.Stat(x.root)
	if err != nil {
		return err
	}
	if !info.IsDir() {
		return fmt.Errorf("%s: %w", x.root, errNotDir)
	}
	return nil
}

// list lists dir, records its files and subdirectories, queues the files
// that need reading, and lists its subdirectories too when deep or when
// they are not indexed yet.
func (p *pass) list(dir string, deep bool) error {
	x := p.x
	root := dir == x.root
	var errs []ParseError
	if p.onDir != nil {
		if err := p.onDir(dir); err != nil {
			if !root && errors.Is(err, fs.ErrNotExist) {
				x.drop(dir) // removed since its parent was read
				return nil
			}
			errs = append(errs, ParseError{File: dir, Err: fmt.Errorf("watch directory: %w", err)})
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		switch {
		case root:
			return err
		case errors.Is(err, fs.ErrNotExist) && len(entries) == 0:
			x.drop(dir) // removed since its parent was read
			return nil
		}
		errs = append(errs, ParseError{File: dir, Err: fmt.Errorf("read directory: %w", err)})
	}
	d := x.dirs[dir]
	if d == nil {
		d = &indexedDir{files: map[string]*indexedFile{}, subdirs: map[string]bool{}}
		x.dirs[dir] = d
	}
	p.walked = append(p.walked, dir)
	files := make(map[string]bool, len(entries))
	subdirs := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if skipName(name) {
			continue
		}
		path := filepath.Join(dir, name)
		var info fs.FileInfo
		typ := e.Type()
		if typ&fs.ModeSymlink != 0 {
			fi, err := os.Stat(path)
			if err != nil {
				if isManifestName(name) {
					errs = append(errs, ParseError{File: path, Err: fmt.Errorf("read: %w", err)})
				}
				continue
			}
			if fi.IsDir() {
				continue // links to directories are not followed
			}
			info, typ = fi, fi.Mode().Type()
		}
		switch {
		case typ.IsDir():
			subdirs[path] = true
			if deep || x.dirs[path] == nil {
				if err := p.list(path, deep); err != nil {
					return err
				}
			}
		case typ.IsRegular() && isManifestName(name):
			if info == nil {
				if info, err = e.Info(); err != nil {
					continue // removed since the directory was read
				}
			}
			files[path] = true
			key := keyOf(info)
			if f := d.files[path]; f != nil && f.key == key && !p.force[path] && !p.all {
				continue
			}
			p.reads = append(p.reads, path)
			p.keys = append(p.keys, key)
		}
	}
	for path := range d.files {
		if !files[path] {
			delete(d.files, path)
			x.changed[path] = true
		}
	}
	for path := range d.subdirs {
		if !subdirs[path] {
			x.drop(path)
		}
	}
	d.subdirs, d.errs = subdirs, errs
	return nil
}

// read reads the queued files in parallel and records what they hold. A
// file removed since it was listed holds nothing.
func (p *pass) read() {
	if p.x.deferReads {
		for i, path := range p.reads {
			if d := p.x.dirs[filepath.Dir(path)]; d != nil {
				d.files[path] = &indexedFile{key: p.keys[i], unread: true}
				p.x.changed[path] = true
			}
		}
		return
	}
	if p.x.onRead != nil {
		for _, path := range p.reads {
			p.x.onRead(path)
		}
	}
	results := readAll(p.reads, p.knownOf)
	for i, path := range p.reads {
		d := p.x.dirs[filepath.Dir(path)]
		if d == nil {
			continue
		}
		d.files[path] = &indexedFile{key: p.keys[i], res: results[i]}
		p.x.changed[path] = true
	}
}

// knownOf is what a file read in this pass need not parse: nothing when
// the pass or the file is read whole.
func (p *pass) knownOf(path string) func(uint64) bool {
	if p.x.known == nil || p.all || p.whole[path] {
		return nil
	}
	return p.x.known(path)
}

// drop forgets dir and everything below it.
func (x *index) drop(dir string) {
	d := x.dirs[dir]
	if d == nil {
		return
	}
	delete(x.dirs, dir)
	for path := range d.files {
		x.changed[path] = true
	}
	for sub := range d.subdirs {
		x.drop(sub)
	}
	if parent := x.dirs[filepath.Dir(dir)]; parent != nil && dir != x.root {
		delete(parent.subdirs, dir)
	}
}

// snapshot assembles what the index holds. Objects of files that were not
// read again are the values of the earlier snapshots.
func (x *index) snapshot() Snapshot {
	var paths []string
	var walkErrs []ParseError
	for _, d := range x.dirs {
		walkErrs = append(walkErrs, d.errs...)
		for path := range d.files {
			paths = append(paths, path)
		}
	}
	slices.SortFunc(paths, comparePaths)
	results := make([]fileResult, len(paths))
	for i, path := range paths {
		results[i] = x.dirs[filepath.Dir(path)].files[path].res
	}
	return assemble(results, walkErrs)
}

// Delta is what changed in a folder since the previous Delta (see
// Watcher.RunDeltas).
type Delta struct {
	// Full is set on the first Delta of a run: Files holds every manifest
	// file of the folder.
	Full bool
	// Files holds each manifest file read or gone since the previous
	// Delta: what it holds now, or nil when it is gone. A file read again
	// holds new values; objects of files not in Files are unchanged.
	Files map[string]*FileContent
	// Chunks, set instead of Files on a full Delta of a Watcher made
	// WithChunks, yields the content of every file of Paths in chunks, in
	// path order, reading each chunk's files when it is taken. It can be
	// taken once, during the callback.
	Chunks iter.Seq[map[string]*FileContent]
	// Paths are the files of a full Delta in chunks, in path order.
	Paths []string
	// DirErrors holds the current problems of the folder's directories
	// (one that cannot be read or watched, a broken link to a manifest).
	DirErrors []ParseError
}

// FileContent is what one manifest file holds: its objects in file order
// and its problems. Identities are not checked across files (or within
// one): that is the reader's part.
type FileContent struct {
	Objects []Object
	// Kept are the documents not parsed, whose bytes the reader already
	// holds (see Watcher.RunDeltas); always empty in a full Delta.
	Kept   []KeptDoc
	Errors []ParseError
}

// delta returns what changed since the last delta and forgets it; full
// returns every file, in chunks when the pass deferred its reads.
func (x *index) delta(full bool) Delta {
	if full && x.deferReads {
		x.deferReads = false
		return x.chunked()
	}
	d := Delta{Full: full, Files: map[string]*FileContent{}}
	take := func(f *indexedFile) *FileContent {
		c := &FileContent{Objects: f.res.objs, Kept: f.res.kept, Errors: f.res.errs}
		if x.lean {
			f.res = fileResult{}
		}
		return c
	}
	for _, dir := range x.dirs {
		d.DirErrors = append(d.DirErrors, dir.errs...)
		if full {
			for path, f := range dir.files {
				d.Files[path] = take(f)
			}
		}
	}
	slices.SortFunc(d.DirErrors, func(a, b ParseError) int { return comparePaths(a.File, b.File) })
	if !full {
		for path := range x.changed {
			d.Files[path] = nil
			if dir := x.dirs[filepath.Dir(path)]; dir != nil {
				if f := dir.files[path]; f != nil {
					d.Files[path] = take(f)
				}
			}
		}
	}
	clear(x.changed)
	return d
}

// chunked is the full delta of a pass that deferred its reads: every file
// in Paths, and their content in Chunks, each chunk read when taken.
func (x *index) chunked() Delta {
	d := Delta{Full: true}
	files := map[string]*indexedFile{}
	for _, dir := range x.dirs {
		d.DirErrors = append(d.DirErrors, dir.errs...)
		for path, f := range dir.files {
			d.Paths = append(d.Paths, path)
			files[path] = f
		}
	}
	slices.SortFunc(d.DirErrors, func(a, b ParseError) int { return comparePaths(a.File, b.File) })
	slices.SortFunc(d.Paths, comparePaths)
	clear(x.changed)
	paths := slices.Clone(d.Paths)
	x.untaken = true
	d.Chunks = func(yield func(map[string]*FileContent) bool) {
		for start := 0; start < len(paths); start += x.chunk {
			part := paths[start:min(start+x.chunk, len(paths))]
			var reads []string
			for _, path := range part {
				if files[path].unread {
					reads = append(reads, path)
				}
			}
			if x.onRead != nil {
				for _, path := range reads {
					x.onRead(path)
				}
			}
			results := readAll(reads, nil)
			chunk := make(map[string]*FileContent, len(part))
			for i, path := range reads {
				files[path].unread = false
				chunk[path] = &FileContent{Objects: results[i].objs, Errors: results[i].errs}
			}
			for _, path := range part {
				if f := files[path]; chunk[path] == nil {
					chunk[path] = &FileContent{Objects: f.res.objs, Errors: f.res.errs}
					f.res = fileResult{}
				}
			}
			if !yield(chunk) {
				return
			}
		}
		x.untaken = false
	}
	return d
}

// dirList returns the indexed directories.
func (x *index) dirList() []string {
	out := make([]string, 0, len(x.dirs))
	for d := range x.dirs {
		out = append(out, d)
	}
	return out
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

// fileResult is what one file holds: the objects parsed, the documents
// kept unparsed, the problems.
type fileResult struct {
	objs []Object
	kept []KeptDoc
	errs []ParseError
}

// readAll reads and parses files in parallel; results keep the order of
// files. knownOf, when not nil, gives for a file the documents it need not
// parse (parseKnown).
func readAll(files []string, knownOf func(path string) func(uint64) bool) []fileResult {
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
				var known func(uint64) bool
				if knownOf != nil {
					known = knownOf(files[i])
				}
				results[i] = readFile(files[i], known)
			}
		})
	}
	wg.Wait()
	return results
}

func readFile(path string, known func(uint64) bool) fileResult {
	data, err := readLimited(path)
	if errors.Is(err, fs.ErrNotExist) {
		// Removed since its directory was read, as editors do with their
		// backup files: it is simply not part of this snapshot.
		return fileResult{}
	}
	if err != nil {
		return fileResult{errs: []ParseError{{File: path, Err: err}}}
	}
	return parseKnown(path, data, known)
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
