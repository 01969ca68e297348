package deployer_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
)

func TestMain(m *testing.M) {
	// Failing orders are retried within milliseconds; a reminder of a
	// failure that lasts never comes within a test.
	deployer.SetRetry(5*time.Millisecond, 50*time.Millisecond, time.Hour)
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}

type fixture struct {
	t    *testing.T
	bus  *testkit.Bus
	env  *testkit.Env
	dest string
}

func start(t *testing.T) *fixture {
	f, run := prepare(t)
	run()
	return f
}

// prepare is start without starting the deployer: run starts it.
func prepare(t *testing.T) (*fixture, func()) {
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(`
targets:
  edge:
    deploy:
      driver: files
      dest: out
      reload_cmd: echo reload >> ../reloads.log
    haproxy_config: {template: unused}
`), dir)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t), dest: filepath.Join(dir, "out")}
	env := testkit.NewEnv(t, f.bus, "d1")
	f.env = env
	return f, func() {
		testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, env.Env, cfg) })
	}
}

func (f *fixture) store(cfg string) msg.Bundle {
	f.t.Helper()
	b, err := msg.NewBundle("edge", f.dest, "haproxy.cfg", []msg.BundleFile{
		{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte(cfg)},
		{Path: "maps/host.map", Kind: msg.FileMap, Content: []byte("a b\n")},
	})
	if err != nil {
		f.t.Fatal(err)
	}
	f.put(b)
	return b
}

// put stores a bundle in the object store.
func (f *fixture) put(b msg.Bundle) {
	f.t.Helper()
	if err := msg.NewBundleStore(f.bus.JS).PutBundle(context.Background(), "", b); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) publish(subject string, m msg.Message) {
	f.t.Helper()
	out, err := msg.NewMsg(subject, "", m)
	if err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.bus.JS.PublishMsg(context.Background(), out); err != nil {
		f.t.Fatal(err)
	}
}

// verdict publishes v and records it in the validation status, as the
// validator does: a verdict the status does not confirm orders nothing.
func (f *fixture) verdict(v msg.Validated) {
	f.t.Helper()
	recordVerdict(f.t, f.bus, v)
	f.publish(msg.ValidatedSubject(v.Target), v)
}

func recordVerdict(t *testing.T, bus *testkit.Bus, v msg.Validated) {
	t.Helper()
	ctx := context.Background()
	kv, _ := bus.JS.KeyValue(ctx, msg.BucketStatus)
	var st msg.ValidationStatus
	rev, err := msg.LoadStatus(ctx, kv, msg.ValidationStatusKey(v.Target), &st)
	if err != nil {
		t.Fatal(err)
	}
	st.Target, st.Version, st.BundleHash, st.OK = v.Target, v.Version, v.BundleHash, v.OK
	if v.OK {
		st.LastGood, st.LastGoodVersion = v.BundleHash, v.Version
	}
	if _, err := msg.StoreStatus(ctx, kv, msg.ValidationStatusKey(v.Target), st, rev); err != nil {
		t.Fatal(err)
	}
}

// outcome waits for the n-th deploy outcome of edge/local.
func (f *fixture) outcome(n uint64) msg.Deployed {
	f.t.Helper()
	stream, _ := f.bus.JS.Stream(context.Background(), msg.StreamDeploys)
	var d msg.Deployed
	testkit.Eventually(f.t, 15*time.Second, func() error {
		info, err := stream.Info(context.Background(), jetstreamFilter(msg.DeployedSubject("edge", "local")))
		if err != nil {
			return err
		}
		if got := info.State.Subjects[msg.DeployedSubject("edge", "local")]; got < n {
			return fmt.Errorf("%d outcomes, want %d", got, n)
		}
		m, err := stream.GetLastMsgForSubject(context.Background(), msg.DeployedSubject("edge", "local"))
		if err != nil {
			return err
		}
		d = msg.Deployed{}
		return msg.Decode(m.Data, &d)
	})
	return d
}

func (f *fixture) file(p string) string {
	data, _ := os.ReadFile(filepath.Join(f.dest, p))
	return string(data)
}

func (f *fixture) reloads() int {
	data, _ := os.ReadFile(filepath.Join(filepath.Dir(f.dest), "reloads.log"))
	return strings.Count(string(data), "\n")
}

