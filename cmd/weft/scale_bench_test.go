package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

// The whole path at scale (BENCHMARKS.md, "The whole path at scale"). Every
// benchmark runs weft's services in this process over an embedded NATS
// server against a real HAProxy (runtime driver) and echo backends; times
// are wall time per change, from the write of the change until a fresh
// connection to the host is answered by the new backend. They report
// custom metrics only (ns/op is 0): run with -benchtime Nx, e.g.
//
//	go test -run '^$' -bench 'EndpointToServedAtScale/manifests/1k' -benchtime 200x

// heapProfile names a file to which BenchmarkInitialSyncToServed and
// BenchmarkHundredThousand write a heap profile of the process once every
// host is served (the last run's), for go tool pprof -sample_index=inuse_space.
var heapProfile = flag.String("scale-heap-profile", "", "write a heap profile here once every host is served")

// changesProfile names a file to which benchScaleChanges writes a CPU
// profile of its timed changes only (the initial load left out), for go
// tool pprof; not with -cpuprofile, which holds the one CPU profiler.
var changesProfile = flag.String("scale-cpu-profile", "", "write a CPU profile of the timed changes (not the initial load) here")

// allocsProfile names a file to which benchScaleChanges writes the heap
// profile as the timed changes end, and FILE.start the one as they begin:
// go tool pprof -sample_index=alloc_space -diff_base FILE.start FILE shows
// what the changes allocated.
var allocsProfile = flag.String("scale-allocs-profile", "", "write heap profiles as the timed changes start (FILE.start) and end (FILE), for -diff_base")

// startChangesProfile starts the profiles -scale-cpu-profile and
// -scale-allocs-profile ask for and returns their stop.
func startChangesProfile(b *testing.B) func() {
	stopAllocs := func() {}
	if *allocsProfile != "" {
		writeHeap(b, *allocsProfile+".start")
		stopAllocs = func() { writeHeap(b, *allocsProfile) }
	}
	if *changesProfile == "" {
		return stopAllocs
	}
	f, err := os.Create(*changesProfile)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			b.Error(err)
		}
		stopAllocs()
	}
}

// writeHeap writes the heap profile to name.
func writeHeap(b *testing.B, name string) {
	f, err := os.Create(name)
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Error(err)
	}
	if err := f.Close(); err != nil {
		b.Error(err)
	}
}

// scaleLogs, when set, keeps the services' logs of a scale benchmark (the
// stage times are read from them) in that file.
var scaleLogs = flag.String("scale-logs", "", "write the services' logs of each scale benchmark to this file")

// scaleSpans, when set, keeps every span of the services (the test
// environment's recorder instead of weft up's tracer, which keeps none)
// and writes those that start during the timed changes to this file, one
// JSON object a line: name, trace, start (ms after the first change) and
// ms, for where a change's time goes between and within the services.
// BenchmarkInitialSyncToServed writes the spans of the initial sync, its
// one "change" from the services' start until every host is served.
var scaleSpans = flag.String("scale-spans", "", "write the spans of the timed changes to this file")

// writeSpans writes the spans -scale-spans asks for, of those that
// started at or after the first change, and each change (named "change",
// without a trace) from its write until it was answered.
func writeSpans(b *testing.B, s *scaleStack, starts, ends []time.Time) {
	if *scaleSpans == "" {
		return
	}
	from := starts[0]
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for k := range starts {
		_ = enc.Encode(map[string]any{
			"name":  "change",
			"start": float64(starts[k].Sub(from).Microseconds()) / 1000,
			"ms":    float64(ends[k].Sub(starts[k]).Microseconds()) / 1000,
		})
	}
	for _, sp := range s.env.Spans.Ended() {
		if sp.StartTime().Before(from) {
			continue
		}
		_ = enc.Encode(map[string]any{
			"name":  sp.Name(),
			"trace": sp.SpanContext().TraceID().String(),
			"start": float64(sp.StartTime().Sub(from).Microseconds()) / 1000,
			"ms":    float64(sp.EndTime().Sub(sp.StartTime()).Microseconds()) / 1000,
		})
	}
	if err := os.WriteFile(*scaleSpans, buf.Bytes(), 0o644); err != nil {
		b.Error(err)
	}
}

// writeLogs writes the services' logs where -scale-logs asks.
func writeLogs(b *testing.B, s *scaleStack) {
	if *scaleLogs == "" {
		return
	}
	if err := os.WriteFile(*scaleLogs, []byte(s.env.Logs.String()), 0o644); err != nil {
		b.Error(err)
	}
}

