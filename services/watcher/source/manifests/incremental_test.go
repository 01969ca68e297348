package manifests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/store"
)

// readCounter counts the reads of each file through WithReadHook.
type readCounter struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *readCounter) hook(path string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[filepath.Base(path)]++
}

func (c *readCounter) get(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[name]
}

// recordingSink records what a Source reports, as "op type/ns/name=value".
type recordingSink struct {
	mu    sync.Mutex
	calls []string
}

func (s *recordingSink) add(call string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, call)
}

func describeObject(o store.Object) string {
	data, _ := o.Body["data"].(map[string]any)
	spec, _ := o.Body["spec"].(map[string]any)
	v := data["value"]
	if v == nil {
		v = spec["value"]
	}
	return fmt.Sprintf("%s/%s/%s=%v", o.Type, o.Namespace, o.Name, v)
}

func (s *recordingSink) Replace(_ context.Context, typ string, objs []store.Object) error {
	var names []string
	for _, o := range objs {
		names = append(names, describeObject(o))
	}
	s.add("replace " + typ + " [" + strings.Join(names, " ") + "]")
	return nil
}

func (s *recordingSink) Upsert(_ context.Context, o store.Object) error {
	s.add("upsert " + describeObject(o))
	return nil
}

func (s *recordingSink) Delete(_ context.Context, typ, ns, name string) error {
	s.add(fmt.Sprintf("delete %s/%s/%s", typ, ns, name))
	return nil
}

func (s *recordingSink) Synced(context.Context, string, []string) error { return nil }
func (s *recordingSink) Problem(context.Context, error)                 {}

// waitCall waits for a call equal to want after the first skip calls and
// returns the number of calls then.
func (s *recordingSink) waitCall(t *testing.T, skip int, want string) int {
	t.Helper()
	return s.waitCallWithin(t, waitTimeout, skip, want)
}

func (s *recordingSink) waitCallWithin(t *testing.T, timeout time.Duration, skip int, want string) int {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		s.mu.Lock()
		calls := s.calls
		s.mu.Unlock()
		for i := skip; i < len(calls); i++ {
			if calls[i] == want {
				return len(calls)
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Fatalf("no %q within %s; calls: %q", want, timeout, s.calls)
	return 0
}

func (s *recordingSink) since(n int) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.calls[n:]...)
}

// typeOfTest maps ConfigMaps and Services to watched types.
func typeOfTest(_, kind string) (string, bool) {
	switch kind {
	case "ConfigMap":
		return "configmaps", true
	case "Service":
		return "services", true
	}
	return "", false
}

// bigConfigMap is a JSON manifest of about size bytes: one ConfigMap with a
// long value.
func bigConfigMap(size int) string {
	return `{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "big", "namespace": "shop"}, "data": {"value": "` + strings.Repeat("x", size) + `"}}`
}

