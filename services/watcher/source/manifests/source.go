package manifests

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// Source is a folder of manifests as a weft source (source.Source). It
// follows the folder with Watcher.RunDeltas and holds no object: per file,
// only the identities of its last good objects, and per identity the files
// holding it. The first pass reports the watched types' complete set a
// chunk of files at a time (source.ReplacePages; with one Replace per type
// when the sink takes no pages), so the whole folder is never held at once;
// every later pass reports the objects of the files that were
// read again, many at once when the sink can (the sink's store skips those
// whose content did not change), and deletes the identities no file holds
// any more, so that an edit costs what it changed, whatever the size of
// the folder. A file read again for a change parses only the documents
// whose bytes differ from its last good read (the source keeps each
// document's sum, not its content): the objects of the others are known
// unchanged and not reported. Each pass ends with Synced and the folder's current
// problems. A write that failed is written again on the next pass, from
// the files read again for it.
//
// A file that stops parsing (or holds one identity twice) keeps its last
// good objects: its error is reported, its objects stay. When files hold
// the same identity, the file first in path order wins and the others'
// copies are reported as duplicates.
type Source struct {
	dir    string
	rescan time.Duration
	types  []string
	typeOf func(apiVersion, kind string) (string, bool)
	opts   []Option

	mu       sync.Mutex
	files    map[string]*fileState  // by path
	first    map[objectKey]string   // the file first in path order holding each identity
	others   map[objectKey][]string // the further files holding one, in path order: duplicates
	dirErrs  []ParseError           // problems of the folder's directories
	pending  map[objectKey]bool     // identities whose last write failed
	replaced bool                   // the first complete set is stored
}

// objectKey names an object as the sink does.
type objectKey struct{ typ, namespace, name string }

// String names the object as "type namespace/name".
func (k objectKey) String() string { return fmt.Sprintf("%s %s/%s", k.typ, k.namespace, k.name) }

// fileState is what the source keeps of one file: the identities of its
// last good objects, where each was and the sum of its document, the sums
// of that read's documents without a watched object, and the file's
// current problems.
type fileState struct {
	keys []objectKey
	locs []loc
	sums []uint64
	bare []uint64
	errs []ParseError
}

// held is one watched object of a file: where it is, and its document's
// sum (0 when none).
type held struct {
	at  loc
	sum uint64
}

// loc is where an object was found in its file.
type loc struct{ doc, line int32 }

// locOf is where the file's object k was.
func (f *fileState) locOf(k objectKey) loc {
	if i := slices.Index(f.keys, k); i >= 0 {
		return f.locs[i]
	}
	return loc{}
}

// chunkFiles is how many files the source's first complete listing reads
// and stores at a time.
const chunkFiles = 16

// NewSource returns a source over dir reporting the given types; typeOf maps
// an object's apiVersion and kind to its watched type. opts configure its
// Watcher.
func NewSource(dir string, rescan time.Duration, types []string, typeOf func(apiVersion, kind string) (string, bool), opts ...Option) *Source {
	return &Source{dir: dir, rescan: rescan, types: types, typeOf: typeOf, opts: opts,
		files: map[string]*fileState{}, first: map[objectKey]string{}, others: map[objectKey][]string{}, pending: map[objectKey]bool{}}
}

// Run watches the folder until ctx is done.
func (s *Source) Run(ctx context.Context, sink source.Sink) error {
	w, err := NewWatcher(s.dir, append([]Option{WithRescan(s.rescan), WithChunks(chunkFiles), withKnownDocs(s.knownDocs)}, s.opts...)...)
	if err != nil {
		return err
	}
	return w.RunDeltas(ctx, func(ctx context.Context, d Delta) (Reread, error) { return s.report(ctx, d, sink) })
}

// knownDocs says which documents of path the source holds: those of the
// file's last good read. It is asked while the folder is read, outside
// report.
func (s *Source) knownDocs(path string) func(sum uint64) bool {
	s.mu.Lock()
	var sums map[uint64]bool
	if f := s.files[path]; f != nil {
		sums = make(map[uint64]bool, len(f.sums)+len(f.bare))
		for _, sum := range f.sums {
			sums[sum] = true
		}
		for _, sum := range f.bare {
			sums[sum] = true
		}
	}
	s.mu.Unlock()
	return func(sum uint64) bool { return sums[sum] }
}

