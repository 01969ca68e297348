package library_test

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/render/target"
)

var update = flag.Bool("update", false, "rewrite the golden files under ingress/testdata/<case>/golden")

// goldenBase is the base the golden bundles are rendered for.
const goldenBase = "/etc/haproxy"

// errorsFile is the golden file of the errors a render registered.
const errorsFile = "errors.txt"

// fixture is one case under ingress/testdata: objects.yaml (the objects),
// options.yaml (library_options, optional), requests.yaml (what the
// routing test sends and expects, optional) and golden/ (the bundle's
// non-empty files and errors.txt).
type fixture struct {
	name     string
	dir      string
	objects  []object
	options  map[string]string
	requests []request
}

func fixtures(t *testing.T) []fixture {
	t.Helper()
	res := watched(t)
	dirs, err := filepath.Glob("ingress/testdata/*/objects.yaml")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var out []fixture
	for _, p := range dirs {
		dir := filepath.Dir(p)
		f := fixture{name: filepath.Base(dir), dir: dir}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f.objects = parseObjects(t, res, data)
		if data, err := os.ReadFile(filepath.Join(dir, "options.yaml")); err == nil {
			if err := yaml.UnmarshalStrict(data, &f.options); err != nil {
				t.Fatalf("%s/options.yaml: %v", dir, err)
			}
		}
		if data, err := os.ReadFile(filepath.Join(dir, "requests.yaml")); err == nil {
			if err := yaml.UnmarshalStrict(data, &f.requests); err != nil {
				t.Fatalf("%s/requests.yaml: %v", dir, err)
			}
		}
		out = append(out, f)
	}
	return out
}

// TestGolden renders every fixture and compares the bundle's non-empty
// files and the registered errors with golden/ (go test -update rewrites
// them); every bundle must pass haproxy -c.
func TestGolden(t *testing.T) {
	res := watched(t)
	for _, f := range fixtures(t) {
		t.Run(f.name, func(t *testing.T) {
			r := render(t, ingressTarget(goldenBase, f.options), newIndex(t, res, f.objects))
			got := map[string]string{}
			for _, file := range r.Bundle.Files {
				if len(file.Content) > 0 {
					got[file.Path] = string(file.Content)
					continue
				}
				// Only unused certificate and backend CA slots and an
				// empty crt-list may be empty.
				if !strings.HasPrefix(file.Path, "certs/ingress-tls-") && !strings.HasPrefix(file.Path, "files/ingress-backend-ca-") &&
					file.Path != "files/ingress-crt-list" {
					t.Errorf("%s is empty", file.Path)
				}
			}
			var errs strings.Builder
			for _, e := range r.Errors {
				fmt.Fprintf(&errs, "%s %s: %s\n", e.Type, e.ID, e.Message)
			}
			got[errorsFile] = errs.String()

			golden := filepath.Join(f.dir, "golden")
			if *update {
				if err := os.RemoveAll(golden); err != nil {
					t.Fatal(err)
				}
				for p, content := range got {
					dst := filepath.Join(golden, filepath.FromSlash(p))
					if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(dst, []byte(content), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
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
			for _, p := range slices.Sorted(mapsKeys(got)) {
				if w, ok := want[p]; !ok {
					t.Errorf("%s is not in golden/ (go test -update)", p)
				} else if w != got[p] {
					t.Errorf("%s differs from golden/ (go test -update)\n--- got ---\n%s\n--- want ---\n%s", p, got[p], w)
				}
			}
			for _, p := range slices.Sorted(mapsKeys(want)) {
				if _, ok := got[p]; !ok {
					t.Errorf("golden/%s is not rendered (go test -update)", p)
				}
			}

			// The same bundle rendered for a temporary base, which is the
			// golden one with the base replaced, passes haproxy -c there.
			dir := t.TempDir()
			checked := render(t, ingressTarget(dir, f.options), newIndex(t, res, f.objects))
			for _, file := range checked.Bundle.Files {
				if w := strings.ReplaceAll(got[file.Path], goldenBase+"/", dir+"/"); string(file.Content) != w {
					t.Errorf("%s rendered for base %s is not the golden file with that base", file.Path, dir)
				}
			}
			if checked.Bundle.Main != target.MainFile {
				t.Fatalf("main file %q", checked.Bundle.Main)
			}
			haproxyCheck(t, dir, checked.Bundle)
		})
	}
}