func TestDeployFlow(t *testing.T) {
	f := start(t)
	b1 := f.store("global # one\n")
	b2 := f.store("global # two\n")
	steps := []struct {
		name    string
		act     func()
		n       uint64
		outcome string
		cfg     string
		reloads int
	}{
		{"accepted bundle is deployed", func() {
			f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b1.Hash, OK: true})
		}, 1, msg.OutcomeApplied, "global # one\n", 1},
		{"refused bundle is not", func() {
			f.verdict(msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: false, Reason: "haproxy refused"})
			f.verdict(msg.Validated{Target: "edge", Version: 3, BundleHash: b1.Hash, OK: true})
		}, 2, msg.OutcomeUnchanged, "global # one\n", 1},
		{"newer bundle is deployed", func() {
			f.verdict(msg.Validated{Target: "edge", Version: 4, BundleHash: b2.Hash, OK: true})
		}, 3, msg.OutcomeApplied, "global # two\n", 2},
		{"an order for an older bundle is skipped", func() {
			f.publish(msg.DeploySubject("edge", "local"), msg.DeployOrder{Target: "edge", Instance: "local", Version: 1, BundleHash: b1.Hash})
		}, 4, msg.OutcomeSkipped, "global # two\n", 2},
		{"drift is repaired by a deploy trigger", func() {
			if err := os.WriteFile(filepath.Join(f.dest, "haproxy.cfg"), []byte("tampered\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, 5*time.Second, func() error {
				_, err := f.bus.NC.Request(msg.TriggerDeploySubject("edge"), nil, 2*time.Second)
				return err
			})
		}, 5, msg.OutcomeApplied, "global # two\n", 3},
	}
	for _, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			st.act()
			d := f.outcome(st.n)
			if d.Outcome != st.outcome {
				t.Fatalf("outcome = %+v, want %s", d, st.outcome)
			}
			if got := f.file("haproxy.cfg"); got != st.cfg {
				t.Fatalf("haproxy.cfg = %q, want %q", got, st.cfg)
			}
			if f.file("maps/host.map") != "a b\n" {
				t.Fatal("map file missing")
			}
			if got := f.reloads(); got != st.reloads {
				t.Fatalf("reloads = %d, want %d", got, st.reloads)
			}
		})
	}
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	rep, err := msg.ReadStatus(context.Background(), kv)
	if err != nil || len(rep.Targets) != 1 || len(rep.Targets[0].Deploys) != 1 {
		t.Fatalf("status = %+v %v", rep, err)
	}
	if ds := rep.Targets[0].Deploys[0]; ds.Version != 4 || ds.BundleHash != b2.Hash || ds.Reloads["files-changed"] != 3 {
		t.Fatalf("deploy status = %+v", ds)
	}
	// weft.api.status answers with the same report.
	resp, err := f.bus.NC.Request(msg.APIStatus, nil, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var viaAPI msg.StatusReport
	if err := msg.Decode(resp.Data, &viaAPI); err != nil || len(viaAPI.Targets) != 1 {
		t.Fatalf("api status = %+v %v", viaAPI, err)
	}
}

