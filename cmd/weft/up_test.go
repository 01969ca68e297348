package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/validator/haproxycheck"
)

// asWeft, set in the environment, makes the test binary run as weft.
const asWeft = "WEFT_TEST_BINARY_IS_WEFT"

// weftProcess is weft running as a process of its own.
type weftProcess struct {
	cmd  *exec.Cmd
	out  *testkit.SyncBuffer
	done chan error
}

// startWeft runs weft with args as a process (the test binary, see
// TestMain) until the test ends.
func startWeft(t *testing.T, args ...string) *weftProcess {
	t.Helper()
	return startWeftEnv(t, nil, args...)
}

// startWeftEnv is startWeft with env added to the process's environment.
func startWeftEnv(t *testing.T, env []string, args ...string) *weftProcess {
	t.Helper()
	return startWeftIn(t, "", env, args...)
}

// startWeftIn is startWeftEnv in the working folder dir ("": the test's).
func startWeftIn(t *testing.T, dir string, env []string, args ...string) *weftProcess {
	t.Helper()
	p := &weftProcess{cmd: exec.Command(os.Args[0], args...), out: &testkit.SyncBuffer{}, done: make(chan error, 1)}
	p.cmd.Dir = dir
	p.cmd.Env = append(append(os.Environ(), asWeft+"=1"), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("weft's output:\n%s", p.out)
		}
	})
	return p
}

// interrupt sends what Ctrl-C sends and waits for weft to exit.
func (p *weftProcess) interrupt(t *testing.T) error {
	t.Helper()
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("weft did not exit within 30s of an interrupt")
		return nil
	}
}

// exited reports whether weft has exited, and how.
func (p *weftProcess) exited() (bool, error) {
	select {
	case err := <-p.done:
		p.done <- err // for the cleanup
		return true, err
	default:
		return false, nil
	}
}

// logged returns the first log record whose msg starts with prefix.
func (p *weftProcess) logged(prefix string) (map[string]any, bool) {
	return logged(p.out.String(), prefix)
}

