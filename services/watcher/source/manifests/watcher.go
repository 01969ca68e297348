package manifests

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Defaults for a Watcher. The debounce only has to cover the events of one
// save (an editor's write, then rename): a burst reads just the files it
// named, so a short one costs little and keeps an edit's latency low.
const (
	DefaultRescan   = 30 * time.Second
	DefaultDebounce = 10 * time.Millisecond
)

// closedSettle is how long the folder must stay quiet after a written file
// was closed, or a file moved into place, with no other file open for
// writing, before it is scanned (at most the debounce): the events of a
// save have all come by then, and those of a burst of saves (a git
// checkout) follow one another closer than that.
const closedSettle = time.Millisecond

// maxBurst bounds how long a stream of changes can postpone a scan, in
// debounce intervals: changes that never pause are still picked up.
const maxBurst = 3

var (
	// ErrInvalidOption is matched by errors.Is when NewWatcher rejects an
	// option's value.
	ErrInvalidOption = errors.New("manifests: invalid option")
	// ErrRunning is returned by Run when the Watcher is already running.
	ErrRunning = errors.New("manifests: watcher already running")
)

// Option configures a Watcher. An option can reject its value, which makes
// NewWatcher fail.
type Option func(*settings) error

type settings struct {
	rescan   time.Duration
	debounce time.Duration
	onRead   func(path string)
	chunk    int
	known    func(path string) func(sum uint64) bool
}

// WithRescan sets the interval of the periodic full re-scan, the safety net
// for changes that filesystem notifications miss. Zero disables it; a
// negative interval is rejected. The default is DefaultRescan.
func WithRescan(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("%w: rescan interval %s is negative", ErrInvalidOption, d)
		}
		s.rescan = d
		return nil
	}
}

// WithDebounce sets how long the directory must be quiet after a change
// before it is scanned, so that a burst of changes (an editor saving, a git
// checkout) gives one scan. A burst that goes on for three intervals is
// scanned anyway. Where the system reports the close of a written file
// (Linux), a change that ends with a file closed after writing, or moved
// into place, while no other file is open for writing, is scanned once
// the folder has been quiet for a millisecond instead (or the debounce,
// if shorter): its content is whole. Zero scans after every change; a
// negative interval is rejected. The default is DefaultDebounce.
func WithDebounce(d time.Duration) Option {
	return func(s *settings) error {
		if d < 0 {
			return fmt.Errorf("%w: debounce interval %s is negative", ErrInvalidOption, d)
		}
		s.debounce = d
		return nil
	}
}

// WithReadHook sets a function called with the path of every file the
// Watcher is about to read, from the goroutine that called Run: a count of
// the reads a change costs.
func WithReadHook(fn func(path string)) Option {
	return func(s *settings) error {
		s.onRead = fn
		return nil
	}
}

// WithChunks makes RunDeltas hand a full delta (the first of a run, and
// the one after the callback asked for everything again) over in chunks of
// n files, in path order, each read only when its turn comes (Delta.Chunks),
// so that the whole folder is never held at once. n must be positive.
func WithChunks(n int) Option {
	return func(s *settings) error {
		if n <= 0 {
			return fmt.Errorf("%w: chunk size %d is not positive", ErrInvalidOption, n)
		}
		s.chunk = n
		return nil
	}
}

// withKnownDocs makes RunDeltas leave unparsed the YAML documents of a
// file read again whose sum known(path) reports: the callback holds them
// (see RunDeltas).
func withKnownDocs(known func(path string) func(sum uint64) bool) Option {
	return func(s *settings) error {
		s.known = known
		return nil
	}
}

// Watcher keeps the snapshot of a manifest folder current.
type Watcher struct {
	dir     string
	set     settings
	running atomic.Bool
}

// NewWatcher returns a Watcher of dir, which must be an existing directory.
func NewWatcher(dir string, opts ...Option) (*Watcher, error) {
	if dir == "" {
		return nil, fmt.Errorf("%w: empty directory", ErrInvalidOption)
	}
	s := settings{rescan: DefaultRescan, debounce: DefaultDebounce}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&s); err != nil {
			return nil, err
		}
	}
	dir = filepath.Clean(dir)
	info, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	if !info.IsDir() {
		return nil, fmt.Errorf("manifests: %s: %w", dir, errNotDir)
	}
	return &Watcher{dir: dir, set: s}, nil
}

// Dir returns the watched directory.
func (w *Watcher) Dir() string { return w.dir }

// Run scans the directory and calls fn with the snapshot, then again after
// every debounced burst of changes and on every re-scan, until ctx is
// cancelled. fn is called from the calling goroutine, one call at a time,
// and receives ctx; Run waits for it to return. When fn fails (it could not
// store the snapshot: a NATS node restarting), the directory is scanned
// and handed to fn again after a delay that doubles from a second up to
// the re-scan interval, until fn succeeds; a change is never left waiting
// for the periodic re-scan. Run returns nil when ctx is
// cancelled, and an error if file notifications cannot be started or the
// directory itself can no longer be read (for example because it was
// removed). A subdirectory that cannot be watched is reported in the
// snapshot's Errors and is still read by every scan. All resources are
// released when Run returns; a Watcher can run again after that, but not
// twice at once.
func (w *Watcher) Run(ctx context.Context, fn func(context.Context, Snapshot) error) error {
	if fn == nil {
		return errors.New("manifests: Run needs a callback")
	}
	return w.run(ctx, false, func(ctx context.Context, r *run) error { return fn(ctx, r.index.snapshot()) })
}

