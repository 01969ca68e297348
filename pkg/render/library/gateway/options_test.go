package gateway_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/library"
)

// TestOptions checks the declared options and the checks of their values.
func TestOptions(t *testing.T) {
	opts, err := library.Options("gateway")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"controller_name", "bind_address", "server_slots", "tls_slots", "admin_socket", "tunnel_timeout", "hard_stop_after"} {
		if o, ok := opts[n]; !ok || o.Doc == "" {
			t.Errorf("option %s: %+v, %v", n, o, ok)
		}
	}
	cases := []struct {
		opts map[string]string
		want string // "" when the options are valid
	}{
		{map[string]string{"controller_name": "example.net/gateway-controller"}, ""},
		{map[string]string{"controller_name": "example.net/a/b-c_d"}, ""},
		{map[string]string{"controller_name": "gateway-controller"}, "library_options.controller_name"},
		{map[string]string{"controller_name": "Example.net/x"}, "library_options.controller_name"},
		{map[string]string{"controller_name": "example.net/"}, "library_options.controller_name"},
		{map[string]string{"controller_name": `example.net/"x"`}, "library_options.controller_name"},
		{map[string]string{"server_slots": "1"}, ""},
		{map[string]string{"server_slots": "0"}, "library_options.server_slots: \"0\" is not a number from 1 to 4096"},
		{map[string]string{"server_slots": "4097"}, "library_options.server_slots"},
		{map[string]string{"tls_slots": "4097"}, "library_options.tls_slots"},
		{map[string]string{"tunnel_timeout": "600", "hard_stop_after": "0"}, ""},
		{map[string]string{"tunnel_timeout": "0"}, "library_options.tunnel_timeout: \"0\" is not a number from 1 to 2147483"},
		{map[string]string{"hard_stop_after": "1h"}, "library_options.hard_stop_after"},
		{map[string]string{"http_port": "80"}, `no option "http_port"`},
	}
	for _, c := range cases {
		tc := config.Target{Library: "gateway", LibraryOptions: c.opts, Base: "/etc/haproxy"}
		err := library.Apply(&tc)
		switch {
		case c.want == "" && err != nil:
			t.Errorf("options %v: %v", c.opts, err)
		case c.want != "" && (!errors.Is(err, library.ErrOption) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("options %v: err = %v, want one mentioning %q", c.opts, err, c.want)
		}
	}
}

// TestControllerName renders the simple fixture for another controller
// name: its GatewayClass is then not this target's, and nothing is served.
func TestControllerName(t *testing.T) {
	res := watched(t)
	for _, f := range fixtures(t) {
		if f.Name != "simple" {
			continue
		}
		r := librarytest.Render(t, gatewayTarget(librarytest.GoldenBase, map[string]string{"controller_name": "example.com/other"}), librarytest.NewIndex(t, res, f.Objects))
		cfg := librarytest.FileContent(r.Bundle, "haproxy.cfg")
		if !strings.Contains(cfg, "frontend gw_8080") || strings.Contains(cfg, "frontend gw_80\n") || strings.Contains(cfg, "use_backend gw_infra_matching") {
			t.Errorf("controller example.com/other: haproxy.cfg serves the other class's Gateway only?\n%s", cfg)
		}
		return
	}
	t.Fatal("no fixture simple")
}
