package bench

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/testkit"
)

func renderAll(t *testing.T, set *engine.Set, ix *index.Index) *engine.Output {
	t.Helper()
	var out *engine.Output
	var err error
	ix.Read(func(uint64) {
		out, err = set.Render(context.Background(), engine.Input{Resources: ix.Stores(), Values: Values})
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sameFiles(t *testing.T, what string, got, want *engine.Output) {
	t.Helper()
	for i, f := range want.Files {
		if !bytes.Equal(got.Files[i].Content, f.Content) {
			t.Fatalf("%s: %s differs (%d bytes, want %d)", what, f.Name, len(got.Files[i].Content), len(f.Content))
		}
	}
}

// TestFragmentsMatchFullRender renders the workload with fragments,
// incrementally through random changes of EndpointSlices, Services and
// Ingresses, and compares every render with a full render without
// fragments.
func TestFragmentsMatchFullRender(t *testing.T) {
	const n = 150
	ix, err := Load(n)
	if err != nil {
		t.Fatal(err)
	}
	full := compile(t, false)
	frag := compile(t, true)
	ix.Observe(func(c index.Change) {
		frag.Invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	out := renderAll(t, frag, ix)
	if len(out.FragmentsRendered) != 2*n {
		t.Fatalf("first render rendered %d entries, want %d", len(out.FragmentsRendered), 2*n)
	}
	sameFiles(t, "first render", out, renderAll(t, full, ix))

	rng := rand.New(rand.NewPCG(7, 7))
	rev := ix.Revision()
	steps := 60
	if raceEnabled {
		steps = 12
	}
	for step := range steps {
		rev++
		i := rng.IntN(n + 20) // some beyond n: new objects
		switch rng.IntN(6) {
		case 0, 1:
			o := EndpointSlice(i, step+1)
			ix.Upsert(o.Type, o.ID, rev, o.Obj)
		case 2:
			o := EndpointSlice(i, step+1)
			// The slice now belongs to another Service.
			o.Obj["metadata"].(map[string]any)["labels"] = map[string]any{"kubernetes.io/service-name": Service(rng.IntN(n)).Obj["metadata"].(map[string]any)["name"]}
			ix.Upsert(o.Type, o.ID, rev, o.Obj)
		case 3:
			o := Service(i)
			o.Obj["spec"].(map[string]any)["ports"] = []any{map[string]any{"name": "http", "port": 80, "targetPort": 8000 + step}}
			ix.Upsert(o.Type, o.ID, rev, o.Obj)
		case 4:
			o := Ingress(i)
			ix.Upsert(o.Type, o.ID, rev, o.Obj)
		case 5:
			typ := []string{"ingresses", "services", "endpoints"}[rng.IntN(3)]
			if items := ix.Store(typ).Items(); len(items) > 0 {
				ix.Delete(typ, items[rng.IntN(len(items))].ID, rev)
			}
		}
		got := renderAll(t, frag, ix)
		if len(got.FragmentsRendered) > 4 {
			t.Errorf("step %d rendered %d entries for one change", step, len(got.FragmentsRendered))
		}
		sameFiles(t, "incremental render", got, renderAll(t, full, ix))
	}
}

// TestJinja2RendersTheSame checks that Python's Jinja2 renders the workload
// exactly as the engine does, so the benchmarks compare equal work.
func TestJinja2RendersTheSame(t *testing.T) {
	testkit.Need(t, jinja2Part, jinja2Missing())
	ix, err := Load(60)
	if err != nil {
		t.Fatal(err)
	}
	spec := Spec(false)
	out := renderAll(t, compile(t, false), ix)
	dir := t.TempDir()
	data, templates := writeJinja2Input(t, dir, ix, spec, nil)
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
}
