package deployer_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/deployer"
)

// ask sends a weft.api request and decodes its answer; an error answer is
// returned as the error.
func ask[Req, Rep msg.Message](t *testing.T, bus *testkit.Bus, subject string, req Req, into Rep) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return msg.Ask(ctx, bus.NC, subject, req, into)
}

// history waits until edge's history satisfies ok and returns it.
func history(t *testing.T, bus *testkit.Bus, ok func(msg.HistoryReply) error) msg.HistoryReply {
	t.Helper()
	var h msg.HistoryReply
	testkit.Eventually(t, 15*time.Second, func() error {
		h = msg.HistoryReply{}
		if err := ask(t, bus, msg.APIHistorySubject("edge"), msg.HistoryRequest{}, &h); err != nil {
			return err
		}
		return ok(h)
	})
	return h
}

func versionsOf(h msg.HistoryReply) []uint64 {
	var out []uint64
	for _, e := range h.Entries {
		out = append(out, e.Version)
	}
	return out
}

func deployedTo(e msg.HistoryEntry) []string {
	var out []string
	for _, d := range e.Deployed {
		out = append(out, d.Instance)
	}
	return out
}

// deploysOf waits until instance of edge has carried out more than n
// orders and returns its status.
func deploysOf(t *testing.T, bus *testkit.Bus, instance string, n uint64) msg.DeployStatus {
	t.Helper()
	kv, _ := bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	var st msg.DeployStatus
	testkit.Eventually(t, 15*time.Second, func() error {
		st = msg.DeployStatus{}
		if _, err := msg.LoadStatus(context.Background(), kv, msg.DeployStatusKey("edge", instance), &st); err != nil {
			return err
		}
		if st.Deploys <= n {
			return fmt.Errorf("%s carried out %d orders, waiting for more than %d", instance, st.Deploys, n)
		}
		return nil
	})
	return st
}

const twoInstances = `
targets:
  edge:
    base: /etc/haproxy
    history: {keep: %d}
    deploy:
      driver: files
      dest: out
      instances: [{name: a, dest: a}, {name: b, dest: b}]
    haproxy_config: {template: unused}
`