// onPorts rewrites the quickstart copied into dir so that HAProxy binds
// httpPort and every EndpointSlice names backendPort.
func onPorts(t testing.TB, dir string, httpPort, backendPort int) {
	t.Helper()
	edit := func(path string, r *strings.Replacer) {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(r.Replace(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edit(filepath.Join(dir, "weft.yaml"), strings.NewReplacer("bind 127.0.0.1:18080", "bind 127.0.0.1:"+strconv.Itoa(httpPort)))
	port := "port: " + strconv.Itoa(backendPort)
	for _, f := range []string{"endpoints.yaml", "blog.yaml"} {
		edit(filepath.Join(dir, "manifests", f), strings.NewReplacer("port: 8080", port, "port: 9000", port, "port: 2368", port))
	}
}

// httpGet returns "<status> <body>" of GET http://127.0.0.1:port<path>
// with Host host, on a new connection.
func httpGet(port int, host, path string) string {
	got, _ := tracedGet(port, host, path)
	return got
}

// slowProbe is how long a probe takes before tracedGet says where its
// time went.
const slowProbe = 300 * time.Millisecond

// probeClient asks on a fresh connection each time. One for every probe:
// a transport built per request was most of a probe's garbage, collected
// by the same collector as the services' in the scale benchmarks.
var probeClient = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// tracedGet asks host for path on a fresh connection and returns the
// status and the body; when that takes slowProbe or more, phases says
// when it connected, wrote its request and got the first byte of the
// answer.
func tracedGet(port int, host, path string) (got, phases string) {
	start := time.Now()
	// The transport may still call these after Do gave up.
	var connected, wrote, first atomic.Int64
	since := func(at *atomic.Int64) { at.Store(int64(time.Since(start))) }
	ctx := httptrace.WithClientTrace(context.Background(), &httptrace.ClientTrace{
		ConnectDone:          func(string, string, error) { since(&connected) },
		WroteRequest:         func(httptrace.WroteRequestInfo) { since(&wrote) },
		GotFirstResponseByte: func() { since(&first) },
	})
	req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d%s", port, path), nil)
	req.Host = host
	resp, err := probeClient.Do(req)
	if err != nil {
		got = "error: " + err.Error()
	} else {
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		got = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(string(body)))
	}
	if took := time.Since(start); took >= slowProbe {
		phases = fmt.Sprintf("took %v: connected %v, request written %v, first byte %v (0: not reached)", took,
			time.Duration(connected.Load()), time.Duration(wrote.Load()), time.Duration(first.Load()))
	}
	return got, phases
}

// bothWebs checks that shop.example.com/ is answered by web-1 and web-2
// in turn, and by nothing else.
func bothWebs(httpPort int) error {
	web := map[string]bool{}
	for range 6 {
		web[httpGet(httpPort, "shop.example.com", "/")] = true
	}
	if !web["200 web-1"] || !web["200 web-2"] || len(web) != 2 {
		return fmt.Errorf("shop.example.com/ answered %v, want web-1 and web-2 in turn", web)
	}
	return nil
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

// TestUpDemo runs `weft up --demo` on the quickstart as `make run` does,
// sends HTTP through the HAProxy it starts, and stops it with an interrupt:
// HAProxy and its workers are gone with it.
func TestUpDemo(t *testing.T) {
	testkit.HAProxy(t)
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	httpPort, backendPort := testkit.FreePort(t), testkit.FreePort(t)
	onPorts(t, dir, httpPort, backendPort)
	p := startWeft(t, "up", "--demo", "--config", filepath.Join(dir, "weft.yaml"), "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")

	routes := []struct{ host, path, want string }{
		{"shop.example.com", "/api/users", "200 api-1"},
		{"checkout.example.com", "/pay", "200 api-1"},
		{"checkout.example.com", "/pay/more", "404 no route"}, // Exact
		{"www.blog.example.com", "/post", "200 blog-1"},       // *.blog.example.com
		{"other.example.com", "/", "404 no route"},            // an Ingress of another class
	}
	waitFor(t, "the quickstart served", func() error {
		for _, r := range routes {
			if got := httpGet(httpPort, r.host, r.path); got != r.want {
				return fmt.Errorf("%s%s answered %q, want %q", r.host, r.path, got, r.want)
			}
		}
		return nil
	})
	if err := bothWebs(httpPort); err != nil {
		t.Fatal(err)
	}
	// An edited address: weft moves the server, the demo moves its backend.
	m := filepath.Join(dir, "manifests", "endpoints.yaml")
	b, _ := os.ReadFile(m)
	if err := os.WriteFile(m, []byte(strings.Replace(string(b), `"127.0.0.2"`, `"127.0.0.9"`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "web-2 served from its new address", func() error {
		if err := contains(readFile(filepath.Join(dir, "out", "haproxy.cfg")), "127.0.0.9:"); err != nil {
			return err
		}
		return bothWebs(httpPort)
	})
	p.stopsWithHAProxy(t, dir)
}

// stopsWithHAProxy interrupts weft and checks that HAProxy (master and
// workers) and the demo's folder went with it.
func (p *weftProcess) stopsWithHAProxy(t *testing.T, dir string) {
	t.Helper()
	ready, ok := p.logged("HAProxy serves the target")
	pid, _ := ready["pid"].(float64)
	if !ok || pid == 0 {
		t.Fatalf("no log record says HAProxy serves the target, with its pid: %v", ready)
	}
	if !slices.ContainsFunc(testkit.ProcessesNaming(t, dir), func(p testkit.LiveProcess) bool { return strings.Contains(p.Cmdline, "haproxy -W") }) {
		t.Fatal("no haproxy process names the copy's folder")
	}
	if err := p.interrupt(t); err != nil {
		t.Fatalf("weft exited with %v after an interrupt", err)
	}
	if left := testkit.ProcessesNaming(t, dir); len(left) > 0 {
		t.Fatalf("processes left after weft stopped: %q", left)
	}
	if err := syscall.Kill(int(pid), 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("haproxy's master is still there: %v", err)
	}
	runDir := filepath.Dir(fmt.Sprint(ready["master_socket"]))
	if _, err := os.Stat(runDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the demo's folder %s is still there: %v", runDir, err)
	}
}

// TestUpDemoFallsBackToTheConfiguration: a configuration the demo cannot
// run (here, its bind address is computed) runs as configured, with the
// files driver, and the log says why.
func TestUpDemoFallsBackToTheConfiguration(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	p := filepath.Join(dir, "weft.yaml")
	y := strings.Replace(readFile(p), "bind 127.0.0.1:18080", fmt.Sprintf(`bind {{ "127.0.0.1" }}:%d`, testkit.FreePort(t)), 1)
	if err := os.WriteFile(p, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	w := startWeft(t, "up", "--demo", "--config", p, "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	waitFor(t, "delivered by the files driver", func() error {
		return contains(readFile(filepath.Join(dir, "out", "reloads.log")), "reload")
	})
	rec, ok := w.logged("the demo cannot run this configuration")
	if !ok || rec["files"] != filepath.Join(dir, "out") || !strings.Contains(fmt.Sprint(rec["err"]), "binds no literal address") {
		t.Fatalf("no warning naming the reason and the files: %v", rec)
	}
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft exited with %v after an interrupt", err)
	}
}

// noHAProxy is the environment of a machine without haproxy: PATH without
// the folders that hold one, and WEFT_HAPROXY naming a binary that does not
// exist (so the lookup does not find Debian's /usr/sbin/haproxy either).
func noHAProxy(t *testing.T) []string {
	t.Helper()
	var path []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "haproxy")); err != nil {
			path = append(path, d)
		}
	}
	return []string{"PATH=" + strings.Join(path, string(filepath.ListSeparator)), haproxycheck.EnvBinary + "=" + filepath.Join(t.TempDir(), "haproxy")}
}

// records returns the JSON log records in out at level.
func records(out, level string) []map[string]any {
	var recs []map[string]any
	for line := range strings.Lines(out) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && rec["level"] == level {
			recs = append(recs, rec)
		}
	}
	return recs
}

