package files

import (
	"errors"
	"os"
	"testing"
)

// TestKeepStaged: with KeepStaged every delivery leaves the staged copy of
// each file it was to install beside it as .<name>.weft-stage, with the
// file's mode, replaced by the next delivery, also when the check refuses
// the file (then only where its folder exists); without it no copy is left.
func TestKeepStaged(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		r := newRig(t)
		d := r.driver(t, Options{KeepStaged: keep, Mode: 0o640, CheckCmd: "! grep -q refuse {{.src}}", Main: "app.conf"})
		r.apply(t, d, bundle("app.conf", "one\n", "sub/x.conf", "x\n"))
		want := map[string]string{".app.conf.weft-stage": "one\n", "sub/.x.conf.weft-stage": "x\n"}
		r.assertKept(t, keep, want)

		r.apply(t, d, bundle("app.conf", "two\n", "sub/x.conf", "x\n"))
		want[".app.conf.weft-stage"] = "two\n"
		r.assertKept(t, keep, want)

		_, err := d.Apply(t.Context(), bundle("app.conf", "refuse\n", "sub/x.conf", "x\n", "new/y.conf", "y\n"))
		r.assertNoStage(t)
		if !errors.Is(err, ErrCheckFailed) {
			t.Fatalf("Apply: %v, want ErrCheckFailed", err)
		}
		if got := r.read(t, "app.conf"); got != "two\n" {
			t.Errorf("a refused file was installed: %q", got)
		}
		if r.exists("new") {
			t.Error("a refused bundle made a folder")
		}
		want[".app.conf.weft-stage"] = "refuse\n"
		r.assertKept(t, keep, want)
	}
}

// assertKept checks the kept copies (name -> content) of a driver with
// KeepStaged, or that there are none without it.
func (r rig) assertKept(t *testing.T, keep bool, want map[string]string) {
	t.Helper()
	for p, content := range want {
		if !keep {
			if r.exists(p) {
				t.Errorf("without KeepStaged, %s was left", p)
			}
			continue
		}
		if got := r.read(t, p); got != content {
			t.Errorf("%s = %q, want %q", p, got, content)
		}
		if fi, err := os.Stat(r.path(p)); err != nil {
			t.Error(err)
		} else if fi.Mode().Perm() != 0o640 {
			t.Errorf("%s: mode %v, want 0640", p, fi.Mode().Perm())
		}
	}
}

// TestKeptName: the copy is named after the file, in its folder.
func TestKeptName(t *testing.T) {
	for p, want := range map[string]string{"app.conf": ".app.conf.weft-stage", "maps/hosts.map": "maps/.hosts.map.weft-stage"} {
		if got := KeptName(p); got != want {
			t.Errorf("KeptName(%q) = %q, want %q", p, got, want)
		}
	}
}
