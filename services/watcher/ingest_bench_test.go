package watcher_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher"
)

const manifestsCfg = `
sources: [{name: m, type: manifests, path: manifests}]
watched_resources:
  ingresses: {api_version: networking.k8s.io/v1, kind: Ingress}
  services: {api_version: v1, kind: Service}
  endpoints: {api_version: discovery.k8s.io/v1, kind: EndpointSlice}
watched_resources_ignore_fields: [metadata.managedFields]
targets: {}
`

// app is the manifest of one application: an Ingress, its Service and its
// EndpointSlice, the slice holding addr.
func app(i int, addr string) string {
	name := fmt.Sprintf("app-%06d", i)
	return fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: %[1]s, namespace: shop, managedFields: [{manager: kubectl, operation: Apply}]}
spec:
  rules:
  - host: %[1]s.example.com
    http:
      paths:
      - {path: /, pathType: Prefix, backend: {service: {name: %[1]s, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: %[1]s, namespace: shop}
spec: {ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: %[1]s, namespace: shop, labels: {kubernetes.io/service-name: %[1]s}}
addressType: IPv4
ports: [{port: 8080}]
endpoints: [{addresses: [%[2]s]}]
`, name, addr)
}

// writeApps writes apps applications (3 objects each) into dir, perFile
// applications to a file, each file written whole with a rename.
func writeApps(tb testing.TB, dir string, apps, perFile int, addr func(i int) string) {
	tb.Helper()
	for f := 0; f*perFile < apps; f++ {
		var b strings.Builder
		for i := f * perFile; i < min((f+1)*perFile, apps); i++ {
			if b.Len() > 0 {
				b.WriteString("---\n")
			}
			b.WriteString(app(i, addr(i)))
		}
		p := filepath.Join(dir, fmt.Sprintf("apps-%05d.yaml", f))
		if err := os.WriteFile(p+".tmp~", []byte(b.String()), 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.Rename(p+".tmp~", p); err != nil {
			tb.Fatal(err)
		}
	}
}

// manifestsWatcher starts a watcher over a folder of apps applications and
// waits until every object is announced.
func manifestsWatcher(tb testing.TB, apps, perFile int) (*testkit.Bus, string, func()) {
	tb.Helper()
	dir := tb.TempDir()
	folder := filepath.Join(dir, "manifests")
	if err := os.Mkdir(folder, 0o755); err != nil {
		tb.Fatal(err)
	}
	writeApps(tb, folder, apps, perFile, func(int) string { return "10.0.0.1" })
	cfg, err := config.Parse([]byte(manifestsCfg), dir)
	if err != nil {
		tb.Fatal(err)
	}
	bus := testkit.NATS(tb)
	env := testkit.NewEnv(tb, bus, "bench")
	// Spans are exported as they end in a deployment; the test recorder
	// would keep every one of them.
	env.Env.Tracer = noop.NewTracerProvider()
	stop := testkit.Run(tb, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
	waitChanges(tb, bus, msg.ChangeAll, uint64(3*apps))
	return bus, folder, stop
}

// changeCount is how many change messages match filter.
func changeCount(tb testing.TB, bus *testkit.Bus, filter string) uint64 {
	tb.Helper()
	ctx := context.Background()
	st, err := bus.JS.Stream(ctx, msg.StreamChanges)
	if err != nil {
		tb.Fatal(err)
	}
	info, err := st.Info(ctx, jetstream.WithSubjectFilter(filter))
	if err != nil {
		tb.Fatal(err)
	}
	var n uint64
	for _, c := range info.State.Subjects {
		n += c
	}
	return n
}

func waitChanges(tb testing.TB, bus *testkit.Bus, filter string, want uint64) {
	tb.Helper()
	testkit.Eventually(tb, 10*time.Minute, func() error {
		if n := changeCount(tb, bus, filter); n < want {
			return fmt.Errorf("%d of %d changes announced", n, want)
		}
		return nil
	})
}

// rawPublish publishes msgs synchronously, one at a time, to a stream of
// their own: the reference the ingest benchmarks are measured against.
func rawPublish(b *testing.B, bus *testkit.Bus, msgs [][]byte) time.Duration {
	b.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("RAW%d", time.Now().UnixNano())
	if _, err := bus.JS.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{strings.ToLower(name) + ".>"}}); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	for i, m := range msgs {
		if _, err := bus.JS.Publish(ctx, fmt.Sprintf("%s.%d", strings.ToLower(name), i), m); err != nil {
			b.Fatal(err)
		}
	}
	return time.Since(start)
}

// BenchmarkIngestManifests changes the EndpointSlice of 1,000 of 10,000
// applications (30,000 objects in 100 files) and measures file writes to
// change messages per second, beside raw JetStream publishes of as many
// messages of the same size in the same run (x-raw: the watcher's rate
// over the raw one).
func BenchmarkIngestManifests(b *testing.B) {
	const apps, perFile, changed = 10_000, 100, 1_000
	bus, folder, _ := manifestsWatcher(b, apps, perFile)
	filter := msg.ChangeSubject("m", "endpoints")
	var weft, raw time.Duration
	for i := 0; b.Loop(); i++ {
		base := changeCount(b, bus, filter)
		start := time.Now()
		// The first ten files: 1,000 applications, a new address each.
		writeApps(b, folder, changed, perFile, func(j int) string { return fmt.Sprintf("10.1.%d.%d", i%250, j%250) })
		waitChanges(b, bus, filter, base+changed)
		weft += time.Since(start)
		b.StopTimer()
		msgs := make([][]byte, changed)
		for j := range msgs {
			msgs[j] = []byte(app(j, "10.1.1.1"))[:600]
		}
		raw += rawPublish(b, bus, msgs)
		b.StartTimer()
	}
	n := float64(changed * b.N)
	b.ReportMetric(n/weft.Seconds(), "changes/s")
	b.ReportMetric(n/raw.Seconds(), "raw-publish/s")
	b.ReportMetric(raw.Seconds()/weft.Seconds(), "x-raw")
}

const natsKVCfg = `
sources: [{name: v, type: natskv, bucket: values, prefix: /app}]
watched_resources: {}
targets: {}
`

// BenchmarkIngestNATSKV writes 1,000 keys of a NATS KV bucket that a natskv
// source follows and measures puts to change messages per second, beside
// raw JetStream publishes of the same number of messages in the same run.
// The puts are in the measured time: they are the changes. It also reports
// how long the puts took (puts/s: they share the machine with the watcher)
// and how long after the last put returned the last change message came
// (ms-lag-after-last-put, from a subscription to the change messages): the
// watcher's own delay.
func BenchmarkIngestNATSKV(b *testing.B) {
	const keys = 1_000
	bus := testkit.NATS(b)
	ctx := context.Background()
	kv, err := bus.JS.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "values"})
	if err != nil {
		b.Fatal(err)
	}
	for j := range keys {
		if _, err := kv.PutString(ctx, fmt.Sprintf("app.key%04d", j), "0"); err != nil {
			b.Fatal(err)
		}
	}
	cfg, err := config.Parse([]byte(natsKVCfg), b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	env := testkit.NewEnv(b, bus, "bench")
	testkit.Run(b, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
	filter := msg.ChangeSubject("v", config.ValuesType)
	waitChanges(b, bus, filter, keys)
	value := strings.Repeat("v", 100)
	var (
		mu       sync.Mutex
		seen     int
		lastSeen time.Time
	)
	sub, err := bus.NC.Subscribe(filter, func(*nats.Msg) {
		mu.Lock()
		seen++
		lastSeen = time.Now()
		mu.Unlock()
	})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	var weft, raw, puts, lag time.Duration
	for i := 0; b.Loop(); i++ {
		base := changeCount(b, bus, filter)
		mu.Lock()
		seen = 0
		mu.Unlock()
		start := time.Now()
		for j := range keys {
			if _, err := kv.PutString(ctx, fmt.Sprintf("app.key%04d", j), fmt.Sprintf("%d-%s", i+1, value)); err != nil {
				b.Fatal(err)
			}
		}
		putsDone := time.Now()
		waitChanges(b, bus, filter, base+keys)
		weft += time.Since(start)
		b.StopTimer()
		testkit.Eventually(b, time.Minute, func() error {
			mu.Lock()
			defer mu.Unlock()
			if seen < keys {
				return fmt.Errorf("%d of %d change messages received", seen, keys)
			}
			return nil
		})
		mu.Lock()
		puts += putsDone.Sub(start)
		lag += max(0, lastSeen.Sub(putsDone))
		mu.Unlock()
		b.StartTimer()
		b.StopTimer()
		msgs := make([][]byte, keys)
		for j := range msgs {
			msgs[j] = []byte(value)
		}
		raw += rawPublish(b, bus, msgs)
		b.StartTimer()
	}
	n := float64(keys * b.N)
	b.ReportMetric(n/weft.Seconds(), "changes/s")
	b.ReportMetric(n/raw.Seconds(), "raw-publish/s")
	b.ReportMetric(raw.Seconds()/weft.Seconds(), "x-raw")
	b.ReportMetric(n/puts.Seconds(), "puts/s")
	b.ReportMetric(float64(lag.Milliseconds())/float64(b.N), "ms-lag-after-last-put")
}

// BenchmarkHeapAfterSync reports the heap held once a source of N objects
// (a third each Ingresses, Services, EndpointSlices) is synced and every
// object announced: MB-heap is the heap in use after a GC, less the heap
// before the watcher started. The NATS server is embedded, so its caches
// count too (the profile written with WEFT_HEAP_PROFILE_DIR tells them
// apart). s-to-announced is the time from start to the last change
// message, beside s-raw-publish: as many synchronous publishes of 600-byte
// messages, measured in the same run. The kube sub-benchmark lists from a
// real API server (kubetest.Start).
func BenchmarkHeapAfterSync(b *testing.B) {
	report := func(b *testing.B, bus *testkit.Bus, objects int, before uint64, took, cpu time.Duration, name string) {
		b.ReportMetric(float64(heapInUse()-before)/1e6, "MB-heap")
		b.ReportMetric(took.Seconds(), "s-to-announced")
		b.ReportMetric(cpu.Seconds(), "s-cpu")
		writeHeapProfile(b, name)
		msgs := make([][]byte, objects)
		for i := range msgs {
			msgs[i] = make([]byte, 600)
		}
		b.ReportMetric(rawPublish(b, bus, msgs).Seconds(), "s-raw-publish")
	}
	for _, objects := range []int{10_002, 30_000, 100_002} {
		name := fmt.Sprintf("manifests-%dk", objects/1000)
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				start, cpu := time.Now(), cpuTime()
				bus, _, stop := manifestsWatcher(b, objects/3, 100)
				report(b, bus, objects, before, time.Since(start), cpuTime()-cpu, name)
				stop()
			}
		})
	}
	b.Run("kube-30k", func(b *testing.B) {
		const objects = 30_000
		k := kubetest.Start(b)
		createMix(b, k.Clientset, "heap", objects)
		cfg, err := config.Parse(fmt.Appendf(nil, kubeCfg, k.Kubeconfig), b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			bus := testkit.NATS(b)
			env := testkit.NewEnv(b, bus, "bench")
			env.Env.Tracer = noop.NewTracerProvider()
			before := heapInUse()
			start, cpu := time.Now(), cpuTime()
			stop := testkit.Run(b, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
			waitChanges(b, bus, msg.ChangeAll, objects)
			report(b, bus, objects, before, time.Since(start), cpuTime()-cpu, "kube-30k")
			stop()
		}
	})
}

// cpuTime is the CPU time this process used so far (user and system), the
// embedded NATS server's included: on a machine shared with other work, the
// wall time says little.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// writeHeapProfile writes the heap profile of this moment (the watcher
// running) to $WEFT_HEAP_PROFILE_DIR/<name>.heap when that is set: what
// -memprofile cannot show, since it is written once the watcher stopped.
func writeHeapProfile(tb testing.TB, name string) {
	dir := os.Getenv("WEFT_HEAP_PROFILE_DIR")
	if dir == "" {
		return
	}
	f, err := os.Create(filepath.Join(dir, name+".heap"))
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	runtime.GC()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkEditLatency edits one file holding one application (its
// EndpointSlice's address) in a folder of N objects and measures the time
// from the file written to its change message received: what an edit
// costs the watcher at that size.
func BenchmarkEditLatency(b *testing.B) {
	for _, objects := range []int{30_000, 100_002} {
		b.Run(fmt.Sprintf("manifests-%dk", objects/1000), func(b *testing.B) {
			bus, folder, _ := manifestsWatcher(b, objects/3, 100)
			edited := filepath.Join(folder, "edited.yaml")
			write := func(addr string) {
				if err := os.WriteFile(edited+".tmp~", []byte(app(objects, addr)), 0o644); err != nil {
					b.Fatal(err)
				}
				if err := os.Rename(edited+".tmp~", edited); err != nil {
					b.Fatal(err)
				}
			}
			changes := make(chan struct{}, 16)
			sub, err := bus.NC.Subscribe(msg.ChangeSubject("m", "endpoints"), func(*nats.Msg) { changes <- struct{}{} })
			if err != nil {
				b.Fatal(err)
			}
			defer func() { _ = sub.Unsubscribe() }()
			wait := func() {
				select {
				case <-changes:
				case <-time.After(time.Minute):
					b.Fatal("no change message within a minute")
				}
			}
			write("10.9.0.0")
			wait()
			for i := 0; b.Loop(); i++ {
				write(fmt.Sprintf("10.9.%d.%d", i/250%250, i%250+1))
				wait()
			}
		})
	}
}
