package engine

import (
	"context"
	"reflect"
	"runtime"
	"testing"

	"github.com/weftio/weft/pkg/render/index"
)

// same reports whether two trees are one map.
func same(a, b objectMap) bool { return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer() }

// TestKeptTrees: an object an output reads is decoded once while renders
// that follow each other read it, garbage collections between them or
// not; a render that does not read it drops it; a new revision is read
// anew; a fragment entry's reads are not kept.
func TestKeptTrees(t *testing.T) {
	ix, err := index.New([]index.Spec{{Type: "svc", IndexBy: []string{"metadata.name"}}})
	if err != nil {
		t.Fatal(err)
	}
	ix.Upsert("svc", "a", 1, map[string]any{"metadata": map[string]any{"name": "a"}, "port": 80})
	var kept keptTrees
	read := func(keep bool) objectMap {
		res := newResources(ix.Stores(), &kept).recording(&reads{}, keep)
		obj, ok := res["svc"].(*storeValue).get("a")
		if !ok {
			t.Fatal("a not found")
		}
		return obj
	}
	render := func(reads ...bool) []objectMap {
		kept.start()
		defer kept.end()
		var out []objectMap
		for _, keep := range reads {
			out = append(out, read(keep))
		}
		return out
	}

	first := render(true, true)
	if !same(first[0], first[1]) {
		t.Error("two reads in one render decoded twice")
	}
	runtime.GC()
	if again := render(true); !same(again[0], first[0]) {
		t.Error("the next render, after a collection, decoded the object again")
	}
	render() // reads nothing: drops it
	runtime.GC()
	if later := render(true); same(later[0], first[0]) {
		t.Error("a render that did not read the object kept it")
	}

	ix.Upsert("svc", "a", 2, map[string]any{"metadata": map[string]any{"name": "a"}, "port": 81})
	if got := render(true)[0]; got["port"] != 81 {
		t.Errorf("after a new revision: port %v, want 81", got["port"])
	}

	kept.start()
	read(false)
	if n := len(kept.cur); n != 0 {
		t.Errorf("a fragment entry's read was kept (%d trees)", n)
	}
	kept.end()
}

// TestOutputsReadKeptTreesThroughRender: a Set's outputs read the same
// trees from one Render to the next, and render the new content of an
// object that changed.
func TestOutputsReadKeptTreesThroughRender(t *testing.T) {
	set, err := Compile(Spec{Outputs: []Template{{Kind: KindConfig, Name: "out", Text: `{% for id, s in resources.svc.items() %}{{ id }}:{{ s.port }};{% endfor %}`}}})
	if err != nil {
		t.Fatal(err)
	}
	ix, err := index.New([]index.Spec{{Type: "svc"}})
	if err != nil {
		t.Fatal(err)
	}
	ix.Upsert("svc", "a", 1, map[string]any{"port": 80})
	ix.Upsert("svc", "b", 2, map[string]any{"port": 443})
	render := func() string {
		out, err := set.Render(context.Background(), Input{Resources: ix.Stores()})
		if err != nil {
			t.Fatal(err)
		}
		return string(out.Files[0].Content)
	}
	if got := render(); got != "a:80;b:443;" {
		t.Fatalf("first render %q", got)
	}
	if n := len(set.kept.cur); n != 2 {
		t.Errorf("%d trees kept after the render, want the 2 it read", n)
	}
	ix.Upsert("svc", "b", 3, map[string]any{"port": 8443})
	runtime.GC()
	if got := render(); got != "a:80;b:8443;" {
		t.Fatalf("after a change %q", got)
	}
}