// writeHeapProfile writes the heap profile -scale-heap-profile asks for.
func writeHeapProfile(b *testing.B) {
	if *heapProfile == "" {
		return
	}
	runtime.GC()
	f, err := os.Create(*heapProfile)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
}

var scaleSizes = []struct {
	name string
	n    int
}{{"1k", 1000}, {"10k", 10000}}

// servedTimeout bounds the wait for one change to be served: generous, so
// that a slow run is measured rather than failed.
const servedTimeout = 2 * time.Minute

// startScaleServed prepares the world, starts weft and HAProxy on it and
// waits until every host is served.
func startScaleServed(b testing.TB, src scaleSource, n int) *scaleStack {
	b.Helper()
	w, dir, kube, cs, port := prepareScale(b, src, n)
	s := startScale(b, src, w, dir, kube, cs, port)
	s.allServed(b, 10*time.Minute)
	return s
}

// reportLatency adds p50-ms, p99-ms (the largest sample when there are
// fewer than 100), max-ms and reloads/1000-changes.
func reportLatency(b *testing.B, lat []time.Duration, reloads int) {
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[min(len(lat)-1, len(lat)*99/100)]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
	b.ReportMetric(float64(reloads)*1000/float64(len(lat)), "reloads/1000-changes")
	b.ReportMetric(0, "ns/op")
}

// reportStages adds the median time of each stage of the pipeline
// (stageMedians), from the services' logs.
func reportStages(b *testing.B, s *scaleStack, starts, ends []time.Time) {
	writeLogs(b, s)
	if len(starts) > 0 {
		writeSpans(b, s, starts, ends)
	}
	for metric, v := range stageMedians(s.env.Logs.String(), starts, ends) {
		b.ReportMetric(v, metric)
	}
}

// BenchmarkEndpointToServedAtScale changes the address of one endpoint at a
// time (in its manifest file, or with an update on the API server), each
// of a different Ingress, and times it until served.
func BenchmarkEndpointToServedAtScale(b *testing.B) {
	benchScaleChanges(b, func(b *testing.B, s *scaleStack, k int) (string, string, func()) {
		i := (k*7919 + 13) % s.w.n
		host := s.w.host(i)
		want := s.flip(b, i)
		return host, want, func() { s.only(b, host, want) }
	})
}

// BenchmarkNewHostAtScale adds a host (a rule of an existing Ingress, on its
// existing Service) at a time, and times it until the host is served.
func BenchmarkNewHostAtScale(b *testing.B) {
	benchScaleChanges(b, func(b *testing.B, s *scaleStack, k int) (string, string, func()) {
		i := (k*7919 + 29) % s.w.n
		host := fmt.Sprintf("new%d.scale.test", k)
		s.w.addHost(i, host)
		s.update(b, i, true)
		return host, s.w.answer(i), nil
	})
}

// benchScaleChanges runs change k = 0, 1, ... on every source and size,
// each timed from the moment change starts making it until host answers
// want (then check, when change returns one, runs untimed), and reports
// the latencies, the reloads and the stages.
func benchScaleChanges(b *testing.B, change func(b *testing.B, s *scaleStack, k int) (host, want string, check func())) {
	for _, src := range []scaleSource{fromManifests, fromKube} {
		for _, size := range scaleSizes {
			b.Run(string(src)+"/"+size.name, func(b *testing.B) {
				if src == fromKube && inScaleNetns(b) {
					return
				}
				s := startScaleServed(b, src, size.n)
				before := s.reloads(b)
				var (
					lat          []time.Duration
					starts, ends []time.Time
				)
				stopProfile := startChangesProfile(b)
				for k := 0; b.Loop(); k++ {
					start := time.Now()
					host, want, check := change(b, s, k)
					end := s.served(b, host, want, servedTimeout)
					starts, ends = append(starts, start), append(ends, end)
					lat = append(lat, end.Sub(start))
					if check != nil {
						check()
					}
				}
				stopProfile()
				reportLatency(b, lat, s.reloads(b)-before)
				reportStages(b, s, starts, ends)
			})
		}
	}
}

// BenchmarkInitialSyncToServed starts weft (its services, on a new embedded
// NATS server) on manifests already written and times it until every host
// is served by HAProxy (sync-s; a sample of hosts is timed, then every host
// is checked).
func BenchmarkInitialSyncToServed(b *testing.B) {
	for _, size := range []struct {
		name string
		n    int
	}{{"1k", 1000}, {"5k", 5000}, {"10k", 10000}} {
		b.Run(size.name, func(b *testing.B) {
			w, dir, kube, cs, port := prepareScale(b, fromManifests, size.n)
			s := startScale(b, fromManifests, w, dir, kube, cs, port)
			served := s.allServed(b, 10*time.Minute)
			took := served.Sub(s.started)
			writeHeapProfile(b)
			writeLogs(b, s)
			writeSpans(b, s, []time.Time{s.started}, []time.Time{served})
			s.stop()
			reportOnce(b, map[string]float64{"sync-s": took.Seconds()})
		})
	}
}

