package renderer_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

const cfgYAML = `
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
        {%- for _, svc in resources.services.items() %}
        # {{ svc.metadata.name }}
        {%- endfor %}
`

type fixture struct {
	t   testing.TB
	bus *testkit.Bus
	env *testkit.Env
}

// newFixture is a fixture on a bus of its own, replica r1's environment,
// with cfgYAML parsed; the renderer is not started.
func newFixture(t *testing.T) (*fixture, *config.Config) {
	t.Helper()
	cfg, err := config.Parse([]byte(cfgYAML), "/")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, bus: testkit.NATS(t)}
	f.env = testkit.NewEnv(t, f.bus, "r1")
	return f, cfg
}

func (f *fixture) put(name string, port int) {
	f.t.Helper()
	c := f.write(name, port)
	out, _ := msg.NewMsg(msg.ChangeSubject("m", "services"), "", c)
	if _, err := f.bus.JS.PublishMsg(context.Background(), out); err != nil {
		f.t.Fatal(err)
	}
}

// write stores the service name with port in the bucket and returns the
// change that announces it.
func (f *fixture) write(name string, port int) msg.Change {
	f.t.Helper()
	return f.writeIn("default", name, port)
}

// writeIn stores the service ns/name with port in the bucket and returns
// the change that announces it.
func (f *fixture) writeIn(ns, name string, port int) msg.Change {
	f.t.Helper()
	return f.writeObj(map[string]any{"metadata": map[string]any{"name": name, "namespace": ns}, "spec": map[string]any{"port": port}})
}

// writeObj stores the service obj in the bucket and returns the change
// that announces it.
func (f *fixture) writeObj(obj map[string]any) msg.Change {
	f.t.Helper()
	ctx := context.Background()
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketResources)
	md := obj["metadata"].(map[string]any)
	ns, name := md["namespace"].(string), md["name"].(string)
	key := msg.ResourceKey("m", "services", ns, name)
	data, err := msg.Encode(msg.Resource{Source: "m", Type: "services", Namespace: ns, Name: name, Hash: fmt.Sprint(obj), Object: obj})
	if err != nil {
		f.t.Fatal(err)
	}
	rev, err := kv.Put(ctx, key, data)
	if err != nil {
		f.t.Fatal(err)
	}
	return msg.Change{Source: "m", Type: "services", Key: key, Op: msg.OpPut, Name: name, Revision: rev}
}

func (f *fixture) synced() {
	f.t.Helper()
	ctx := context.Background()
	status, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	data, _ := msg.Encode(msg.SyncStatus{Source: "m", Type: "services", Synced: true})
	if _, err := status.Put(ctx, msg.SyncStatusKey("m", "services"), data); err != nil {
		f.t.Fatal(err)
	}
	out, _ := msg.NewMsg(msg.SyncSubject("m", "services"), "", msg.Sync{Source: "m", Type: "services"})
	if _, err := f.bus.JS.PublishMsg(ctx, out); err != nil {
		f.t.Fatal(err)
	}
}

// render waits for render version v and returns it with its bundle.
func (f *fixture) render(v uint64) (msg.Render, msg.Bundle) {
	f.t.Helper()
	ctx := context.Background()
	stream, _ := f.bus.JS.Stream(ctx, msg.StreamRenders)
	var r msg.Render
	testkit.Eventually(f.t, 10*time.Second, func() error {
		m, err := stream.GetLastMsgForSubject(ctx, msg.RenderSubject("edge"))
		if err != nil {
			return err
		}
		r = msg.Render{}
		if err := msg.Decode(m.Data, &r); err != nil {
			return err
		}
		if r.Version != v {
			return fmt.Errorf("version %d, want %d", r.Version, v)
		}
		return nil
	})
	b, err := msg.NewBundleStore(f.bus.JS).LoadBundle(ctx, r.BundleHash)
	if err != nil {
		f.t.Fatal(err)
	}
	return r, b
}

