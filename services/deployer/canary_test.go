package deployer_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
)

// canaryHAProxy is one real HAProxy (master-worker) that the runtime
// driver deploys to: its folder, its HTTP port and its admin socket.
type canaryHAProxy struct {
	dir, port, admin string
}

// startHAProxy runs HAProxy in dir on cfg, with PORT set to its HTTP port
// (the bundle binds "${PORT}", so one bundle serves every instance), and
// waits until its worker answers on the admin socket.
func startHAProxy(t *testing.T, bin, dir, cfg string) canaryHAProxy {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	h := canaryHAProxy{dir: dir, port: fmt.Sprint(testkit.FreePort(t)), admin: filepath.Join(dir, "admin.sock")}
	if err := os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(strings.ReplaceAll(cfg, "/etc/haproxy", dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(filepath.Dir(dir), filepath.Base(dir)+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "-W", "-db", "-f", filepath.Join(dir, "haproxy.cfg"), "-S", filepath.Join(dir, "master.sock"))
	cmd.Env = append(os.Environ(), "PORT="+h.port)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		_ = logf.Close()
	})
	testkit.Eventually(t, 15*time.Second, func() error {
		_, err := adminDo(h.admin, "show info")
		return err
	})
	return h
}

func adminDo(sock, cmd string) (string, error) {
	c, err := net.DialTimeout("unix", sock, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, cmd+"\n"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(c)
	return string(b), err
}

// get sends one request through h to host and returns "<code> <body>".
func (h canaryHAProxy) get(host string) string {
	req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+h.port+"/", nil)
	req.Host = host
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return fmt.Sprintf("%d %s", resp.StatusCode, b)
}

// echoServer answers every request with its name until the test ends.
func echoServer(t *testing.T, name string) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, name) })}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return l.Addr().String()
}

// canaryConfig is an HAProxy configuration whose backend be_app has one
// health-checked server per address, and which answers version on
// /version through the frontend.
func canaryConfig(version string, servers ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, `global
  stats socket /etc/haproxy/admin.sock mode 600 level admin
defaults
  mode http
  timeout connect 1s
  timeout client 5s
  timeout server 5s
  default-server check inter 100ms fall 2 rise 1
frontend fe_http
  bind "127.0.0.1:${PORT}"
  http-response set-header X-Bundle %s
  default_backend be_app
backend be_app
`, version)
	for i, s := range servers {
		fmt.Fprintf(&b, "  server app%d %s\n", i+1, s)
	}
	return b.String()
}

const canaryYAML = `
targets:
  edge:
    base: /etc/haproxy
    deploy:
      driver: runtime
      instances:
        - {name: a, dest: %[1]s/a, master_socket: %[1]s/a/master.sock, admin_socket: %[1]s/a/admin.sock}
        - {name: b, dest: %[1]s/b, master_socket: %[1]s/b/master.sock, admin_socket: %[1]s/b/admin.sock}
        - {name: c, dest: %[1]s/c, master_socket: %[1]s/c/master.sock, admin_socket: %[1]s/c/admin.sock}
      canary: {instances: 1, hold: 3s}
    haproxy_config: {template: unused}
`

type canaryRig struct {
	t     *testing.T
	bus   *testkit.Bus
	cfg   *config.Config
	hs    map[string]canaryHAProxy
	envs  []*testkit.Env
	bunds map[uint64]msg.Bundle
}

func (r *canaryRig) startDeployer(replica string) func() {
	env := testkit.NewEnv(r.t, r.bus, replica)
	r.envs = append(r.envs, env)
	return testkit.Run(r.t, func(ctx context.Context) error { return deployer.Run(ctx, env.Env, r.cfg) })
}

