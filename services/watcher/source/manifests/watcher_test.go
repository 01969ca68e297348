package manifests

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// waitTimeout bounds every wait for a snapshot; a watcher that works
// delivers in well under a second.
const waitTimeout = 10 * time.Second

// harness runs a Watcher and collects the snapshots it delivers.
type harness struct {
	t       *testing.T
	snaps   chan Snapshot
	done    chan error
	cancel  context.CancelFunc
	stopped bool
	overlap atomic.Bool
	calls   atomic.Int64
	last    Snapshot
}

func startWatcher(t *testing.T, dir string, opts ...Option) *harness {
	t.Helper()
	w, err := NewWatcher(dir, opts...)
	if err != nil {
		t.Fatalf("NewWatcher: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := &harness{t: t, snaps: make(chan Snapshot, 16), done: make(chan error, 1), cancel: cancel}
	var inFlight atomic.Int32
	go func() {
		h.done <- w.Run(ctx, func(ctx context.Context, s Snapshot) error {
			if inFlight.Add(1) != 1 {
				h.overlap.Store(true)
			}
			defer inFlight.Add(-1)
			h.calls.Add(1)
			select {
			case h.snaps <- s:
			case <-ctx.Done():
			}
			return nil
		})
	}()
	t.Cleanup(func() {
		if err := h.stop(); err != nil {
			t.Errorf("Run returned %v after cancel, want nil", err)
		}
	})
	return h
}

// stop cancels Run and returns its result.
func (h *harness) stop() error {
	h.t.Helper()
	if h.stopped {
		return nil
	}
	h.stopped = true
	h.cancel()
	if h.overlap.Load() {
		h.t.Error("the callback was called concurrently")
	}
	select {
	case err := <-h.done:
		return err
	case <-time.After(waitTimeout):
		h.t.Fatal("Run did not return after cancel")
		return nil
	}
}

// next returns the next snapshot.
func (h *harness) next(t *testing.T) Snapshot {
	t.Helper()
	select {
	case s := <-h.snaps:
		h.last = s
		return s
	case err := <-h.done:
		h.stopped = true
		t.Fatalf("Run returned early: %v", err)
	case <-time.After(waitTimeout):
		t.Fatalf("no snapshot within %s; last: %v", waitTimeout, contents(h.last))
	}
	return Snapshot{}
}

// waitFor returns the first snapshot whose contents are want.
func (h *harness) waitFor(t *testing.T, want ...string) Snapshot {
	t.Helper()
	slices.Sort(want)
	deadline := time.After(waitTimeout)
	for {
		select {
		case s := <-h.snaps:
			h.last = s
			if slices.Equal(contents(s), want) {
				return s
			}
		case err := <-h.done:
			h.stopped = true
			t.Fatalf("Run returned early: %v", err)
		case <-deadline:
			t.Fatalf("timed out waiting for %q; last snapshot: %q, errors %v", want, contents(h.last), h.last.Errors)
		}
	}
}

// contents lists a snapshot as "name=value@file" for objects (file relative
// to its directory's parent) and "error@file" for errors, sorted.
func contents(s Snapshot) []string {
	out := []string{}
	for _, o := range s.Objects {
		data, _ := o.Body["data"].(map[string]any)
		out = append(out, fmt.Sprintf("%s=%v@%s", o.Name, data["value"], shortPath(o.File)))
	}
	for _, e := range s.Errors {
		out = append(out, "error@"+shortPath(e.File))
	}
	slices.Sort(out)
	return out
}

// shortPath drops the temporary directory from a path.
func shortPath(p string) string {
	parts := strings.Split(filepath.ToSlash(p), "/")
	for i, part := range parts {
		if part == "root" {
			return strings.Join(parts[i+1:], "/")
		}
	}
	return p
}

// newRoot returns a fresh directory named "root" for a watcher.
func newRoot(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "root")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestWatcherFileChanges(t *testing.T) {
	dir := newRoot(t)
	at := func(p string) string { return filepath.Join(dir, p) }
	writeFile(t, at("a.yaml"), configMap("a", "1"))

	// Rescans are off: every change must come through notifications.
	h := startWatcher(t, dir, WithRescan(0), WithDebounce(20*time.Millisecond))
	h.waitFor(t, "a=1@a.yaml")

	steps := []struct {
		name   string
		change func(t *testing.T)
		want   []string
	}{
		{"create", func(t *testing.T) { writeFile(t, at("b.yaml"), configMap("b", "1")) },
			[]string{"a=1@a.yaml", "b=1@b.yaml"}},
		{"edit in place", func(t *testing.T) { writeFile(t, at("a.yaml"), configMap("a", "2")) },
			[]string{"a=2@a.yaml", "b=1@b.yaml"}},
		{"save by rename over", func(t *testing.T) {
			writeFile(t, at(".a.yaml.tmp"), configMap("a", "3"))
			must(t, os.Rename(at(".a.yaml.tmp"), at("a.yaml")))
		}, []string{"a=3@a.yaml", "b=1@b.yaml"}},
		{"save with a backup", func(t *testing.T) {
			must(t, os.Rename(at("a.yaml"), at("a.yaml~")))
			writeFile(t, at("a.yaml"), configMap("a", "4"))
			must(t, os.Remove(at("a.yaml~")))
		}, []string{"a=4@a.yaml", "b=1@b.yaml"}},
		{"rename", func(t *testing.T) { must(t, os.Rename(at("b.yaml"), at("c.yml"))) },
			[]string{"a=4@a.yaml", "b=1@c.yml"}},
		{"rename away", func(t *testing.T) { must(t, os.Rename(at("c.yml"), at("c.txt"))) },
			[]string{"a=4@a.yaml"}},
		{"broken", func(t *testing.T) { writeFile(t, at("bad.yaml"), "kind: [\n") },
			[]string{"a=4@a.yaml", "error@bad.yaml"}},
		{"delete", func(t *testing.T) {
			must(t, os.Remove(at("a.yaml")))
			must(t, os.Remove(at("bad.yaml")))
		}, []string{}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.change(t)
			h.waitFor(t, step.want...)
		})
	}
}

func TestWatcherSubdirectories(t *testing.T) {
	dir := newRoot(t)
	at := func(p string) string { return filepath.Join(dir, p) }
	h := startWatcher(t, dir, WithRescan(0), WithDebounce(20*time.Millisecond))
	h.waitFor(t)

	outside := t.TempDir()
	steps := []struct {
		name   string
		change func(t *testing.T)
		want   []string
	}{
		{"new nested directories", func(t *testing.T) {
			writeFile(t, at("sub/deeper/x.yaml"), configMap("x", "1"))
		}, []string{"x=1@sub/deeper/x.yaml"}},
		{"edit in the new directory", func(t *testing.T) {
			writeFile(t, at("sub/deeper/x.yaml"), configMap("x", "2"))
		}, []string{"x=2@sub/deeper/x.yaml"}},
		{"rename the directory", func(t *testing.T) {
			must(t, os.Rename(at("sub"), at("moved")))
		}, []string{"x=2@moved/deeper/x.yaml"}},
		{"edit in the renamed directory", func(t *testing.T) {
			writeFile(t, at("moved/deeper/x.yaml"), configMap("x", "3"))
		}, []string{"x=3@moved/deeper/x.yaml"}},
		{"add a file next to it", func(t *testing.T) {
			writeFile(t, at("moved/deeper/w.yaml"), configMap("w", "1"))
		}, []string{"x=3@moved/deeper/x.yaml", "w=1@moved/deeper/w.yaml"}},
		{"move a tree in", func(t *testing.T) {
			writeFile(t, filepath.Join(outside, "tree/z/z.yaml"), configMap("z", "1"))
			must(t, os.Rename(filepath.Join(outside, "tree"), at("tree")))
		}, []string{"x=3@moved/deeper/x.yaml", "w=1@moved/deeper/w.yaml", "z=1@tree/z/z.yaml"}},
		{"edit in the moved-in tree", func(t *testing.T) {
			writeFile(t, at("tree/z/z.yaml"), configMap("z", "2"))
		}, []string{"x=3@moved/deeper/x.yaml", "w=1@moved/deeper/w.yaml", "z=2@tree/z/z.yaml"}},
		{"move a tree out", func(t *testing.T) {
			must(t, os.Rename(at("moved"), filepath.Join(outside, "moved")))
		}, []string{"z=2@tree/z/z.yaml"}},
		{"remove a tree", func(t *testing.T) {
			must(t, os.RemoveAll(at("tree")))
		}, []string{}},
		{"recreate a removed directory", func(t *testing.T) {
			writeFile(t, at("tree/z/z.yaml"), configMap("z", "3"))
		}, []string{"z=3@tree/z/z.yaml"}},
		{"hidden directories are ignored", func(t *testing.T) {
			writeFile(t, at(".git/objects/x.yaml"), configMap("hidden", "1"))
			writeFile(t, at("tree/z/z.yaml"), configMap("z", "4"))
		}, []string{"z=4@tree/z/z.yaml"}},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			step.change(t)
			h.waitFor(t, step.want...)
		})
	}
}