// Reread is what a RunDeltas callback asks of the next pass: files to read
// again, whose content the next Delta holds with every document parsed, or,
// with All, every file (the next Delta is Full).
type Reread struct {
	Files []string
	All   bool
}

// RunDeltas is Run with a callback that receives only what changed since
// its previous call (see Delta), so that a pass costs what changed, not
// the size of the folder; the Watcher keeps no object once it handed it
// over. Everything Run says holds, except that a failed call is not
// followed by the same delta: the next call, after the delay, holds what
// changed since, and what the callback asked to read again. A file read
// again for a change leaves unparsed the documents the callback says it
// holds (an option of the package's Source): they are in FileContent.Kept;
// files read for a full Delta or a Reread are parsed whole.
func (w *Watcher) RunDeltas(ctx context.Context, fn func(context.Context, Delta) (Reread, error)) error {
	if fn == nil {
		return errors.New("manifests: RunDeltas needs a callback")
	}
	return w.run(ctx, true, func(ctx context.Context, r *run) error {
		d := r.index.delta(r.fullDelta)
		r.fullDelta = false
		again, err := fn(ctx, d)
		if r.index.untaken {
			// Files of the delta were never read: read everything again.
			r.index.untaken = false
			again.All = true
		}
		if again.All {
			r.full, r.readAll = true, true
		}
		for _, f := range again.Files {
			r.force[f] = true
			r.whole[f] = true
		}
		if err == nil && (again.All || len(again.Files) > 0) {
			r.schedule(r.debounce)
		}
		return err
	})
}

func (w *Watcher) run(ctx context.Context, lean bool, fn func(context.Context, *run) error) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer w.running.Store(false)
	if ctx.Err() != nil {
		return nil
	}

	fsw, err := newNotifier()
	if err != nil {
		return fmt.Errorf("manifests: start watching %s: %w", w.dir, err)
	}
	defer fsw.close()

	r := &run{
		dir: w.dir, debounce: w.set.debounce, retryMax: max(w.set.rescan, time.Second), fsw: fsw, timer: time.NewTimer(time.Hour),
		index: newIndex(w.dir, w.set.onRead), full: true, fullDelta: true, dirty: map[string]bool{}, force: map[string]bool{}, whole: map[string]bool{},
		writing: map[string]bool{},
	}
	r.index.lean = lean
	if lean {
		r.index.chunk = w.set.chunk
		r.index.known = w.set.known
	}
	r.timer.Stop()
	defer r.timer.Stop()

	if err := r.emit(ctx, fn); err != nil {
		return err
	}

	var tick <-chan time.Time
	if w.set.rescan > 0 {
		t := time.NewTicker(w.set.rescan)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fsw.events():
			if !ok {
				return fmt.Errorf("manifests: watching %s stopped", w.dir)
			}
			r.event(ev)
		case _, ok := <-fsw.errors():
			if !ok {
				return fmt.Errorf("manifests: watching %s stopped", w.dir)
			}
			// Events were lost (a queue overflow, a failed read): only a
			// full scan is sure to see everything.
			r.full = true
			r.schedule(r.debounce)
		case <-r.timer.C:
			r.pending = false
			if err := r.emit(ctx, fn); err != nil {
				return err
			}
		case <-tick:
			r.pending = false
			r.full = true
			r.timer.Stop()
			if err := r.emit(ctx, fn); err != nil {
				return err
			}
		}
	}
}

// run is the state of one Run.
type run struct {
	dir        string
	debounce   time.Duration
	fsw        notifier
	timer      *time.Timer
	pending    bool
	burstStart time.Time
	failures   int           // fn's failures in a row
	retryMax   time.Duration // the longest delay before fn is tried again

	index     *index
	full      bool            // the next scan re-lists the whole tree
	readAll   bool            // the next scan reads every file, and its delta is full
	fullDelta bool            // the next delta holds every file
	dirty     map[string]bool // directories to list again at the next scan
	force     map[string]bool // files to read at the next scan, whatever their stat
	whole     map[string]bool // files whose every document the next scan parses
	writing   map[string]bool // manifest files written since the last scan and not closed since
}

