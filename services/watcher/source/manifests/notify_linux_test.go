//go:build linux

package manifests

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestNotifierReportsInOrder: the notifications of a watched directory come
// in the order of the changes, a written file's close after its writes, and
// the watches follow directories removed and moved away.
func TestNotifierReportsInOrder(t *testing.T) {
	tests := []struct {
		name   string
		before func(t *testing.T, dir string)
		change func(t *testing.T, dir string)
		// want: the events up to the last one, by name relative to the
		// directory, with repeats in a row dropped (the kernel merges an
		// event with the same one queued before it and not read yet)
		want []string
		// watched: what is watched afterwards, relative to the directory
		watched []string
	}{
		{
			name:    "a new file written",
			change:  func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "a.yaml"), "x") },
			want:    []string{"a.yaml create", "a.yaml write", "a.yaml closed"},
			watched: []string{"."},
		},
		{
			name:    "a file written over",
			before:  func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "a.yaml"), "old") },
			change:  func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "a.yaml"), "new") },
			want:    []string{"a.yaml write", "a.yaml closed"},
			watched: []string{"."},
		},
		{
			name: "a file still open",
			change: func(t *testing.T, dir string) {
				f, err := os.Create(filepath.Join(dir, "open.yaml"))
				must(t, err)
				t.Cleanup(func() { _ = f.Close() })
				_, err = f.WriteString("x")
				must(t, err)
				writeFile(t, filepath.Join(dir, "b.yaml"), "x")
			},
			want:    []string{"open.yaml create", "open.yaml write", "b.yaml create", "b.yaml write", "b.yaml closed"},
			watched: []string{"."},
		},
		{
			name:   "a file moved into place",
			before: func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "a.yaml.tmp"), "x") },
			change: func(t *testing.T, dir string) {
				must(t, os.Rename(filepath.Join(dir, "a.yaml.tmp"), filepath.Join(dir, "a.yaml")))
			},
			want:    []string{"a.yaml.tmp rename", "a.yaml create|closed"},
			watched: []string{"."},
		},
		{
			name:    "a file removed",
			before:  func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "a.yaml"), "x") },
			change:  func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, "a.yaml"))) },
			want:    []string{"a.yaml remove"},
			watched: []string{"."},
		},
		{
			name:    "a file's mode changed",
			before:  func(t *testing.T, dir string) { writeFile(t, filepath.Join(dir, "a.yaml"), "x") },
			change:  func(t *testing.T, dir string) { must(t, os.Chmod(filepath.Join(dir, "a.yaml"), 0o600)) },
			want:    []string{"a.yaml chmod"},
			watched: []string{"."},
		},
		{
			name:    "a watched directory removed",
			before:  func(t *testing.T, dir string) { must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755)) },
			change:  func(t *testing.T, dir string) { must(t, os.Remove(filepath.Join(dir, "sub"))) },
			want:    []string{"sub remove"},
			watched: []string{"."},
		},
		{
			name:   "a watched directory moved",
			before: func(t *testing.T, dir string) { must(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755)) },
			change: func(t *testing.T, dir string) {
				must(t, os.Rename(filepath.Join(dir, "sub"), filepath.Join(dir, "moved")))
			},
			want: []string{"sub rename", "moved create|closed"},
			// still watched (the kernel keeps the watch) until removed
			// or added by its new path
			watched: []string{".", "sub"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if tt.before != nil {
				tt.before(t, dir)
			}
			n, err := newNotifier()
			must(t, err)
			defer func() { must(t, n.close()) }()
			for _, d := range []string{dir, filepath.Join(dir, "sub")} {
				if _, err := os.Stat(d); err == nil {
					must(t, n.add(d))
					must(t, n.add(d)) // a second add is a no-op
				}
			}
			tt.change(t, dir)
			var got []string
			deadline := time.After(waitTimeout)
			for len(got) < len(tt.want) {
				select {
				case ev := <-n.events():
					rel, err := filepath.Rel(dir, ev.name)
					must(t, err)
					line := rel + " " + ev.op.String()
					if len(got) == 0 || got[len(got)-1] != line {
						got = append(got, line)
					}
				case err := <-n.errors():
					t.Fatalf("error: %v", err)
				case <-deadline:
					t.Fatalf("events %q, want %q", got, tt.want)
				}
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("events %q, want %q", got, tt.want)
			}
			var watched []string
			for _, p := range n.watchList() {
				rel, err := filepath.Rel(dir, p)
				must(t, err)
				watched = append(watched, rel)
			}
			slices.Sort(watched)
			if !slices.Equal(watched, tt.watched) {
				t.Errorf("watching %q, want %q", watched, tt.watched)
			}
		})
	}
}

// TestNotifierFollowsAMovedDirectory: a directory moved and added under its
// new path keeps its kernel watch, which then goes by the new path.
func TestNotifierFollowsAMovedDirectory(t *testing.T) {
	dir := t.TempDir()
	old, moved := filepath.Join(dir, "old"), filepath.Join(dir, "new")
	must(t, os.Mkdir(old, 0o755))
	n, err := newNotifier()
	must(t, err)
	defer func() { must(t, n.close()) }()
	must(t, n.add(old))
	must(t, os.Rename(old, moved))
	must(t, n.add(moved)) // before the move's notification was read
	writeFile(t, filepath.Join(moved, "a.yaml"), "x")
	deadline := time.After(waitTimeout)
	for {
		select {
		case ev := <-n.events():
			if ev.name == filepath.Join(moved, "a.yaml") && ev.op.has(opClosed) {
				return
			}
			if strings.HasPrefix(ev.name, old+string(filepath.Separator)) {
				t.Fatalf("event %s %s under the old path", ev.name, ev.op)
			}
		case <-deadline:
			t.Fatalf("no close of new/a.yaml; watching %q", n.watchList())
		}
	}
}

// String names the operations, for test failures and debugging.
func (o op) String() string {
	var names []string
	for i, name := range []string{"create", "write", "remove", "rename", "chmod", "closed"} {
		if o.has(1 << i) {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return fmt.Sprintf("op(%d)", uint32(o))
	}
	return strings.Join(names, "|")
}
