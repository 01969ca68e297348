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

// churnYAML reads the Services of namespace default only, through
// get_indexed: a Service elsewhere is nothing the target reads.
const churnYAML = `
sources: [{name: m, type: manifests, path: unused}]
watched_resources:
  services: {api_version: v1, kind: Service, index_by: ["metadata.namespace"]}
targets:
  edge:
    base: /etc/haproxy
    deploy: {driver: files, dest: /tmp/unused}
    maps:
      svc.map:
        template: |
          {%- for svc in resources.services.get_indexed("default") %}
          {{ svc.metadata.name }} {{ svc.spec.port }}
          {%- endfor %}
    haproxy_config:
      template: |
        # map at {{ "svc.map" | get_path("map") }}
`

// announce publishes the change of a write made with writeIn.
func (f *fixture) announce(c msg.Change) {
	f.t.Helper()
	out, _ := msg.NewMsg(msg.ChangeSubject("m", "services"), "", c)
	if _, err := f.bus.JS.PublishMsg(context.Background(), out); err != nil {
		f.t.Fatal(err)
	}
}

// handled waits until replica r1's change feed has handled every change.
func (f *fixture) handled() {
	f.t.Helper()
	testkit.Eventually(f.t, 20*time.Second, func() error {
		if info := f.feedInfo(); info.NumPending+uint64(info.NumAckPending) > 0 {
			return fmt.Errorf("%d changes pending, %d unacknowledged", info.NumPending, info.NumAckPending)
		}
		return nil
	})
}

func startChurn(t testing.TB, debounce time.Duration) *fixture {
	cfg, err := config.Parse([]byte(churnYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	edge := cfg.Targets["edge"]
	edge.Render.Debounce = config.Dur(debounce)
	cfg.Targets["edge"] = edge
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	f.writeIn("default", "web", 1)
	f.writeIn("other", "db", 1)
	f.synced()
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	f.render(1)
	return f
}

// TestChangeNothingReadRendersNothing: a change of an object no template
// of the target read, and an object written again with the same content,
// start no render; the next change of what the target read renders once.
func TestChangeNothingReadRendersNothing(t *testing.T) {
	f := startChurn(t, 100*time.Millisecond)
	before := renders(t, f.env, "edge")
	f.announce(f.writeIn("other", "db", 2)) // a namespace nothing looks up
	f.handled()
	f.announce(f.writeIn("default", "web", 1)) // the same content again
	f.handled()
	f.announce(f.writeIn("default", "web", 2))
	_, b := f.render(2)
	if got := file(b, "maps/svc.map"); got != "\nweb 2\n" {
		t.Fatalf("svc.map = %q", got)
	}
	f.handled()
	if n := renders(t, f.env, "edge") - before; n != 1 {
		t.Fatalf("3 changes, one of them to what the target read, cost %v renders, want 1", n)
	}
}

// TestChangesThatNeverPauseStillRender sends a change of what the target
// reads every 20 ms for 2 seconds with a debounce of 100 ms and max_wait
// unset: the changes never pause for the debounce, and the target still
// renders about once per debounce interval while they go on, not once at
// their end.
func TestChangesThatNeverPauseStillRender(t *testing.T) {
	f := startChurn(t, 100*time.Millisecond)
	before := outcomes(t, f.env, "weft_renderer_renders_total", "published")
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for i := range 100 {
		<-tick.C
		f.announce(f.writeIn("default", "web", 2+i))
	}
	during := outcomes(t, f.env, "weft_renderer_renders_total", "published") - before
	t.Logf("%v renders published while 100 changes came 20 ms apart", during)
	if during < 5 {
		t.Errorf("%v renders published while changes came for 2 s, want about one per 100 ms debounce", during)
	}
	testkit.Eventually(t, 20*time.Second, func() error {
		if got, want := file(f.latest(), "maps/svc.map"), "\nweb 101\n"; got != want {
			return fmt.Errorf("svc.map = %q, want %q", got, want)
		}
		return nil
	})
}

// TestChurnRenders sends 100 changes a second for 3 seconds with debounce
// 0, a third each to a Service nothing reads, rewrites of a Service with
// its content, and real changes of a Service the target reads, and counts
// the renders by outcome: none renders the bundle already published.
func TestChurnRenders(t *testing.T) {
	f := startChurn(t, 0)
	count := func(outcome string) float64 { return outcomes(t, f.env, "weft_renderer_renders_total", outcome) }
	before := map[string]float64{"published": count("published"), "unchanged": count("unchanged")}
	const changes = 300
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	port := 1
	for i := range changes {
		<-tick.C
		switch i % 3 {
		case 0:
			f.announce(f.writeIn("other", "db", 2+i))
		case 1:
			f.announce(f.writeIn("default", "web", port))
		case 2:
			port++
			f.announce(f.writeIn("default", "web", port))
		}
	}
	f.handled()
	testkit.Eventually(t, 20*time.Second, func() error {
		if got, want := file(f.latest(), "maps/svc.map"), fmt.Sprintf("\nweb %d\n", port); got != want {
			return fmt.Errorf("svc.map = %q, want %q", got, want)
		}
		return nil
	})
	published, unchanged := count("published")-before["published"], count("unchanged")-before["unchanged"]
	t.Logf("%d changes (%d of what the target reads): %v renders published, %v unchanged", changes, changes/3, published, unchanged)
	if unchanged > 0 {
		t.Errorf("%v renders produced the bundle already published", unchanged)
	}
	if published > changes/3 {
		t.Errorf("%v renders published for %d changes of what the target reads", published, changes/3)
	}
}

// BenchmarkChurnSlowRender sends 100 changes a second, each to what the
// target reads, for 2 seconds with debounce 0 while every render takes 20
// ms more (a test hook inside the render's read of the index), and reports
// the renders a second, the changes each absorbed, and how long after the
// last change its bundle was seen (polled). Renders run one after
// another, so the ceiling is 50 a second.
func BenchmarkChurnSlowRender(b *testing.B) {
	renderer.SetRenderHook(b, func(string) { time.Sleep(20 * time.Millisecond) })
	for range b.N {
		f := startChurn(b, 0)
		before := testkit.CounterValue(b, f.env.Registry, "weft_renderer_renders_total")
		const changes = 200
		tick := time.NewTicker(10 * time.Millisecond)
		begin := time.Now()
		for i := range changes {
			<-tick.C
			f.announce(f.writeIn("default", "web", 100+i))
		}
		tick.Stop()
		last := time.Now()
		f.handled()
		want := fmt.Sprintf("\nweb %d\n", 100+changes-1)
		testkit.Eventually(b, 20*time.Second, func() error {
			if got := file(f.latest(), "maps/svc.map"); got != want {
				return fmt.Errorf("svc.map = %q, want %q", got, want)
			}
			return nil
		})
		elapsed := time.Since(begin)
		n := testkit.CounterValue(b, f.env.Registry, "weft_renderer_renders_total") - before
		b.ReportMetric(n/elapsed.Seconds(), "renders/s")
		b.ReportMetric(changes/n, "changes/render")
		b.ReportMetric(float64(time.Since(last).Milliseconds()), "ms-last-change-to-bundle")
	}
}
