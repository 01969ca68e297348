package deployer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
)

// startAt starts a deployer at site ("" is the hub) on a configuration
// whose target edge is delivered at site edge-1 and shop at the hub.
func startAt(t *testing.T, site string) *fixture {
	t.Helper()
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(`
sites: [edge-1]
targets:
  edge:
    deploy: {driver: files, dest: out, site: edge-1}
    haproxy_config: {template: unused}
  shop:
    deploy: {driver: files, dest: shop-out}
    haproxy_config: {template: unused}
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t), dest: filepath.Join(dir, "out")}
	f.env = testkit.NewEnv(t, f.bus, "d1")
	f.env.Site = site
	testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, f.env.Env, cfg) })
	return f
}

// TestSiteDeploysWhatItsStatusAccepts: at a site, the validation status
// sourced from the hub orders the last accepted bundle by itself: a
// verdict that never arrives, or came too early and was dead-lettered,
// does not leave the site behind.
func TestSiteDeploysWhatItsStatusAccepts(t *testing.T) {
	f := startAt(t, "edge-1")
	for v := uint64(1); v <= 2; v++ {
		b := f.store(fmt.Sprintf("global # v%d\n", v))
		recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: v, BundleHash: b.Hash, OK: true})
		if d := f.outcome(v); d.Version != v || d.Outcome != msg.OutcomeApplied {
			t.Fatalf("outcome %+v, want v%d applied", d, v)
		}
		if got := f.file("haproxy.cfg"); got != fmt.Sprintf("global # v%d\n", v) {
			t.Fatalf("haproxy.cfg %q after v%d", got, v)
		}
	}
	// The verdict of v2, late: ordered once already, not again.
	f.publish(msg.ValidatedSubject("edge"), msg.Validated{Target: "edge", Version: 2, BundleHash: f.store("global # v2\n").Hash, OK: true})
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	var st msg.DeployStatus
	testkit.Eventually(t, 10*time.Second, func() error {
		if _, err := msg.LoadStatus(context.Background(), kv, msg.DeployStatusKey("edge", "local"), &st); err != nil {
			return err
		}
		if st.Site != "edge-1" || st.Deploys != 2 {
			return fmt.Errorf("deploy status %+v, want 2 deploys at site edge-1", st)
		}
		return nil
	})
}

// TestHubLeavesSiteTargets: the hub's deployer neither orders nor
// dead-letters the verdicts on a site's target.
func TestHubLeavesSiteTargets(t *testing.T) {
	f := startAt(t, "")
	b := f.store("global # edge\n")
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
	shop, err := msg.NewBundle("shop", filepath.Join(filepath.Dir(f.dest), "shop-out"), "haproxy.cfg", []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte("global # shop\n")}})
	if err != nil {
		t.Fatal(err)
	}
	f.put(shop)
	f.verdict(msg.Validated{Target: "shop", Version: 1, BundleHash: shop.Hash, OK: true})
	stream, _ := f.bus.JS.Stream(context.Background(), msg.StreamDeploys)
	testkit.Eventually(t, 10*time.Second, func() error {
		_, err := stream.GetLastMsgForSubject(context.Background(), msg.DeployedSubject("shop", "local"))
		return err
	})
	for _, subject := range []string{msg.DeploySubject("edge", "local"), msg.DeployedSubject("edge", "local")} {
		if _, err := stream.GetLastMsgForSubject(context.Background(), subject); err == nil {
			t.Errorf("the hub published on %s", subject)
		}
	}
	dlq, _ := f.bus.JS.Stream(context.Background(), msg.StreamDLQ)
	info, err := dlq.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 0 {
		t.Errorf("%d messages dead-lettered", info.State.Msgs)
	}
}

// TestSiteHonoursAPin: the pin of a site's target reaches the site as a
// status key (sourced from the hub): the site's deployer deploys the
// pinned bundle, keeps it when a newer one is accepted and on a re-deploy
// trigger, and deploys the last accepted one once the pin is lifted.
func TestSiteHonoursAPin(t *testing.T) {
	f := startAt(t, "edge-1")
	cfg := func(v uint64) string { return fmt.Sprintf("global # v%d\n", v) }
	hashes := map[uint64]string{}
	accept := func(v uint64) {
		b := f.store(cfg(v))
		hashes[v] = b.Hash
		recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: v, BundleHash: b.Hash, OK: true})
	}
	for v := uint64(1); v <= 2; v++ {
		accept(v)
		if d := f.outcome(v); d.Version != v || d.Outcome != msg.OutcomeApplied {
			t.Fatalf("outcome %+v, want v%d applied", d, v)
		}
	}
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	pin, _ := msg.Encode(msg.Pin{Target: "edge", Version: 1, BundleHash: hashes[1], Since: time.Now()})
	if _, err := kv.Put(context.Background(), msg.PinKey("edge"), pin); err != nil {
		t.Fatal(err)
	}
	if d := f.outcome(3); d.Version != 1 || d.Outcome != msg.OutcomeApplied || f.file("haproxy.cfg") != cfg(1) {
		t.Fatalf("outcome %+v and %q after the pin, want v1 applied", d, f.file("haproxy.cfg"))
	}
	accept(3)
	if _, err := f.bus.NC.Request(msg.TriggerDeploySubject("edge"), nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if d := f.outcome(4); d.Version != 1 || f.file("haproxy.cfg") != cfg(1) {
		t.Fatalf("outcome %+v and %q after v3 and a trigger, want v1 kept", d, f.file("haproxy.cfg"))
	}
	if err := kv.Delete(context.Background(), msg.PinKey("edge")); err != nil {
		t.Fatal(err)
	}
	if d := f.outcome(5); d.Version != 3 || f.file("haproxy.cfg") != cfg(3) {
		t.Fatalf("outcome %+v and %q after the pin was lifted, want v3", d, f.file("haproxy.cfg"))
	}
}

// TestHubPinsASiteTarget: the hub's deployer keeps the history of a site's
// target (where it ran from the site's statuses) and pins it on request,
// ordering nothing itself (the site's deployer delivers it).
func TestHubPinsASiteTarget(t *testing.T) {
	f := startAt(t, "")
	b := f.store("global # edge\n")
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true, At: time.Now()})
	var rb msg.RollbackReply
	testkit.Eventually(t, 10*time.Second, func() error {
		return ask(t, f.bus, msg.APIRollbackSubject("edge"), msg.RollbackRequest{To: "1"}, &rb)
	})
	if rb.Pin.Version != 1 || len(rb.Instances) != 0 {
		t.Fatalf("rollback reply %+v, want the pin and no instance of the hub", rb)
	}
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	var p msg.Pin
	if rev, err := msg.LoadStatus(context.Background(), kv, msg.PinKey("edge"), &p); err != nil || rev == 0 || p.BundleHash != b.Hash {
		t.Fatalf("pin %+v (%v)", p, err)
	}
	stream, _ := f.bus.JS.Stream(context.Background(), msg.StreamDeploys)
	if _, err := stream.GetLastMsgForSubject(context.Background(), msg.DeploySubject("edge", "local")); err == nil {
		t.Errorf("the hub ordered a site's target")
	}

	// The site's deploy status, sourced to the hub, says where v1 ran.
	at := time.Now().UTC().Truncate(time.Second)
	ran := msg.DeployStatus{Target: "edge", Instance: "local", Site: "edge-1", Version: 1, BundleHash: b.Hash, At: at}
	if _, err := msg.StoreStatus(context.Background(), kv, msg.DeployStatusKey("edge", "local"), ran, 0); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 10*time.Second, func() error {
		var h msg.HistoryReply
		if err := ask(t, f.bus, msg.APIHistorySubject("edge"), msg.HistoryRequest{}, &h); err != nil {
			return err
		}
		if len(h.Entries) != 1 || len(h.Entries[0].Deployed) != 1 {
			return fmt.Errorf("history %+v", h.Entries)
		}
		if got := h.Entries[0].Deployed[0]; got.Site != "edge-1" || got.Instance != "local" || !got.At.Equal(at) {
			return fmt.Errorf("v1 ran on %+v", got)
		}
		return nil
	})
}

// TestSiteRollsBackOnItsStatus: at a site, a validation status moved back
// to an earlier bundle (a refutation of a provisionally accepted one) is
// ordered even though that bundle was ordered, by the same path, moments
// before: the rollback is not taken for a duplicate of that order.
func TestSiteRollsBackOnItsStatus(t *testing.T) {
	f := startAt(t, "edge-1")
	b1, b2 := f.store("global # v1\n"), f.store("global # v2\n")
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 1, BundleHash: b1.Hash, OK: true})
	f.outcome(1)
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: true})
	f.outcome(2)
	if got := f.file("haproxy.cfg"); got != "global # v2\n" {
		t.Fatalf("haproxy.cfg %q after v2", got)
	}
	// What the validator writes on a refutation of v2: LastGood back to v1.
	ctx := context.Background()
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	var st msg.ValidationStatus
	rev, err := msg.LoadStatus(ctx, kv, msg.ValidationStatusKey("edge"), &st)
	if err != nil {
		t.Fatal(err)
	}
	st.OK, st.FullOnly, st.LastGood, st.LastGoodVersion = false, true, b1.Hash, 1
	if _, err := msg.StoreStatus(ctx, kv, msg.ValidationStatusKey("edge"), st, rev); err != nil {
		t.Fatal(err)
	}
	if d := f.outcome(3); d.BundleHash != b1.Hash || d.Outcome != msg.OutcomeApplied {
		t.Fatalf("outcome after the rollback %+v, want v1 applied", d)
	}
	if got := f.file("haproxy.cfg"); got != "global # v1\n" {
		t.Fatalf("haproxy.cfg %q after the rollback", got)
	}
}