func TestWatcherConfigMapMount(t *testing.T) {
	// A mounted ConfigMap is updated by writing a new hidden directory and
	// swapping the "..data" link to it in one rename.
	dir := newRoot(t)
	at := func(p string) string { return filepath.Join(dir, p) }
	writeFile(t, at("..v1/app.yaml"), configMap("app", "1"))
	must(t, os.Symlink("..v1", at("..data")))
	must(t, os.Symlink("..data/app.yaml", at("app.yaml")))

	h := startWatcher(t, dir, WithRescan(0), WithDebounce(20*time.Millisecond))
	h.waitFor(t, "app=1@app.yaml")

	writeFile(t, at("..v2/app.yaml"), configMap("app", "2"))
	must(t, os.Symlink("..v2", at("..data_tmp")))
	must(t, os.Rename(at("..data_tmp"), at("..data")))
	must(t, os.RemoveAll(at("..v1")))
	h.waitFor(t, "app=2@app.yaml")
}

func TestWatcherRescan(t *testing.T) {
	dir := newRoot(t)
	// Notifications are held back for an hour; only the rescan can deliver.
	h := startWatcher(t, dir, WithRescan(50*time.Millisecond), WithDebounce(time.Hour))
	h.waitFor(t)
	writeFile(t, filepath.Join(dir, "a.yaml"), configMap("a", "1"))
	h.waitFor(t, "a=1@a.yaml")
	writeFile(t, filepath.Join(dir, "sub", "b.yaml"), configMap("b", "1"))
	h.waitFor(t, "a=1@a.yaml", "b=1@sub/b.yaml")
}

