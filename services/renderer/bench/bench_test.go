package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/testkit"
)

// The benchmarks, each at 100, 1,000 and 10,000 Ingresses:
//
//	BenchmarkJinja2            Python's Jinja2 3.1 rendering Spec(false); ns/op is its median render
//	BenchmarkFullRender        (a) every output without fragments, a fresh Set each render
//	BenchmarkFullRenderOneChange (a) on one Set, after one EndpointSlice change
//	BenchmarkFragmentsCold     (b) with fragments, from an empty cache
//	BenchmarkFragmentsOneChange (c) with fragments, after one EndpointSlice change
//	BenchmarkTargetOneChange   (c) through target.Render: plus the bundle and its hash
//	BenchmarkIndexLoad         (d) loading the index from JSON; heap it retains
//
// Every benchmark also reports min-ns/op, its fastest op (the steadiest
// figure on a shared, noisy machine), and cpu-ns/op, the process's CPU time
// per op (user and system, all threads: GC and parallel rendering
// included). Where /usr/bin/python3 has jinja2, (a), (b) and (c) also
// report x-jinja2 and x-jinja2-min: their mean and fastest time per render
// divided by Jinja2's median and fastest, measured in the same run (by the
// latest BenchmarkJinja2 run at that size, or just before).

var sizes = []int{100, 1000, 10000}

var (
	loadedMu sync.Mutex
	loaded   = map[int]*index.Index{}
)

// load returns the workload's index of n Ingresses, built once per process
// and shared by benchmarks that only read it.
func load(tb testing.TB, n int) *index.Index {
	tb.Helper()
	loadedMu.Lock()
	defer loadedMu.Unlock()
	if ix := loaded[n]; ix != nil {
		return ix
	}
	ix, err := Load(n)
	if err != nil {
		tb.Fatal(err)
	}
	loaded[n] = ix
	return ix
}

func compile(tb testing.TB, fragments bool) *engine.Set {
	tb.Helper()
	set, err := engine.Compile(Spec(fragments))
	if err != nil {
		tb.Fatal(err)
	}
	return set
}

// The workloads Python's Jinja2 renders: the workload template without
// fragments, and the ingress library.
const (
	workloadTemplate = "template"
	workloadLibrary  = "library"
)

// jinja2Inputs write the Jinja2 input of each workload at n Ingresses.
var jinja2Inputs = map[string]func(b *testing.B, dir string, n int) (data, templates string){
	workloadTemplate: func(b *testing.B, dir string, n int) (string, string) {
		return writeJinja2Input(b, dir, load(b, n), Spec(false), nil)
	},
	workloadLibrary: func(b *testing.B, dir string, n int) (string, string) {
		spec, paths := librarySpec(b)
		return writeJinja2Input(b, dir, loadLibrary(b, n), spec, paths)
	},
}

type jinja2Key struct {
	workload string
	n        int
}

var (
	jinja2Mu  sync.Mutex
	jinja2Res = map[jinja2Key]*jinja2Result{} // the latest measurement per workload and size
)

// jinja2Iterations is how many renders Python times per size.
var jinja2Iterations = map[int]int{100: 20, 1000: 5, 10000: 3}

// jinja2 returns the latest measurement of Python's Jinja2 rendering the
// workload of n Ingresses, measuring it when there is none or fresh is
// set; nil when Jinja2 is not available (a failure under CI).
func jinja2(b *testing.B, workload string, n int, fresh bool) *jinja2Result {
	b.Helper()
	jinja2Mu.Lock()
	defer jinja2Mu.Unlock()
	key := jinja2Key{workload, n}
	if res, ok := jinja2Res[key]; ok && !fresh {
		return res
	}
	var res *jinja2Result
	if testkit.Want(b, jinja2Part+", the x-jinja2 metrics' reference", jinja2Missing()) {
		dir := b.TempDir()
		data, templates := jinja2Inputs[workload](b, dir, n)
		r := runJinja2(b, data, templates, jinja2Iterations[n], "")
		res = &r
	}
	jinja2Res[key] = res
	return res
}