// TestEditBesideLargeFileReadsOnlyTheEdit: with a 50 MB manifest in the
// folder, an edit of a small file, in place or written to a temporary file
// and renamed over it as editors do, is stored by reading that file alone;
// the large file is read once, at the start. A file that stops parsing
// keeps its objects, and removing a file deletes them.
func TestEditBesideLargeFileReadsOnlyTheEdit(t *testing.T) {
	dir := newRoot(t)
	writeFile(t, filepath.Join(dir, "big.json"), bigConfigMap(50<<20))
	writeFile(t, filepath.Join(dir, "team", "small.yaml"), configMap("small", "1"))
	var reads readCounter
	src := NewSource(dir, 0, []string{"configmaps", "services"}, typeOfTest, WithDebounce(0), WithReadHook(reads.hook))
	sink := &recordingSink{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	// Reading 50 MB takes a while under the race detector.
	n := sink.waitCallWithin(t, 2*time.Minute, 0, "replace services []")
	if calls := sink.since(0); !strings.HasPrefix(calls[0], "replace configmaps [configmaps/shop/big=xxx") || !strings.HasSuffix(calls[0], " configmaps/shop/small=1]") {
		t.Fatalf("first report %.80q..., want both ConfigMaps", calls[0])
	}

	small := filepath.Join(dir, "team", "small.yaml")
	steps := []struct {
		name string
		edit func()
		want string
	}{
		{"written in place", func() { writeFile(t, small, configMap("small", "2")) }, "upsert configmaps/shop/small=2"},
		{"renamed over", func() {
			writeFile(t, small+".tmp~", configMap("small", "3"))
			must(t, os.Rename(small+".tmp~", small))
		}, "upsert configmaps/shop/small=3"},
		{"new file", func() {
			writeFile(t, filepath.Join(dir, "team", "svc.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {value: 1}\n")
		}, "upsert services/shop/web=1"},
		{"new folder", func() { writeFile(t, filepath.Join(dir, "other", "deep", "c.yaml"), configMap("c", "1")) }, "upsert configmaps/shop/c=1"},
		{"removed file", func() { must(t, os.Remove(filepath.Join(dir, "team", "svc.yaml"))) }, "delete services/shop/web"},
		{"removed folder", func() { must(t, os.RemoveAll(filepath.Join(dir, "other"))) }, "delete configmaps/shop/c"},
	}
	for _, st := range steps {
		st.edit()
		n = sink.waitCall(t, n, st.want)
		if got := reads.get("big.json"); got != 1 {
			t.Fatalf("%s: the large file was read %d times, want once", st.name, got)
		}
	}

	// A file that stops parsing keeps its objects: nothing is deleted.
	// (Written whole with a rename, so that no read sees it half written.)
	replaceFile := func(content string) {
		writeFile(t, small+".tmp~", content)
		must(t, os.Rename(small+".tmp~", small))
	}
	replaceFile("apiVersion: v1\nkind: [")
	before := reads.get("small.yaml")
	deadline := time.Now().Add(waitTimeout)
	for reads.get("small.yaml") == before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	replaceFile(configMap("small", "4"))
	n2 := sink.waitCall(t, n, "upsert configmaps/shop/small=4")
	for _, c := range sink.since(n)[:n2-n] {
		if strings.HasPrefix(c, "delete") {
			t.Fatalf("a broken file lost its objects: %q", sink.since(n))
		}
	}
	if got := reads.get("big.json"); got != 1 {
		t.Fatalf("the large file was read %d times, want once", got)
	}
}

// TestRescanReadsOnlyChangedFiles: the periodic re-scan compares each
// file's size, modification time and inode with what was read, and reads
// only the files that differ.
func TestRescanReadsOnlyChangedFiles(t *testing.T) {
	dir := newRoot(t)
	for i := range 5 {
		writeFile(t, filepath.Join(dir, fmt.Sprintf("f%d.yaml", i)), configMap(fmt.Sprintf("c%d", i), "1"))
	}
	var reads readCounter
	// Notifications wait for an hour: only the re-scan delivers.
	h := startWatcher(t, dir, WithRescan(20*time.Millisecond), WithDebounce(time.Hour), WithReadHook(reads.hook))
	h.waitFor(t, "c0=1@f0.yaml", "c1=1@f1.yaml", "c2=1@f2.yaml", "c3=1@f3.yaml", "c4=1@f4.yaml")
	for range 5 {
		h.next(t) // five more re-scans
	}
	writeFile(t, filepath.Join(dir, "f2.yaml"), configMap("c2", "22"))
	h.waitFor(t, "c0=1@f0.yaml", "c1=1@f1.yaml", "c2=22@f2.yaml", "c3=1@f3.yaml", "c4=1@f4.yaml")
	for i := range 5 {
		want := 1
		if i == 2 {
			want = 2
		}
		if got := reads.get(fmt.Sprintf("f%d.yaml", i)); got != want {
			t.Errorf("f%d.yaml read %d times, want %d", i, got, want)
		}
	}
}

// startSource runs a Source over dir with sink until the test ends.
func startSource(t *testing.T, dir string, sink source.Sink, reads *readCounter) {
	t.Helper()
	runSource(t, NewSource(dir, 0, []string{"configmaps", "services"}, typeOfTest, WithDebounce(20*time.Millisecond), WithReadHook(reads.hook)), sink)
}

// runSource runs src with sink until the test or benchmark ends, and
// fails it if Run fails.
func runSource(tb testing.TB, src *Source, sink source.Sink) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	tb.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			tb.Error(err)
		}
	})
}

