package deployer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// TestPrune: entries beyond a target's keep or older than its max_age go
// with their bundles, unless an instance runs the bundle, a pin names it,
// it is the last accepted one, the fast path's base, pending or being
// checked whole, or a kept entry (of any target) shares it;
// a bundle that must stay and is half the store's retention old is stored
// again. A second pass changes nothing.
func TestPrune(t *testing.T) {
	bus := testkit.NATS(t)
	ctx := context.Background()
	cfg, err := config.Parse([]byte(`
history: {keep: 2, max_age: 48h}
targets:
  edge:
    deploy: {driver: files, dest: /tmp/edge}
    haproxy_config: {template: unused}
  shop:
    history: {keep: 10}
    deploy: {driver: files, dest: /tmp/shop}
    haproxy_config: {template: unused}
`), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &deployer{env: testkit.NewEnv(t, bus, "d1").Env, cfg: cfg}
	if d.status, err = bus.JS.KeyValue(ctx, msg.BucketStatus); err != nil {
		t.Fatal(err)
	}
	if d.history, err = bus.JS.KeyValue(ctx, msg.BucketHistory); err != nil {
		t.Fatal(err)
	}
	d.bundles = msg.NewBundleStore(bus.JS)
	now := time.Now()
	// The bundles' names stand for their hashes: what prune reads.
	entries := []struct {
		target  string
		version uint64
		hash    string
		age     time.Duration
	}{
		{"edge", 1, "running", 50 * time.Hour},    // older than max_age, runs on an instance
		{"edge", 2, "pinned", 40 * time.Hour},     // beyond keep, pinned
		{"edge", 3, "dropped", 30 * time.Hour},    // beyond keep: goes
		{"edge", 4, "shared", 20 * time.Hour},     // beyond keep, but shop keeps the same bundle
		{"edge", 5, "base", 19 * time.Hour},       // beyond keep, the fast path's base
		{"edge", 6, "checking", 18 * time.Hour},   // beyond keep, being checked whole
		{"edge", 7, "pending", 17 * time.Hour},    // beyond keep, pending its whole check
		{"edge", 8, "newer", time.Hour},           // kept
		{"edge", 9, "accepted", time.Minute},      // kept, last accepted
		{"shop", 1, "old", 49 * time.Hour},        // older than the global max_age shop inherits: goes
		{"shop", 2, "shared", 10 * time.Hour},     // kept
		{"shop", 3, "shop-last", 5 * time.Minute}, // kept
	}
	for _, e := range entries {
		b, err := msg.NewBundle(e.target, "", "haproxy.cfg", []msg.BundleFile{{Path: "haproxy.cfg", Kind: msg.FileConfig, Content: []byte("# bundle " + e.hash + "\n")}})
		if err != nil {
			t.Fatal(err)
		}
		if err := d.bundles.PutBundle(ctx, e.hash, b); err != nil {
			t.Fatal(err)
		}
		he := msg.HistoryEntry{Target: e.target, Version: e.version, BundleHash: e.hash, OK: true, VerdictAt: now.Add(-e.age)}
		if _, err := msg.StoreStatus(ctx, d.history, msg.HistoryKey(e.target, e.version), he, 0); err != nil {
			t.Fatal(err)
		}
	}
	statuses := map[string]msg.Message{
		msg.ValidationStatusKey("edge"): msg.ValidationStatus{Target: "edge", LastGood: "accepted", LastGoodVersion: 9,
			LastFull: "base", LastFullVersion: 5, Checking: "checking", CheckingVersion: 6, Pending: "pending", PendingVersion: 7},
		msg.PinKey("edge"):                 msg.Pin{Target: "edge", Version: 2, BundleHash: "pinned"},
		msg.DeployStatusKey("edge", "a"):   msg.DeployStatus{Target: "edge", Instance: "a", Version: 1, BundleHash: "running"},
		msg.ValidationStatusKey("shop"):    msg.ValidationStatus{Target: "shop", LastGood: "shop-last", LastGoodVersion: 3},
		msg.DeployStatusKey("shop", "loc"): msg.DeployStatus{Target: "shop", Instance: "loc", Version: 3, BundleHash: "shop-last"},
	}
	for key, s := range statuses {
		if _, err := msg.StoreStatus(ctx, d.status, key, s, 0); err != nil {
			t.Fatal(err)
		}
	}

	res, err := d.prune(ctx, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.entries)
	slices.Sort(res.bundles)
	if want := []string{"edge.3", "edge.4", "shop.1"}; !slices.Equal(res.entries, want) {
		t.Errorf("entries removed %v, want %v", res.entries, want)
	}
	if want := []string{"dropped", "old"}; !slices.Equal(res.bundles, want) {
		t.Errorf("bundles removed %v, want %v", res.bundles, want)
	}
	for _, e := range entries {
		_, err := d.bundles.StoredAt(ctx, e.hash)
		gone := errors.Is(err, msg.ErrNotStored)
		if want := slices.Contains(res.bundles, e.hash); gone != want {
			t.Errorf("bundle %s gone: %v (%v), want %v", e.hash, gone, err, want)
		}
	}
	if len(res.kept) != 0 {
		t.Errorf("stored again %v, none is old enough", res.kept)
	}
	// What is left of a pruned entry is a marker that expires.
	stream, err := bus.JS.Stream(ctx, msg.KVStream(msg.BucketHistory))
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetLastMsgForSubject(ctx, "$KV."+msg.BucketHistory+"."+msg.HistoryKey("edge", 3))
	if err != nil || m.Header.Get("KV-Operation") != "PURGE" || m.Header.Get("Nats-TTL") == "" {
		t.Errorf("pruned entry left %v (%v), want a purge marker with a TTL", m, err)
	}

	// A pass later re-reads: nothing more goes; the protected bundles
	// are stored again once they are half the store's retention old.
	res, err = d.prune(ctx, now.Add(msg.BundleRetention/2+time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(res.kept)
	if want := []string{"accepted", "base", "checking", "pending", "pinned", "running", "shop-last"}; !slices.Equal(res.kept, want) {
		t.Errorf("stored again %v, want %v", res.kept, want)
	}
	var left []string
	all, err := d.readHistory(ctx, ">")
	if err != nil {
		t.Fatal(err)
	}
	for _, es := range all {
		for _, e := range es {
			left = append(left, fmt.Sprintf("%s.%d", e.Target, e.Version))
		}
	}
	slices.Sort(left)
	// Days later, every entry is older than max_age: only those of
	// protected bundles stay.
	if want := []string{"edge.1", "edge.2", "edge.5", "edge.6", "edge.7", "edge.9", "shop.3"}; !slices.Equal(left, want) {
		t.Errorf("history left %v, want %v", left, want)
	}
	for _, h := range []string{"accepted", "base", "checking", "pending", "pinned", "running", "shop-last"} {
		if _, err := d.bundles.LoadBundle(ctx, h); err != nil {
			t.Errorf("protected bundle %s: %v", h, err)
		}
	}
}

// A deploy carried out and announced is recorded in the history even when
// the deployer is stopping (its context cancelled): no redelivery would
// record it later. Without a reachable history, the miss is logged.
func TestDoneDeployRecordedWhileStopping(t *testing.T) {
	bus := testkit.NATS(t)
	env := testkit.NewEnv(t, bus, "d1")
	d := &deployer{env: env.Env}
	var err error
	if d.history, err = bus.JS.KeyValue(context.Background(), msg.BucketHistory); err != nil {
		t.Fatal(err)
	}
	stopping, stop := context.WithCancel(context.Background())
	stop()
	out := msg.Deployed{Target: "edge", Instance: "a", Version: 7, BundleHash: "abc", At: time.Now().UTC()}
	d.recordDone(stopping, out)
	var e msg.HistoryEntry
	if _, err := msg.LoadStatus(context.Background(), d.history, msg.HistoryKey("edge", 7), &e); err != nil {
		t.Fatalf("the done deploy's history entry: %v", err)
	}
	if e.BundleHash != "abc" || len(e.Deployed) != 1 || e.Deployed[0].Instance != "a" {
		t.Fatalf("history entry %+v, want bundle abc deployed to a", e)
	}
	if logs := env.Logs.String(); strings.Contains(logs, "not recorded in the history") {
		t.Fatalf("logged a miss:\n%s", logs)
	}
	// The history's bucket gone: the miss is an error in the log.
	if err := bus.JS.DeleteKeyValue(context.Background(), msg.BucketHistory); err != nil {
		t.Fatal(err)
	}
	out.Version = 8
	d.recordDone(stopping, out)
	if logs := env.Logs.String(); !strings.Contains(logs, "deployed, but not recorded in the history") {
		t.Fatalf("no error logged for a deploy the history could not take:\n%s", logs)
	}
}
