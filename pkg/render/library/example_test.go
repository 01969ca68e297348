package library_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
)

// exampleDir is examples/ingress, which uses the library.
const exampleDir = "../../../examples/ingress"

// TestExample renders examples/ingress as `weft render` would, checks that
// it registers no errors and serves what its manifests say, and that the
// bundle passes haproxy -c; its watched resources must be the documented
// ones.
func TestExample(t *testing.T) {
	cfg, err := config.Load(filepath.Join(exampleDir, "weft.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg.WatchedResources, withStoreDefaults(watched(t))) {
		t.Errorf("the example's watched_resources differ from ingress/README.md's:\n%+v\n%+v", cfg.WatchedResources, watched(t))
	}
	files, err := filepath.Glob(filepath.Join(exampleDir, "manifests", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("manifests: %v", err)
	}
	var objs []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, parseObjects(t, cfg.WatchedResources, data)...)
	}
	tc := cfg.Targets["ingress"]
	if tc.Library != "ingress" {
		t.Fatalf("target ingress: library %q", tc.Library)
	}
	dir := t.TempDir()
	tc.Base = dir
	r := render(t, tc, newIndex(t, cfg.WatchedResources, objs))
	if len(r.Errors) > 0 {
		t.Errorf("registered errors: %+v", r.Errors)
	}
	cfgText := fileContent(r.Bundle, "haproxy.cfg")
	for _, want := range []string{
		"bind 127.0.0.1:18080\n", "bind 127.0.0.1:18443 ssl crt-list " + dir + "/files/ingress-crt-list\n",
		"default_backend ing_default_fallback_fallback_80\n",
		"server SRV_2 127.0.0.12:3000\n  server SRV_3 127.0.0.1:1 disabled\n",
	} {
		if !strings.Contains(cfgText, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, cfgText)
		}
	}
	if strings.Contains(cfgText, "other.example.com") || strings.Contains(fileContent(r.Bundle, "maps/ingress-hosts.map"), "other.example.com") {
		t.Error("the Ingress of class nginx is served")
	}
	if got := fileContent(r.Bundle, "files/ingress-crt-list"); got != "ingress-tls-1.pem shop.example.com\n" {
		t.Errorf("crt-list = %q", got)
	}
	haproxyCheck(t, dir, r.Bundle)
}

// withStoreDefaults is res as config.Load defaults it.
func withStoreDefaults(res map[string]config.Resource) map[string]config.Resource {
	for n, r := range res {
		if r.Store == "" {
			r.Store = config.StoreFull
		}
		res[n] = r
	}
	return res
}