// TestRollbackPinsEveryInstance: three bundles (the second refused) are
// listed with their verdicts and where they ran; the diff of 1 and 3 shows
// the change; a rollback to a refused or unknown bundle is refused with
// the reason; a rollback to v1 deploys it to both instances and pins the
// target, so an accepted v4, a re-deploy trigger and a deployer restart
// all keep v1; unpin deploys v4.
func TestRollbackPinsEveryInstance(t *testing.T) {
	dir := t.TempDir()
	bus := testkit.NATS(t)
	yaml := fmt.Sprintf(twoInstances, 10)
	f, stop := run(t, bus, dir, "/etc/haproxy", yaml)
	cfgOf := func(v int) string {
		return fmt.Sprintf("global\n  maxconn 100\n# version %d\ndefaults\n  timeout client 1s\n", v)
	}
	b1 := f.store(cfgOf(1))
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b1.Hash, OK: true, At: time.Now()})
	status(t, bus, "a", 1)
	status(t, bus, "b", 1)
	b2 := f.store(cfgOf(2))
	f.verdict(msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: false, Reason: "haproxy: unknown keyword", At: time.Now()})
	b3 := f.store(cfgOf(3))
	f.verdict(msg.Validated{Target: "edge", Version: 3, BundleHash: b3.Hash, OK: true, At: time.Now()})
	status(t, bus, "a", 3)
	status(t, bus, "b", 3)

	h := history(t, bus, func(h msg.HistoryReply) error {
		if !slices.Equal(versionsOf(h), []uint64{3, 2, 1}) || len(h.Entries[0].Deployed) < 2 {
			return fmt.Errorf("history %v, v3 deployed to %v", versionsOf(h), deployedTo(h.Entries[0]))
		}
		return nil
	})
	if e := h.Entries[1]; e.OK || e.Reason != "haproxy: unknown keyword" || len(e.Deployed) != 0 || e.BundleHash != b2.Hash {
		t.Errorf("v2 entry %+v, want refused with its reason and never deployed", e)
	}
	for _, e := range []msg.HistoryEntry{h.Entries[0], h.Entries[2]} {
		if !e.OK || !slices.Equal(deployedTo(e), []string{"a", "b"}) || e.RenderedAt.IsZero() {
			t.Errorf("v%d entry %+v, want accepted, rendered and deployed to a and b", e.Version, e)
		}
	}
	if h.LastGood != 3 || h.Running["a"] != 3 || h.Running["b"] != 3 || h.Pin != nil || h.Keep != 10 {
		t.Errorf("history reply %+v", h)
	}

	for _, names := range [][2]string{{"1", "3"}, {"v1", b3.Hash[:10]}} {
		var d msg.DiffReply
		if err := ask(t, bus, msg.APIDiffSubject("edge"), msg.DiffRequest{From: names[0], To: names[1]}, &d); err != nil {
			t.Fatal(err)
		}
		if d.FromVersion != 1 || d.ToVersion != 3 || len(d.Files) != 1 || d.Files[0].Path != "haproxy.cfg" || d.Files[0].Change != msg.FileChanged ||
			!strings.Contains(d.Files[0].Unified, "-# version 1\n+# version 3\n") || !strings.Contains(d.Files[0].Unified, "--- v1/haproxy.cfg\n+++ v3/haproxy.cfg\n") {
			t.Errorf("diff %v: %+v", names, d)
		}
	}

	refusals := []struct {
		name, target, body, want string
	}{
		{"a refused bundle", "edge", `{"to":"2"}`, "edge v2 was refused by validation (haproxy: unknown keyword); only an accepted bundle can be rolled back to"},
		{"an unknown version", "edge", `{"to":"9"}`, "edge has no version 9 in its history (kept: v3, v2, v1)"},
		{"an unknown hash", "edge", `{"to":"deadbeef00"}`, `edge has no bundle "deadbeef00" in its history`},
		{"an unknown target", "nope", `{"to":"1"}`, `unknown target "nope" (known: edge)`},
		{"no bundle named", "edge", `{}`, "to is missing"},
		{"not JSON", "edge", `to 1`, "malformed"},
	}
	for _, tc := range refusals {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := bus.NC.Request(msg.APIRollbackSubject(tc.target), []byte(tc.body), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			var pin msg.RollbackReply
			err = msg.DecodeReply(rep.Data, &pin)
			if !msg.IsAPIError(err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("answer %s (%v), want an error saying %q", rep.Data, err, tc.want)
			}
		})
	}

	var rb msg.RollbackReply
	if err := ask(t, bus, msg.APIRollbackSubject("edge"), msg.RollbackRequest{To: "1", By: "alice"}, &rb); err != nil {
		t.Fatal(err)
	}
	if rb.Pin.Version != 1 || rb.Pin.BundleHash != b1.Hash || rb.Pin.By != "alice" || !slices.Equal(rb.Instances, []string{"a", "b"}) {
		t.Fatalf("rollback reply %+v", rb)
	}
	for _, in := range []string{"a", "b"} {
		status(t, bus, in, 1)
		if got := read(t, filepath.Join(dir, in, "haproxy.cfg")); got != cfgOf(1) {
			t.Fatalf("%s serves %q after the rollback", in, got)
		}
	}

	// v4 is accepted, recorded, and not deployed, even when asked to.
	b4 := f.store(cfgOf(4))
	f.verdict(msg.Validated{Target: "edge", Version: 4, BundleHash: b4.Hash, OK: true, At: time.Now()})
	h = history(t, bus, func(h msg.HistoryReply) error {
		if len(h.Entries) == 0 || h.Entries[0].Version != 4 {
			return fmt.Errorf("history %v, waiting for v4", versionsOf(h))
		}
		return nil
	})
	if h.Pin == nil || h.Pin.Version != 1 || h.LastGood != 4 || len(h.Entries[0].Deployed) != 0 {
		t.Errorf("history while pinned: %+v", h)
	}
	before := deploysOf(t, bus, "a", 0).Deploys
	if _, err := bus.NC.Request(msg.TriggerDeploySubject("edge"), nil, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if st := deploysOf(t, bus, "a", before); st.Version != 1 || st.BundleHash != b1.Hash {
		t.Fatalf("a re-deployed %d (%s) while pinned on 1", st.Version, st.BundleHash)
	}

	// A restarted deployer keeps the pin.
	stop()
	before = deploysOf(t, bus, "a", 0).Deploys
	f, _ = run(t, bus, dir, "/etc/haproxy", yaml)
	for _, in := range []string{"a", "b"} {
		if st := deploysOf(t, bus, in, before); st.Version != 1 {
			t.Fatalf("%s at v%d after the restart, pinned on 1", in, st.Version)
		}
		if got := read(t, filepath.Join(dir, in, "haproxy.cfg")); got != cfgOf(1) {
			t.Fatalf("%s serves %q after the restart", in, got)
		}
	}

	var up msg.UnpinReply
	if err := ask(t, bus, msg.APIUnpinSubject("edge"), msg.UnpinRequest{By: "bob"}, &up); err != nil {
		t.Fatal(err)
	}
	if up.Lifted == nil || up.Lifted.Version != 1 || up.Version != 4 || up.BundleHash != b4.Hash {
		t.Fatalf("unpin reply %+v", up)
	}
	for _, in := range []string{"a", "b"} {
		status(t, bus, in, 4)
		if got := read(t, filepath.Join(dir, in, "haproxy.cfg")); got != cfgOf(4) {
			t.Fatalf("%s serves %q after unpin", in, got)
		}
	}
	history(t, bus, func(h msg.HistoryReply) error {
		if h.Pin != nil || !slices.Equal(deployedTo(h.Entries[0]), []string{"a", "b"}) {
			return fmt.Errorf("after unpin: pin %v, v%d deployed to %v", h.Pin, h.Entries[0].Version, deployedTo(h.Entries[0]))
		}
		return nil
	})
	var again msg.UnpinReply
	if err := ask(t, bus, msg.APIUnpinSubject("edge"), msg.UnpinRequest{}, &again); err != nil || again.Lifted != nil || again.Version != 4 {
		t.Fatalf("unpin of a target not pinned: %+v, %v", again, err)
	}
}