func file(b msg.Bundle, p string) string {
	for _, f := range b.Files {
		if f.Path == p {
			return string(f.Content)
		}
	}
	return ""
}

func TestRenderer(t *testing.T) {
	f, cfg := newFixture(t)
	f.put("web", 80) // present before the renderer starts
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	f.put("api", 8000) // arrives before the sync marker: no render yet
	time.Sleep(200 * time.Millisecond)
	if n := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total"); n != 0 {
		t.Fatalf("rendered %v times before sync", n)
	}
	f.synced()
	r, b := f.render(1)
	if got := file(b, "maps/svc.map"); got != "\napi 8000\nweb 80\n" {
		t.Fatalf("svc.map = %q", got)
	}
	if got := file(b, "haproxy.cfg"); !strings.HasPrefix(got, "# map at /etc/haproxy/maps/svc.map\n") {
		t.Fatalf("haproxy.cfg = %q", got)
	}
	if r.Provenance.StateRevision == 0 || r.Provenance.Counts["services"] != 2 || len(r.Files) != 2 {
		t.Fatalf("render = %+v", r)
	}

	t.Run("change re-renders", func(t *testing.T) {
		f.put("web", 81)
		_, b := f.render(2)
		if got := file(b, "maps/svc.map"); got != "\napi 8000\nweb 81\n" {
			t.Fatalf("svc.map = %q", got)
		}
	})
	t.Run("same output is not published", func(t *testing.T) {
		before := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total")
		// A field no template prints: the render runs, its output is the same.
		f.announce(f.writeObj(map[string]any{"metadata": map[string]any{"name": "web", "namespace": "default", "labels": map[string]any{"tier": "front"}}, "spec": map[string]any{"port": 81}}))
		testkit.Eventually(t, 5*time.Second, func() error {
			if testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total") <= before {
				return fmt.Errorf("no render yet")
			}
			return nil
		})
		f.render(2) // still version 2
	})
	t.Run("trigger forces a render", func(t *testing.T) {
		testkit.Eventually(t, 5*time.Second, func() error {
			_, err := f.bus.NC.Request(msg.TriggerRenderSubject("edge"), []byte(`{"schema":"weft.trigger.v1","reason":"test"}`), time.Second)
			return err
		})
		r, _ := f.render(3)
		if r.Provenance.Cause != "trigger" || r.Provenance.Trigger == nil || r.Provenance.Trigger.Reason != "test" {
			t.Fatalf("cause = %q, trigger %+v", r.Provenance.Cause, r.Provenance.Trigger)
		}
	})
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketStatus)
	e, err := kv.Get(context.Background(), msg.RenderStatusKey("edge"))
	if err != nil {
		t.Fatal(err)
	}
	var st msg.RenderStatus
	if err := msg.Decode(e.Value(), &st); err != nil || st.Version != 3 || st.LastError != "" {
		t.Fatalf("status = %+v %v", st, err)
	}
}

// del deletes the service name from the bucket and announces it as the
// relay does: with the revision of the delete marker.
func (f *fixture) del(name string) {
	f.t.Helper()
	ctx := context.Background()
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketResources)
	key := msg.ResourceKey("m", "services", "default", name)
	if err := kv.Delete(ctx, key); err != nil {
		f.t.Fatal(err)
	}
	stream, _ := f.bus.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	m, err := stream.GetLastMsgForSubject(ctx, msg.ResourceSubject(key))
	if err != nil {
		f.t.Fatal(err)
	}
	out, _ := msg.NewMsg(msg.ChangeSubject("m", "services"), "", msg.Change{Source: "m", Type: "services", Key: key, Op: msg.OpDelete, Name: name, Revision: m.Sequence})
	if _, err := f.bus.JS.PublishMsg(ctx, out); err != nil {
		f.t.Fatal(err)
	}
}

