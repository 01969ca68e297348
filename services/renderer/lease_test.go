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
	ctx := context.Background()
	// Short leases for the test.
	if err := f.bus.JS.DeleteKeyValue(ctx, msg.BucketLeases); err != nil {
		t.Fatal(err)
	}
	if _, err := f.bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: msg.BucketLeases, TTL: 1500 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	f.put("web", 80)
	f.synced()
	envs := []*testkit.Env{testkit.NewEnv(t, f.bus, "r1"), testkit.NewEnv(t, f.bus, "r2")}
	stops := make([]func(), 2)
	for i, env := range envs {
		stops[i] = testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, env.Env, cfg) })
	}
	f.render(1)
	holder := -1
	testkit.Eventually(t, 10*time.Second, func() error {
		held := 0
		for i, env := range envs {
			if testkit.CounterValue(t, env.Registry, "weft_renderer_lease_held") == 1 {
				holder, held = i, held+1
			}
		}
		if held != 1 {
			return fmt.Errorf("%d replicas hold the lease", held)
		}
		return nil
	})
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