// TestOrderCarriedOutIsNotRepeated: an order that the status says was
// carried out (a deployer died after recording it, before acknowledging
// it) is acknowledged when delivered again, not carried out twice; the
// next order is carried out.
func TestOrderCarriedOutIsNotRepeated(t *testing.T) {
	f, run := prepare(t)
	ctx := context.Background()
	b, b2 := f.store("global # one\n"), f.store("global # two\n")
	order := func(version uint64, b msg.Bundle) uint64 {
		out, err := msg.NewMsg(msg.DeploySubject("edge", "local"), "", msg.DeployOrder{Target: "edge", Instance: "local", Version: version, BundleHash: b.Hash, Reason: msg.OrderValidated})
		if err != nil {
			t.Fatal(err)
		}
		ack, err := f.bus.JS.PublishMsg(ctx, out)
		if err != nil {
			t.Fatal(err)
		}
		return ack.Sequence
	}
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
	done := order(1, b)
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	if _, err := msg.StoreStatus(ctx, kv, msg.DeployStatusKey("edge", "local"),
		msg.DeployStatus{Target: "edge", Instance: "local", Driver: "files", Version: 1, BundleHash: b.Hash, Deploys: 1, Order: done}, 0); err != nil {
		t.Fatal(err)
	}
	run()
	testkit.Eventually(t, 15*time.Second, func() error {
		c, err := f.bus.JS.Consumer(ctx, msg.StreamDeploys, deployer.InstanceConsumer("edge", "local"))
		if err != nil {
			return err
		}
		info, err := c.Info(ctx)
		if err != nil {
			return err
		}
		if info.AckFloor.Stream < done {
			return fmt.Errorf("order %d not acknowledged yet (ack floor %d)", done, info.AckFloor.Stream)
		}
		return nil
	})
	// A starting deployer repairs the instance with an order of its own
	// (the files are not on disk here); the order carried out before
	// has no second outcome.
	if _, ok := f.outcomeOf(done); ok {
		t.Fatal("the order carried out before was carried out and reported again")
	}
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: true})
	next := order(2, b2)
	testkit.Eventually(t, 15*time.Second, func() error {
		d, ok := f.outcomeOf(next)
		if !ok {
			return fmt.Errorf("no outcome of order %d yet", next)
		}
		if d.Outcome == msg.OutcomeFailed {
			return fmt.Errorf("next order failed: %s", d.Error)
		}
		return nil
	})
	if got := f.file("haproxy.cfg"); got != "global # two\n" {
		t.Fatalf("haproxy.cfg = %q", got)
	}
	var st msg.DeployStatus
	if _, err := msg.LoadStatus(ctx, kv, msg.DeployStatusKey("edge", "local"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Order != next {
		t.Fatalf("status records order %d, want %d", st.Order, next)
	}
}

// outcomeOf returns the outcome published for the order at stream sequence
// order, found by its message id (msg.DeployedID).
func (f *fixture) outcomeOf(order uint64) (msg.Deployed, bool) {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := f.bus.JS.OrderedConsumer(ctx, msg.StreamDeploys, jetstream.OrderedConsumerConfig{FilterSubjects: []string{msg.DeployedSubject("edge", "local")}})
	if err != nil {
		f.t.Fatal(err)
	}
	batch, err := c.FetchNoWait(1000)
	if err != nil {
		f.t.Fatal(err)
	}
	want := msg.DeployedID("edge", "local", order)
	var found msg.Deployed
	ok := false
	for m := range batch.Messages() {
		if m.Headers().Get(jetstream.MsgIDHeader) == want {
			ok = msg.Decode(m.Data(), &found) == nil
		}
	}
	return found, ok
}

// TestForgedVerdictsAndOrdersAreDeadLettered: a verdict or a deploy order
// the validation status does not confirm (anyone can publish them) deploys
// nothing and is dead-lettered with the reason; a deploy status such an
// order wrote before this check does not make real orders look old.
func TestForgedVerdictsAndOrdersAreDeadLettered(t *testing.T) {
	f, run := prepare(t)
	ctx := context.Background()
	real, fake := f.store("global # real\n"), f.store("global # forged\n")
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	if _, err := msg.StoreStatus(ctx, kv, msg.DeployStatusKey("edge", "local"),
		msg.DeployStatus{Target: "edge", Instance: "local", Driver: "files", Version: 99998, BundleHash: fake.Hash}, 0); err != nil {
		t.Fatal(err)
	}
	run()
	f.publish(msg.ValidatedSubject("edge"), msg.Validated{Target: "edge", Version: 99999, BundleHash: fake.Hash, OK: true})
	for _, reason := range []string{msg.OrderValidated, msg.OrderTrigger, msg.OrderDriftCheck} {
		f.publish(msg.DeploySubject("edge", "local"), msg.DeployOrder{Target: "edge", Instance: "local", Version: 99999, BundleHash: fake.Hash, Reason: reason})
	}
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: real.Hash, OK: true})
	testkit.Eventually(t, 15*time.Second, func() error {
		var st msg.DeployStatus
		if _, err := msg.LoadStatus(ctx, kv, msg.DeployStatusKey("edge", "local"), &st); err != nil {
			return err
		}
		if st.Version != 1 || st.BundleHash != real.Hash || f.file("haproxy.cfg") != "global # real\n" {
			return fmt.Errorf("deploy status v%d %s, haproxy.cfg %q", st.Version, st.BundleHash, f.file("haproxy.cfg"))
		}
		return nil
	})
	dlq, _ := f.bus.JS.Stream(ctx, msg.StreamDLQ)
	testkit.Eventually(t, 3*msg.ConfirmWait, func() error {
		info, err := dlq.Info(ctx, jetstreamFilter(msg.DLQSubject("deployer")))
		if err != nil {
			return err
		}
		var subjects []string
		for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
			m, err := dlq.GetMsg(ctx, seq)
			if err != nil {
				return err
			}
			var dl msg.DeadLetter
			if err := msg.Decode(m.Data, &dl); err != nil {
				return err
			}
			if !strings.Contains(dl.Reason, msg.ErrUnconfirmed.Error()) || !strings.Contains(dl.Reason, "v99999") {
				return fmt.Errorf("dead letter %+v", dl)
			}
			subjects = append(subjects, dl.Subject)
		}
		if len(subjects) != 4 {
			return fmt.Errorf("dead letters on %v, want the verdict and three orders", subjects)
		}
		return nil
	})
	if strings.Contains(f.file("haproxy.cfg"), "forged") {
		t.Fatal("a forged bundle was deployed")
	}
}