// reportOnce reports metrics measured once before the benchmark's loop
// (whose iterations do nothing): these benchmarks measure one run each,
// however long -benchtime asks for; -count repeats them.
func reportOnce(b *testing.B, metrics map[string]float64) {
	for b.Loop() {
	}
	for unit, v := range metrics {
		b.ReportMetric(v, unit)
	}
	b.ReportMetric(0, "ns/op")
}

// hundredThousand is the Ingresses of BenchmarkHundredThousand: with their
// Services and EndpointSlices, 100,002 objects.
const hundredThousand = 33334

// BenchmarkHundredThousand loads 100,002 objects from manifests: the time
// from the start of the services to the first deploy served (load-s), this
// process's resident memory (rss-MB, VmRSS: the NATS server, every service
// and the test) and Go heap in use after a collection (heap-MB), and the
// time of one endpoint change served while all are held (edit-ms).
func BenchmarkHundredThousand(b *testing.B) {
	w, dir, kube, cs, port := prepareScale(b, fromManifests, hundredThousand)
	s := startScale(b, fromManifests, w, dir, kube, cs, port)
	load := s.allServed(b, 20*time.Minute).Sub(s.started)
	writeHeapProfile(b)
	writeLogs(b, s)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss := vmRSS(b, "self")
	i := hundredThousand / 2
	stopProfile := startChangesProfile(b)
	start := time.Now()
	want := s.flip(b, i)
	served := s.served(b, s.w.host(i), want, servedTimeout)
	stopProfile()
	edit := served.Sub(start)
	writeSpans(b, s, []time.Time{start}, []time.Time{served})
	s.only(b, s.w.host(i), want)
	s.stop()
	reportOnce(b, map[string]float64{
		"load-s":  load.Seconds(),
		"rss-MB":  float64(rss) / (1 << 20),
		"heap-MB": float64(ms.HeapInuse) / (1 << 20),
		"edit-ms": float64(edit.Microseconds()) / 1000,
	})
}

// BenchmarkWatcherProcessRSS runs the watcher alone as its own process
// (weft-watcher, built with go build) on N Ingresses with their Services
// and EndpointSlices, and reads its resident memory (rss-MB, VmRSS) once it
// has published every object (sync-s: from its start until then).
func BenchmarkWatcherProcessRSS(b *testing.B) {
	bin := testkit.GoBuild(b, "github.com/weftio/weft/services/watcher/cmd/weft-watcher")
	for _, size := range scaleSizes {
		b.Run(size.name, func(b *testing.B) {
			w := newScaleWorld(size.n, 8080, loopbackBackends)
			dir := b.TempDir()
			w.writeAll(b, filepath.Join(dir, "manifests"))
			cfg := filepath.Join(dir, "weft.yaml")
			if err := os.WriteFile(cfg, []byte(scaleConfig(fromManifests, "", 18080, dir)), 0o644); err != nil {
				b.Fatal(err)
			}
			bus := testkit.NATS(b)
			start := time.Now()
			p := testkit.StartProcess(b, bin, "--config", cfg, "--nats-url", bus.URL, "--listen", "127.0.0.1:0", "--log-level", "warn")
			testkit.Eventually(b, 5*time.Minute, func() error { return synced(bus.JS, "manifests", size.n) })
			took := time.Since(start)
			rss := vmRSS(b, strconv.Itoa(p.Pid()))
			reportOnce(b, map[string]float64{"sync-s": took.Seconds(), "rss-MB": float64(rss) / (1 << 20)})
		})
	}
}

// synced reports nil once the status bucket says source has published n
// objects of each of the world's three types.
func synced(js jetstream.JetStream, source string, n int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := js.KeyValue(ctx, msg.BucketStatus)
	if err != nil {
		return err
	}
	rep, err := msg.ReadStatus(ctx, kv)
	if err != nil {
		return err
	}
	got := map[string]int{}
	for _, sy := range rep.Syncs {
		if sy.Source == source && sy.Synced {
			got[sy.Type] = sy.Count
		}
	}
	for _, typ := range []string{"ingresses", "services", "endpoints"} {
		if got[typ] != n {
			return fmt.Errorf("%w: %s has %v of %d each", errNotYet, source, got, n)
		}
	}
	return nil
}