// accept stores the bundle of cfg as version v and records the verdict
// accepting it, as the validator does.
func (r *canaryRig) accept(v uint64, cfg string) msg.Bundle {
	r.t.Helper()
	b, err := msg.NewBundle("edge", "/etc/haproxy", "haproxy.cfg", []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(cfg)}})
	if err != nil {
		r.t.Fatal(err)
	}
	if err := msg.NewBundleStore(r.bus.JS).PutBundle(context.Background(), "", b); err != nil {
		r.t.Fatal(err)
	}
	vd := msg.Validated{Target: "edge", Version: v, BundleHash: b.Hash, OK: true, At: time.Now().UTC()}
	recordVerdict(r.t, r.bus, vd)
	out, err := msg.NewMsg(msg.ValidatedSubject("edge"), "", vd)
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.bus.JS.PublishMsg(context.Background(), out); err != nil {
		r.t.Fatal(err)
	}
	return b
}

func (r *canaryRig) canary() (msg.Canary, error) {
	kv, _ := r.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	var c msg.Canary
	rev, err := msg.LoadStatus(context.Background(), kv, msg.CanaryKey("edge"), &c)
	if err == nil && rev == 0 {
		err = errors.New("no canary record")
	}
	return c, err
}

// waitCanary waits until the canary of version is in phase.
func (r *canaryRig) waitCanary(version uint64, phase string) msg.Canary {
	r.t.Helper()
	var c msg.Canary
	testkit.Eventually(r.t, 30*time.Second, func() error {
		var err error
		if c, err = r.canary(); err != nil {
			return err
		}
		if c.Version != version || c.Phase != phase {
			return fmt.Errorf("canary of v%d %s (%s), waiting for v%d %s", c.Version, c.Phase, c.Reason, version, phase)
		}
		return nil
	})
	return c
}

func (r *canaryRig) deployStatus(instance string) msg.DeployStatus {
	kv, _ := r.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	var st msg.DeployStatus
	if _, err := msg.LoadStatus(context.Background(), kv, msg.DeployStatusKey("edge", instance), &st); err != nil {
		r.t.Fatal(err)
	}
	return st
}

// served waits until instance's HAProxy serves version (X-Bundle) from
// an echo server.
func (r *canaryRig) served(instance, version string) {
	r.t.Helper()
	h := r.hs[instance]
	testkit.Eventually(r.t, 30*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, "http://127.0.0.1:"+h.port+"/", nil)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if got := resp.Header.Get("X-Bundle"); resp.StatusCode != http.StatusOK || got != version || !strings.HasPrefix(string(b), "app-") {
			return fmt.Errorf("%s: %d %q, bundle %q, want 200 from an echo server, bundle %q", instance, resp.StatusCode, b, got, version)
		}
		return nil
	})
}

// deployedVersions are the versions the outcomes of instance name.
func (r *canaryRig) deployedVersions(instance string) []uint64 {
	r.t.Helper()
	ctx := context.Background()
	cons, err := r.bus.JS.OrderedConsumer(ctx, msg.StreamDeploys, jetstreamOrdered(msg.DeployedSubject("edge", instance)))
	if err != nil {
		r.t.Fatal(err)
	}
	var out []uint64
	for {
		m, err := cons.Next(jetstreamFetchWait(200 * time.Millisecond))
		if err != nil {
			return out
		}
		var d msg.Deployed
		if msg.Decode(m.Data(), &d) == nil && d.Outcome != msg.OutcomeSkipped && d.Outcome != msg.OutcomeFailed {
			out = append(out, d.Version)
		}
	}
}

func (r *canaryRig) canaryMetric(result string) float64 {
	var sum float64
	for _, env := range r.envs {
		mfs, err := env.Registry.Gather()
		if err != nil {
			r.t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "weft_deployer_canary_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "result" && l.GetValue() == result {
						sum += m.GetCounter().GetValue()
					}
				}
			}
		}
	}
	return sum
}