// TestUpDemoWithoutHAProxy runs `make run` (weft up --demo on the
// quickstart) on a machine without haproxy: weft runs, validates with the
// kinds that can run, delivers the files, and says once, in one warning,
// what it skips and how to get it.
func TestUpDemoWithoutHAProxy(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	w := startWeftEnv(t, noHAProxy(t), "up", "--demo", "--config", filepath.Join(dir, "weft.yaml"), "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	// The quickstart's target expects the haproxy and template kinds: only
	// a verdict without haproxy lets anything be delivered.
	waitFor(t, "delivered by the files driver", func() error {
		if err := contains(readFile(filepath.Join(dir, "out", "haproxy.cfg")), "frontend"); err != nil {
			return err
		}
		return contains(readFile(filepath.Join(dir, "out", "reloads.log")), "reload")
	})
	if exited, err := w.exited(); exited {
		t.Fatalf("weft exited: %v", err)
	}
	warns := records(w.out.String(), "WARN")
	if len(warns) != 1 {
		t.Fatalf("%d warnings, want one: %v", len(warns), warns)
	}
	rec := warns[0]
	msg := fmt.Sprint(rec["msg"])
	for _, says := range []string{"haproxy not found", "haproxy validator kind", "apt-get install haproxy"} {
		if !strings.Contains(msg, says) {
			t.Errorf("the warning %q does not say %q", msg, says)
		}
	}
	if rec["skipped_kind"] != "haproxy" || rec["targets"] != "quickstart" || rec["files"] != filepath.Join(dir, "out") {
		t.Errorf("the warning does not name the kind skipped, its targets and the files: %v", rec)
	}
	if err := w.interrupt(t); err != nil {
		t.Fatalf("weft exited with %v after an interrupt", err)
	}
}

// TestUpWithoutHAProxyRefusesToStart: outside the demo, a configuration
// whose target expects the haproxy kind is an error at start on a machine
// without haproxy, saying what is missing, who needs it and how to get it.
func TestUpWithoutHAProxyRefusesToStart(t *testing.T) {
	dir := t.TempDir()
	copyTree(t, quickstart, dir)
	w := startWeftEnv(t, noHAProxy(t), "up", "--config", filepath.Join(dir, "weft.yaml"), "--nats-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0")
	var err error
	select {
	case err = <-w.done:
		w.done <- err // for the cleanup
	case <-time.After(time.Minute):
		t.Fatal("weft still runs a minute after it started without the haproxy its configuration expects")
	}
	if err == nil {
		t.Fatal("weft exited 0")
	}
	for _, says := range []string{"kind haproxy, which targets quickstart expect (validate.kinds), cannot run here", "apt-get install haproxy", haproxycheck.EnvBinary} {
		if !strings.Contains(w.out.String(), says) {
			t.Errorf("weft's output does not say %q", says)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out", "haproxy.cfg")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("out/haproxy.cfg: %v, want nothing delivered", err)
	}
}