// TestDeleteThenRecreateRenders: an object deleted and created again as
// the very next write of the bucket (kubectl delete, then apply) is
// rendered again.
func TestDeleteThenRecreateRenders(t *testing.T) {
	f, cfg := newFixture(t)
	f.put("web", 80)
	f.put("api", 8000)
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	f.synced()
	f.render(1)
	f.del("web")
	if _, b := f.render(2); file(b, "maps/svc.map") != "\napi 8000\n" {
		t.Fatalf("after delete: svc.map = %q", file(b, "maps/svc.map"))
	}
	f.put("web", 80) // the next write of the bucket: the marker's revision + 1
	if _, b := f.render(3); file(b, "maps/svc.map") != "\napi 8000\nweb 80\n" {
		t.Fatalf("after re-create: svc.map = %q", file(b, "maps/svc.map"))
	}
}

// TestForgedSyncOpensNothing: a sync message whose marker the status
// bucket does not hold (anyone can publish one) does not open rendering
// before the source synced; it is dead-lettered, and the real marker
// opens rendering.
func TestForgedSyncOpensNothing(t *testing.T) {
	f, cfg := newFixture(t)
	f.put("web", 80)
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	ctx := context.Background()
	changes, _ := f.bus.JS.Stream(ctx, msg.StreamChanges)
	testkit.Eventually(t, 10*time.Second, func() error { // the renderer follows the stream
		info, err := changes.Info(ctx)
		if err != nil {
			return err
		}
		if info.State.Consumers == 0 {
			return fmt.Errorf("no consumer yet")
		}
		return nil
	})
	out, _ := msg.NewMsg(msg.SyncSubject("m", "services"), "", msg.Sync{Source: "m", Type: "services"})
	if _, err := f.bus.JS.PublishMsg(ctx, out); err != nil {
		t.Fatal(err)
	}
	dlq, _ := f.bus.JS.Stream(ctx, msg.StreamDLQ)
	var dl msg.DeadLetter
	testkit.Eventually(t, 3*msg.ConfirmWait, func() error {
		m, err := dlq.GetLastMsgForSubject(ctx, msg.DLQSubject("renderer"))
		if err != nil {
			return err
		}
		return msg.Decode(m.Data, &dl)
	})
	if dl.Subject != msg.SyncSubject("m", "services") || !strings.Contains(dl.Reason, msg.ErrUnconfirmed.Error()) {
		t.Fatalf("dead letter = %+v", dl)
	}
	if n := testkit.CounterValue(t, f.env.Registry, "weft_renderer_renders_total"); n != 0 {
		t.Fatalf("rendered %v times on a forged sync", n)
	}
	f.synced()
	if _, b := f.render(1); file(b, "maps/svc.map") != "\nweb 80\n" {
		t.Fatalf("svc.map = %q", file(b, "maps/svc.map"))
	}
}

// TestRenderVersionTakenBefore: a version already in the stream (published
// by a render whose status write failed) is not reused: the render goes
// out at the next version instead of being dropped as a duplicate, and
// the status names that version.
func TestRenderVersionTakenBefore(t *testing.T) {
	f, cfg := newFixture(t)
	ctx := context.Background()
	earlier, _ := msg.NewMsg(msg.RenderSubject("edge"), msg.RenderID("edge", 1), msg.Render{Target: "edge", Version: 1, BundleHash: "earlier"})
	if _, err := f.bus.JS.PublishMsg(ctx, earlier); err != nil {
		t.Fatal(err)
	}
	f.put("web", 80)
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	f.synced()
	r, b := f.render(2)
	if file(b, "maps/svc.map") != "\nweb 80\n" {
		t.Fatalf("svc.map = %q", file(b, "maps/svc.map"))
	}
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketStatus)
	var st msg.RenderStatus
	if _, err := msg.LoadStatus(ctx, kv, msg.RenderStatusKey("edge"), &st); err != nil || st.Version != 2 || st.BundleHash != r.BundleHash {
		t.Fatalf("render status = %+v %v, want v2 %s", st, err, r.BundleHash)
	}
}
