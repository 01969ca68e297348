package librarytest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// LoadExample loads the example in dir as `weft render` would: its
// weft.yaml, whose watched_resources must be documented (those of the
// README readme, with config.Load's defaults), and the objects of its
// manifests/*.yaml.
func LoadExample(t testing.TB, dir string, documented map[string]config.Resource, readme string) (*config.Config, []Object) {
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
	return cfg, objs
}