func TestWatcherDebounceCoalescesBursts(t *testing.T) {
	dir := newRoot(t)
	var want []string
	for i := range 20 {
		name := fmt.Sprintf("cm-%02d", i)
		writeFile(t, filepath.Join(dir, name+".yaml"), configMap(name, "1"))
		want = append(want, name+"=1@"+name+".yaml")
	}
	h := startWatcher(t, dir, WithRescan(0), WithDebounce(500*time.Millisecond))
	h.waitFor(t, want...)
	// Files written and left open (a writer not done with them), and
	// files removed: none of it is whole before the folder is quiet, so
	// the first snapshot after the burst holds all of it.
	want = want[:0]
	for i := range 20 {
		name := fmt.Sprintf("cm-%02d", i)
		if i%2 == 0 {
			must(t, os.Remove(filepath.Join(dir, name+".yaml")))
			continue
		}
		f, err := os.OpenFile(filepath.Join(dir, name+".yaml"), os.O_WRONLY|os.O_TRUNC, 0)
		must(t, err)
		t.Cleanup(func() { _ = f.Close() })
		_, err = f.WriteString(configMap(name, "2"))
		must(t, err)
		want = append(want, name+"=2@"+name+".yaml")
	}
	if got := contents(h.next(t)); !slices.Equal(got, want) {
		t.Errorf("first snapshot after the burst = %q, want %q", got, want)
	}
}

