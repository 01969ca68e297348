package watcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/watcher"
)

// syncCount reads the object count of a sync status.
func syncCount(bus *testkit.Bus, source, typ string) (int, error) {
	ctx := context.Background()
	kv, err := bus.JS.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return 0, err
	}
	var st msg.SyncStatus
	if _, err := msg.LoadStatus(ctx, kv, msg.SyncStatusKey(source, typ), &st); err != nil {
		return 0, err
	}
	if !st.Synced {
		return 0, fmt.Errorf("%s %s not synced", source, typ)
	}
	return st.Count, nil
}

// wantCount waits until the sync status and every replica's objects gauge
// hold want.
func wantCount(t *testing.T, bus *testkit.Bus, envs []*testkit.Env, source, typ string, want int) {
	t.Helper()
	testkit.Eventually(t, 20*time.Second, func() error {
		n, err := syncCount(bus, source, typ)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("sync status of %s %s counts %d objects, want %d", source, typ, n, want)
		}
		for _, env := range envs {
			if g := testkit.CounterValue(t, env.Registry, "weft_watcher_objects"); g != float64(want) {
				return fmt.Errorf("replica %s: weft_watcher_objects = %v, want %d", env.Replica, g, want)
			}
		}
		return nil
	})
}

// TestSyncStatusCountFollowsListings keeps the count of a manifests
// source's type current after its initial sync, with two replicas on the
// folder: objects added and removed later are counted, not only the
// initial listing's.
func TestSyncStatusCountFollowsListings(t *testing.T) {
	f := newFixture(t)
	for i := range 3 {
		f.write(fmt.Sprintf("s%d.yaml", i), svcYAML(fmt.Sprintf("s%d", i), "80"))
	}
	var envs []*testkit.Env
	for _, r := range []string{"w1", "w2"} {
		env, _ := f.start(r)
		envs = append(envs, env)
	}
	wantCount(t, f.bus, envs, "m", "services", 3)
	for i := 3; i < 120; i++ {
		f.write(fmt.Sprintf("s%d.yaml", i), svcYAML(fmt.Sprintf("s%d", i), "80"))
	}
	wantCount(t, f.bus, envs, "m", "services", 120)
	for i := range 45 {
		if err := os.Remove(filepath.Join(f.dir, "manifests", fmt.Sprintf("s%d.yaml", i))); err != nil {
			t.Fatal(err)
		}
	}
	wantCount(t, f.bus, envs, "m", "services", 75)
}

// TestSyncStatusCountFollowsEvents does the same for a source that reports
// changes one by one after its first listing (Upsert and Delete): a natskv
// value source.
func TestSyncStatusCountFollowsEvents(t *testing.T) {
	bus := testkit.NATS(t)
	ctx := context.Background()
	app, err := bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "app"})
	if err != nil {
		t.Fatal(err)
	}
	put := func(from, to int) {
		for i := from; i < to; i++ {
			if _, err := app.PutString(ctx, fmt.Sprintf("k%d", i), "v"); err != nil {
				t.Fatal(err)
			}
		}
	}
	put(0, 3)
	cfg, err := config.Parse([]byte("sources: [{name: v, type: natskv, bucket: app}]\ntargets: {}\n"), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var envs []*testkit.Env
	for _, r := range []string{"w1", "w2"} {
		env := testkit.NewEnv(t, bus, r)
		testkit.Run(t, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
		envs = append(envs, env)
	}
	wantCount(t, bus, envs, "v", config.ValuesType, 3)
	put(3, 250)
	wantCount(t, bus, envs, "v", config.ValuesType, 250)
	for i := range 40 {
		if err := app.Delete(ctx, fmt.Sprintf("k%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	wantCount(t, bus, envs, "v", config.ValuesType, 210)
}
