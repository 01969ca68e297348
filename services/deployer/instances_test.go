package deployer_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
)

// run starts a deployer on yaml (paths relative to dir) and returns the
// fixture whose bundles are based at base.
func run(t *testing.T, bus *testkit.Bus, dir, base, yaml string) (*fixture, func()) {
	t.Helper()
	cfg, err := config.Parse([]byte(yaml), dir)
	if err != nil {
		t.Fatal(err)
	}
	env := testkit.NewEnv(t, bus, "d1")
	f := &fixture{t: t, bus: bus, env: env, dest: base}
	stop := testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, env.Env, cfg) })
	return f, stop
}

// status waits until instance of edge has version and returns its status.
func status(t *testing.T, bus *testkit.Bus, instance string, version uint64) msg.DeployStatus {
	t.Helper()
	kv, _ := bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	var st msg.DeployStatus
	testkit.Eventually(t, 15*time.Second, func() error {
		st = msg.DeployStatus{}
		if _, err := msg.LoadStatus(context.Background(), kv, msg.DeployStatusKey("edge", instance), &st); err != nil {
			return err
		}
		if st.Version != version {
			return fmt.Errorf("%s at version %d, want %d", instance, st.Version, version)
		}
		return nil
	})
	return st
}

func read(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TestInstancesEachGetTheBundleInTheirFolder deploys one bundle to three
// instances: each gets it relocated to its own folder, with its own status.
func TestInstancesEachGetTheBundleInTheirFolder(t *testing.T) {
	dir := t.TempDir()
	const yaml = `
targets:
  edge:
    base: /etc/haproxy
    deploy:
      driver: files
      dest: out
      instances: [{name: a, dest: a}, {name: b, dest: b}, {name: c, dest: c}]
    haproxy_config: {template: unused}
`
	f, _ := run(t, testkit.NATS(t), dir, "/etc/haproxy", yaml)
	b := f.store("frontend f\n  use_backend %[req.hdr(host),map(/etc/haproxy/maps/host.map)]\n")
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
	for _, name := range []string{"a", "b", "c"} {
		st := status(t, f.bus, name, 1)
		if st.BundleHash != b.Hash || st.Deploys != 1 {
			t.Errorf("%s: status %+v", name, st)
		}
		want := fmt.Sprintf("frontend f\n  use_backend %%[req.hdr(host),map(%s/maps/host.map)]\n", filepath.Join(dir, name))
		if got := read(t, filepath.Join(dir, name, "haproxy.cfg")); got != want {
			t.Errorf("%s: haproxy.cfg = %q, want %q", name, got, want)
		}
		if got := read(t, filepath.Join(dir, name, "maps/host.map")); got != "a b\n" {
			t.Errorf("%s: map = %q", name, got)
		}
		// Outcomes are counted per instance, as each has its own status.
		if n := testkit.LabeledValue(t, f.env.Registry, "weft_deployer_deploys_total", map[string]string{"target": "edge", "deploy_instance": name, "outcome": msg.OutcomeApplied}); n != 1 {
			t.Errorf("%s: weft_deployer_deploys_total{deploy_instance=%q,outcome=applied} = %v, want 1", name, name, n)
		}
	}
}

// TestCatchUpAtStart starts a deployer on an instance that is behind the
// last accepted bundle (its order was lost): it is brought up to date
// without any new verdict.
func TestCatchUpAtStart(t *testing.T) {
	dir := t.TempDir()
	bus := testkit.NATS(t)
	const yaml = `
targets:
  edge:
    deploy: {driver: files, dest: out}
    haproxy_config: {template: unused}
`
	f := &fixture{t: t, bus: bus, dest: filepath.Join(dir, "out")}
	b := f.store("global # accepted while no deployer ran\n")
	kv, _ := bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	if _, err := msg.StoreStatus(context.Background(), kv, msg.ValidationStatusKey("edge"),
		msg.ValidationStatus{Target: "edge", Version: 7, BundleHash: b.Hash, OK: true, LastGood: b.Hash, LastGoodVersion: 7}, 0); err != nil {
		t.Fatal(err)
	}
	run(t, bus, dir, f.dest, yaml)
	status(t, bus, "local", 7)
	if got := f.file("haproxy.cfg"); got != "global # accepted while no deployer ran\n" {
		t.Fatalf("haproxy.cfg = %q", got)
	}
}

// TestDriftCheckRepairs changes a delivered file behind weft's back: the
// periodic drift check puts it back without any trigger.
func TestDriftCheckRepairs(t *testing.T) {
	dir := t.TempDir()
	const yaml = `
targets:
  edge:
    deploy: {driver: files, dest: out, drift_check: 300ms}
    haproxy_config: {template: unused}
`
	f, _ := run(t, testkit.NATS(t), dir, filepath.Join(dir, "out"), yaml)
	b := f.store("global # delivered\n")
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
	status(t, f.bus, "local", 1)
	if err := os.WriteFile(filepath.Join(f.dest, "haproxy.cfg"), []byte("tampered\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		if got := f.file("haproxy.cfg"); got != "global # delivered\n" {
			return fmt.Errorf("haproxy.cfg = %q", got)
		}
		return nil
	})
	stream, _ := f.bus.JS.Stream(context.Background(), msg.StreamDeploys)
	m, err := stream.GetLastMsgForSubject(context.Background(), msg.DeploySubject("edge", "local"))
	if err != nil {
		t.Fatal(err)
	}
	var o msg.DeployOrder
	if err := msg.Decode(m.Data, &o); err != nil || o.Reason != msg.OrderDriftCheck || o.Version != 1 {
		t.Fatalf("last order = %+v %v, want a drift check of version 1", o, err)
	}
}
