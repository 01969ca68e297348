//go:build linux

package files

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// bundle builds files from path, content pairs.
func bundle(pairs ...string) []File {
	if len(pairs)%2 != 0 {
		panic("bundle: odd number of arguments")
	}
	var out []File
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, File{Path: pairs[i], Content: []byte(pairs[i+1])})
	}
	return out
}

// rig is a destination folder plus a place outside it for command logs.
type rig struct {
	dest string
	log  string // lines appended by commands
}

func newRig(t *testing.T) rig {
	t.Helper()
	return rig{dest: t.TempDir(), log: filepath.Join(t.TempDir(), "log")}
}

// reloadCmd appends "reload" to the rig's log.
func (r rig) reloadCmd() string { return "echo reload >> " + shellQuote(r.log) }

// lines returns the lines of the rig's log.
func (r rig) lines(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(r.log)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(b))
}

func (r rig) reloads(t *testing.T) int {
	t.Helper()
	n := 0
	for _, l := range r.lines(t) {
		if l == "reload" {
			n++
		}
	}
	return n
}

func (r rig) driver(t *testing.T, opts Options) *Driver {
	t.Helper()
	opts.Dest = r.dest
	d, err := New(opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return d
}

func (r rig) path(p string) string { return filepath.Join(r.dest, filepath.FromSlash(p)) }

func (r rig) read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(r.path(p))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func (r rig) write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(r.path(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.path(p), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r rig) exists(p string) bool {
	_, err := os.Lstat(r.path(p))
	return err == nil
}

// apply runs Apply, checks that no staging entry is left, and fails the test
// on error.
func (r rig) apply(t *testing.T, d *Driver, files []File) Result {
	t.Helper()
	res, err := d.Apply(t.Context(), files)
	r.assertNoStage(t)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return res
}

// assertNoStage fails if a staging entry is in Dest.
func (r rig) assertNoStage(t *testing.T) {
	t.Helper()
	entries, err := os.ReadDir(r.dest)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), stagePrefix) {
			t.Errorf("staging entry %s left in Dest", e.Name())
		}
	}
}

// assertBundle fails unless every file of the bundle is in Dest with its
// content.
func (r rig) assertBundle(t *testing.T, files []File) {
	t.Helper()
	for _, f := range files {
		got, err := os.ReadFile(r.path(f.Path))
		if err != nil {
			t.Errorf("%s: %v", f.Path, err)
			continue
		}
		if !bytes.Equal(got, f.Content) {
			t.Errorf("%s = %q, want %q", f.Path, got, f.Content)
		}
	}
}

type entry struct {
	mode     fs.FileMode
	uid, gid uint32
	content  string
}

// snapshot records every entry under Dest: type, mode, owner, content.
func (r rig) snapshot(t *testing.T) map[string]entry {
	t.Helper()
	snap := map[string]entry{}
	err := filepath.WalkDir(r.dest, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		e := entry{mode: fi.Mode(), uid: st.Uid, gid: st.Gid}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.content = string(b)
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			e.content = target
		}
		rel, _ := filepath.Rel(r.dest, p)
		snap[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return snap
}

func assertSameSnapshot(t *testing.T, before, after map[string]entry) {
	t.Helper()
	if maps.Equal(before, after) {
		return
	}
	keys := slices.Sorted(maps.Keys(before))
	for k := range after {
		if _, ok := before[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		b, inB := before[k]
		a, inA := after[k]
		if inB != inA || b != a {
			t.Errorf("Dest changed at %s: before %+v (present %v), after %+v (present %v)", k, b, inB, a, inA)
		}
	}
}

func readManifestFile(t *testing.T, r rig) manifest {
	t.Helper()
	root, err := os.OpenRoot(r.dest)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	m, _, err := readManifest(root, names{manifest: manifestName, stage: stagePrefix})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// processGone waits until pid has exited (it may linger as a zombie when no
// one reaps it).
func processGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err == nil {
			// pid (comm) state ...: the state follows the last ')'.
			s := string(stat)
			if i := strings.LastIndexByte(s, ')'); i >= 0 && strings.HasPrefix(s[i+1:], " Z") {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d is still running", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitForFile polls until path holds a non-empty line and returns it.
func waitForFile(t *testing.T, path string) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			return strings.TrimSpace(string(b))
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s was not written", path)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