// TestPruneKeepsPinnedAndRunning: with keep 2, a target pinned on v1 gets
// v2..v5 accepted; pruning drops v2 and v3 with their bundles and keeps
// v1 (pinned, running on every instance) and the newest two.
func TestPruneKeepsPinnedAndRunning(t *testing.T) {
	dir := t.TempDir()
	bus := testkit.NATS(t)
	f, _ := run(t, bus, dir, "/etc/haproxy", fmt.Sprintf(twoInstances, 2))
	hashes := map[uint64]string{}
	accept := func(v uint64) {
		b := f.store(fmt.Sprintf("global\n# version %d\n", v))
		hashes[v] = b.Hash
		f.verdict(msg.Validated{Target: "edge", Version: v, BundleHash: b.Hash, OK: true, At: time.Now()})
	}
	accept(1)
	status(t, bus, "a", 1)
	status(t, bus, "b", 1)
	var rb msg.RollbackReply
	if err := ask(t, bus, msg.APIRollbackSubject("edge"), msg.RollbackRequest{To: "1"}, &rb); err != nil {
		t.Fatal(err)
	}
	for v := uint64(2); v <= 5; v++ {
		accept(v)
	}
	history(t, bus, func(h msg.HistoryReply) error {
		if !slices.Equal(versionsOf(h), []uint64{5, 4, 1}) {
			return fmt.Errorf("history %v, want 5, 4, 1", versionsOf(h))
		}
		return nil
	})
	store := msg.NewBundleStore(bus.JS)
	for v, hash := range hashes {
		_, err := store.StoredAt(context.Background(), hash)
		switch gone := errors.Is(err, msg.ErrNotStored); {
		case v == 2 || v == 3:
			if !gone {
				t.Errorf("bundle of v%d still stored (%v)", v, err)
			}
		case err != nil:
			t.Errorf("bundle of v%d: %v", v, err)
		}
	}
	for _, in := range []string{"a", "b"} {
		if st := status(t, bus, in, 1); st.BundleHash != hashes[1] {
			t.Errorf("%s runs %s", in, st.BundleHash)
		}
	}
}