// emit scans and hands the snapshot to fn unless ctx was cancelled.
func (r *run) emit(ctx context.Context, fn func(context.Context, *run) error) error {
	again, err := r.scan()
	if err != nil {
		return fmt.Errorf("manifests: watch: %w", err)
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := fn(ctx, r); err != nil && ctx.Err() == nil {
		r.failures++
		r.retry()
		return nil
	}
	r.failures = 0
	if again {
		r.schedule(r.debounce)
	}
	return nil
}

// retry arranges the next scan after fn failed: a second after the first
// failure, doubling up to retryMax. That scan re-lists the whole tree.
func (r *run) retry() {
	r.full = true
	delay := min(time.Second<<min(r.failures-1, 16), r.retryMax)
	r.pending = true
	r.burstStart = time.Now()
	r.timer.Reset(delay)
}

// scan brings the index up to date and the watches in line with the
// directories found: in full after a lost notification, a failed callback
// and at every re-scan; otherwise it lists only the directories that
// notifications named and reads only the files in them that changed. Each
// directory is watched before it is read, so a change made after the read
// is always notified. It reports whether a watch had to be repaired after
// the read, in which case a change may have gone unnoticed and another scan
// is due.
func (r *run) scan() (bool, error) {
	watched := make(map[string]bool)
	for _, p := range r.fsw.watchList() {
		watched[p] = true
	}
	onDir := func(dir string) error {
		if watched[dir] {
			return nil
		}
		return r.fsw.add(dir)
	}
	full, dirty, force, whole := r.full, r.dirty, r.force, r.whole
	r.full, r.dirty, r.force, r.whole = false, map[string]bool{}, map[string]bool{}, map[string]bool{}
	// What was written so far is read now; a writer still at it writes
	// again, and is noted again.
	clear(r.writing)
	if r.readAll {
		r.readAll, r.fullDelta = false, true
		force = nil // every file
	}
	// A full delta in chunks reads its files when the callback takes them.
	r.index.deferReads = r.index.chunk > 0 && r.fullDelta
	var dirs []string
	if full {
		if err := r.index.fullPass(onDir, force, whole); err != nil {
			return false, err
		}
		dirs = r.index.dirList()
		walked := make(map[string]bool, len(dirs))
		for _, d := range dirs {
			walked[d] = true
		}
		for p := range watched {
			if !walked[p] {
				_ = r.fsw.remove(p) // already gone when the directory was deleted
			}
		}
	} else {
		var err error
		if dirs, err = r.index.update(slices.Collect(maps.Keys(dirty)), force, whole, onDir); err != nil {
			return false, err
		}
	}
	// A directory moved inside the tree keeps its kernel watch under the
	// old path, and adding the new path then silently reuses it. Once the
	// old paths are removed, watch whatever is still missing.
	again := false
	now := make(map[string]bool, len(dirs))
	for _, p := range r.fsw.watchList() {
		now[p] = true
	}
	for _, d := range dirs {
		if !now[d] && r.fsw.add(d) == nil {
			again = true
		}
	}
	return again, nil
}

// event handles one filesystem notification.
func (r *run) event(ev event) {
	base := filepath.Base(ev.name)
	if ev.op == opChmod || isTempName(base) {
		return
	}
	closeOnly := ev.op == opClosed
	if closeOnly && !r.pending {
		return // a close with nothing noted since the last scan
	}
	if !closeOnly {
		r.note(ev, isManifestName(base))
	}
	// A manifest is whole once closed after writing, or moved into place:
	// with none still open for writing, the save is done.
	if ev.op.has(opClosed) {
		delete(r.writing, ev.name)
		if len(r.writing) == 0 {
			r.schedule(min(r.debounce, closedSettle))
			return
		}
	}
	if !closeOnly {
		r.schedule(r.debounce)
	}
}

// note records what a notification other than a close changed.
func (r *run) note(ev event, manifest bool) {
	if ev.op.has(opRemove | opRename) {
		r.unwatch(ev.name)
		delete(r.writing, ev.name)
	}
	// A file written is read again, even if its stat looks the same. On
	// anything else the directory holding the name is listed again: that
	// sees a file or directory that came or went, and a hidden name that
	// changed (a ConfigMap volume's "..data" link) changes the stat of the
	// files linked through it.
	if ev.op.has(opCreate | opWrite) {
		r.force[ev.name] = true
		if manifest {
			r.writing[ev.name] = true
		}
	}
	if ev.op&^(opWrite|opClosed) != 0 {
		r.dirty[filepath.Dir(ev.name)] = true
	}
}

// unwatch drops the watches of a directory that was removed or moved, and
// of everything below it, so that the next scan watches the tree afresh
// under its current paths.
func (r *run) unwatch(name string) {
	below := name + string(filepath.Separator)
	for _, p := range r.fsw.watchList() {
		if p == name || strings.HasPrefix(p, below) {
			_ = r.fsw.remove(p) // the kernel may have dropped it already
		}
	}
}

// schedule arranges a scan once the directory has been quiet for quiet
// (the debounce interval, or less once a save is known to be whole), or at
// the latest maxBurst debounce intervals after the first change of the
// burst.
func (r *run) schedule(quiet time.Duration) {
	now := time.Now()
	if !r.pending {
		r.pending = true
		r.burstStart = now
	}
	limit := time.Duration(math.MaxInt64)
	if r.debounce < limit/maxBurst {
		limit = maxBurst * r.debounce
	}
	r.timer.Reset(max(min(quiet, limit-now.Sub(r.burstStart)), 0))
}
