package index

import (
	"encoding/json"
	"fmt"
	"reflect"
	"runtime"
	"runtime/debug"
	"testing"
)

// TestObjectsKeptAsJSON: what a reader gets is what Decode makes of the
// object's JSON, before and after a collection has dropped the decoded
// tree, whichever way the object came in.
func TestObjectsKeptAsJSON(t *testing.T) {
	const raw = `{"metadata":{"labels":{"kubernetes.io/service-name":"web"},"name":"a","namespace":"ns"},"ports":[{"port":80}],"weight":1.5}`
	want, err := Decode([]byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	var asFloats map[string]any // as a plain json.Unmarshal gives it: 80.0
	if err := json.Unmarshal([]byte(raw), &asFloats); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		put  Put
	}{
		{"json", Put{JSON: []byte(raw)}},
		{"json and its tree", Put{JSON: []byte(raw), Object: want}},
		{"tree", Put{Object: want}},
		{"tree with whole floats", Put{Object: asFloats}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex(t)
			tt.put.Type, tt.put.ID, tt.put.Rev = "endpoints", "ns/a", 1
			if !ix.Put(tt.put) {
				t.Fatal("Put stored nothing")
			}
			st := ix.Store("endpoints")
			for _, when := range []string{"stored", "after a collection"} {
				if when != "stored" {
					runtime.GC()
				}
				got, ok := st.Get("ns/a")
				if !ok || !reflect.DeepEqual(got, want) {
					t.Errorf("%s: Get = %#v, want %#v", when, got, want)
				}
				if port := got["ports"].([]any)[0].(map[string]any)["port"]; port != 80 {
					t.Errorf("%s: port = %#v, want int 80", when, port)
				}
				if objs := st.GetIndexed("web"); len(objs) != 1 || !reflect.DeepEqual(objs[0], want) {
					t.Errorf("%s: GetIndexed(web) = %v", when, objs)
				}
				it, _ := st.Item("ns/a")
				if !reflect.DeepEqual(it.Object(), want) {
					t.Errorf("%s: Item.Object = %v", when, it.Object())
				}
			}
			it, _ := st.Item("ns/a")
			if got, _ := Decode(it.JSON()); !reflect.DeepEqual(got, want) {
				t.Errorf("JSON %s decodes to %v", it.JSON(), got)
			}
		})
	}
}

// TestPutRefusesWhatIsNotJSON: an object that does not decode (JSON) or
// encode (tree) is not stored, by Put nor by UpsertMany, and the objects
// beside it are.
func TestPutRefusesWhatIsNotJSON(t *testing.T) {
	bad := []Put{
		{Type: "plain", ID: "truncated", Rev: 1, JSON: []byte(`{"a":`)},
		{Type: "plain", ID: "list", Rev: 2, JSON: []byte(`[1,2]`)},
		{Type: "plain", ID: "trailing", Rev: 3, JSON: []byte(`{"a":1} {}`)},
		{Type: "plain", ID: "func", Rev: 4, Object: map[string]any{"f": func() {}}},
	}
	good := Put{Type: "plain", ID: "ok", Rev: 5, JSON: []byte(`{"a":1}`)}
	one := newIndex(t)
	for _, p := range bad {
		if one.Put(p) {
			t.Errorf("Put(%s) stored it", p.ID)
		}
	}
	many := newIndex(t)
	if n := many.UpsertMany(append(bad, good)); n != 1 {
		t.Errorf("UpsertMany = %d, want 1 (only %s)", n, good.ID)
	}
	if got := stored(many.Store("plain")); len(got) != 1 || got[0] != `ok@5 {"a":1}` {
		t.Errorf("stored %v", got)
	}
	if one.Store("plain").Len() != 0 || one.Revision() != 0 {
		t.Errorf("refused puts left %d objects, revision %d", one.Store("plain").Len(), one.Revision())
	}
}

