package renderer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer"
)

const valuesCfg = `
sources: [{name: v, type: env}]
targets:
  reader:
    base: /b
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config: {template: "timeout {{ values.timeout }}\n"}
  other:
    base: /b
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config: {template: "static {{ values.get('unrelated', 'x') }}\n"}
`

func putValue(t *testing.T, b *testkit.Bus, name, value string) {
	t.Helper()
	ctx := context.Background()
	kv, _ := b.JS.KeyValue(ctx, msg.BucketResources)
	key := msg.ResourceKey("v", config.ValuesType, "", name)
	data, _ := msg.Encode(msg.Resource{Source: "v", Type: config.ValuesType, Name: name, Hash: value, Object: map[string]any{"name": name, "value": value}})
	rev, err := kv.Put(ctx, key, data)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := msg.NewMsg(msg.ChangeSubject("v", config.ValuesType), "", msg.Change{Source: "v", Type: config.ValuesType, Key: key, Op: msg.OpPut, Name: name, Revision: rev})
	if _, err := b.JS.PublishMsg(ctx, out); err != nil {
		t.Fatal(err)
	}
}

func renders(t *testing.T, env *testkit.Env, target string) float64 {
	var n float64
	fams, _ := env.Registry.Gather()
	for _, f := range fams {
		if f.GetName() != "weft_renderer_renders_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "target" && l.GetValue() == target {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// TestValueChangeRendersOnlyReaders changes a value one target reads and
// another does not: only the reader renders again.
func TestValueChangeRendersOnlyReaders(t *testing.T) {
	cfg, err := config.Parse([]byte(valuesCfg), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	putValue(t, f.bus, "timeout", "5s")
	status, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	data, _ := msg.Encode(msg.SyncStatus{Source: "v", Type: config.ValuesType, Synced: true})
	if _, err := status.Put(context.Background(), msg.SyncStatusKey("v", config.ValuesType), data); err != nil {
		t.Fatal(err)
	}
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	wait := func(target string, atLeast float64) {
		testkit.Eventually(t, 10*time.Second, func() error {
			if n := renders(t, f.env, target); n < atLeast {
				return fmt.Errorf("%s rendered %v times, want %v", target, n, atLeast)
			}
			return nil
		})
	}
	wait("reader", 1)
	wait("other", 1)
	time.Sleep(200 * time.Millisecond) // let the start and lease renders settle
	readerBefore := renders(t, f.env, "reader")
	putValue(t, f.bus, "timeout", "9s")
	wait("reader", readerBefore+1)
	otherBefore := renders(t, f.env, "other")
	putValue(t, f.bus, "unrelated-but-unread", "1")
	putValue(t, f.bus, "timeout", "10s") // a later change to a read value, as a fence
	wait("reader", readerBefore+2)
	if n := renders(t, f.env, "other"); n != otherBefore {
		t.Fatalf("the target that reads no changed value rendered %v more times", n-otherBefore)
	}
}
