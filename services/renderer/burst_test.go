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

// TestBurstCostsFewRenders applies 1,000 changes in a burst: the debouncer
// turns them into at most one render at each edge of the burst.
func TestBurstCostsFewRenders(t *testing.T) {
	testBurst(t, false, 3)
}

// TestQueuedBurstCostsOneRender announces 1,000 changes faster than the
// renderer reads them: changes read while more are queued never take the
// leading edge, so the backlog costs one render.
func TestQueuedBurstCostsOneRender(t *testing.T) {
	testBurst(t, true, 1)
}

func testBurst(t *testing.T, queued bool, most float64) {
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	// A debounce window no stall of a loaded machine reaches between two
	// changes of the burst: a pause that long would rightly end the burst.
	edge := cfg.Targets["edge"]
	edge.Render.Debounce = config.Duration(time.Second)
	cfg.Targets["edge"] = edge
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	f.put("web", 1)
	f.synced()
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	f.render(1)
	time.Sleep(1500 * time.Millisecond) // past the debounce window of the start
	before := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total")
	if queued {
		f.putQueued("web", 1000, 1999)
	} else {
		for i := range 1000 {
			f.put("web", 1000+i)
		}
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if got := file(f.latest(), "maps/svc.map"); got != "\nweb 1999\n" {
			return fmt.Errorf("svc.map = %q", got)
		}
		return nil
	})
	renders := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total") - before
	if renders > most {
		t.Fatalf("1,000 changes cost %v renders, want at most %v", renders, most)
	}
	t.Logf("1,000 changes, %v renders", renders)
}

// latest returns the bundle of the newest render of edge.
func (f *fixture) latest() msg.Bundle {
	f.t.Helper()
	ctx := context.Background()
	stream, _ := f.bus.JS.Stream(ctx, msg.StreamRenders)
	m, err := stream.GetLastMsgForSubject(ctx, msg.RenderSubject("edge"))
	if err != nil {
		return msg.Bundle{}
	}
	var r msg.Render
	if msg.Decode(m.Data, &r) != nil || r.BundleHash == "" {
		return msg.Bundle{}
	}
	b, _ := msg.NewBundleStore(f.bus.JS).LoadBundle(ctx, r.BundleHash)
	return b
}

// putQueued writes the ports from..to of name to the bucket, then announces
// every write at once, without waiting for acknowledgements in between.
func (f *fixture) putQueued(name string, from, to int) {
	f.t.Helper()
	ctx := context.Background()
	var changes []msg.Change
	for port := from; port <= to; port++ {
		changes = append(changes, f.write(name, port))
	}
	for _, c := range changes {
		out, _ := msg.NewMsg(msg.ChangeSubject("m", "services"), "", c)
		if _, err := f.bus.JS.PublishMsgAsync(out); err != nil {
			f.t.Fatal(err)
		}
	}
	select {
	case <-f.bus.JS.PublishAsyncComplete():
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		f.t.Fatal("announcements not acknowledged")
	}
}