// TestSameJSONIsNoChange: a write of the bytes already stored moves the
// revision and reaches no observer; other bytes do, with the old and new
// trees.
func TestSameJSONIsNoChange(t *testing.T) {
	ix := newIndex(t)
	var changes []Change
	ix.Observe(func(c Change) { changes = append(changes, c) })
	put := func(rev uint64, raw string) bool {
		return ix.Put(Put{Type: "endpoints", ID: "ns/a", Rev: rev, JSON: []byte(raw)})
	}
	put(1, `{"metadata":{"labels":{"kubernetes.io/service-name":"web"}},"v":1}`)
	if put(2, `{"metadata":{"labels":{"kubernetes.io/service-name":"web"}},"v":1}`) {
		t.Error("the same JSON again was a change")
	}
	if rev, _ := ix.Store("endpoints").Revision("ns/a"); rev != 2 {
		t.Errorf("revision %d after the same JSON at 2", rev)
	}
	if !put(3, `{"metadata":{"labels":{"kubernetes.io/service-name":"api"}},"v":2}`) {
		t.Fatal("new content was no change")
	}
	if len(changes) != 2 {
		t.Fatalf("observers saw %d changes, want 2", len(changes))
	}
	c := seenOf(changes[1])
	if c.Old["v"] != 1 || c.New["v"] != 2 || !reflect.DeepEqual(c.OldKeys, []string{"web"}) || !reflect.DeepEqual(c.NewKeys, []string{"api"}) {
		t.Errorf("change %+v", c)
	}
	ix.Delete("endpoints", "ns/a", 4)
	if d := seenOf(changes[len(changes)-1]); d.New != nil || d.Old["v"] != 2 {
		t.Errorf("delete change %+v", d)
	}
}

// TestPrepare: a Put prepared holds the object's JSON and not its tree;
// put in the Index that prepared it, it is stored as it was prepared, and
// in another Index it is indexed by that one's index_by.
func TestPrepare(t *testing.T) {
	ix := newIndex(t)
	p, err := ix.Prepare(Put{Type: "endpoints", ID: "ns/a", Rev: 1, Object: slice("ns", "a", "web")})
	if err != nil {
		t.Fatal(err)
	}
	if p.Object != nil || len(p.JSON) == 0 {
		t.Fatalf("prepared put holds tree %v, JSON %q", p.Object, p.JSON)
	}
	if _, err := ix.Prepare(Put{Type: "endpoints", ID: "bad", JSON: []byte("{")}); err == nil {
		t.Error("Prepare of broken JSON: no error")
	}
	other, err := New([]Spec{{Type: "endpoints", IndexBy: []string{"metadata.name"}}})
	if err != nil {
		t.Fatal(err)
	}
	if ix.UpsertMany([]Put{p}) != 1 || !other.Put(p) {
		t.Fatal("prepared put not stored")
	}
	if got := names(ix.Store("endpoints").GetIndexed("web")); !reflect.DeepEqual(got, []string{"ns/a"}) {
		t.Errorf("GetIndexed(web) = %v", got)
	}
	if got := names(other.Store("endpoints").GetIndexed("a")); !reflect.DeepEqual(got, []string{"ns/a"}) {
		t.Errorf("other index: GetIndexed(a) = %v", got)
	}
}

// TestDecodedTreeSharedUntilACollection: with no collection between
// them, reads of one object share one tree; a collection drops it, and the
// next read decodes the JSON again.
func TestDecodedTreeSharedUntilACollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	ix := newIndex(t)
	ix.Upsert("plain", "a", 1, map[string]any{"k": "v"})
	st := ix.Store("plain")
	a, _ := st.Get("a")
	b, _ := st.Get("a")
	if reflect.ValueOf(a).Pointer() != reflect.ValueOf(b).Pointer() {
		t.Error("two reads with no collection between decoded twice")
	}
	if n := testing.AllocsPerRun(20, func() { st.Get("a") }); n != 0 {
		t.Errorf("a read of a decoded object allocated %v times", n)
	}
	runtime.KeepAlive(a)
	runtime.KeepAlive(b)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	c, _ := st.Get("a")
	runtime.ReadMemStats(&after)
	if after.Mallocs == before.Mallocs {
		t.Error("a read after a collection allocated nothing: the tree was kept")
	}
	if c["k"] != "v" {
		t.Errorf("decoded again: %v", c)
	}
}

