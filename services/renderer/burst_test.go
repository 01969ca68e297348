package renderer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

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
	// A max_wait far beyond the burst's length: by default (the debounce)
	// a burst longer than a second renders once a second
	// (TestChangesThatNeverPauseStillRender).
	edge := cfg.Targets["edge"]
	edge.Render.Debounce = config.Dur(time.Second)
	edge.Render.MaxWait = config.Duration(time.Hour)
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

// TestRenderInFlightAbsorbsBurst: with debounce 0, the changes that
// arrive while a render holds the index are rendered by exactly one next
// render, started once the render in flight is done, holding all of them.
func TestRenderInFlightAbsorbsBurst(t *testing.T) {
	const burst = 100
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	edge := cfg.Targets["edge"]
	edge.Render.Debounce = config.Dur(0)
	cfg.Targets["edge"] = edge
	var hold atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var once sync.Once
	renderer.SetRenderHook(t, func(string) {
		if hold.CompareAndSwap(true, false) {
			entered <- struct{}{}
			<-release
		}
	})
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	f.put("web", 1)
	f.synced()
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	t.Cleanup(func() { once.Do(func() { close(release) }) }) // before the service stops
	f.render(1)

	hold.Store(true)
	f.put("web", 2)
	select {
	case <-entered:
	case <-time.After(20 * time.Second):
		t.Fatal("the render of the first change did not start")
	}
	for i := range burst {
		f.put("web", 3+i)
	}
	feed := f.feedInfo
	testkit.Eventually(t, 20*time.Second, func() error {
		if info := feed(); info.NumPending > 0 {
			return fmt.Errorf("%d changes not delivered yet", info.NumPending)
		}
		return nil
	})
	before := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total")
	once.Do(func() { close(release) })

	_, b := f.render(3)
	if got, want := file(b, "maps/svc.map"), fmt.Sprintf("\nweb %d\n", 2+burst); got != want {
		t.Fatalf("render 3: svc.map = %q, want %q", got, want)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if info := feed(); info.NumAckPending > 0 {
			return fmt.Errorf("%d changes not handled yet", info.NumAckPending)
		}
		return nil
	})
	if renders := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total") - before; renders != 2 {
		t.Fatalf("the held render and %d changes during it cost %v renders, want 2 (the held one and one more)", burst, renders)
	}
}

// feedInfo reads the state of replica r1's change feed.
func (f *fixture) feedInfo() *jetstream.ConsumerInfo {
	f.t.Helper()
	c, err := f.bus.JS.Consumer(context.Background(), msg.StreamChanges, renderer.ChangesConsumer("r1"))
	if err != nil {
		f.t.Fatal(err)
	}
	return c.CachedInfo()
}
