package renderer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer"
)

// TestOneReplicaRendersATargetAndAnotherTakesOver runs two renderer
// replicas: only the lease holder renders; when it stops, the other takes
// the lease and renders the next change.
func TestOneReplicaRendersATargetAndAnotherTakesOver(t *testing.T) {
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.shortLeases()
	f.put("web", 80)
	f.synced()
	envs := []*testkit.Env{testkit.NewEnv(t, f.bus, "r1"), testkit.NewEnv(t, f.bus, "r2")}
	stops := make([]func(), 2)
	for i, env := range envs {
		stops[i] = testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, env.Env, cfg) })
	}
	f.render(1)
	var holder int
	testkit.Eventually(t, 10*time.Second, func() (err error) { holder, err = leaseHolder(t, envs); return err })
	other := 1 - holder
	f.put("web", 81)
	f.render(2)
	if n := testkit.CounterValue(t, envs[other].Registry, "weft_renderer_renders_total"); n != 0 {
		t.Fatalf("the replica without the lease rendered %v times", n)
	}
	stops[holder]()
	f.put("web", 82)
	_, b := f.render(3)
	if got := file(b, "maps/svc.map"); got != "\napi 8000\nweb 82\n" && got != "\nweb 82\n" {
		t.Fatalf("svc.map = %q", got)
	}
	if testkit.CounterValue(t, envs[other].Registry, "weft_renderer_renders_total") == 0 {
		t.Fatal("the other replica did not take over")
	}
}

// shortLeases replaces the leases bucket with one whose keys live 1.5s, so
// that a lease passes between replicas within a test.
func (f *fixture) shortLeases() {
	f.t.Helper()
	ctx := context.Background()
	if err := f.bus.JS.DeleteKeyValue(ctx, msg.BucketLeases); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: msg.BucketLeases, TTL: 1500 * time.Millisecond}); err != nil {
		f.t.Fatal(err)
	}
}

// leaseHolder is the index of the one replica holding the render lease (by
// its weft_renderer_lease_held gauge); none or several is an error.
func leaseHolder(t *testing.T, envs []*testkit.Env) (int, error) {
	t.Helper()
	h, n := -1, 0
	for i, env := range envs {
		if testkit.CounterValue(t, env.Registry, "weft_renderer_lease_held") == 1 {
			h, n = i, n+1
		}
	}
	if n != 1 {
		return -1, fmt.Errorf("%d replicas hold the lease", n)
	}
	return h, nil
}