// TestPinHonouredByTwoReplicasOnACluster: two deployer replicas on
// different nodes of a real 3-node cluster; a rollback asked through one
// node pins both instances on v1, and neither replica deploys v3 on its
// verdict or on re-deploy triggers answered by either of them, nor after
// one of them restarts; unpin, asked through the other node, deploys v3.
func TestPinHonouredByTwoReplicasOnACluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node NATS cluster")
	}
	c := testkit.NATSCluster(t)
	a, b := c.Bus(t, 0), c.Bus(t, 1)
	c.Provision(t, a)
	dir := t.TempDir()
	cfg, err := config.Parse([]byte(fmt.Sprintf(twoInstances, 10)), dir)
	if err != nil {
		t.Fatal(err)
	}
	replica := func(bus *testkit.Bus, name string) func() {
		env := testkit.NewEnv(t, bus, name)
		return testkit.Run(t, func(ctx context.Context) error { return deployer.Run(ctx, env.Env, cfg) })
	}
	stopA := replica(a, "deployer-a")
	replica(b, "deployer-b")
	f := &fixture{t: t, bus: a, dest: "/etc/haproxy"}
	accept := func(v uint64) msg.Bundle {
		bd := f.store(fmt.Sprintf("global\n# version %d\n", v))
		f.verdict(msg.Validated{Target: "edge", Version: v, BundleHash: bd.Hash, OK: true, At: time.Now()})
		return bd
	}
	accept(1)
	accept(2)
	for _, in := range []string{"a", "b"} {
		status(t, a, in, 2)
	}
	var rb msg.RollbackReply
	testkit.Eventually(t, time.Minute, func() error {
		return ask(t, a, msg.APIRollbackSubject("edge"), msg.RollbackRequest{To: "1"}, &rb)
	})
	for _, in := range []string{"a", "b"} {
		status(t, b, in, 1)
	}
	accept(3)
	history(t, b, func(h msg.HistoryReply) error {
		if len(h.Entries) == 0 || h.Entries[0].Version != 3 {
			return fmt.Errorf("history %v, waiting for v3", versionsOf(h))
		}
		return nil
	})
	// Triggers are answered by either replica (one queue group).
	for i, bus := range []*testkit.Bus{a, b, a, b} {
		before := deploysOf(t, a, "a", 0).Deploys
		if _, err := bus.NC.Request(msg.TriggerDeploySubject("edge"), nil, 10*time.Second); err != nil {
			t.Fatal(err)
		}
		if st := deploysOf(t, a, "a", before); st.Version != 1 {
			t.Fatalf("trigger %d: a at v%d, pinned on 1", i, st.Version)
		}
		if i == 1 {
			stopA()
			stopA = replica(a, "deployer-a")
		}
	}
	var up msg.UnpinReply
	if err := ask(t, b, msg.APIUnpinSubject("edge"), msg.UnpinRequest{}, &up); err != nil {
		t.Fatal(err)
	}
	for _, in := range []string{"a", "b"} {
		status(t, a, in, 3)
	}
}

// TestPruneOnceForABurst: the verdicts of a burst ask for one prune, run
// after it (not a prune per verdict beside its deploys), and the history
// is then down to its keep.
func TestPruneOnceForABurst(t *testing.T) {
	dir := t.TempDir()
	bus := testkit.NATS(t)
	f, _ := run(t, bus, dir, "/etc/haproxy", fmt.Sprintf(twoInstances, 2))
	const n = 20
	for v := uint64(1); v <= n; v++ {
		b := f.store(fmt.Sprintf("global\n# version %d\n", v))
		f.verdict(msg.Validated{Target: "edge", Version: v, BundleHash: b.Hash, OK: true, At: time.Now()})
	}
	status(t, bus, "a", n)
	history(t, bus, func(h msg.HistoryReply) error {
		if !slices.Equal(versionsOf(h), []uint64{n, n - 1}) {
			return fmt.Errorf("history %v, want %d, %d", versionsOf(h), n, n-1)
		}
		return nil
	})
	// The verdicts take well under a second (the prune's delay): one
	// prune, or two or three when the burst straddles them (a prune a
	// verdict made 6 here).
	if p := testkit.LabeledValue(t, f.env.Registry, "weft_deployer_history_prunes_total", nil); p < 1 || p > 3 {
		t.Fatalf("%v prunes for a burst of %d verdicts, want 1 to 3", p, n)
	}
}