// Resync re-reads the whole folder now and reports every type's complete
// set again, a chunk of files at a time as the first listing does: what
// the sink holds that no file does (left by an earlier run, or a delete
// that was lost) is deleted.
func (s *Source) Resync(ctx context.Context, sink source.Sink) error {
	x := newIndex(s.dir, nil)
	x.lean, x.chunk, x.deferReads = true, chunkFiles, true
	if err := x.full(nil); err != nil {
		return fmt.Errorf("manifests: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.replaceChunks(ctx, x.delta(true), sink); err != nil {
		return err
	}
	s.replaced = true
	return s.synced(ctx, sink)
}

// report takes in a delta and stores what it changed through sink. It
// fails when a write failed, so that the watcher calls again soon, and
// names the files to read again for the writes to do.
func (s *Source) report(ctx context.Context, d Delta, sink source.Sink) (Reread, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if d.Chunks != nil && !s.replaced {
		if err := s.replaceChunks(ctx, d, sink); err != nil {
			return Reread{All: true}, err
		}
		s.replaced = true
		return Reread{}, s.synced(ctx, sink)
	}
	if d.Chunks != nil {
		d = gather(d)
	}
	c := s.take(ctx, d, sink)
	if !s.replaced {
		if !d.Full {
			return Reread{All: true}, nil // the first complete set needs every object
		}
		if err := s.replaceAll(ctx, c, sink); err != nil {
			return Reread{All: true}, err
		}
		s.replaced = true
	} else if again, err := s.reportChanges(ctx, c, sink); err != nil || len(again)+len(c.whole) > 0 {
		return Reread{Files: append(again, c.whole...)}, err
	}
	return Reread{}, s.synced(ctx, sink)
}

// synced marks every type synced with the folder's current problems.
func (s *Source) synced(ctx context.Context, sink source.Sink) error {
	problems := s.problems()
	var failed error
	for _, typ := range s.types {
		if err := sink.Synced(ctx, typ, problems); err != nil {
			sink.Problem(ctx, err)
			failed = err
		}
	}
	return failed
}

// gather turns a full delta in chunks into one with every file in Files.
func gather(d Delta) Delta {
	out := Delta{Full: d.Full, DirErrors: d.DirErrors, Files: map[string]*FileContent{}}
	for chunk := range d.Chunks {
		maps.Copy(out.Files, chunk)
	}
	return out
}

// replaceChunks reports every type's complete set from a full delta in
// chunks, a page per chunk as it is read: the objects of the identities
// whose first file in path order is in the chunk. The chunks come in path
// order, so that file is final when its chunk comes, and no more than a
// chunk of objects is held at once.
func (s *Source) replaceChunks(ctx context.Context, d Delta, sink source.Sink) error {
	present := make(map[string]bool, len(d.Paths))
	for _, p := range d.Paths {
		present[p] = true
	}
	s.dropMissing(func(path string) bool { return present[path] }, s.newChanges())
	s.takeDirErrors(ctx, d.DirErrors, sink)
	pages := func(yield func([]store.Object, error) bool) {
		for chunk := range d.Chunks {
			c := s.newChanges()
			s.takeFiles(ctx, chunk, sink, c)
			var page []store.Object
			for path, objs := range c.fresh {
				for k, o := range objs {
					if s.first[k] == path {
						page = append(page, o)
					}
				}
			}
			if !yield(page, nil) {
				return
			}
		}
	}
	if err := source.ReplacePages(ctx, sink, s.types, pages); err != nil {
		sink.Problem(ctx, err)
		return err
	}
	clear(s.pending)
	return nil
}

// changes is what one delta changed: the identities whose object may have
// changed, with the file that stood for each before, the objects read, and
// the files to read again whole, taken from nothing of this delta.
type changes struct {
	touched map[objectKey]string                  // identity -> the file that held it first, "" if none
	fresh   map[string]map[objectKey]store.Object // by file: the objects read now
	whole   []string
}

// take records the files of d and returns what changed. Problems found in
// d are reported to sink.
func (s *Source) take(ctx context.Context, d Delta, sink source.Sink) changes {
	c := s.newChanges()
	if d.Full {
		s.dropMissing(func(path string) bool { _, ok := d.Files[path]; return ok }, c)
	}
	s.takeDirErrors(ctx, d.DirErrors, sink)
	s.takeFiles(ctx, d.Files, sink, c)
	return c
}

func (s *Source) newChanges() changes {
	return changes{touched: map[objectKey]string{}, fresh: map[string]map[objectKey]store.Object{}}
}

// touch notes that k may have changed, and which file held it first before.
func (s *Source) touch(c changes, k objectKey) {
	if _, ok := c.touched[k]; !ok {
		c.touched[k] = s.first[k]
	}
}

// dropMissing forgets the files a full delta does not hold (present says
// which it holds), and touches every identity of those it holds: each is
// reported again.
func (s *Source) dropMissing(present func(path string) bool, c changes) {
	touch := func(k objectKey) { s.touch(c, k) }
	for path, f := range s.files {
		if !present(path) {
			s.setGood(path, nil, nil, touch)
			delete(s.files, path)
		} else {
			for _, k := range f.keys {
				touch(k) // every object is reported again
			}
		}
	}
}

// takeDirErrors records and reports the folder's directory problems.
func (s *Source) takeDirErrors(ctx context.Context, errs []ParseError, sink source.Sink) {
	for _, pe := range errs {
		sink.Problem(ctx, pe)
	}
	s.dirErrs = errs
}

// takeFiles records files (nil content: gone) into c, and reports their
// problems and the duplicates among the identities touched.
func (s *Source) takeFiles(ctx context.Context, files map[string]*FileContent, sink source.Sink, c changes) {
	touch := func(k objectKey) { s.touch(c, k) }
	for path, fc := range files {
		if fc == nil {
			s.setGood(path, nil, nil, touch)
			delete(s.files, path)
			continue
		}
		objs, good, bare, errs, complete := s.objectsOf(path, fc, s.files[path])
		if !complete {
			// A document kept unparsed is no longer the one held (a
			// resync came between the read and now): read it whole.
			c.whole = append(c.whole, path)
			continue
		}
		f := s.files[path]
		if f == nil {
			f = &fileState{}
			s.files[path] = f
		}
		f.errs = errs
		for _, pe := range errs {
			sink.Problem(ctx, fmt.Errorf("not loaded; the last good objects of %s stay: %w", pe.File, pe))
		}
		if len(errs) == 0 {
			s.setGood(path, good, bare, touch)
			c.fresh[path] = objs
		}
	}
	for k := range c.touched {
		if len(s.others[k]) > 0 {
			for _, pe := range s.duplicates(k) {
				sink.Problem(ctx, pe)
			}
		}
	}
}

// objectsOf converts a file's watched objects, with the identities of its
// kept documents from before, the file's last good state; an identity held
// twice is one of its problems. It returns the objects parsed, every
// identity with its place, the sums of the documents without a watched
// object, the problems, and false when a kept document is not one before
// holds.
func (s *Source) objectsOf(path string, fc *FileContent, before *fileState) (map[objectKey]store.Object, map[objectKey]held, []uint64, []ParseError, bool) {
	errs := slices.Clone(fc.Errors)
	objs := make(map[objectKey]store.Object, len(fc.Objects))
	good := make(map[objectKey]held, len(fc.Objects)+len(fc.Kept))
	var bare []uint64
	add := func(k objectKey, h held, what fmt.Stringer) bool {
		if first, dup := good[k]; dup {
			errs = append(errs, ParseError{File: path, Doc: int(h.at.doc), Line: int(h.at.line),
				Err: fmt.Errorf("duplicate %s: already defined in %s", what, location(path, int(first.at.doc), int(first.at.line)))})
			return false
		}
		good[k] = h
		return true
	}
	keptKeys := before.keysBySum(len(fc.Kept))
	parsed, kept := fc.Objects, fc.Kept
	watched := map[uint64]bool{}
	for len(parsed) > 0 || len(kept) > 0 {
		if len(kept) == 0 || (len(parsed) > 0 && parsed[0].Doc < kept[0].Doc) {
			o := parsed[0]
			parsed = parsed[1:]
			typ, ok := s.typeOf(o.APIVersion, o.Kind)
			if !ok {
				continue
			}
			watched[o.sum] = true
			k := objectKey{typ, o.Namespace, o.Name}
			if add(k, held{loc{int32(o.Doc), int32(o.Line)}, o.sum}, o) {
				rv, _ := nested(o.Body, "metadata", "resourceVersion").(string)
				objs[k] = store.Object{Type: typ, Namespace: o.Namespace, Name: o.Name, ResourceVersion: rv, Origin: o.File, Body: o.Body}
			}
			continue
		}
		d := kept[0]
		kept = kept[1:]
		keys, ok := keptKeys[d.Sum]
		if !ok {
			return nil, nil, nil, nil, false
		}
		if len(keys) == 0 {
			bare = append(bare, d.Sum)
		}
		for _, k := range keys {
			add(k, held{loc{int32(d.Doc), int32(d.Line)}, d.Sum}, k)
		}
	}
	for _, o := range fc.Objects {
		if o.sum != 0 && !watched[o.sum] {
			bare = append(bare, o.sum)
			watched[o.sum] = true
		}
	}
	return objs, good, bare, errs, true
}

// keysBySum gives the identities of each document of the file's last good
// read by its sum (an empty list for the documents without a watched
// object); nothing when there is no such read or nothing is asked (n, the
// documents asked about, is 0).
func (f *fileState) keysBySum(n int) map[uint64][]objectKey {
	if f == nil || n == 0 {
		return nil
	}
	out := make(map[uint64][]objectKey, len(f.sums)+len(f.bare))
	for i, sum := range f.sums {
		if sum != 0 {
			out[sum] = append(out[sum], f.keys[i])
		}
	}
	for _, sum := range f.bare {
		out[sum] = nil
	}
	return out
}

// setGood makes good the last good objects of path (nil: none) and the
// sums of its documents without a watched object, touching every identity
// it held or holds.
func (s *Source) setGood(path string, good map[objectKey]held, bare []uint64, touch func(objectKey)) {
	f := s.files[path]
	if f != nil {
		for _, k := range f.keys {
			touch(k)
			if _, still := good[k]; !still {
				s.unclaim(k, path)
			}
		}
	}
	was := make(map[objectKey]bool)
	if f != nil {
		for _, k := range f.keys {
			was[k] = true
		}
	}
	keys := make([]objectKey, 0, len(good))
	for k := range good {
		touch(k)
		if !was[k] {
			s.claim(k, path)
		}
		keys = append(keys, k)
	}
	locs := make([]loc, len(keys))
	sums := make([]uint64, len(keys))
	for i, k := range keys {
		locs[i], sums[i] = good[k].at, good[k].sum
	}
	switch {
	case f != nil:
		f.keys, f.locs, f.sums, f.bare = keys, locs, sums, bare
	case good != nil:
		s.files[path] = &fileState{keys: keys, locs: locs, sums: sums, bare: bare}
	}
}

// holders are the files holding k, in path order.
func (s *Source) holders(k objectKey) []string {
	first, ok := s.first[k]
	if !ok {
		return nil
	}
	return append([]string{first}, s.others[k]...)
}

// setHolders records the files holding k.
func (s *Source) setHolders(k objectKey, paths []string) {
	switch len(paths) {
	case 0:
		delete(s.first, k)
		delete(s.others, k)
	case 1:
		s.first[k] = paths[0]
		delete(s.others, k)
	default:
		s.first[k] = paths[0]
		s.others[k] = slices.Clone(paths[1:])
	}
}

func (s *Source) claim(k objectKey, path string) {
	if _, ok := s.first[k]; !ok {
		s.first[k] = path
		return
	}
	paths := s.holders(k)
	if i, found := slices.BinarySearchFunc(paths, path, comparePaths); !found {
		s.setHolders(k, slices.Insert(paths, i, path))
	}
}

func (s *Source) unclaim(k objectKey, path string) {
	if first, ok := s.first[k]; ok && first == path && len(s.others[k]) == 0 {
		delete(s.first, k)
		return
	}
	s.setHolders(k, slices.DeleteFunc(s.holders(k), func(p string) bool { return p == path }))
}

// duplicates are the problems of an identity that several files hold.
func (s *Source) duplicates(k objectKey) []ParseError {
	paths := s.holders(k)
	first := s.files[paths[0]].locOf(k)
	var out []ParseError
	for _, p := range paths[1:] {
		at := s.files[p].locOf(k)
		out = append(out, ParseError{File: p, Doc: int(at.doc), Line: int(at.line),
			Err: fmt.Errorf("duplicate %s %s/%s: already defined in %s", k.typ, k.namespace, k.name, location(paths[0], int(first.doc), int(first.line)))})
	}
	return out
}

// problems lists the folder's current problems, ordered by file.
func (s *Source) problems() []string {
	all := slices.Clone(s.dirErrs)
	for _, f := range s.files {
		all = append(all, f.errs...)
	}
	for k := range s.others {
		all = append(all, s.duplicates(k)...)
	}
	slices.SortStableFunc(all, func(a, b ParseError) int {
		return cmp.Or(comparePaths(a.File, b.File), cmp.Compare(a.Doc, b.Doc), strings.Compare(a.Error(), b.Error()))
	})
	var out []string
	for _, pe := range all {
		out = append(out, pe.Error())
	}
	return out
}

// replaceAll reports every type's complete set, from a full delta.
func (s *Source) replaceAll(ctx context.Context, c changes, sink source.Sink) error {
	byType := map[string][]store.Object{}
	for k, first := range s.first {
		if o, ok := c.fresh[first][k]; ok {
			byType[k.typ] = append(byType[k.typ], o)
		}
	}
	for _, typ := range s.types {
		slices.SortFunc(byType[typ], func(a, b store.Object) int {
			return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
		})
		if err := sink.Replace(ctx, typ, byType[typ]); err != nil {
			sink.Problem(ctx, err)
			return err
		}
	}
	clear(s.pending)
	return nil
}

// reportChanges stores the object of every touched (or pending) identity
// whose winning file was read now, and deletes those no file holds any
// more. It returns the files to read again: those that now stand for an
// identity without having been read (another file's copy went away), and,
// when a write failed, those of every identity it did not store.
func (s *Source) reportChanges(ctx context.Context, c changes, sink source.Sink) ([]string, error) {
	for k := range s.pending {
		if _, ok := c.touched[k]; !ok {
			c.touched[k] = "?" // stands for no file: its object is written again
		}
	}
	var (
		upserts []store.Object
		deletes []objectKey
		again   []string
	)
	for k, before := range c.touched {
		first, held := s.first[k]
		if !held {
			if before != "" || s.pending[k] {
				deletes = append(deletes, k)
			}
			continue
		}
		if o, ok := c.fresh[first][k]; ok {
			upserts = append(upserts, o)
		} else if first != before || s.pending[k] {
			// Its object was not read now (its file was not, or its
			// document was kept unparsed): read that file whole.
			again = append(again, first)
		}
	}
	if err := upsertAll(ctx, sink, upserts); err != nil {
		sink.Problem(ctx, err)
		s.failed(upserts, deletes)
		return s.winnersOf(upserts, again), err
	}
	for _, o := range upserts {
		delete(s.pending, objectKey{o.Type, o.Namespace, o.Name})
	}
	for i, k := range deletes {
		if err := sink.Delete(ctx, k.typ, k.namespace, k.name); err != nil {
			sink.Problem(ctx, err)
			s.failed(nil, deletes[i:])
			return again, err
		}
		delete(s.pending, k)
	}
	return again, nil
}

// failed marks identities whose write may not have happened.
func (s *Source) failed(upserts []store.Object, deletes []objectKey) {
	for _, o := range upserts {
		s.pending[objectKey{o.Type, o.Namespace, o.Name}] = true
	}
	for _, k := range deletes {
		s.pending[k] = true
	}
}

// winnersOf adds to files the files that hold objs.
func (s *Source) winnersOf(objs []store.Object, files []string) []string {
	for _, o := range objs {
		files = append(files, o.Origin)
	}
	slices.Sort(files)
	return slices.Compact(files)
}

// batchSink is a sink that stores many objects at once faster than one by
// one.
type batchSink interface {
	UpsertAll(ctx context.Context, objects []store.Object) error
}

// upsertAll stores objects through sink, at once when it can.
func upsertAll(ctx context.Context, sink source.Sink, objects []store.Object) error {
	if len(objects) == 0 {
		return nil
	}
	if b, ok := sink.(batchSink); ok && len(objects) > 1 {
		return b.UpsertAll(ctx, objects)
	}
	for _, o := range objects {
		if err := sink.Upsert(ctx, o); err != nil {
			return err
		}
	}
	return nil
}

func nested(obj map[string]any, keys ...string) any {
	var cur any = obj
	for _, k := range keys {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}
