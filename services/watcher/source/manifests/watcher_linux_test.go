//go:build linux

package manifests

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestWatcherReadsAWholeSaveAtOnce: a file closed after writing, or moved
// into place, is read without waiting for the debounce (here an hour),
// unless another file is still open for writing: then the folder is read
// when that one is closed too.
func TestWatcherReadsAWholeSaveAtOnce(t *testing.T) {
	dir := newRoot(t)
	at := func(p string) string { return filepath.Join(dir, p) }
	h := startWatcher(t, dir, WithRescan(0), WithDebounce(time.Hour))
	h.waitFor(t)

	writeFile(t, at("a.yaml"), configMap("a", "1"))
	h.waitFor(t, "a=1@a.yaml")

	writeFile(t, at(".a.yaml.tmp"), configMap("a", "2"))
	must(t, os.Rename(at(".a.yaml.tmp"), at("a.yaml")))
	h.waitFor(t, "a=2@a.yaml")

	// b.yaml is open and written; a.yaml written and closed beside it
	// must wait for it.
	b, err := os.Create(at("b.yaml"))
	must(t, err)
	defer b.Close()
	_, err = b.WriteString(configMap("b", "1"))
	must(t, err)
	writeFile(t, at("a.yaml"), configMap("a", "3"))
	select {
	case s := <-h.snaps:
		t.Fatalf("snapshot %q while b.yaml was open for writing", contents(s))
	case <-time.After(300 * time.Millisecond):
	}
	must(t, b.Close())
	h.waitFor(t, "a=3@a.yaml", "b=1@b.yaml")

	// Opened for writing and closed unwritten: nothing to read.
	f, err := os.OpenFile(at("a.yaml"), os.O_WRONLY, 0)
	must(t, err)
	must(t, f.Close())
	select {
	case s := <-h.snaps:
		t.Fatalf("snapshot %q after a close with no write", contents(s))
	case <-time.After(300 * time.Millisecond):
	}

	// Not a manifest: written and left open, it holds nothing back.
	other, err := os.Create(at("notes.txt"))
	must(t, err)
	defer other.Close()
	_, err = other.WriteString("x")
	must(t, err)
	writeFile(t, at("a.yaml"), configMap("a", "4"))
	h.waitFor(t, "a=4@a.yaml", "b=1@b.yaml")
}
