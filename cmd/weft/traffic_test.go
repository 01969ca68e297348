package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer/driver/runtime"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// echo serves its name on addr until the test ends.
func echo(t *testing.T, addr, name string) {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// TestTrafficThroughHAProxy deploys the quickstart to a real HAProxy with
// the runtime driver and sends HTTP through it: an endpoint address change
// is served with no reload, a new host reloads once, and a bundle HAProxy
// would refuse is never deployed while the old configuration keeps serving.
func TestTrafficThroughHAProxy(t *testing.T) {
	bin := testkit.HAProxy(t)
	httpPort, backendPort, bootPort := freePort(t), freePort(t), freePort(t)
	for _, e := range []struct{ addr, name string }{{"127.0.0.1", "web-1"}, {"127.0.0.2", "web-2"}, {"127.0.0.9", "web-9"}, {"127.0.0.3", "api-1"}, {"127.0.0.5", "blog-1"}} {
		echo(t, net.JoinHostPort(e.addr, strconv.Itoa(backendPort)), e.name)
	}
	var dir string
	s := startStackWith(t, quickstart, func(d string) {
		dir = d
		// HAProxy runs before weft deploys anything: a bootstrap config.
		out := filepath.Join(d, "out")
		if err := os.MkdirAll(out, 0o755); err != nil {
			t.Fatal(err)
		}
		boot := fmt.Sprintf("global\n  stats socket %s/admin.sock mode 660 level admin expose-fd listeners\ndefaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\nfrontend boot\n  bind 127.0.0.1:%d\n", d, bootPort)
		if err := os.WriteFile(filepath.Join(out, "haproxy.cfg"), []byte(boot), 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "-W", "-db", "-f", filepath.Join(out, "haproxy.cfg"), "-S", filepath.Join(d, "master.sock"))
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
		testkit.Eventually(t, 10*time.Second, func() error {
			_, err := os.Stat(filepath.Join(d, "master.sock"))
			return err
		})
	}, func(y string) string {
		y = strings.Replace(y, "      driver: files\n      dest: out\n", "      driver: runtime\n      dest: out\n      master_socket: master.sock\n      admin_socket: admin.sock\n", 1)
		y = strings.Replace(y, `      reload_cmd: echo "$(date -u +%FT%TZ) reload" >> reloads.log`+"\n", "", 1)
		y = strings.Replace(y, "bind 127.0.0.1:18080", "bind 127.0.0.1:"+strconv.Itoa(httpPort), 1)
		return y
	}, func(d string) {
		adminPath := filepath.Join(d, "admin.sock")
		p := filepath.Join(d, "weft.yaml")
		y, _ := os.ReadFile(p)
		// The runtime driver talks to HAProxy's admin socket.
		_ = os.WriteFile(p, []byte(strings.Replace(string(y), "          maxconn 2000\n",
			"          maxconn 2000\n          stats socket "+adminPath+" mode 660 level admin expose-fd listeners\n", 1)), 0o644)
		for _, f := range []string{"endpoints.yaml", "blog.yaml"} {
			m := filepath.Join(d, "manifests", f)
			b, _ := os.ReadFile(m)
			c := strings.NewReplacer("port: 8080", "port: "+strconv.Itoa(backendPort), "port: 9000", "port: "+strconv.Itoa(backendPort), "port: 2368", "port: "+strconv.Itoa(backendPort)).Replace(string(b))
			_ = os.WriteFile(m, []byte(c), 0o644)
		}
	})
	drv, err := runtime.New(runtime.Options{Dir: filepath.Join(dir, "out"), MasterSocket: filepath.Join(dir, "master.sock"), AdminSocket: filepath.Join(dir, "admin.sock")})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// New connections each time: a kept-alive client connection may keep
	// reusing HAProxy's idle connection to a server's old address, which a
	// runtime address change does not cut.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	get := func(host, path string) string {
		req, _ := http.NewRequest("GET", fmt.Sprintf("http://127.0.0.1:%d%s", httpPort, path), nil)
		req.Host = host
		resp, err := client.Do(req)
		if err != nil {
			return "error: " + err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return fmt.Sprintf("%d %s", resp.StatusCode, b)
	}
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
		if d := s.target("quickstart").Deploys; len(d) == 0 || d[0].RuntimeOps == 0 {
			t.Fatalf("deploy status records no runtime operation: %+v", d)
		}
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
