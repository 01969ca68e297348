package watcher_test

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
	"github.com/weftio/weft/services/watcher"
)

func TestZZDebug(t *testing.T) {
	dir := t.TempDir()
	folder := filepath.Join(dir, "manifests")
	os.Mkdir(folder, 0o755)
	writeApps(t, folder, 10000, 100, func(int) string { return "10.0.0.1" })
	cfg, _ := config.Parse([]byte(manifestsCfg), dir)
	bus := testkit.NATS(t)
	env := testkit.NewEnv(t, bus, "bench")
	testkit.Run(t, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
	waitChanges(t, bus, msg.ChangeAll, 30000)
	filter := msg.ChangeSubject("m", "endpoints")
	for i := range 4 {
		base := changeCount(t, bus, filter)
		start := time.Now()
		writeApps(t, folder, 1000, 100, func(j int) string { return fmt.Sprintf("10.1.%d.%d", i%250, j%250) })
		w := time.Since(start)
		st, _ := bus.JS.Stream(context.Background(), msg.KVStream(msg.BucketResources))
		info, _ := st.Info(context.Background())
		target := info.State.LastSeq + 1000
		testkit.Eventually(t, time.Minute, func() error {
			info, _ := st.Info(context.Background())
			if info.State.LastSeq < target {
				return fmt.Errorf("no")
			}
			return nil
		})
		t.Logf("stored after %v", time.Since(start))
		waitChanges(t, bus, filter, base+1000)
		t.Logf("write %v total %v", w, time.Since(start))
	}
	t.Log(env.Logs.String())
}
