package librarytest

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/target"
)

// GoldenBase is the base the golden bundles are rendered for.
const GoldenBase = "/etc/haproxy"

// ErrorsFile is the golden file of the errors a render registered.
const ErrorsFile = "errors.txt"

// Golden is what a library's golden test needs besides the fixture.
type Golden struct {
	// Resources are the watched resources the fixture is indexed with.
	Resources map[string]config.Resource
	// Target is the target of the library for a base and options.
	Target func(base string, opts map[string]string) config.Target
	// MayBeEmpty tells the bundle files that may be empty (unused slots).
	MayBeEmpty func(path string) bool
	// Update rewrites golden/ with what is rendered (the -update flag).
	Update bool
}

// Check renders f for GoldenBase and compares the bundle's non-empty files
// and the registered errors with f's golden/ (rewritten first with
// g.Update); then renders f for a temporary base, which must give the
// golden files with the base replaced, and checks that bundle with
// haproxy -c.
func (g Golden) Check(t *testing.T, dir string, objs []Object, opts map[string]string) {
	t.Helper()
	r := Render(t, g.Target(GoldenBase, opts), NewIndex(t, g.Resources, objs))
	got := map[string]string{}
	for _, file := range r.Bundle.Files {
		if len(file.Content) > 0 {
			got[file.Path] = string(file.Content)
			continue
		}
		if !g.MayBeEmpty(file.Path) {
			t.Errorf("%s is empty", file.Path)
		}
	}
	var errs strings.Builder
	for _, e := range r.Errors {
		fmt.Fprintf(&errs, "%s %s: %s\n", e.Type, e.ID, e.Message)
	}
	got[ErrorsFile] = errs.String()

	golden := filepath.Join(dir, "golden")
	if g.Update {
		writeGolden(t, golden, got)
	}
	want := readGolden(t, golden)
	for _, p := range slices.Sorted(maps.Keys(got)) {
		if w, ok := want[p]; !ok {
			t.Errorf("%s is not in golden/ (go test -update)", p)
		} else if w != got[p] {
			t.Errorf("%s differs from golden/ (go test -update)\n--- got ---\n%s\n--- want ---\n%s", p, got[p], w)
		}
	}
	for _, p := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[p]; !ok {
			t.Errorf("golden/%s is not rendered (go test -update)", p)
		}
	}

	// The same bundle rendered for a temporary base, which is the golden
	// one with the base replaced, passes haproxy -c there.
	base := t.TempDir()
	checked := Render(t, g.Target(base, opts), NewIndex(t, g.Resources, objs))
	for _, file := range checked.Bundle.Files {
		if w := strings.ReplaceAll(got[file.Path], GoldenBase+"/", base+"/"); string(file.Content) != w {
			t.Errorf("%s rendered for base %s is not the golden file with that base", file.Path, base)
		}
	}
	if checked.Bundle.Main != target.MainFile {
		t.Fatalf("main file %q", checked.Bundle.Main)
	}
	HAProxyCheck(t, base, checked.Bundle)
}

func writeGolden(t *testing.T, golden string, files map[string]string) {
	t.Helper()
	if err := os.RemoveAll(golden); err != nil {
		t.Fatal(err)
	}
	for p, content := range files {
		dst := filepath.Join(golden, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readGolden(t *testing.T, golden string) map[string]string {
	t.Helper()
	want := map[string]string{}
	err := filepath.WalkDir(golden, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		rel, _ := filepath.Rel(golden, p)
		want[filepath.ToSlash(rel)] = string(b)
		return err
	})
	if err != nil {
		t.Fatalf("golden files (run go test -update to write them): %v", err)
	}
	return want
}