// TestCanaryThroughHAProxy deploys to three real HAProxy instances with the
// runtime driver and deploy.canary (instance a, a 3s hold):
// (1) a good bundle goes to a first, and to b and c only once the hold
// passed; (2) a bundle that points be_app's servers at a closed port, so
// that HAProxy's health checks mark them DOWN on a, is refused by the
// canary: a is rolled back and its HAProxy serves the previous bundle
// again, b and c never get it, the history and the record say why, and
// weft_deployer_canary_total counts it; so is one whose backend answers
// 503 while traffic goes through the canary during the hold, on its 5xx
// share; (3) the next good bundle goes
// through the canary again, and a deployer stopped during its hold is
// replaced by another replica that resumes the same hold, then deploys the
// rest.
func TestCanaryThroughHAProxy(t *testing.T) {
	bin := testkit.HAProxy(t)
	dir := t.TempDir()
	bus := testkit.NATS(t)
	apps := []string{echoServer(t, "app-1"), echoServer(t, "app-2"), echoServer(t, "app-3")}
	cfg, err := config.Parse(fmt.Appendf(nil, canaryYAML, dir), dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &canaryRig{t: t, bus: bus, cfg: cfg, hs: map[string]canaryHAProxy{}}
	for _, name := range []string{"a", "b", "c"} {
		r.hs[name] = startHAProxy(t, bin, filepath.Join(dir, name), canaryConfig("v0", apps...))
	}
	stop := r.startDeployer("d1")

	// v1, the first bundle: nothing to compare with, every instance.
	r.accept(1, canaryConfig("v1", apps...))
	if c := r.waitCanary(1, msg.CanaryPassed); !strings.Contains(c.Reason, "no previous bundle") {
		t.Errorf("first canary: %+v", c)
	}
	for _, name := range []string{"a", "b", "c"} {
		r.served(name, "v1")
	}

	// (1) v2: a first; b and c keep v1 through the hold.
	r.accept(2, canaryConfig("v2", apps...))
	holding := r.waitCanary(2, msg.CanaryHolding)
	for _, name := range []string{"b", "c"} {
		if st := r.deployStatus(name); st.Version != 1 {
			t.Fatalf("%s at v%d during the hold of v2's canary", name, st.Version)
		}
		if got := r.hs[name].get("x"); !strings.HasPrefix(got, "200 app-") {
			t.Fatalf("%s answered %q", name, got)
		}
	}
	r.served("a", "v2")
	passed := r.waitCanary(2, msg.CanaryPassed)
	if passed.Reason != "" || !passed.HoldFrom.Equal(holding.HoldFrom) || passed.DecidedAt.Before(holding.HoldFrom.Add(passed.Hold)) {
		t.Errorf("v2 passed: %+v (hold from %s)", passed, holding.HoldFrom)
	}
	for _, name := range []string{"b", "c"} {
		r.served(name, "v2")
		if st := status(t, bus, name, 2); st.At.Before(passed.DecidedAt) {
			t.Errorf("%s got v2 at %s, before the canary passed at %s", name, st.At, passed.DecidedAt)
		}
	}

	// (2) v3 points be_app at a closed port: DOWN on a, refused.
	closed := testkit.FreeAddr(t)
	r.accept(3, canaryConfig("v3", closed, closed, closed))
	refused := r.waitCanary(3, msg.CanaryRefused)
	if want := "canary: instance a: backend be_app: 3 of 3 servers down"; !strings.HasPrefix(refused.Reason, want) {
		t.Errorf("refusal %q, want it to start with %q", refused.Reason, want)
	}
	if refused.PreviousVersion != 2 {
		t.Errorf("refused canary's previous bundle v%d, want v2", refused.PreviousVersion)
	}
	r.served("a", "v2") // rolled back: the real HAProxy serves v2 again
	testkit.Eventually(t, 15*time.Second, func() error {
		if st := r.deployStatus("a"); st.Version != 2 {
			return fmt.Errorf("a at v%d, want v2 again", st.Version)
		}
		return nil
	})
	for _, name := range []string{"b", "c"} {
		if vs := r.deployedVersions(name); slices.Contains(vs, 3) {
			t.Errorf("%s got the refused v3 (deployed %v)", name, vs)
		}
		r.served(name, "v2")
	}
	if vs := r.deployedVersions("a"); !slices.Contains(vs, 3) {
		t.Errorf("a never got v3 (deployed %v)", vs)
	}
	h := history(t, bus, func(h msg.HistoryReply) error {
		for _, e := range h.Entries {
			if e.Version == 3 && !e.OK && e.Reason == refused.Reason {
				return nil
			}
		}
		return fmt.Errorf("v3 not refused in the history: %+v", h.Entries)
	})
	for _, e := range h.Entries {
		if e.Version == 3 && !slices.Equal(deployedTo(e), []string{"a"}) {
			t.Errorf("v3 ran on %v, want only a", deployedTo(e))
		}
	}
	kv, _ := bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	rep, err := msg.ReadStatus(context.Background(), kv)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Targets) != 1 || rep.Targets[0].Canary == nil || rep.Targets[0].Canary.Reason != refused.Reason {
		t.Errorf("the status report does not show the refused canary: %+v", rep.Targets)
	}
	if n := r.canaryMetric(msg.CanaryRefused); n != 1 {
		t.Errorf("weft_deployer_canary_total{result=refused} = %v, want 1", n)
	}

	// v4 makes be_app answer 503 (HAProxy counts those on the frontend)
	// while traffic goes through a during the hold: refused on the 5xx
	// share, a back on v2.
	traffic := make(chan struct{})
	trafficDone := make(chan struct{})
	go func() {
		defer close(trafficDone)
		for {
			select {
			case <-traffic:
				return
			case <-time.After(20 * time.Millisecond):
				r.hs["a"].get("x")
			}
		}
	}()
	r.accept(4, strings.Replace(canaryConfig("v4", apps...), "backend be_app\n", "backend be_app\n  http-request return status 503\n", 1))
	refused = r.waitCanary(4, msg.CanaryRefused)
	close(traffic)
	<-trafficDone
	if !strings.Contains(refused.Reason, "frontend fe_http: 5xx ratio 1.00 during the hold") || strings.Contains(refused.Reason, "servers down") {
		t.Errorf("refusal of v4: %q", refused.Reason)
	}
	r.served("a", "v2")
	if n := r.canaryMetric(msg.CanaryRefused); n != 2 {
		t.Errorf("weft_deployer_canary_total{result=refused} = %v, want 2", n)
	}

	// (3) v5 goes through the canary again; the deployer stops during the
	// hold, another replica resumes it.
	r.accept(5, canaryConfig("v5", apps...))
	holding = r.waitCanary(5, msg.CanaryHolding)
	if holding.PreviousVersion != 2 {
		t.Errorf("v5's canary keeps v%d meanwhile, want v2", holding.PreviousVersion)
	}
	stop()
	if c, err := r.canary(); err != nil || c.Phase != msg.CanaryHolding {
		t.Fatalf("the deployer stopped after the hold: %+v %v", c, err)
	}
	if st := r.deployStatus("b"); st.Version != 2 {
		t.Fatalf("b at v%d during the hold of v5", st.Version)
	}
	r.startDeployer("d2")
	passed = r.waitCanary(5, msg.CanaryPassed)
	if !passed.HoldFrom.Equal(holding.HoldFrom) || !passed.StartedAt.Equal(holding.StartedAt) {
		t.Errorf("the restarted deployer started the canary over: hold from %s, was %s", passed.HoldFrom, holding.HoldFrom)
	}
	for _, name := range []string{"a", "b", "c"} {
		r.served(name, "v5")
	}
	if n := r.canaryMetric(msg.CanaryPassed); n < 1 {
		t.Errorf("weft_deployer_canary_total{result=passed} = %v", n)
	}
}
