package renderer_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/services/renderer"
	"github.com/weftio/weft/services/renderer/bench"
)

// loadYAML watches the workload's three types; its template is cheap, so
// the time to the first render is the time to read the bucket.
const loadYAML = `
sources: [{name: m, type: manifests, path: unused}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress, index_by: ["metadata.namespace", "metadata.name"]}
  services: {api_version: v1, kind: Service, index_by: ["metadata.namespace", "metadata.name"]}
  endpoints: {api_version: discovery.k8s.io/v1, kind: EndpointSlice, index_by: ["metadata.namespace", "metadata.labels['kubernetes.io/service-name']"]}
targets:
  edge:
    base: /etc/haproxy
    deploy: {driver: files, dest: /tmp/unused}
    haproxy_config:
      template: |
        # {{ resources.ingresses | length }} {{ resources.services | length }} {{ resources.endpoints | length }}
`

// fillResources writes bench.Objects(n/3) to the resources bucket (as a
// watcher does, one message per object) and the three sync markers.
func fillResources(b *testing.B, bus *testkit.Bus, n int) {
	b.Helper()
	ctx := context.Background()
	var last uint64
	for i, o := range bench.Objects(n / 3) {
		md := o.Obj["metadata"].(map[string]any)
		ns, name := md["namespace"].(string), md["name"].(string)
		data, err := msg.Encode(msg.Resource{Source: "m", Type: o.Type, Namespace: ns, Name: name, Hash: fmt.Sprint(i), Object: o.Obj})
		if err != nil {
			b.Fatal(err)
		}
		m := nats.NewMsg(msg.ResourceSubject(msg.ResourceKey("m", o.Type, ns, name)))
		m.Data = data
		m.Header.Set(msg.HeaderSchema, msg.SchemaResource)
		if _, err := bus.JS.PublishMsgAsync(m); err != nil {
			b.Fatal(err)
		}
		if i%5000 == 4999 {
			<-bus.JS.PublishAsyncComplete()
		}
	}
	<-bus.JS.PublishAsyncComplete()
	stream, err := bus.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	if err != nil {
		b.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if last = info.State.LastSeq; info.State.Msgs != uint64(n/3*3) {
		b.Fatalf("bucket holds %d messages, want %d", info.State.Msgs, n/3*3)
	}
	status, _ := bus.JS.KeyValue(ctx, msg.BucketStatus)
	for _, typ := range []string{"ingresses", "services", "endpoints"} {
		data, _ := msg.Encode(msg.SyncStatus{Source: "m", Type: typ, Synced: true, Revision: last})
		if _, err := status.Put(ctx, msg.SyncStatusKey("m", typ), data); err != nil {
			b.Fatal(err)
		}
	}
}

// writeHeapProfile writes the heap profile to $WEFT_BENCH_HEAP_PROFILE,
// when set, while the renderer holds its first render: where the index's
// memory goes.
func writeHeapProfile(b *testing.B) {
	p := os.Getenv("WEFT_BENCH_HEAP_PROFILE")
	if p == "" {
		return
	}
	f, err := os.Create(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

// cpuTime is the CPU time the process has used (user and system): the
// figure a loaded machine does not distort the way it does wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkRendererInitialLoad starts a renderer over a resources bucket
// already holding n objects (a third each Ingresses, Services and
// EndpointSlices) and measures the time from start to its first render and
// the heap it holds then (above the heap before it started; the embedded
// NATS server shares the process). The reference reads the same keys with
// a bare KV watch and keeps their values.
func BenchmarkRendererInitialLoad(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("objects=%d", n), func(b *testing.B) {
			cfg, err := config.Parse([]byte(loadYAML), "/")
			if err != nil {
				b.Fatal(err)
			}
			bus := testkit.NATS(b)
			fillResources(b, bus, n)
			b.Run("renderer", func(b *testing.B) {
				started := make(chan struct{}, 1)
				release := make(chan struct{})
				renderer.SetRenderHook(b, func(string) {
					select {
					case started <- struct{}{}:
						<-release
					default:
					}
				})
				var heap uint64
				for i := range b.N {
					base := heapInUse()
					env := testkit.NewEnv(b, bus, fmt.Sprintf("bench-%d", i))
					begin, cpu := time.Now(), cpuTime()
					stop := testkit.Run(b, func(ctx context.Context) error { return renderer.Run(ctx, env.Env, cfg) })
					select {
					case <-started:
					case <-time.After(10 * time.Minute):
						b.Fatal("no render")
					}
					b.ReportMetric(float64(time.Since(begin).Milliseconds()), "ms-to-first-render")
					b.ReportMetric((cpuTime() - cpu).Seconds(), "cpu-s")
					heap = heapInUse() - min(base, heapInUse())
					writeHeapProfile(b)
					release <- struct{}{}
					stop()
				}
				close(release)
				b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
			})
			b.Run("reference-kv-watch", func(b *testing.B) {
				ctx := context.Background()
				kv, err := bus.JS.KeyValue(ctx, msg.BucketResources)
				if err != nil {
					b.Fatal(err)
				}
				var heap uint64
				for range b.N {
					base := heapInUse()
					begin, cpu := time.Now(), cpuTime()
					w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
					if err != nil {
						b.Fatal(err)
					}
					values := make(map[string][]byte, n)
					for e := range w.Updates() {
						if e == nil {
							break
						}
						values[e.Key()] = e.Value()
					}
					b.ReportMetric(float64(time.Since(begin).Milliseconds()), "ms-to-first-render")
					b.ReportMetric((cpuTime() - cpu).Seconds(), "cpu-s")
					heap = heapInUse() - min(base, heapInUse())
					_ = w.Stop()
					if len(values) != n/3*3 {
						b.Fatalf("read %d keys, want %d", len(values), n/3*3)
					}
				}
				b.ReportMetric(float64(heap)/(1<<20), "heap-MB")
			})
		})
	}
}

// TestLoadSkipsUnreadableResource: a value in the resources bucket that is
// no resource is logged and left out; every other object is loaded and
// rendered.
func TestLoadSkipsUnreadableResource(t *testing.T) {
	f, cfg := newFixture(t)
	for i := range 50 {
		f.write(fmt.Sprintf("svc%02d", i), 1000+i)
	}
	kv, _ := f.bus.JS.KeyValue(context.Background(), msg.BucketResources)
	if _, err := kv.Put(context.Background(), msg.ResourceKey("m", "services", "default", "broken"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	f.synced()
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	r, b := f.render(1)
	if r.Provenance.Counts["services"] != 50 {
		t.Errorf("counts = %v, want 50 services", r.Provenance.Counts)
	}
	if got := file(b, "maps/svc.map"); !strings.Contains(got, "\nsvc00 1000\n") || !strings.HasSuffix(got, "\nsvc49 1049\n") {
		t.Errorf("svc.map = %q", got)
	}
	if logs := f.env.Logs.String(); !strings.Contains(logs, "unreadable resource in bucket") || !strings.Contains(logs, "broken") {
		t.Errorf("the unreadable resource is not logged:\n%s", logs)
	}
}

// TestStartBesideSourcesReadsBucketWhole: a renderer started before its
// sources have synced gets their objects as changes; it leaves them to one
// read of the whole bucket once every source has synced, and what it
// renders is the bucket: of the objects it read at start, those deleted
// since are gone from the first render although their deletions' changes
// are among those the whole read covers.
func TestStartBesideSourcesReadsBucketWhole(t *testing.T) {
	const lateN = 2000
	f, cfg := newFixture(t)
	ctx := context.Background()
	var early []msg.Change
	for i := range 50 {
		early = append(early, f.writeIn("default", fmt.Sprintf("early-%02d", i), 80))
	}
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, f.env.Env, cfg) })
	testkit.Eventually(t, 10*time.Second, func() error {
		if _, err := f.bus.JS.Consumer(ctx, msg.StreamChanges, renderer.ChangesConsumer("r1")); err != nil {
			return err // the renderer has read the bucket at start when its feed exists
		}
		return nil
	})
	kv, _ := f.bus.JS.KeyValue(ctx, msg.BucketResources)
	stream, _ := f.bus.JS.Stream(ctx, msg.KVStream(msg.BucketResources))
	var later []msg.Change
	for _, c := range early[:20] {
		if err := kv.Delete(ctx, c.Key); err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		later = append(later, msg.Change{Source: c.Source, Type: c.Type, Key: c.Key, Op: msg.OpDelete, Name: c.Name, Revision: info.State.LastSeq})
	}
	// Written and announced at once, as a watcher's pipelined writes are.
	var acks []jetstream.PubAckFuture
	for i := range lateN {
		name := fmt.Sprintf("late-%04d", i)
		obj := map[string]any{"metadata": map[string]any{"name": name, "namespace": "default"}, "spec": map[string]any{"port": 80}}
		data, err := msg.Encode(msg.Resource{Source: "m", Type: "services", Namespace: "default", Name: name, Hash: name, Object: obj})
		if err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(msg.ResourceSubject(msg.ResourceKey("m", "services", "default", name)))
		m.Data = data
		m.Header.Set(msg.HeaderSchema, msg.SchemaResource)
		a, err := f.bus.JS.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, a)
	}
	for i, a := range acks {
		select {
		case pa := <-a.Ok():
			name := fmt.Sprintf("late-%04d", i)
			later = append(later, msg.Change{Source: "m", Type: "services", Key: msg.ResourceKey("m", "services", "default", name), Op: msg.OpPut, Name: name, Revision: pa.Sequence})
		case err := <-a.Err():
			t.Fatal(err)
		}
	}
	for _, c := range later {
		out, _ := msg.NewMsg(msg.ChangeSubject("m", "services"), "", c)
		if _, err := f.bus.JS.PublishMsgAsync(out); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-f.bus.JS.PublishAsyncComplete():
	case <-time.After(10 * time.Second):
		t.Fatal("announcements not acknowledged")
	}
	f.synced()
	_, b := f.render(1)
	cfgFile := file(b, "haproxy.cfg")
	if n := strings.Count(cfgFile, "\n# "); n != 30+lateN {
		t.Fatalf("the first render has %d services, want %d (50 early, 20 of them deleted, %d late)", n, 30+lateN, lateN)
	}
	if strings.Contains(cfgFile, "# early-00\n") || !strings.Contains(cfgFile, "# early-20\n") || !strings.Contains(cfgFile, fmt.Sprintf("# late-%04d", lateN-1)) {
		t.Fatalf("the first render is not the bucket's objects:\n%s", cfgFile[:min(len(cfgFile), 400)])
	}
	if !strings.Contains(f.env.Logs.String(), "read the whole resources bucket") {
		t.Fatal("the changes were read one by one, not as the whole bucket")
	}
}