// vmRSS reads VmRSS of /proc/<pid>/status in bytes.
func vmRSS(b testing.TB, pid string) int64 { return procStatus(b, pid, "VmRSS") }

// procStatus is a size field of /proc/<pid>/status (VmRSS, VmHWM), in
// bytes.
func procStatus(b testing.TB, pid, field string) int64 {
	b.Helper()
	f, err := os.Open(filepath.Join("/proc", pid, "status"))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatal(errors.New("no " + field + " in /proc/" + pid + "/status"))
	return 0
}

// BenchmarkUpProcess runs `weft up` as its own process (built as the
// tests build it, its NATS server embedded) on N Ingresses with their
// Services and EndpointSlices from manifests, delivering to an HAProxy the
// benchmark starts, as BenchmarkHundredThousand's rig does; but the
// process measured holds weft alone, not the benchmark's probes, echo
// backends and world. It reports the time from the start of the process
// until every host is served (load-s), weft's resident memory then
// (rss-MB, VmRSS) and at its peak (peak-MB, VmHWM), HAProxy's (its master
// and workers, haproxy-MB), and one endpoint change served while all are
// held (edit-ms).
func BenchmarkUpProcess(b *testing.B) {
	bin := testkit.GoBuild(b, "github.com/weftio/weft/cmd/weft")
	for _, size := range []struct {
		name string
		n    int
	}{{"10k", 10000}, {"100k", hundredThousand}} {
		b.Run(size.name, func(b *testing.B) {
			w, dir, _, _, port := prepareScale(b, fromManifests, size.n)
			cfg := filepath.Join(dir, "weft.yaml")
			if err := os.WriteFile(cfg, []byte(scaleConfig(fromManifests, "", port, dir)), 0o644); err != nil {
				b.Fatal(err)
			}
			ss := &scaleStack{w: w, src: fromManifests, port: port, stack: &stack{t: b, dir: dir}}
			ss.drv = startScaleHAProxy(b, dir, port)
			ss.started = time.Now()
			p := testkit.StartProcess(b, bin, "up", "--config", cfg, "--data-dir", filepath.Join(dir, "data"),
				"--nats-listen", "127.0.0.1:"+strconv.Itoa(testkit.FreePort(b)), "--listen", "127.0.0.1:0", "--log-level", "warn")
			load := ss.allServed(b, 20*time.Minute).Sub(ss.started)
			pid := strconv.Itoa(p.Pid())
			rss, peak := procStatus(b, pid, "VmRSS"), procStatus(b, pid, "VmHWM")
			// HAProxy's master and workers, old and new: each runs with
			// its configuration file's path on its command line
			var haproxy int64
			for _, p := range testkit.ProcessesNaming(b, filepath.Join(dir, "out", "haproxy.cfg")) {
				haproxy += vmRSS(b, strconv.Itoa(p.Pid))
			}
			i := size.n / 2
			start := time.Now()
			want := ss.flip(b, i)
			edit := ss.served(b, w.host(i), want, servedTimeout).Sub(start)
			ss.only(b, w.host(i), want)
			reportOnce(b, map[string]float64{
				"load-s":     load.Seconds(),
				"rss-MB":     float64(rss) / (1 << 20),
				"peak-MB":    float64(peak) / (1 << 20),
				"haproxy-MB": float64(haproxy) / (1 << 20),
				"edit-ms":    float64(edit.Microseconds()) / 1000,
			})
		})
	}
}

// TestScaleRigServes is the scale benchmarks' rig at 20 Ingresses, from
// manifests and from a kube-apiserver: every host is served, an endpoint
// change moves its host (and only it) to the other backend with no reload,
// and a new host is served.
func TestScaleRigServes(t *testing.T) {
	for _, src := range []scaleSource{fromManifests, fromKube} {
		t.Run(string(src), func(t *testing.T) {
			if src == fromKube && inScaleNetns(t) {
				return
			}
			s := startScaleServed(t, src, 20)
			before := s.reloads(t)
			want := s.flip(t, 7)
			s.served(t, s.w.host(7), want, time.Minute)
			s.only(t, s.w.host(7), want)
			if got := httpGet(s.port, s.w.host(8), "/"); got != "200 a" {
				t.Fatalf("%s answered %q after another host's endpoint changed", s.w.host(8), got)
			}
			if n := s.reloads(t) - before; n != 0 {
				t.Errorf("an endpoint change cost %d reloads, want 0", n)
			}
			s.w.addHost(3, "new.scale.test")
			s.update(t, 3, true)
			s.served(t, "new.scale.test", "a", time.Minute)
		})
	}
}
