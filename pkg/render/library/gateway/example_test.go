package gateway_test

import (
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"
)

// exampleDir is examples/gateway, which uses the library.
const exampleDir = "../../../../examples/gateway"

// TestExample renders examples/gateway as `weft render` would, checks that
// it registers no errors and serves what its manifests say, and that the
// bundle passes haproxy -c; its watched resources must be the documented
// ones.
func TestExample(t *testing.T) {
	r, dir := librarytest.RenderExample(t, exampleDir, "gateway", watched(t), "README.md")
	cfgText := librarytest.FileContent(r.Bundle, "haproxy.cfg")
	for _, want := range []string{
		"bind 127.0.0.1:18080\n", "bind 127.0.0.1:18443 ssl crt-list " + dir + "/files/gateway-crt-list\n",
		"use_backend gw_shop_shop_r0m0 if { var(txn.host) -m str shop.example.com } { var(txn.gw_path) -m beg '/api/' }\n",
		"server SRV_1_1 10.0.0.11:3000 weight 256\n  server SRV_1_2 127.0.0.1:1 disabled weight 256\n",
		"server SRV_1_4 127.0.0.1:1 disabled weight 256\n  server SRV_2_1 10.0.0.12:3000 weight 28\n",
		"http-request redirect location http://%[var(txn.host)]%[var(txn.gw_portsfx)]%[path]%[var(txn.gw_qs)] code 301 if !{ ssl_fc }\n",
		"http-response set-header X-Served-By 'weft'\n",
	} {
		if !strings.Contains(cfgText, want) {
			t.Errorf("haproxy.cfg lacks %q:\n%s", want, cfgText)
		}
	}
	if strings.Contains(cfgText, "18081") {
		t.Error("the Gateway of the other class is served")
	}
	if got := librarytest.FileContent(r.Bundle, "files/gateway-crt-list"); got != "gateway-tls-1.pem shop.example.com\n" {
		t.Errorf("crt-list = %q", got)
	}
	librarytest.HAProxyCheck(t, dir, r.Bundle)
}