func TestWatcherDebounceIsBounded(t *testing.T) {
	dir := newRoot(t)
	h := startWatcher(t, dir, WithRescan(0), WithDebounce(100*time.Millisecond))
	h.waitFor(t)

	// Changes that never pause still produce a snapshot within three
	// debounce intervals, long before the writer gives up. The writer
	// keeps its file open (a file closed would be read at once).
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	f, err := os.Create(filepath.Join(dir, "busy.yaml"))
	must(t, err)
	defer f.Close()
	writerDone := make(chan struct{})
	var finished atomic.Bool
	go func() {
		defer close(writerDone)
		defer finished.Store(true)
		for i := 0; ctx.Err() == nil; i++ {
			// The same length every time, written over in place, so that
			// no scan sees a half-written file.
			if _, err := f.WriteAt([]byte(configMap("busy", fmt.Sprintf("%06d", i))), 0); err != nil {
				t.Error(err)
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	s := h.next(t)
	stillWriting := !finished.Load()
	cancel()
	<-writerDone
	if len(s.Objects) != 1 || !stillWriting {
		t.Errorf("snapshot %q arrived with the writer still running = %v, want one object while it runs", contents(s), stillWriting)
	}
}

func TestWatcherStopsOnCancel(t *testing.T) {
	dir := newRoot(t)
	writeFile(t, filepath.Join(dir, "a.yaml"), configMap("a", "1"))
	w, err := NewWatcher(dir, WithDebounce(time.Millisecond), WithRescan(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for round := range 2 { // a stopped watcher can run again
		ctx, cancel := context.WithCancel(context.Background())
		got := make(chan Snapshot, 1)
		done := make(chan error, 1)
		go func() {
			done <- w.Run(ctx, func(ctx context.Context, s Snapshot) error {
				select {
				case got <- s:
				default:
				}
				return nil
			})
		}()
		select {
		case s := <-got:
			if len(s.Objects) != 1 {
				t.Fatalf("round %d: initial snapshot %q", round, contents(s))
			}
		case <-time.After(waitTimeout):
			t.Fatalf("round %d: no initial snapshot", round)
		}
		if err := w.Run(ctx, func(context.Context, Snapshot) error { return nil }); !errors.Is(err, ErrRunning) {
			t.Errorf("round %d: second Run = %v, want ErrRunning", round, err)
		}
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("round %d: Run = %v, want nil", round, err)
			}
		case <-time.After(waitTimeout):
			t.Fatalf("round %d: Run did not return after cancel", round)
		}
		goleak.VerifyNone(t)
	}
}

func TestWatcherCancelledBeforeRun(t *testing.T) {
	w, err := NewWatcher(newRoot(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	called := false
	if err := w.Run(ctx, func(context.Context, Snapshot) error { called = true; return nil }); err != nil || called {
		t.Errorf("Run on a cancelled context = %v, called = %v; want nil, false", err, called)
	}
	if err := w.Run(context.Background(), nil); err == nil {
		t.Error("Run with a nil callback succeeded")
	}
}

func TestWatcherDirectoryRemoved(t *testing.T) {
	dir := newRoot(t)
	h := startWatcher(t, dir, WithRescan(0), WithDebounce(10*time.Millisecond))
	h.waitFor(t)
	must(t, os.RemoveAll(dir))
	select {
	case err := <-h.done:
		h.stopped = true
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Run = %v, want an error for the missing directory", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("Run kept running after its directory was removed")
	}
}

func TestNewWatcher(t *testing.T) {
	dir := newRoot(t)
	file := filepath.Join(dir, "file.yaml")
	writeFile(t, file, configMap("a", "1"))
	tests := []struct {
		name         string
		dir          string
		opts         []Option
		wantErr      error
		wantRescan   time.Duration
		wantDebounce time.Duration
	}{
		{"defaults", dir, nil, nil, 30 * time.Second, 10 * time.Millisecond},
		{"set both", dir, []Option{WithRescan(time.Minute), WithDebounce(time.Second)}, nil, time.Minute, time.Second},
		{"zero", dir, []Option{WithRescan(0), WithDebounce(0)}, nil, 0, 0},
		{"nil option", dir, []Option{nil}, nil, DefaultRescan, DefaultDebounce},
		{"negative rescan", dir, []Option{WithRescan(-time.Second)}, ErrInvalidOption, 0, 0},
		{"negative debounce", dir, []Option{WithDebounce(-1)}, ErrInvalidOption, 0, 0},
		{"empty dir", "", nil, ErrInvalidOption, 0, 0},
		{"missing dir", filepath.Join(dir, "missing"), nil, fs.ErrNotExist, 0, 0},
		{"not a dir", file, nil, errNotDir, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := NewWatcher(tt.dir, tt.opts...)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) || w != nil {
					t.Fatalf("NewWatcher = %v, %v; want error %v", w, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("NewWatcher: %v", err)
			}
			if w.set.rescan != tt.wantRescan || w.set.debounce != tt.wantDebounce || w.Dir() != tt.dir {
				t.Errorf("NewWatcher = %+v, want rescan %s, debounce %s", w.set, tt.wantRescan, tt.wantDebounce)
			}
		})
	}
}

// TestFailedReportIsTriedAgain: a snapshot the callback could not store (a
// write to NATS failed) is scanned and handed over again within seconds,
// with no file change and no periodic re-scan to wait for.
func TestFailedReportIsTriedAgain(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "a.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: a, namespace: default}\n")
	w, err := NewWatcher(dir, WithRescan(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls atomic.Int32
	stored := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- w.Run(ctx, func(context.Context, Snapshot) error {
			if calls.Add(1) <= 2 {
				return errors.New("nats: no response from stream")
			}
			close(stored)
			return nil
		})
	}()
	select {
	case <-stored:
	case <-time.After(20 * time.Second):
		t.Fatalf("the snapshot was not handed over again after %d failed calls", calls.Load())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls, want 3 (two failures, then stored; nothing after)", n)
	}
}
