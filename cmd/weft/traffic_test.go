package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/weftio/weft/cmd/weft/internal/demo"
	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer/driver/runtime"
)

// echo serves its name on addr until the test ends.
func echo(t testing.TB, addr, name string) {
	t.Helper()
	srv, err := demo.Echo(addr, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
}

// runtimeQuickstart turns the quickstart copied into dir into the
// configuration `weft up --demo` runs (the runtime driver, an admin socket)
// and starts HAProxy for it as the demo does, until the test ends.
func runtimeQuickstart(t testing.TB, dir string) {
	t.Helper()
	cfg, err := config.Load(filepath.Join(dir, "weft.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := demo.Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	master, admin := filepath.Join(dir, "master.sock"), filepath.Join(dir, "admin.sock")
	if err := plan.WriteConfig(filepath.Join(dir, "weft.yaml"), master, admin); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	hp, err := demo.StartHAProxy(ctx, demo.HAProxyOptions{
		Bin: testkit.HAProxy(t), Dir: plan.Dest, Listen: plan.Listen, Log: slog.New(slog.DiscardHandler),
		MasterSocket: master, AdminSocket: admin,
	})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); _ = hp.Wait() })
}

// TestTrafficThroughHAProxy deploys the quickstart to a real HAProxy with
// the runtime driver and sends HTTP through it: an endpoint address change
// is served with no reload, a new host reloads once, and a bundle HAProxy
// would refuse is never deployed while the old configuration keeps serving.
func TestTrafficThroughHAProxy(t *testing.T) {
	testkit.HAProxy(t)
	httpPort, backendPort := testkit.FreePort(t), testkit.FreePort(t)
	for _, e := range []struct{ addr, name string }{{"127.0.0.1", "web-1"}, {"127.0.0.2", "web-2"}, {"127.0.0.9", "web-9"}, {"127.0.0.3", "api-1"}, {"127.0.0.5", "blog-1"}} {
		echo(t, net.JoinHostPort(e.addr, strconv.Itoa(backendPort)), e.name)
	}
	var dir string
	s := startStackWith(t, quickstart, func(d string) {
		dir = d
		onPorts(t, d, httpPort, backendPort)
	}, nil, func(d string) { runtimeQuickstart(t, d) })
	drv, err := runtime.New(runtime.Options{Dir: filepath.Join(dir, "out"), MasterSocket: filepath.Join(dir, "master.sock"), AdminSocket: filepath.Join(dir, "admin.sock")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// New connections each time (httpGet): a kept-alive client connection
	// may keep reusing HAProxy's idle connection to a server's old address,
	// which a runtime address change does not cut.
	get := func(host, path string) string { return httpGet(httpPort, host, path) }
	// seen collects which backends answer host+path over n requests.
	seen := func(host, path string) map[string]bool {
		out := map[string]bool{}
		for range 12 {
			out[get(host, path)] = true
		}
		return out
	}
	waitFor(t, "served by the rendered configuration", func() error {
		if got := seen("shop.example.com", "/"); !got["200 web-1"] || !got["200 web-2"] {
			return fmt.Errorf("shop.example.com/ answered %v", got)
		}
		return nil
	})
	routes := []struct{ host, path, want string }{
		{"shop.example.com", "/api/users", "200 api-1"},
		{"checkout.example.com", "/pay", "200 api-1"},
		{"www.blog.example.com", "/post", "200 blog-1"},
		{"unknown.example.com", "/", "404 no route"},
	}
	for _, r := range routes {
		if got := get(r.host, r.path); got != r.want {
			t.Errorf("%s%s = %q, want %q", r.host, r.path, got, r.want)
		}
	}
	reloads, err := drv.Reloads(ctx)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("endpoint change served without a reload", func(t *testing.T) {
		s.editManifest("endpoints.yaml", `"127.0.0.2"`, `"127.0.0.9"`)
		waitFor(t, "traffic moved", func() error {
			if got := seen("shop.example.com", "/"); !got["200 web-9"] || got["200 web-2"] {
				return fmt.Errorf("answered %v", got)
			}
			return nil
		})
		if n, _ := drv.Reloads(ctx); n != reloads {
			t.Fatalf("reloads %d -> %d, want none", reloads, n)
		}
		// The deployer records the deploy a moment after HAProxy serves it.
		waitFor(t, "the deploy recorded", func() error {
			if d := s.target("quickstart").Deploys; len(d) == 0 || d[0].RuntimeOps == 0 {
				return fmt.Errorf("deploy status records no runtime operation: %+v", d)
			}
			return nil
		})
	})
	t.Run("a new host reloads at most once", func(t *testing.T) {
		s.editManifest("shop.yaml", "    - host: checkout.example.com\n", "    - host: new.example.com\n      http:\n        paths:\n          - path: /\n            pathType: Prefix\n            backend:\n              service:\n                name: web\n                port:\n                  number: 80\n    - host: checkout.example.com\n")
		waitFor(t, "new host served", func() error {
			if got := get("new.example.com", "/"); !strings.HasPrefix(got, "200 web-") {
				return fmt.Errorf("answered %q", got)
			}
			return nil
		})
		n, _ := drv.Reloads(ctx)
		if n > reloads+1 {
			t.Fatalf("reloads %d -> %d, want at most one", reloads, n)
		}
		t.Logf("a new host on an existing backend: %d reloads (map entries change at runtime)", n-reloads)
		reloads = n
	})
	t.Run("an invalid bundle is never deployed", func(t *testing.T) {
		before := s.read("haproxy.cfg")
		// A service name with a space makes a backend line HAProxy refuses.
		s.editManifest("shop.yaml", "                name: api\n", "                name: api x\n")
		waitFor(t, "refusal", func() error {
			v := s.target("quickstart").Validation
			if v == nil || v.OK {
				return errNotYet
			}
			return nil
		})
		if s.read("haproxy.cfg") != before {
			t.Fatal("a refused bundle reached HAProxy's folder")
		}
		if got := get("shop.example.com", "/"); !strings.HasPrefix(got, "200 web-") {
			t.Fatalf("the old configuration stopped serving: %q", got)
		}
		if n, _ := drv.Reloads(ctx); n != reloads {
			t.Fatalf("reloads %d -> %d, want none", reloads, n)
		}
	})
}
