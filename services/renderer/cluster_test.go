package renderer_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/svc/bus"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer"
)

// TestVersionsGrowWhenTheStatusIsBehind: the render status lags the render
// stream (its write failed after the publish, or was read stale); the next
// render still gets a new version, and its message is stored rather than
// dropped as a duplicate of the version handed out before.
func TestVersionsGrowWhenTheStatusIsBehind(t *testing.T) {
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	f.put("web", 80)
	f.synced()
	f.render(1)
	ctx := context.Background()
	status, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	data, _ := msg.Encode(msg.RenderStatus{Target: "edge"})
	if _, err := status.Put(ctx, msg.RenderStatusKey("edge"), data); err != nil {
		t.Fatal(err)
	}
	f.put("web", 81)
	_, b := f.render(2)
	if got := file(b, "maps/svc.map"); got != "\nweb 81\n" {
		t.Fatalf("svc.map = %q", got)
	}
}

// TestDeafReplicaGivesUpItsLease: a replica whose change feed is lost or
// silent cannot follow the state; it gives up its render leases, and a
// replica that hears the changes renders them.
func TestDeafReplicaGivesUpItsLease(t *testing.T) {
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.shortLeases()
	f.put("web", 80)
	f.synced()
	envs := []*testkit.Env{testkit.NewEnv(t, f.bus, "r1"), testkit.NewEnv(t, f.bus, "r2")}
	for _, env := range envs {
		testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, env.Env, cfg) })
	}
	f.render(1)
	holder := func() (int, error) { return leaseHolder(t, envs) }
	var deaf int
	testkit.Eventually(t, 10*time.Second, func() (err error) { deaf, err = holder(); return err })
	envs[deaf].Health.Set(bus.ConsumerCheck(renderer.Service, renderer.ChangesConsumer(envs[deaf].Replica)), errors.New("no heartbeat"))
	testkit.Eventually(t, 10*time.Second, func() error {
		h, err := holder()
		if err != nil {
			return err
		}
		if h == deaf {
			return errors.New("the deaf replica keeps the lease")
		}
		return nil
	})
	before := testkit.CounterValue(t, envs[1-deaf].Registry, "weft_renderer_renders_total")
	f.put("web", 81)
	_, b := f.render(2)
	if got := file(b, "maps/svc.map"); got != "\nweb 81\n" {
		t.Fatalf("svc.map = %q", got)
	}
	if testkit.CounterValue(t, envs[1-deaf].Registry, "weft_renderer_renders_total") == before {
		t.Fatal("the replica that hears the changes did not render")
	}
}
