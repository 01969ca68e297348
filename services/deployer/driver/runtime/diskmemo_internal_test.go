package runtime

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestReadDiskTakesWhatItWrote: a file the driver wrote is taken from
// what it wrote (the same bytes, not read again) while nobody touched it;
// any change by someone else, even in place to the same size, makes
// readDisk read the file.
func TestReadDiskTakesWhatItWrote(t *testing.T) {
	const name = "haproxy.cfg"
	written := []byte("global\n  maxconn 100\n")
	other := []byte("global\n  maxconn 999\n") // the same size
	cases := []struct {
		name   string
		change func(t *testing.T, path string)
		want   []byte // nil: no file
		taken  bool   // the bytes written, not read
	}{
		{name: "untouched", want: written, taken: true},
		{name: "written in place, same size", change: func(t *testing.T, p string) {
			// Past the timestamp granularity of kernels without
			// fine-grained change times (a tick, at most 10 ms).
			time.Sleep(20 * time.Millisecond)
			f, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.WriteAt(other, 0); err != nil {
				t.Fatal(err)
			}
		}, want: other},
		{name: "renamed over, same content", change: func(t *testing.T, p string) {
			tmp := p + ".new"
			if err := os.WriteFile(tmp, written, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, p); err != nil {
				t.Fatal(err)
			}
		}, want: written},
		{name: "mode changed", change: func(t *testing.T, p string) {
			if err := os.Chmod(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}, want: written},
		{name: "times set back", change: func(t *testing.T, p string) {
			if err := os.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0)); err != nil {
				t.Fatal(err)
			}
		}, want: written},
		{name: "removed", change: func(t *testing.T, p string) {
			if err := os.Remove(p); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			d, err := New(Options{Dir: dir, MasterSocket: filepath.Join(dir, "master.sock")})
			if err != nil {
				t.Fatal(err)
			}
			root, err := os.OpenRoot(dir)
			if err != nil {
				t.Fatal(err)
			}
			defer root.Close()
			m := manifest{Files: map[string]string{}}
			content := bytes.Clone(written)
			if err := d.writeFile(root, &m, File{Path: name, Content: content}); err != nil {
				t.Fatal(err)
			}
			if c.change != nil {
				c.change(t, filepath.Join(dir, name))
			}
			tr := newTree(root)
			defer tr.close()
			got, exists, err := d.readDisk(tr, name)
			switch {
			case err != nil:
				t.Fatal(err)
			case exists != (c.want != nil) || !bytes.Equal(got, c.want):
				t.Fatalf("readDisk = %q (exists %v), want %q", got, exists, c.want)
			case exists && (&got[0] == &content[0]) != c.taken:
				t.Fatalf("readDisk took the bytes written instead of reading: %v, want %v", !c.taken, c.taken)
			}
		})
	}
}