// cpuTime is the CPU time the process has used so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// measure runs op b.N times, after collecting the garbage of the setup so
// far, and reports the fastest op and the CPU time per op beside the
// framework's mean wall time; setup (untimed) runs before each op. It
// returns the fastest op.
func measure(b *testing.B, setup, op func()) time.Duration {
	b.Helper()
	runtime.GC()
	var cpu time.Duration
	fastest := time.Duration(math.MaxInt64)
	for b.Loop() {
		if setup != nil {
			b.StopTimer()
			setup()
			b.StartTimer()
		}
		start, startCPU := time.Now(), cpuTime()
		op()
		cpu += cpuTime() - startCPU
		fastest = min(fastest, time.Since(start))
	}
	b.ReportMetric(float64(fastest.Nanoseconds()), "min-ns/op")
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	return fastest
}

// reportRatio reports the benchmark's mean and fastest time per op divided
// by Jinja2's median and fastest render of the workload at the same size.
func reportRatio(b *testing.B, workload string, n int, fastest time.Duration) {
	b.Helper()
	res := jinja2(b, workload, n, false)
	if res == nil || b.N == 0 {
		return
	}
	perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(perOp/(res.MsMedian*1e6), "x-jinja2")
	b.ReportMetric(float64(fastest.Nanoseconds())/(res.MsMin*1e6), "x-jinja2-min")
}

// BenchmarkJinja2 is Python's Jinja2 rendering the same templates and data
// as BenchmarkFullRender; ns/op is the median of its timed renders (the
// interpreter's start and the data's loading are not counted).
func BenchmarkJinja2(b *testing.B) {
	benchmarkJinja2(b, workloadTemplate)
}

func benchmarkJinja2(b *testing.B, workload string) {
	testkit.Need(b, jinja2Part, jinja2Missing())
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			var res *jinja2Result
			for b.Loop() {
				res = jinja2(b, workload, n, true)
			}
			b.ReportMetric(res.MsMedian*1e6, "ns/op")
			b.ReportMetric(res.MsMin*1e6, "min-ns/op")
			b.ReportMetric(res.CPUMsMedian*1e6, "cpu-ns/op")
			b.ReportMetric(float64(res.Bytes), "bytes/render")
		})
	}
}

// BenchmarkFullRender (a) renders every output without fragments, each
// time with a freshly compiled Set (a Set keeps its outputs between
// renders).
func BenchmarkFullRender(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ix := load(b, n)
			var set *engine.Set
			in := engine.Input{Resources: ix.Stores(), Values: Values}
			ctx := context.Background()
			var bytes int
			b.ReportAllocs()
			fastest := measure(b, func() { set = compile(b, false) }, func() {
				out, err := set.Render(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				bytes = len(out.Files[0].Content) + len(out.Files[1].Content)
			})
			b.ReportMetric(float64(bytes), "bytes/render")
			reportRatio(b, workloadTemplate, n, fastest)
		})
	}
}

// BenchmarkFragmentsCold (b) renders with fragments from an empty cache:
// every entry is rendered (in parallel on GOMAXPROCS goroutines). cache-MB
// is the heap the filled cache retains.
func BenchmarkFragmentsCold(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ix := load(b, n)
			in := engine.Input{Resources: ix.Stores(), Values: Values}
			ctx := context.Background()
			var set *engine.Set
			b.ReportAllocs()
			fastest := measure(b, func() { set = compile(b, true) }, func() {
				if _, err := set.Render(ctx, in); err != nil {
					b.Fatal(err)
				}
			})
			reportRatio(b, workloadTemplate, n, fastest)
			b.StopTimer()
			set = compile(b, true)
			before := heap()
			if _, err := set.Render(ctx, in); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(heap()-before)/(1<<20), "cache-MB")
			runtime.KeepAlive(set)
		})
	}
}

// oneChange is a warm fragment Set over its own index, fed the index's
// changes as the renderer feeds them; step changes the EndpointSlice of
// one Ingress after another.
type oneChange struct {
	ix  *index.Index
	rev uint64
	k   int
	n   int
}

