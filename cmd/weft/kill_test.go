package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/host"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
	"github.com/weftio/weft/services/deployer/driver/runtime"
)

// TestDeployerKilledMidDeployConverges runs the deployer as a process of its
// own (the weft-deployer binary) beside the other services, delivering the
// quickstart to a real HAProxy with the runtime driver, and kills it with
// SIGKILL while it waits for a reload that HAProxy is still doing (a Lua
// script holds HAProxy's master in the reload: the deploy is in flight,
// the new files are on disk, and nothing is acknowledged). While the
// deployer is dead another change is rendered and validated. Restarted, the
// deployer converges: the killed order is delivered again and skipped, since
// a newer bundle was accepted meanwhile; the change made while it was dead
// is delivered after it (and the start-up catch-up names it) and reloads
// with the reload the killed deploy owes ("pending": it cannot know whether
// the first reload took); the instance's status has the last accepted
// bundle, the files on disk are exactly that bundle, HTTP through HAProxy
// follows both changes, every answer on the way came from a valid
// configuration, and HAProxy reloaded once for each of the two deploys
// (killed, new).
func TestDeployerKilledMidDeployConverges(t *testing.T) {
	testkit.HAProxy(t)
	bin := testkit.GoBuild(t, "github.com/weftio/weft/services/deployer/cmd/weft-deployer")
	httpPort, backendPort := testkit.FreePort(t), testkit.FreePort(t)
	for _, e := range []struct{ addr, name string }{{"127.0.0.1", "web-1"}, {"127.0.0.2", "web-2"}, {"127.0.0.3", "api-1"}, {"127.0.0.5", "blog-1"}, {"127.0.0.6", "news-1"}, {"127.0.0.7", "docs-1"}} {
		echo(t, net.JoinHostPort(e.addr, strconv.Itoa(backendPort)), e.name)
	}
	gate := newReloadGate(t)
	var dir string
	s := startStackOf(t, quickstart, func(d string) {
		dir = d
		onPorts(t, d, httpPort, backendPort)
		// The Services and endpoints of two sites are there from the
		// start; each change below is then one object (its Ingress), so
		// one render and one deploy order.
		for _, b := range []struct{ name, addr string }{{"news", "127.0.0.6"}, {"docs", "127.0.0.7"}} {
			p := filepath.Join(d, "manifests", b.name+"-backend.yaml")
			if err := os.WriteFile(p, []byte(siteBackend(b.name, b.addr, backendPort)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}, func(y string) string {
		const global = "          maxconn 2000\n"
		if !strings.Contains(y, global) {
			t.Fatalf("the quickstart's global section has no %q", global)
		}
		return strings.Replace(y, global, global+"          lua-load "+gate.script+"\n", 1)
	}, func(d string) { runtimeQuickstart(t, d) }, servicesBut(deployer.Service))
	master := filepath.Join(dir, "master.sock")
	drv, err := runtime.New(runtime.Options{Dir: s.out(""), MasterSocket: master})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	startDeployer := func() *testkit.Process {
		return testkit.StartProcess(t, bin, "--config", filepath.Join(dir, "weft.yaml"), "--nats-url", s.bus.URL,
			"--listen", "127.0.0.1:0", "--log-level", "debug")
	}
	get := func(host string) string { return httpGet(httpPort, host, "/") }
	serves := func(want map[string]string) func() error {
		return func() error {
			for host, w := range want {
				if got := get(host); got != w {
					return fmt.Errorf("%s answered %q, want %q", host, got, w)
				}
			}
			return nil
		}
	}
	const long = 90 * time.Second // generous: two cores, other work in parallel

	dep := startDeployer()
	testkit.Eventually(t, long, serves(map[string]string{"www.blog.example.com": "200 blog-1", "news.example.com": "404 no route"}))
	st0 := s.deployedAsAccepted(t, long)
	reloads0, err := drv.Reloads(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// Every answer from here on must come from a configuration weft
	// accepted: the quickstart's shop, whichever bundle is running.
	probe := startProbe(func() string { return get("shop.example.com") }, "200 web-1", "200 web-2")

	// A: a new site, a new backend: a structural change, one reload. The
	// gate holds HAProxy's master in that reload.
	gate.close(t)
	s.writeManifest("news.yaml", siteIngress("news"))
	testkit.Eventually(t, long, gate.entered)
	if st := s.deployStatus(t); st.Version != st0.Version {
		t.Fatalf("the status moved to version %d before the deploy finished", st.Version)
	}
	if m := runtimeManifest(t, s.out("")); m.Pending == "" {
		t.Fatal("the runtime driver's manifest records no pending reload while HAProxy reloads")
	}
	// The previous worker still serves the previous configuration.
	if got := get("news.example.com"); got != "404 no route" {
		t.Fatalf("news.example.com answered %q while the reload was held", got)
	}
	killed := s.inFlightOrder(t)
	dep.Kill(t)

	// B, while the deployer is dead: rendered and validated, not deployed.
	s.writeManifest("docs.yaml", siteIngress("docs"))
	var accepted msg.ValidationStatus
	testkit.Eventually(t, long, func() error {
		if v := s.target("quickstart").Validation; v != nil && v.OK && v.LastGoodVersion > killed.Version {
			accepted = *v
			return nil
		}
		return errors.New("the change made while the deployer is dead is not accepted yet")
	})
	if st := s.deployStatus(t); st.Version != st0.Version {
		t.Fatalf("status version %d changed while the deployer was dead", st.Version)
	}

	// HAProxy finishes the reload on its own, with A (on disk before the
	// kill): nobody tells the deployer.
	gate.release(t)
	testkit.Eventually(t, long, func() error {
		if n, err := drv.Reloads(ctx); err != nil || n != reloads0+1 {
			return fmt.Errorf("reloads %d (err %v), want %d", n, err, reloads0+1)
		}
		return serves(map[string]string{"news.example.com": "200 news-1", "docs.example.com": "404 no route"})()
	})

	dep = startDeployer()
	testkit.Eventually(t, long, func() error {
		st := s.deployStatus(t)
		if st.Version != accepted.LastGoodVersion || st.BundleHash != accepted.LastGood {
			return fmt.Errorf("instance has version %d (%s), want %d (%s)", st.Version, st.BundleHash, accepted.LastGoodVersion, accepted.LastGood)
		}
		return nil
	})
	testkit.Eventually(t, long, serves(map[string]string{"news.example.com": "200 news-1", "docs.example.com": "200 docs-1", "www.blog.example.com": "200 blog-1"}))
	if err := probe.stop(); err != nil {
		t.Error(err)
	}

	st := s.deployStatus(t)
	if st.LastError != "" {
		t.Errorf("status has an error: %s", st.LastError)
	}
	// What the restarted deployer did, in order: the killed order again,
	// which, B being accepted meanwhile, carries out B, reloading for the
	// killed deploy too (it cannot know whether that reload took); then
	// B's own order (the verdict's or the start's catch-up, one id), which
	// finds B there: skipped (the verdict's) or re-applied unchanged (the
	// catch-up's).
	var did []string
	for _, d := range s.deployedSince(t, st0.Version) {
		did = append(did, fmt.Sprintf("%d %s %s", d.Version, d.Outcome, d.ReloadReason))
	}
	first := fmt.Sprintf("%d %s %s", accepted.LastGoodVersion, msg.OutcomeApplied, runtime.ReasonPending)
	then := []string{fmt.Sprintf("%d %s ", accepted.LastGoodVersion, msg.OutcomeSkipped), fmt.Sprintf("%d %s ", accepted.LastGoodVersion, msg.OutcomeUnchanged)}
	if len(did) != 2 || did[0] != first || !slices.Contains(then, did[1]) {
		t.Errorf("deploys after the kill: %q, want %q then one of %q", did, first, then)
	}
	// HAProxy reloaded twice: the killed deploy's reload and B's.
	if n, err := drv.Reloads(ctx); err != nil || n != reloads0+2 {
		t.Errorf("HAProxy reloaded %d times since the kill (err %v), want 2", n-reloads0, err)
	}
	if st.Reloads[runtime.ReasonPending] != 1 {
		t.Errorf("status counts %d reloads for a pending deploy, want 1: %v", st.Reloads[runtime.ReasonPending], st.Reloads)
	}
	if failed := failedReloads(t, master); failed != 0 {
		t.Errorf("HAProxy reports %d failed reloads", failed)
	}
	if _, ok := logged(dep.Output(), "instance behind the last accepted bundle"); !ok {
		t.Error("the restarted deployer did not order a catch-up")
	}
	s.onDiskIs(t, accepted.LastGood)
	if err := haproxyCheck(t, s.out("haproxy.cfg")); err != nil {
		t.Error(err)
	}
	if exited, err := dep.Exited(); exited {
		t.Errorf("the restarted deployer exited: %v", err)
	}
}

// servicesBut returns the services `weft up` runs, but name.
func servicesBut(name string) []host.Service {
	return slices.DeleteFunc(slices.Clone(Services), func(s host.Service) bool { return s.Name == name })
}

// siteIngress routes <name>.example.com to the Service name.
func siteIngress(name string) string {
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: %[1]s
  namespace: default
spec:
  ingressClassName: weft
  rules:
    - host: %[1]s.example.com
      http:
        paths:
          - path: /
            pathType: Prefix
            backend:
              service:
                name: %[1]s
                port:
                  number: 80
`, name)
}

// siteBackend is the Service name with one endpoint, <name>-1 at
// addr:port.
func siteBackend(name, addr string, port int) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: %[1]s
  namespace: default
spec:
  ports:
    - port: 80
      targetPort: %[3]d
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: %[1]s-1
  namespace: default
  labels:
    kubernetes.io/service-name: %[1]s
addressType: IPv4
ports:
  - port: %[3]d
endpoints:
  - addresses: [%[2]q]
    targetRef:
      kind: Pod
      name: %[1]s-1
`, name, addr, port)
}

// reloadGate holds HAProxy's master in a reload. Its Lua script, loaded
// by the configuration, runs each time the master loads it; during a reload
// (HAPROXY_MWORKER_REEXEC is set; `haproxy -c` and the first start do not
// set it) and while the gate is closed, it writes the entered marker and
// waits for the release file. The previous worker keeps serving meanwhile.
type reloadGate struct {
	script, closed, inside, released string
}

func newReloadGate(t testing.TB) *reloadGate {
	t.Helper()
	dir := t.TempDir()
	g := &reloadGate{
		script: filepath.Join(dir, "gate.lua"), closed: filepath.Join(dir, "closed"),
		inside: filepath.Join(dir, "inside"), released: filepath.Join(dir, "released"),
	}
	lua := fmt.Sprintf(`if os.getenv("HAPROXY_MWORKER_REEXEC") then
  local closed = io.open(%q)
  if closed then
    closed:close()
    assert(io.open(%q, "w")):close()
    while true do
      local released = io.open(%q)
      if released then released:close() break end
      os.execute("sleep 0.05")
    end
  end
end
`, g.closed, g.inside, g.released)
	if err := os.WriteFile(g.script, []byte(lua), 0o644); err != nil {
		t.Fatal(err)
	}
	return g
}

// close makes the next reload wait.
func (g *reloadGate) close(t testing.TB) {
	t.Helper()
	if err := os.WriteFile(g.closed, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// entered reports whether a reload waits at the gate.
func (g *reloadGate) entered() error {
	if _, err := os.Stat(g.inside); err != nil {
		return fmt.Errorf("no reload at the gate yet: %w", err)
	}
	return nil
}

// release opens the gate for good and lets the waiting reload go on.
func (g *reloadGate) release(t testing.TB) {
	t.Helper()
	if err := os.Remove(g.closed); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(g.released, nil, 0o644); err != nil {
		t.Fatal(err)
	}
}

// probe sends requests until stopped and keeps every answer that is not
// one of the expected ones.
type probe struct {
	stopCh chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	n      int
	bad    map[string]int
}

func startProbe(ask func() string, expected ...string) *probe {
	p := &probe{stopCh: make(chan struct{}), done: make(chan struct{}), bad: map[string]int{}}
	go func() {
		defer close(p.done)
		for {
			select {
			case <-p.stopCh:
				return
			case <-time.After(20 * time.Millisecond):
			}
			got := ask()
			p.mu.Lock()
			p.n++
			if !slices.Contains(expected, got) {
				p.bad[got]++
			}
			p.mu.Unlock()
		}
	}()
	return p
}

// stop stops the probe and returns an error naming the unexpected answers.
func (p *probe) stop() error {
	close(p.stopCh)
	<-p.done
	if len(p.bad) > 0 {
		return fmt.Errorf("%d requests, unexpected answers (with counts): %v", p.n, p.bad)
	}
	if p.n == 0 {
		return errors.New("the probe sent no request")
	}
	return nil
}

// deployStatus is the status of the quickstart's one instance.
func (s *stack) deployStatus(t testing.TB) msg.DeployStatus {
	t.Helper()
	d := s.target("quickstart").Deploys
	if len(d) != 1 {
		t.Fatalf("want one deployed instance, status has %d", len(d))
	}
	return d[0]
}

// deployedAsAccepted waits until the instance has the last accepted
// bundle and returns its status.
func (s *stack) deployedAsAccepted(t testing.TB, timeout time.Duration) msg.DeployStatus {
	t.Helper()
	var st msg.DeployStatus
	testkit.Eventually(t, timeout, func() error {
		r := s.target("quickstart")
		if r.Validation == nil || len(r.Deploys) != 1 || r.Deploys[0].BundleHash != r.Validation.LastGood {
			return errors.New("the instance does not have the last accepted bundle yet")
		}
		st = r.Deploys[0]
		return nil
	})
	return st
}

// deployedSince returns the deploy outcomes of the quickstart's instance
// for versions after version, in the order they were published.
func (s *stack) deployedSince(t testing.TB, version uint64) []msg.Deployed {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := s.bus.JS.OrderedConsumer(ctx, msg.StreamDeploys, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{msg.DeployedSubject("quickstart", config.DefaultInstance)},
	})
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var out []msg.Deployed
	for range info.NumPending {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatal(err)
		}
		var d msg.Deployed
		if err := msg.Decode(m.Data(), &d); err != nil {
			t.Fatal(err)
		}
		if d.Version > version {
			out = append(out, d)
		}
	}
	return out
}

// inFlightOrder returns the order the quickstart's instance is handling:
// delivered and not acknowledged (the consumer has one in flight at most).
func (s *stack) inFlightOrder(t testing.TB) msg.DeployOrder {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := s.bus.JS.Consumer(ctx, msg.StreamDeploys, deployer.InstanceConsumer("quickstart", config.DefaultInstance))
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.NumAckPending != 1 {
		t.Fatalf("the instance's consumer has %d orders in flight, want 1", info.NumAckPending)
	}
	next, err := s.bus.JS.OrderedConsumer(ctx, msg.StreamDeploys, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{msg.DeploySubject("quickstart", config.DefaultInstance)},
		DeliverPolicy:  jetstream.DeliverByStartSequencePolicy, OptStartSeq: info.AckFloor.Stream + 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := next.Next(jetstream.FetchMaxWait(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	var o msg.DeployOrder
	if err := msg.Decode(m.Data(), &o); err != nil {
		t.Fatal(err)
	}
	return o
}

// onDiskIs checks that the deploy folder holds exactly the bundle hash
// (besides the driver's manifest), with nothing pending and no temporary
// file left.
func (s *stack) onDiskIs(t testing.TB, hash string) {
	t.Helper()
	b, err := msg.NewBundleStore(s.bus.JS).LoadBundle(context.Background(), hash)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, f := range b.Files {
		want[f.Path] = string(f.Content)
	}
	root := s.out("")
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if rel == ".weft-runtime.json" {
			return nil
		}
		content, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		w, ok := want[rel]
		switch {
		case !ok:
			t.Errorf("%s is on disk but not in the bundle", rel)
		case string(content) != w:
			t.Errorf("%s on disk differs from the bundle", rel)
		}
		delete(want, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for p := range want {
		t.Errorf("%s of the bundle is not on disk", p)
	}
	if m := runtimeManifest(t, root); m.Pending != "" {
		t.Errorf("the runtime driver's manifest is still pending: %s", m.Pending)
	}
}

// runtimeManifest reads the runtime driver's record in dir.
func runtimeManifest(t testing.TB, dir string) (m struct {
	Pending string `json:"pending"`
}) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, ".weft-runtime.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

var failedField = regexp.MustCompile(`\[failed: (\d+)\]`)

// failedReloads is the master's count of failed reloads ("show proc").
func failedReloads(t testing.TB, masterSocket string) int {
	t.Helper()
	c, err := net.DialTimeout("unix", masterSocket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "show proc\n"); err != nil {
		t.Fatal(err)
	}
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.CloseWrite()
	}
	out, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	m := failedField.FindSubmatch(out)
	if m == nil {
		t.Fatalf("show proc: no failed count in %q", out)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// logged returns the first JSON log record in out whose msg starts with
// prefix.
func logged(out, prefix string) (map[string]any, bool) {
	for line := range strings.Lines(out) {
		var rec map[string]any
		if json.Unmarshal([]byte(line), &rec) == nil && strings.HasPrefix(fmt.Sprint(rec["msg"]), prefix) {
			return rec, true
		}
	}
	return nil, false
}
