package bench

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
	"github.com/weftio/weft/pkg/testkit"
)

// The ingress library's benchmarks, each at 100, 1,000 and 10,000
// Ingresses (LibraryObjects: with their Services, EndpointSlices and the
// TLS Secrets of every fourth), reporting x-jinja2 like the workload's:
//
//	BenchmarkLibraryJinja2          Python's Jinja2 rendering the library's templates; ns/op is its median render
//	BenchmarkLibraryFullRender      every output, every fragment entry from an empty cache
//	BenchmarkLibraryOneChange       after one EndpointSlice change
//	BenchmarkLibraryTargetOneChange the same through target.Render: plus the bundle and its hash
//	BenchmarkLibraryIndexLoad       loading the index; heap it retains

var (
	libraryMu     sync.Mutex
	libraryLoaded = map[int]*index.Index{}
)

// loadLibrary returns the library workload's index of n Ingresses, built
// once per process and shared by benchmarks that only read it.
func loadLibrary(tb testing.TB, n int) *index.Index {
	tb.Helper()
	libraryMu.Lock()
	defer libraryMu.Unlock()
	if ix := libraryLoaded[n]; ix != nil {
		return ix
	}
	ix, err := LoadLibrary(n)
	if err != nil {
		tb.Fatal(err)
	}
	libraryLoaded[n] = ix
	return ix
}

func librarySpec(tb testing.TB) (engine.Spec, map[string]string) {
	tb.Helper()
	spec, paths, err := LibrarySpec()
	if err != nil {
		tb.Fatal(err)
	}
	return spec, paths
}

// compileLibrary compiles the library's templates as target.Compile does.
func compileLibrary(tb testing.TB) (*engine.Set, func(*index.Index) engine.Input) {
	tb.Helper()
	spec, paths := librarySpec(tb)
	set, err := engine.Compile(spec)
	if err != nil {
		tb.Fatal(err)
	}
	path := PathFunc(paths)
	return set, func(ix *index.Index) engine.Input {
		return engine.Input{Resources: ix.Stores(), Path: path}
	}
}

