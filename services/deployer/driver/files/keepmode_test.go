package files

import (
	"io/fs"
	"os"
	"testing"
)

// TestKeepMode: with KeepMode (a confd resource without mode) a file
// already in Dest keeps its permission bits when new content replaces it,
// and a mode changed behind the driver is left alone; a new file gets
// Mode; key material still gets KeyMode.
func TestKeepMode(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	if err := os.MkdirAll(r.dest, 0o755); err != nil {
		t.Fatal(err)
	}
	r.write(t, "app.conf", "old\n")
	if err := os.Chmod(r.path("app.conf"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := r.driver(t, Options{KeepMode: true})
	files := append(bundle("app.conf", "new\n", "fresh.conf", "x\n"), File{Path: "site.pem", Content: []byte("key\n"), Secret: true})
	r.apply(t, d, files)
	mode := func(p string) fs.FileMode {
		t.Helper()
		fi, err := os.Stat(r.path(p))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}
	for p, want := range map[string]fs.FileMode{"app.conf": 0o600, "fresh.conf": DefaultMode, "site.pem": DefaultKeyMode} {
		if got := mode(p); got != want {
			t.Errorf("%s: mode %v, want %v", p, got, want)
		}
	}
	if got := r.read(t, "app.conf"); got != "new\n" {
		t.Errorf("app.conf = %q", got)
	}
	// A mode an operator sets is kept by the next delivery too.
	if err := os.Chmod(r.path("fresh.conf"), 0o640); err != nil {
		t.Fatal(err)
	}
	res := r.apply(t, d, bundle("app.conf", "newer\n", "fresh.conf", "x\n"))
	if len(res.Written) != 1 || res.Written[0] != "app.conf" {
		t.Errorf("written %v, want only app.conf", res.Written)
	}
	if got := mode("fresh.conf"); got != 0o640 {
		t.Errorf("fresh.conf: mode %v, want the operator's 0640", got)
	}
	if got := mode("app.conf"); got != 0o600 {
		t.Errorf("app.conf: mode %v, want 0600 kept", got)
	}
}
