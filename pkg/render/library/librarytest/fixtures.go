package librarytest

import (
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/config"
)

// Fixture is one case of a library's testdata: objects.yaml (the
// objects), options.yaml (library_options, optional), requests.yaml (what
// the routing test sends and expects, in the library's request format R,
// optional) and golden/ (the bundle's non-empty files and errors.txt).
type Fixture[R any] struct {
	Name     string
	Dir      string
	Objects  []Object
	Options  map[string]string
	Requests []R
}

// Fixtures reads every case testdata/<case>/objects.yaml, with its
// objects typed by res.
func Fixtures[R any](t testing.TB, res map[string]config.Resource, testdata string) []Fixture[R] {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(testdata, "*", "objects.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	var out []Fixture[R]
	for _, p := range paths {
		dir := filepath.Dir(p)
		f := Fixture[R]{Name: filepath.Base(dir), Dir: dir}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		f.Objects = ParseObjects(t, res, data)
		if data, err := os.ReadFile(filepath.Join(dir, "options.yaml")); err == nil {
			if err := yaml.UnmarshalStrict(data, &f.Options); err != nil {
				t.Fatalf("%s/options.yaml: %v", dir, err)
			}
		}
		if data, err := os.ReadFile(filepath.Join(dir, "requests.yaml")); err == nil {
			if err := yaml.UnmarshalStrict(data, &f.Requests); err != nil {
				t.Fatalf("%s/requests.yaml: %v", dir, err)
			}
		}
		out = append(out, f)
	}
	return out
}

// Find is the fixture named name of fs; the test fails without it.
func Find[R any](t testing.TB, fs []Fixture[R], name string) Fixture[R] {
	t.Helper()
	for _, f := range fs {
		if f.Name == name {
			return f
		}
	}
	t.Fatalf("no fixture %s", name)
	return Fixture[R]{}
}

// Object is a copy of the body of the object typ ns/name of f, or nil
// when f has none.
func (f Fixture[R]) Object(t testing.TB, typ, ns, name string) map[string]any {
	t.Helper()
	for _, o := range f.Objects {
		if o.Type == typ && o.Namespace == ns && o.Name == name {
			return RoundTrip(t, o.Body)
		}
	}
	return nil
}
