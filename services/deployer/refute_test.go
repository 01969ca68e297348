package deployer_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// TestRefutationRollsBack: a provisionally accepted bundle, deployed, is
// then refused by the validator's whole check: with the validation status
// back on the last fully accepted bundle, the refutation verdict orders
// that bundle to every instance, whatever they hold. On a 3-node cluster
// the deployer's NATS node is killed between the deploy and the
// refutation: its consumers carry on from another node.
func TestRefutationRollsBack(t *testing.T) {
	for _, tc := range []struct {
		name string
		// buses gives the deployer's bus, the test's bus, and what to do
		// once the provisional bundle is deployed.
		buses func(t *testing.T) (deployer, test *testkit.Bus, fault func())
	}{
		{"one server", func(t *testing.T) (*testkit.Bus, *testkit.Bus, func()) {
			bus := testkit.NATS(t)
			return bus, bus, func() {}
		}},
		{"cluster, the deployer's node killed", func(t *testing.T) (*testkit.Bus, *testkit.Bus, func()) {
			nc := testkit.NATSCluster(t)
			test := nc.Bus(t, 1)
			nc.Provision(t, test)
			return nc.Bus(t, 0), test, func() {
				if err := nc.Kill(0); err != nil {
					t.Fatal(err)
				}
				// The test's own writes wait for the streams' new leaders.
				nc.WaitStreams(t, test, msg.StreamValidated, msg.StreamDeploys, "KV_"+msg.BucketStatus)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			deployerBus, bus, fault := tc.buses(t)
			refutationRollsBack(t, deployerBus, bus, fault)
		})
	}
}

func refutationRollsBack(t *testing.T, deployerBus, bus *testkit.Bus, fault func()) {
	dir := t.TempDir()
	f, _ := run(t, deployerBus, dir, "/etc/haproxy", fmt.Sprintf(twoInstances, 10))
	f.bus = bus
	cfgOf := func(v int) string {
		return fmt.Sprintf("global\n  maxconn 100\n# version %d\ndefaults\n  timeout client 1s\n", v)
	}
	b1 := f.store(cfgOf(1))
	f.verdict(msg.Validated{Target: "edge", Version: 1, BundleHash: b1.Hash, OK: true, At: time.Now()})
	b2 := f.store(cfgOf(2))
	f.verdict(msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, OK: true, Provisional: true, At: time.Now()})
	for _, in := range []string{"a", "b"} {
		status(t, bus, in, 2)
	}
	fault()

	// What the validator does on a refutation: the status first, then
	// the verdict; a read or write that fails is made again, as the
	// validator's redelivery would (on a cluster a node's loss can leave
	// the JetStream API unavailable for a moment).
	ctx := context.Background()
	testkit.Eventually(t, 30*time.Second, func() error {
		kv, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
		if err != nil {
			return err
		}
		var st msg.ValidationStatus
		rev, err := msg.LoadStatus(ctx, kv, msg.ValidationStatusKey("edge"), &st)
		if err != nil {
			return err
		}
		st.OK, st.FullOnly, st.LastGood, st.LastGoodVersion, st.LastFull, st.LastFullVersion = false, true, b1.Hash, 1, b1.Hash, 1
		_, err = msg.StoreStatus(ctx, kv, msg.ValidationStatusKey("edge"), st, rev)
		return err
	})
	f.publish(msg.ValidatedSubject("edge"), msg.Validated{Target: "edge", Version: 2, BundleHash: b2.Hash, Refutes: true,
		Reason: "refuted by the whole check after a provisional acceptance: haproxy refused", At: time.Now()})

	for _, in := range []string{"a", "b"} {
		st := status(t, bus, in, 1)
		if st.BundleHash != b1.Hash {
			t.Fatalf("%s after the refutation: %+v", in, st)
		}
		if got := read(t, filepath.Join(dir, in, "haproxy.cfg")); got != cfgOf(1) {
			t.Fatalf("%s serves %q after the refutation", in, got)
		}
	}
}