func newOneChange(b *testing.B, n int, invalidate func([]engine.Change) bool) *oneChange {
	b.Helper()
	ix, err := Load(n)
	if err != nil {
		b.Fatal(err)
	}
	ix.Observe(func(c index.Change) {
		invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	return &oneChange{ix: ix, rev: ix.Revision(), n: n}
}

func (o *oneChange) step() {
	o.k++
	o.rev++
	e := EndpointSlice((o.k*7919)%o.n, o.k)
	o.ix.Upsert(e.Type, e.ID, o.rev, e.Obj)
}

// BenchmarkFullRenderOneChange is (a) as the renderer runs a template
// without fragments: one Set, one EndpointSlice changed before each
// render, so every output, which reads every object, renders again.
func BenchmarkFullRenderOneChange(b *testing.B) { benchmarkOneChange(b, false) }

// BenchmarkFragmentsOneChange (c) changes one EndpointSlice and renders
// again: one fragment entry is rendered, the rest reused, and the outputs
// join them.
func BenchmarkFragmentsOneChange(b *testing.B) { benchmarkOneChange(b, true) }

// benchmarkOneChange renders the workload (with fragments or without)
// once, then again after each change of one EndpointSlice, on one Set.
func benchmarkOneChange(b *testing.B, fragments bool) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			set := compile(b, fragments)
			oc := newOneChange(b, n, set.Invalidate)
			in := engine.Input{Resources: oc.ix.Stores(), Values: Values}
			ctx := context.Background()
			if _, err := set.Render(ctx, in); err != nil {
				b.Fatal(err)
			}
			rendered := 0
			b.ReportAllocs()
			fastest := measure(b, nil, func() {
				oc.step()
				out, err := set.Render(ctx, in)
				if err != nil {
					b.Fatal(err)
				}
				rendered += len(out.FragmentsRendered)
			})
			if fragments {
				b.ReportMetric(float64(rendered)/float64(b.N), "entries/op")
			}
			reportRatio(b, workloadTemplate, n, fastest)
		})
	}
}

// targetConfig is the workload with fragments as a configured target.
func targetConfig() config.Target {
	spec := Spec(true)
	t := config.Target{
		Base:             "/etc/haproxy",
		TemplateSnippets: map[string]config.Template{},
		Fragments:        map[string]config.Fragment{},
		Maps:             map[string]config.Template{},
	}
	for name, text := range spec.Snippets {
		t.TemplateSnippets[name] = config.Template{Template: text}
	}
	for name, f := range spec.Fragments {
		t.Fragments[name] = config.Fragment{ForEach: f.ForEach, Template: f.Text}
	}
	for _, o := range spec.Outputs {
		if o.Kind == engine.KindConfig {
			t.HAProxyConfig = config.Template{Template: o.Text}
		} else {
			t.Maps[o.Name] = config.Template{Template: o.Text}
		}
	}
	return t
}

// BenchmarkTargetOneChange is (c) as the renderer service runs it: through
// target.Render, which also lays out the bundle and hashes it.
func BenchmarkTargetOneChange(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			tg, err := target.Compile("bench", targetConfig())
			if err != nil {
				b.Fatal(err)
			}
			oc := newOneChange(b, n, tg.Invalidate)
			ctx := context.Background()
			if _, err := tg.Render(ctx, oc.ix.Stores(), Values); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			measure(b, nil, func() {
				oc.step()
				if _, err := tg.Render(ctx, oc.ix.Stores(), Values); err != nil {
					b.Fatal(err)
				}
			})
		})
	}
}

func heap() uint64 {
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkIndexLoad (d) loads 3n objects into a new index per op from
// their JSON, as the renderer loads its bucket (each object decoded and its
// keys read, then one UpsertMany), and reports the heap retained: index-MB
// by the index (the objects' JSON, entries, sorted ids, key tuples, prefix
// maps), objects-MB by the same objects decoded, which is what the index
// held on top of its own structures when it kept trees.
func BenchmarkIndexLoad(b *testing.B) {
	benchmarkIndexLoad(b, Types, Objects)
}

func benchmarkIndexLoad(b *testing.B, types []index.Spec, objects func(n int) []Object) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			objs := objects(n)
			puts := make([]index.Put, len(objs))
			for i, o := range objs {
				raw, err := json.Marshal(o.Obj)
				if err != nil {
					b.Fatal(err)
				}
				puts[i] = index.Put{Type: o.Type, ID: o.ID, Rev: uint64(i + 1), JSON: raw}
			}
			load := func() *index.Index {
				ix, err := index.New(types)
				if err != nil {
					b.Fatal(err)
				}
				ix.UpsertMany(puts)
				return ix
			}
			before := heap()
			trees := make([]map[string]any, len(puts))
			for i, p := range puts {
				trees[i], _ = index.Decode(p.JSON)
			}
			withTrees := heap()
			runtime.KeepAlive(trees)
			trees = nil
			start := heap()
			ix := load()
			loaded := heap()
			runtime.KeepAlive(ix)
			b.ReportAllocs()
			measure(b, nil, func() { load() })
			b.ReportMetric(float64(withTrees-before)/(1<<20), "objects-MB")
			b.ReportMetric(float64(loaded-start)/(1<<20), "index-MB")
		})
	}
}
