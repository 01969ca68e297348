package runtime

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// assertModes fails unless every file of bundle is in the rig's folder with
// the mode the driver delivers it with: key material 0600, the rest 0644.
func (r *rig) assertModes(bundle []File) {
	r.tb.Helper()
	for _, f := range bundle {
		fi, err := os.Stat(filepath.Join(r.dir, filepath.FromSlash(f.Path)))
		if err != nil {
			r.tb.Fatal(err)
		}
		want := fs.FileMode(0o644)
		if f.Secret {
			want = 0o600
		}
		if fi.Mode().Perm() != want {
			r.tb.Errorf("%s mode = %v, want %v", f.Path, fi.Mode().Perm(), want)
		}
	}
}

// TestKeyMaterialIsPrivate: certificates are written 0600 on every path
// that writes them (a new certificate file through a reload, a changed one
// through the Runtime API), and one found world-readable with the right
// content is narrowed without a reload.
func TestKeyMaterialIsPrivate(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	s := baseSpec(r)
	r.assertModes(r.bundle(s))

	// A certificate left world-readable (by a version of weft that wrote
	// keys 0644, or by someone) is narrowed in place.
	cert := filepath.Join(r.dir, "certs", "site.pem")
	if err := os.Chmod(cert, 0o644); err != nil {
		t.Fatal(err)
	}
	if d, err := r.drv.Drift(r.bundle(s)); err != nil || !slices.Equal(d, []string{"certs/site.pem"}) {
		t.Fatalf("Drift = %q, %v; want the widened certificate", d, err)
	}
	before := r.reloads()
	res := r.apply(r.bundle(s))
	if res.Reloaded || r.reloads() != before || !slices.Equal(res.Written, []string{"certs/site.pem"}) {
		t.Errorf("Apply of a widened certificate: %+v, want it set back without a reload", res)
	}
	r.assertModes(r.bundle(s))

	// A new certificate file: a reload writes it.
	s.extra = append(s.extra, File{Path: "certs/extra.pem", Content: r.certTwo, Secret: true})
	res = r.apply(r.bundle(s))
	if !res.Reloaded || res.ReloadReason != ReasonNewFile {
		t.Errorf("Apply of a new certificate: %+v, want a new-file reload", res)
	}
	r.assertModes(r.bundle(s))

	// A changed certificate HAProxy has loaded: through the Runtime API,
	// and written.
	s.cert = r.certTwo
	before = r.reloads()
	res = r.apply(r.bundle(s))
	if res.Reloaded || r.reloads() != before || !slices.Contains(res.Written, "certs/site.pem") {
		t.Errorf("Apply of a changed certificate: %+v, want it written without a reload", res)
	}
	if got := r.certCN(); got != "two" {
		t.Errorf("TLS frontend serves %q, want two", got)
	}
	r.assertModes(r.bundle(s))
}

// TestKeyModeMustBePrivate: a key mode that gives others access is refused.
func TestKeyModeMustBePrivate(t *testing.T) {
	t.Parallel()
	for _, m := range []fs.FileMode{0o644, 0o604, 0o601, 0o4600} {
		if _, err := New(Options{Dir: t.TempDir(), MasterSocket: "/m.sock", KeyMode: m}); !errors.Is(err, ErrConfig) {
			t.Errorf("KeyMode %v: %v, want ErrConfig", m, err)
		}
	}
	d, err := New(Options{Dir: t.TempDir(), MasterSocket: "/m.sock"})
	if err != nil || d.Options().KeyMode != DefaultKeyMode {
		t.Fatalf("default KeyMode: %+v, %v", d.Options(), err)
	}
}

// TestDirRemoved: the folder removed behind the driver's back (with its
// record) is created again, every file written and HAProxy reloaded on
// them.
func TestDirRemoved(t *testing.T) {
	t.Parallel()
	r := newRig(t, baseSpec)
	bundle := r.bundle(baseSpec(r))
	if err := os.RemoveAll(r.dir); err != nil {
		t.Fatal(err)
	}
	if d, err := r.drv.Drift(bundle); err != nil || len(d) != len(bundle) {
		t.Fatalf("Drift = %q, %v; want every file", d, err)
	}
	before := r.reloads()
	res := r.apply(bundle)
	if !res.Reloaded || res.ReloadReason != ReasonInitial || r.reloads() != before+1 || len(res.Written) != len(bundle) {
		t.Errorf("Apply into a removed folder: %+v, want every file written and one reload", res)
	}
	r.assertModes(bundle)
	if got := r.get("app.example", "/"); got != "B" {
		t.Errorf("app.example answered by %q, want B", got)
	}
}
