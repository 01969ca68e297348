package library_test

import (
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"
)

// exampleDir is examples/ingress, which uses the library.
const exampleDir = "../../../examples/ingress"

// TestExample renders examples/ingress as `weft render` would, checks that
// it registers no errors and serves what its manifests say, and that the
// bundle passes haproxy -c; its watched resources must be the documented
// ones.
func TestExample(t *testing.T) {
	r, dir := librarytest.RenderExample(t, exampleDir, "ingress", watched(t), "ingress/README.md")
	cfgText := librarytest.FileContent(r.Bundle, "haproxy.cfg")
	for _, want := range []string{
		"bind 127.0.0.1:18080\n", "bind 127.0.0.1:18443 ssl crt-list " + dir + "/files/ingress-crt-list\n",
		"default_backend ing_default_fallback_fallback_80\n",
		"server SRV_2 127.0.0.12:3000\n  server SRV_3 127.0.0.1:1 disabled\n",
	} {
		if !strings.Contains(cfgText, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, cfgText)
		}
	}
	if strings.Contains(cfgText, "other.example.com") || strings.Contains(librarytest.FileContent(r.Bundle, "maps/ingress-hosts.map"), "other.example.com") {
		t.Error("the Ingress of class nginx is served")
	}
	if got := librarytest.FileContent(r.Bundle, "files/ingress-crt-list"); got != "ingress-tls-1.pem shop.example.com\n" {
		t.Errorf("crt-list = %q", got)
	}
	librarytest.HAProxyCheck(t, dir, r.Bundle)
}