// BenchmarkHeld is the heap an Index holds per object (EndpointSlices of
// one endpoint, as the watcher writes them), beside the same objects held
// as decoded trees, which is how the Index kept them before.
func BenchmarkHeld(b *testing.B) {
	const n = 20000
	raws := make([][]byte, n)
	for i := range raws {
		raws[i] = fmt.Appendf(nil, `{"addressType":"IPv4","apiVersion":"discovery.k8s.io/v1","endpoints":[{"addresses":["10.1.%d.%d"],"conditions":{"ready":true}}],"kind":"EndpointSlice","metadata":{"labels":{"kubernetes.io/service-name":"s%d"},"name":"s%d-1","namespace":"scale"},"ports":[{"name":"http","port":8080}]}`, i/250, i%250, i, i)
	}
	held := func(b *testing.B, fill func() any) {
		for b.Loop() {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			keep := fill()
			runtime.GC()
			runtime.ReadMemStats(&after)
			b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/object")
			runtime.KeepAlive(keep)
		}
	}
	b.Run("index", func(b *testing.B) {
		held(b, func() any {
			ix, _ := New([]Spec{{Type: "endpoints", IndexBy: []string{"metadata.labels['kubernetes.io/service-name']"}}})
			puts := make([]Put, n)
			for i, raw := range raws {
				puts[i] = Put{Type: "endpoints", ID: fmt.Sprintf("scale/s%d-1", i), Rev: uint64(i + 1), JSON: raw}
			}
			ix.UpsertMany(puts)
			return ix
		})
	})
	b.Run("trees", func(b *testing.B) {
		held(b, func() any {
			trees := make(map[string]map[string]any, n)
			for i, raw := range raws {
				trees[fmt.Sprintf("scale/s%d-1", i)], _ = Decode(raw)
			}
			return trees
		})
	})
}

// TestClone: a clone holds what the Index held, indexed alike, and writes
// to either (new, changed, deleted objects) leave the other as it was.
func TestClone(t *testing.T) {
	ix := newIndex(t)
	ix.Upsert("endpoints", "ns/a", 1, slice("ns", "a", "web"))
	ix.Upsert("endpoints", "ns/b", 2, slice("ns", "b", "web"))
	ix.Delete("endpoints", "ns/gone", 3)
	c := ix.Clone()
	if !reflect.DeepEqual(stored(c.Store("endpoints")), stored(ix.Store("endpoints"))) || c.Revision() != 3 {
		t.Fatalf("clone %v at %d", stored(c.Store("endpoints")), c.Revision())
	}
	c.Upsert("endpoints", "ns/a", 4, slice("ns", "a", "api"))
	c.Upsert("endpoints", "ns/c", 5, slice("ns", "c", "web"))
	ix.Delete("endpoints", "ns/b", 6)
	if c.Upsert("endpoints", "ns/gone", 2, slice("ns", "gone", "web")) {
		t.Error("the clone lost the tombstone of ns/gone")
	}
	for _, tc := range []struct {
		ix        *Index
		web, api  []string
		revisions uint64
	}{
		{ix, []string{"ns/a"}, []string{}, 6},
		{c, []string{"ns/b", "ns/c"}, []string{"ns/a"}, 5},
	} {
		st := tc.ix.Store("endpoints")
		if got := names(st.GetIndexed("web")); !reflect.DeepEqual(got, tc.web) {
			t.Errorf("GetIndexed(web) = %v, want %v", got, tc.web)
		}
		if got := names(st.GetIndexed("api")); !reflect.DeepEqual(got, tc.api) {
			t.Errorf("GetIndexed(api) = %v, want %v", got, tc.api)
		}
		if tc.ix.Revision() != tc.revisions {
			t.Errorf("revision %d, want %d", tc.ix.Revision(), tc.revisions)
		}
	}
}