// TestMissingChunkIsRetried: an order whose bundle misses a chunk (dropped
// by the store's limits) is not carried out: the failure is reported (an
// outcome naming the missing chunk) and the order tried again, carried out
// once the bundle is stored again.
func TestMissingChunkIsRetried(t *testing.T) {
	f := start(t)
	b := f.store("global # chunk\n")
	ctx := context.Background()
	objects, err := f.bus.JS.Stream(ctx, msg.ObjectStream(msg.ObjectBundles))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b.Files[0].Content)
	if err := objects.Purge(ctx, jetstream.WithPurgeSubject(msg.ChunkSubject(hex.EncodeToString(sum[:])))); err != nil {
		t.Fatal(err)
	}
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b.Hash, OK: true})
	if d := f.outcome(1); d.Outcome != msg.OutcomeFailed || !strings.Contains(d.Error, msg.ErrChunkMissing.Error()) {
		t.Fatalf("outcome = %+v, want failed naming the missing chunk", d)
	}
	if got := f.file("haproxy.cfg"); got != "" {
		t.Fatalf("haproxy.cfg = %q written from a bundle missing a chunk", got)
	}
	f.put(b)
	if d := f.outcome(2); d.Outcome != msg.OutcomeApplied {
		t.Fatalf("outcome = %+v, want applied", d)
	}
	if got := f.file("haproxy.cfg"); got != "global # chunk\n" {
		t.Fatalf("haproxy.cfg = %q", got)
	}
}

// TestNewestAcceptedDeployedUnderChurn accepts bundles faster than the
// deployer reads their verdicts: each verdict is published only after the
// next bundle's acceptance is recorded, and the newest one's verdict never
// comes. The newest accepted bundle is deployed all the same.
func TestNewestAcceptedDeployedUnderChurn(t *testing.T) {
	f := start(t)
	const n = 30
	bundles := make([]msg.Bundle, n+1)
	for i := 1; i <= n; i++ {
		bundles[i] = f.store(fmt.Sprintf("global # %d\n", i))
	}
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 1, BundleHash: bundles[1].Hash, OK: true})
	for i := 1; i < n; i++ {
		recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: uint64(i + 1), BundleHash: bundles[i+1].Hash, OK: true})
		f.publish(msg.ValidatedSubject("edge"), msg.Validated{Target: "edge", Version: uint64(i), BundleHash: bundles[i].Hash, OK: true})
	}
	testkit.Eventually(t, 15*time.Second, func() error {
		if got, want := f.file("haproxy.cfg"), fmt.Sprintf("global # %d\n", n); got != want {
			return fmt.Errorf("haproxy.cfg = %q, want %q", got, want)
		}
		return nil
	})
}

// TestOrderBehindCarriesOutNewestAccepted gives an instance an order for
// an accepted bundle that a newer acceptance superseded before the order
// was carried out: the instance gets the newest accepted bundle, and the
// newest bundle's own order then finds it done.
func TestOrderBehindCarriesOutNewestAccepted(t *testing.T) {
	f, run := prepare(t)
	b1, b2, b3 := f.store("global # one\n"), f.store("global # two\n"), f.store("global # three\n")
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 1, BundleHash: b1.Hash, OK: true})
	run()
	// The start's catch-up gives the instance v1.
	if d := f.outcome(1); d.Outcome != msg.OutcomeApplied || d.Version != 1 {
		t.Fatalf("catch-up outcome = %+v", d)
	}
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: true})
	recordVerdict(t, f.bus, msg.Validated{Target: "edge", Version: 3, BundleHash: b3.Hash, OK: true})
	steps := []struct {
		name    string
		order   msg.DeployOrder
		outcome string
		version uint64
	}{
		{"superseded order carries out the newest", msg.DeployOrder{Target: "edge", Instance: "local", Version: 2, BundleHash: b2.Hash, Reason: msg.OrderValidated}, msg.OutcomeApplied, 3},
		{"the newest's own order finds it done", msg.DeployOrder{Target: "edge", Instance: "local", Version: 3, BundleHash: b3.Hash, Reason: msg.OrderValidated}, msg.OutcomeSkipped, 3},
		{"an older order once the instance has the newest is skipped", msg.DeployOrder{Target: "edge", Instance: "local", Version: 2, BundleHash: b2.Hash, Reason: msg.OrderValidated}, msg.OutcomeSkipped, 2},
	}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			f.publish(msg.DeploySubject("edge", "local"), st.order)
			d := f.outcome(uint64(i + 2))
			if d.Outcome != st.outcome || d.Version != st.version {
				t.Fatalf("outcome = %+v, want %s of v%d", d, st.outcome, st.version)
			}
			if got := f.file("haproxy.cfg"); got != "global # three\n" {
				t.Fatalf("haproxy.cfg = %q, want the newest accepted bundle", got)
			}
			if got := f.reloads(); got != 2 {
				t.Fatalf("%d reloads, want 2 (v1 at start, then v3)", got)
			}
		})
	}
}