// TestDuplicateFallsBackToTheNextFile: when the file whose copy of an
// identity wins goes away, the next file's copy is stored; that file is
// read again for it, since the source holds no object.
func TestDuplicateFallsBackToTheNextFile(t *testing.T) {
	dir := newRoot(t)
	writeFile(t, filepath.Join(dir, "a.yaml"), configMap("x", "from-a"))
	writeFile(t, filepath.Join(dir, "b.yaml"), configMap("x", "from-b"))
	var reads readCounter
	sink := &recordingSink{}
	startSource(t, dir, sink, &reads)
	n := sink.waitCall(t, 0, "replace configmaps [configmaps/shop/x=from-a]")
	must(t, os.Remove(filepath.Join(dir, "a.yaml")))
	n = sink.waitCall(t, n, "upsert configmaps/shop/x=from-b")
	if got := reads.get("b.yaml"); got != 2 {
		t.Errorf("b.yaml read %d times, want twice (at the start, and when its copy came to stand)", got)
	}
	must(t, os.Remove(filepath.Join(dir, "b.yaml")))
	sink.waitCall(t, n, "delete configmaps/shop/x")
}

// failingSink fails its first failures writes of single objects.
type failingSink struct {
	recordingSink
	failures atomic.Int32
}

func (s *failingSink) Upsert(ctx context.Context, o store.Object) error {
	if s.failures.Add(-1) >= 0 {
		s.add("failed " + describeObject(o))
		return errors.New("nats: no response from stream")
	}
	return s.recordingSink.Upsert(ctx, o)
}

// TestFailedUpsertIsWrittenAgain: an object whose write failed is written
// on a later pass with its content, read again from its file, with no
// further change to the folder.
func TestFailedUpsertIsWrittenAgain(t *testing.T) {
	dir := newRoot(t)
	writeFile(t, filepath.Join(dir, "a.yaml"), configMap("a", "1"))
	var reads readCounter
	sink := &failingSink{}
	sink.failures.Store(2)
	startSource(t, dir, sink, &reads)
	n := sink.waitCall(t, 0, "replace configmaps [configmaps/shop/a=1]")
	writeFile(t, filepath.Join(dir, "a.yaml"), configMap("a", "2"))
	sink.waitCallWithin(t, 30*time.Second, n, "upsert configmaps/shop/a=2")
	if calls := sink.since(n); !slices.Contains(calls, "failed configmaps/shop/a=2") {
		t.Fatalf("calls %q: the write never failed", calls)
	}
}

// TestResyncReplacesEverything: a resync reports each type's complete set
// (a sink's Replace deletes what it holds that no file holds), not only
// the changes the source knows of, and it reads every file whole.
func TestResyncReplacesEverything(t *testing.T) {
	dir := newRoot(t)
	writeFile(t, filepath.Join(dir, "a.yaml"), docs(configMap("a", "1"), configMap("b", "1")))
	writeFile(t, filepath.Join(dir, "s.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: shop}\nspec: {value: 1}\n")
	src := NewSource(dir, 0, []string{"configmaps", "services"}, typeOfTest, WithDebounce(time.Hour))
	sink := &recordingSink{}
	want := []string{"replace configmaps [configmaps/shop/a=1 configmaps/shop/b=1]", "replace services [services/shop/web=1]"}
	// The first resync is the source's first listing; the second comes
	// after it, as a trigger does.
	for i := range 2 {
		n := len(sink.since(0))
		if err := src.Resync(context.Background(), sink); err != nil {
			t.Fatal(err)
		}
		if got := sink.since(n); !slices.Equal(got, want) {
			t.Fatalf("resync %d reported %q, want %q", i+1, got, want)
		}
	}
}
