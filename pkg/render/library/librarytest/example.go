package librarytest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/target"
)

// RenderExample renders the target named library of the example in dir
// as `weft render` would, for a temporary base, which it returns: the
// example's weft.yaml must use the library there, its watched_resources
// must be documented (those of the README readme, with config.Load's
// defaults), and the render over the objects of its manifests/*.yaml must
// register no errors.
func RenderExample(t testing.TB, dir, library string, documented map[string]config.Resource, readme string) (target.Result, string) {
	t.Helper()
	cfg, err := config.Load(filepath.Join(dir, "weft.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]config.Resource{}
	for n, r := range documented {
		if r.Store == "" {
			r.Store = config.StoreFull
		}
		want[n] = r
	}
	if !reflect.DeepEqual(cfg.WatchedResources, want) {
		t.Errorf("the example's watched_resources differ from %s's:\n%+v\n%+v", readme, cfg.WatchedResources, want)
	}
	files, err := filepath.Glob(filepath.Join(dir, "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v", err)
	}
	var objs []Object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, ParseObjects(t, cfg.WatchedResources, data)...)
	}
	tc := cfg.Targets[library]
	if tc.Library != library {
		t.Fatalf("target %s: library %q", library, tc.Library)
	}
	tc.Base = t.TempDir()
	r := Render(t, tc, NewIndex(t, cfg.WatchedResources, objs))
	if len(r.Errors) > 0 {
		t.Errorf("registered errors: %+v", r.Errors)
	}
	return r, tc.Base
}