func renderLibrary(tb testing.TB, set *engine.Set, in engine.Input) *engine.Output {
	tb.Helper()
	out, err := set.Render(context.Background(), in)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func errorLines(out *engine.Output) string {
	var b strings.Builder
	for _, e := range out.Errors {
		fmt.Fprintf(&b, "%s %s: %s\n", e.Type, e.ID, e.Message)
	}
	return b.String()
}

// TestLibraryJinja2RendersTheSame checks that Python's Jinja2, given the
// library's templates and the weft functions they use, renders the library
// workload exactly as the engine does (every output and the registered
// errors), so the benchmarks compare equal work.
func TestLibraryJinja2RendersTheSame(t *testing.T) {
	testkit.Need(t, jinja2Part, jinja2Missing())
	// 300 Ingresses: 75 TLS Secrets, more than the 64 slots.
	ix, err := LoadLibrary(300)
	if err != nil {
		t.Fatal(err)
	}
	set, input := compileLibrary(t)
	out := renderLibrary(t, set, input(ix))
	spec, paths := librarySpec(t)
	dir := t.TempDir()
	data, templates := writeJinja2Input(t, dir, ix, spec, paths)
	res := runJinja2(t, data, templates, 1, dir)
	total := 0
	for _, f := range out.Files {
		py, err := os.ReadFile(filepath.Join(dir, f.Name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(py, f.Content) {
			t.Errorf("%s: Jinja2 rendered %d bytes, the engine %d, and they differ", f.Name, len(py), len(f.Content))
		}
		total += len(f.Content)
	}
	if res.Bytes != total {
		t.Errorf("Jinja2 reports %d bytes, the engine rendered %d", res.Bytes, total)
	}
	pyErrors, err := os.ReadFile(filepath.Join(dir, ".errors"))
	if err != nil {
		t.Fatal(err)
	}
	if got := errorLines(out); string(pyErrors) != got || got == "" {
		t.Errorf("registered errors differ:\n--- engine ---\n%s--- Jinja2 ---\n%s", got, pyErrors)
	}
}

// TestLibraryFragmentsMatchScratch renders the library workload
// incrementally through random changes of EndpointSlices, Services,
// Secrets and Ingresses, and compares every render (files and errors)
// with a render from an empty cache.
func TestLibraryFragmentsMatchScratch(t *testing.T) {
	const n = 80
	ix, err := LoadLibrary(n)
	if err != nil {
		t.Fatal(err)
	}
	set, input := compileLibrary(t)
	ix.Observe(func(c index.Change) {
		set.Invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	rng := rand.New(rand.NewPCG(11, 3))
	rev := ix.Revision()
	steps := 25
	if raceEnabled {
		steps = 6
	}
	for step := range steps + 1 {
		var got, want *engine.Output
		ix.Read(func(uint64) {
			got = renderLibrary(t, set, input(ix))
			scratch, _ := compileLibrary(t)
			want = renderLibrary(t, scratch, input(ix))
		})
		for i, f := range want.Files {
			if !bytes.Equal(got.Files[i].Content, f.Content) {
				t.Fatalf("step %d: %s differs from a render from scratch", step, f.Name)
			}
		}
		if errorLines(got) != errorLines(want) {
			t.Fatalf("step %d: errors differ from a render from scratch", step)
		}
		if step > 0 && len(got.FragmentsRendered) > 4 {
			t.Errorf("step %d rendered %d entries for one change", step, len(got.FragmentsRendered))
		}
		rev++
		i := rng.IntN(n + 10)
		var o Object
		switch rng.IntN(5) {
		case 0, 1:
			o = EndpointSlice(i, step+1)
		case 2:
			o = Service(i)
			o.Obj["spec"].(map[string]any)["ports"] = []any{map[string]any{"name": "http", "port": 80 + step%2}}
		case 3:
			o = Secret(i)
			o.Obj["type"] = []string{"Opaque", "kubernetes.io/tls"}[step%2]
		case 4:
			o = Ingress(i)
			if step%3 == 0 {
				ix.Delete(o.Type, o.ID, rev)
				continue
			}
		}
		ix.Upsert(o.Type, o.ID, rev, o.Obj)
	}
}

// BenchmarkLibraryJinja2 is Python's Jinja2 rendering the library's
// templates over the same data as BenchmarkLibraryFullRender; ns/op is the
// median of its timed renders.
func BenchmarkLibraryJinja2(b *testing.B) {
	benchmarkJinja2(b, workloadLibrary)
}

// BenchmarkLibraryFullRender renders every output of the library from an
// empty fragment cache: every fragment entry is rendered (in parallel on
// GOMAXPROCS goroutines). cache-MB is the heap the filled cache retains.
func BenchmarkLibraryFullRender(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			ix := loadLibrary(b, n)
			var set *engine.Set
			var input func(*index.Index) engine.Input
			var bytes int
			b.ReportAllocs()
			fastest := measure(b, func() { set, input = compileLibrary(b) }, func() {
				out := renderLibrary(b, set, input(ix))
				bytes = 0
				for _, f := range out.Files {
					bytes += len(f.Content)
				}
			})
			b.ReportMetric(float64(bytes), "bytes/render")
			reportRatio(b, workloadLibrary, n, fastest)
			b.StopTimer()
			set, input = compileLibrary(b)
			before := heap()
			renderLibrary(b, set, input(ix))
			b.ReportMetric(float64(heap()-before)/(1<<20), "cache-MB")
			runtime.KeepAlive(set)
		})
	}
}

// BenchmarkLibraryOneChange changes one EndpointSlice and renders the
// library again: one fragment entry is rendered, the rest reused.
func BenchmarkLibraryOneChange(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			set, input := compileLibrary(b)
			oc := newLibraryOneChange(b, n, set.Invalidate)
			in := input(oc.ix)
			renderLibrary(b, set, in)
			rendered := 0
			b.ReportAllocs()
			fastest := measure(b, nil, func() {
				oc.step()
				rendered += len(renderLibrary(b, set, in).FragmentsRendered)
			})
			b.ReportMetric(float64(rendered)/float64(b.N), "entries/op")
			reportRatio(b, workloadLibrary, n, fastest)
		})
	}
}

// newLibraryOneChange is newOneChange over the library workload's index.
func newLibraryOneChange(b *testing.B, n int, invalidate func([]engine.Change) bool) *oneChange {
	b.Helper()
	ix, err := LoadLibrary(n)
	if err != nil {
		b.Fatal(err)
	}
	ix.Observe(func(c index.Change) {
		invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	return &oneChange{ix: ix, rev: ix.Revision(), n: n}
}

// BenchmarkLibraryTargetOneChange is BenchmarkLibraryOneChange as the
// renderer service runs it: through target.Render, which also lays out the
// bundle and hashes it.
func BenchmarkLibraryTargetOneChange(b *testing.B) {
	for _, n := range sizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			tg, err := target.Compile("bench", LibraryTarget())
			if err != nil {
				b.Fatal(err)
			}
			oc := newLibraryOneChange(b, n, tg.Invalidate)
			ctx := context.Background()
			if _, err := tg.Render(ctx, oc.ix.Stores(), nil); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			fastest := measure(b, nil, func() {
				oc.step()
				if _, err := tg.Render(ctx, oc.ix.Stores(), nil); err != nil {
					b.Fatal(err)
				}
			})
			reportRatio(b, workloadLibrary, n, fastest)
		})
	}
}

// BenchmarkLibraryIndexLoad is BenchmarkIndexLoad for the library
// workload's objects and types.
func BenchmarkLibraryIndexLoad(b *testing.B) {
	benchmarkIndexLoad(b, LibraryTypes, LibraryObjects)
}
