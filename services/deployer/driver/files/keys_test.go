//go:build linux

package files

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"testing"
)

// TestKeyMaterialIsPrivate: files marked Secret are delivered with KeyMode
// (0600 unless set), the others with Mode, and a key file found with a
// wider mode (delivered by a version that did not know it was a key, or
// chmod-ed by someone) is narrowed by the next Apply.
func TestKeyMaterialIsPrivate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		opts          Options
		mode, keyMode fs.FileMode
		wantErr       error
	}{
		{name: "defaults", mode: 0o644, keyMode: 0o600},
		{name: "configured key mode", opts: Options{Mode: 0o644, KeyMode: 0o640}, mode: 0o644, keyMode: 0o640},
		{name: "private everything", opts: Options{Mode: 0o600}, mode: 0o600, keyMode: 0o600},
		{name: "world-readable key mode refused", opts: Options{KeyMode: 0o644}, wantErr: ErrConfig},
		{name: "world-writable key mode refused", opts: Options{KeyMode: 0o602}, wantErr: ErrConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			opts := tt.opts
			opts.Dest = r.dest
			d, err := New(opts)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("New(%+v) = %v, want %v", opts, err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			files := []File{
				{Path: "haproxy.cfg", Content: []byte("global\n")},
				{Path: "certs/site.pem", Content: []byte("cert and key\n"), Secret: true},
				{Path: "certs/other.pem", Content: []byte("another\n"), Secret: true},
				{Path: "maps/host.map", Content: []byte("a b\n")},
			}
			r.apply(t, d, files)
			want := func(f File) fs.FileMode {
				if f.Secret {
					return tt.keyMode
				}
				return tt.mode
			}
			checkModes := func() {
				t.Helper()
				for _, f := range files {
					fi, err := os.Stat(r.path(f.Path))
					if err != nil {
						t.Fatal(err)
					}
					if fi.Mode().Perm() != want(f) {
						t.Errorf("%s mode = %v, want %v", f.Path, fi.Mode().Perm(), want(f))
					}
				}
			}
			checkModes()
			if drift, err := d.Drift(files); err != nil || len(drift) != 0 {
				t.Fatalf("Drift = %q, %v; want none", drift, err)
			}

			// A key left world-readable is narrowed without rewriting the
			// others.
			if err := os.Chmod(r.path("certs/site.pem"), 0o644); err != nil {
				t.Fatal(err)
			}
			if drift, err := d.Drift(files); err != nil || !slices.Equal(drift, []string{"certs/site.pem"}) {
				t.Fatalf("Drift = %q, %v; want the widened key", drift, err)
			}
			res := r.apply(t, d, files)
			if !slices.Equal(res.Written, []string{"certs/site.pem"}) {
				t.Errorf("Written = %q, want the widened key", res.Written)
			}
			checkModes()
		})
	}
}

// TestDestRemovedIsDeliveredAgain: a destination removed behind the
// driver's back is created again and the whole bundle delivered and
// reloaded, as Drift announces.
func TestDestRemovedIsDeliveredAgain(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	d := r.driver(t, Options{ReloadCmd: r.reloadCmd(), DirMode: 0o750})
	files := bundle("haproxy.cfg", "global\n", "maps/host.map", "a b\n")
	r.apply(t, d, files)
	if err := os.RemoveAll(r.dest); err != nil {
		t.Fatal(err)
	}
	drift, err := d.Drift(files)
	if err != nil || !slices.Equal(drift, []string{"haproxy.cfg", "maps/host.map"}) {
		t.Fatalf("Drift = %q, %v; want every file", drift, err)
	}
	res := r.apply(t, d, files)
	if !slices.Equal(res.Written, []string{"haproxy.cfg", "maps/host.map"}) || !res.Reloaded || r.reloads(t) != 2 {
		t.Fatalf("Result = %+v with %d reloads, want every file written and a second reload", res, r.reloads(t))
	}
	r.assertBundle(t, files)
	fi, err := os.Stat(r.dest)
	if err != nil || fi.Mode().Perm() != 0o750 {
		t.Fatalf("Dest = %v, %v; want a folder with DirMode", fi, err)
	}
}
