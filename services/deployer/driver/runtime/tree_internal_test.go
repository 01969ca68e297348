package runtime

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// TestTreeReadsWhatIsThere: readDisk through a tree sees each bundle path
// as a walk of the whole path would: folders opened once, links to
// folders inside Dir followed, a file where a folder goes a conflict, a
// link out of Dir refused, a missing folder a missing file. Asking twice
// gives the same answer.
func TestTreeReadsWhatIsThere(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(name, content string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("haproxy.cfg", "main")
	write("maps/a.map", "a")
	write("maps/deep/b.map", "b")
	write("file", "not a folder")
	write("sub/dir/inner", "x")
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, l := range []struct{ target, name string }{
		{"maps", "linked"},          // a folder inside Dir
		{outside, "out"},            // a folder outside Dir
		{"missing", "dangling"},     // nothing
		{"haproxy.cfg", "cfg-link"}, // a file: not followed
	} {
		if err := os.Symlink(l.target, filepath.Join(dir, l.name)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	d, err := New(Options{Dir: dir, MasterSocket: filepath.Join(dir, "m.sock")})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		want    string // "" with exists false: nothing there
		exists  bool
		wantErr error // matched with errors.Is; errAny: any error
	}{
		{name: "haproxy.cfg", want: "main", exists: true},
		{name: "maps/a.map", want: "a", exists: true},
		{name: "maps/deep/b.map", want: "b", exists: true},
		{name: "maps/none.map"},
		{name: "nothing/here/x.map"},
		{name: "linked/a.map", want: "a", exists: true},
		{name: "dangling/x"},
		{name: "cfg-link"},
		{name: "file/x", wantErr: ErrConflict},
		{name: "sub/dir", wantErr: ErrConflict},
		{name: "sub/dir/inner/x", wantErr: ErrConflict},
		{name: "out/secret", wantErr: errAny},
	}
	tr := newTree(root)
	defer tr.close()
	for range 2 {
		for _, c := range cases {
			got, exists, err := d.readDisk(tr, c.name)
			switch {
			case c.wantErr == errAny && err == nil, c.wantErr != nil && c.wantErr != errAny && !errors.Is(err, c.wantErr):
				t.Errorf("readDisk(%s) = %q, %v, %v; want the error %v", c.name, got, exists, err, c.wantErr)
			case c.wantErr == nil && (err != nil || exists != c.exists || string(got) != c.want):
				t.Errorf("readDisk(%s) = %q, %v, %v; want %q, %v", c.name, got, exists, err, c.want, c.exists)
			}
		}
	}
}

var errAny = errors.New("any error")
