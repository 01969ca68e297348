package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator/haproxycheck"
)

const quickstart = "../../../../examples/quickstart/weft.yaml"

// The starter goroutine lives as long as the process, by design (start).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, append(testkit.LeakOptions(), goleak.IgnoreAnyFunction("github.com/weftio/weft/cmd/weft/internal/demo.starter"))...)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func freeAddr(t *testing.T, ip string) string {
	t.Helper()
	l, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// get returns "<status> <body>" of GET http://addr/ with Host host.
func get(addr, host string) string {
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	req.Host = host
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Do(req)
	if err != nil {
		return "error: " + err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(b)))
}

func TestRuntimeConfigOfTheQuickstart(t *testing.T) {
	cfg, err := config.Load(quickstart)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := Prepare(cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := Plan{Target: "quickstart", Dest: filepath.Join(cfg.Dir, "out"), Listen: "127.0.0.1:18080", Manifests: []string{filepath.Join(cfg.Dir, "manifests")}}
	if plan.Target != want.Target || plan.Dest != want.Dest || plan.Listen != want.Listen || fmt.Sprint(plan.Manifests) != fmt.Sprint(want.Manifests) {
		t.Fatalf("plan %+v, want %+v", plan, want)
	}
	data, err := plan.RuntimeConfig("/run/m.sock", "/run/a.sock")
	if err != nil {
		t.Fatal(err)
	}
	// Written elsewhere, it still names the quickstart's folders.
	got, err := config.Parse(data, t.TempDir())
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	d := got.Targets["quickstart"].Deploy
	if d.Driver != config.DriverRuntime || d.Dest != want.Dest || d.MasterSocket != "/run/m.sock" || d.AdminSocket != "/run/a.sock" || d.ReloadCmd != "" {
		t.Fatalf("deploy %+v", d)
	}
	if got.Sources[0].Path != want.Manifests[0] || got.Targets["quickstart"].Base != want.Dest {
		t.Fatalf("paths moved: source %q, base %q", got.Sources[0].Path, got.Targets["quickstart"].Base)
	}
	tpl := got.Targets["quickstart"].HAProxyConfig.Template
	if !strings.Contains(tpl, "global\n  stats socket /run/a.sock mode 600 level admin expose-fd listeners\n  log stderr") {
		t.Fatalf("no admin socket in the global section:\n%s", tpl)
	}
	if strings.Replace(tpl, "  stats socket /run/a.sock mode 600 level admin expose-fd listeners\n", "", 1) != cfg.Targets["quickstart"].HAProxyConfig.Template {
		t.Fatal("the template changed beyond the admin socket")
	}
}

func TestPrepareRefuses(t *testing.T) {
	for name, y := range map[string]string{
		"two targets": "targets:\n  a: {haproxy_config: {template: \"global\\nfrontend f\\n  bind 127.0.0.1:1\"}, deploy: {driver: files, dest: a}}\n" +
			"  b: {haproxy_config: {template: \"global\\nfrontend f\\n  bind 127.0.0.1:1\"}, deploy: {driver: files, dest: b}}\n",
		"no literal bind":   "targets:\n  a: {haproxy_config: {template: \"global\\nfrontend f\\n  bind {{ addr }}\"}, deploy: {driver: files, dest: a}}\n",
		"no global section": "targets:\n  a: {haproxy_config: {template: \"frontend f\\n  bind 127.0.0.1:1\"}, deploy: {driver: files, dest: a}}\n",
	} {
		cfg, err := config.Parse([]byte(y), t.TempDir())
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := Prepare(cfg); !errors.Is(err, ErrNotDemonstrable) {
			t.Errorf("%s: err %v, want ErrNotDemonstrable", name, err)
		}
	}
}

const slice = `apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: web
  namespace: default
ports:
  - port: %s
endpoints:
  - addresses: ["127.0.0.1"]
    targetRef: {name: %s}
  - addresses: ["127.0.0.2"]
`

func TestBackendsFollowTheManifests(t *testing.T) {
	dir := t.TempDir()
	write := func(port, name string) {
		if err := os.WriteFile(filepath.Join(dir, "slice.yaml"), fmt.Appendf(nil, slice, port, name), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	_, p1, _ := net.SplitHostPort(freeAddr(t, "127.0.0.1"))
	_, p2, _ := net.SplitHostPort(freeAddr(t, "127.0.0.1"))
	write(p1, "web-1")
	b, err := StartBackends(discard(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	want := []Endpoint{{"127.0.0.1:" + p1, "web-1"}, {"127.0.0.2:" + p1, "127.0.0.2"}}
	if got := b.Running(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("running %v, want %v", got, want)
	}
	for _, e := range want {
		if got := get(e.Addr, "x"); got != "200 "+e.Name {
			t.Errorf("%s answered %q", e.Addr, got)
		}
	}
	write(p2, "web-9")
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	if got := get("127.0.0.1:"+p2, "x"); got != "200 web-9" {
		t.Errorf("new port answered %q", got)
	}
	if got := get("127.0.0.1:"+p1, "x"); !strings.HasPrefix(got, "error") {
		t.Errorf("old port still answers %q", got)
	}
}

func TestBackendOnATakenAddressIsSkipped(t *testing.T) {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, port, _ := net.SplitHostPort(l.Addr().String())
	if err := os.WriteFile(filepath.Join(dir, "slice.yaml"), fmt.Appendf(nil, slice, port, "web-1"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, err := StartBackends(discard(), []string{dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.Running(); len(got) != 1 || got[0].Addr != "127.0.0.2:"+port {
		t.Fatalf("running %v, want only 127.0.0.2:%s", got, port)
	}
}

func startHAProxy(t *testing.T, ctx context.Context, listen string) (*HAProxy, error) {
	dir := t.TempDir()
	return StartHAProxy(ctx, HAProxyOptions{
		Bin: testkit.HAProxy(t), Dir: filepath.Join(dir, "out"), Listen: listen, Log: discard(),
		MasterSocket: filepath.Join(dir, "master.sock"), AdminSocket: filepath.Join(dir, "admin.sock"),
	})
}

func TestHAProxyServesTheBootstrapAndStopsWithItsContext(t *testing.T) {
	listen := freeAddr(t, "127.0.0.1")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	hp, err := startHAProxy(t, ctx, listen)
	if err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if got := get(listen, "x"); got != "503 waiting for weft's first configuration" {
			return fmt.Errorf("answered %q", got)
		}
		return nil
	})
	if c, err := net.Dial("unix", hp.AdminSocket); err != nil {
		t.Errorf("admin socket: %v", err)
	} else {
		c.Close()
	}
	// The master runs with glibc's malloc on huge pages, and so does
	// every worker a reload execs from it.
	environ, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", hp.Pid))
	if err != nil {
		t.Fatal(err)
	}
	if want := "GLIBC_TUNABLES=" + haproxycheck.HugePages; !slices.Contains(strings.Split(string(environ), "\x00"), want) {
		t.Errorf("haproxy's environment has no %s: %q", want, environ)
	}
	cancel()
	if err := hp.Wait(); err != nil {
		t.Fatalf("wait after cancel: %v", err)
	}
	// Neither the master nor a worker is left in its process group. A
	// worker killed as the master exited is gone a moment later, once the
	// kernel has delivered the kill and it was reaped.
	testkit.Eventually(t, 5*time.Second, func() error {
		if err := syscall.Kill(-hp.Pid, 0); !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("process group %d still has members: %v", hp.Pid, err)
		}
		return nil
	})
}

func TestHAProxyOnATakenAddress(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = startHAProxy(t, context.Background(), l.Addr().String())
	if !errors.Is(err, ErrAddrInUse) || !strings.Contains(err.Error(), l.Addr().String()) {
		t.Fatalf("err %v, want ErrAddrInUse naming %s", err, l.Addr())
	}
}

func TestHAProxyExitingIsReported(t *testing.T) {
	listen := freeAddr(t, "127.0.0.1")
	hp, err := startHAProxy(t, context.Background(), listen)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(hp.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := hp.Wait(); !errors.Is(err, ErrHAProxyExited) {
		t.Fatalf("err %v, want ErrHAProxyExited", err)
	}
}

// TestWithoutHAProxyKind takes the haproxy kind out of the targets that
// expect it and leaves everything else, the configuration given included,
// as it was.
func TestWithoutHAProxyKind(t *testing.T) {
	const yaml = `
targets:
  both: {validate: {kinds: [haproxy, template], min_kinds: 2}, deploy: {driver: files, dest: /tmp/a}, haproxy_config: {template: "x"}}
  only: {validate: {kinds: [haproxy]}, deploy: {driver: files, dest: /tmp/b}, haproxy_config: {template: "x"}}
  none: {validate: {kinds: [syntax, template], min_kinds: 1}, deploy: {driver: files, dest: /tmp/c}, haproxy_config: {template: "x"}}
`
	cfg, err := config.Parse([]byte(yaml), "/")
	if err != nil {
		t.Fatal(err)
	}
	got, changed := WithoutHAProxyKind(cfg)
	if !slices.Equal(changed, []string{"both", "only"}) {
		t.Errorf("changed %v, want both and only", changed)
	}
	cases := []struct {
		target   string
		kinds    []string
		minKinds int
	}{
		{"both", []string{"template"}, 1},
		{"only", []string{"template"}, 0},
		{"none", []string{"syntax", "template"}, 1},
	}
	for _, tc := range cases {
		v := got.Targets[tc.target].Validate
		if !slices.Equal(v.Kinds, tc.kinds) || v.MinKinds != tc.minKinds {
			t.Errorf("%s: kinds %v min_kinds %d, want %v %d", tc.target, v.Kinds, v.MinKinds, tc.kinds, tc.minKinds)
		}
	}
	if k := cfg.Targets["both"].Validate.Kinds; !slices.Equal(k, []string{"haproxy", "template"}) {
		t.Errorf("the configuration given was changed: both has kinds %v", k)
	}
	if got.Targets["both"].Deploy.Dest != "/tmp/a" || len(got.Targets) != 3 {
		t.Errorf("other settings changed: %+v", got.Targets)
	}
}
