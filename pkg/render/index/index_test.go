package index

import (
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/weftio/weft/pkg/config/fieldpath"
)

func slice(ns, name, svc string) map[string]any {
	md := map[string]any{"namespace": ns, "name": name}
	if svc != "" {
		md["labels"] = map[string]any{"kubernetes.io/service-name": svc}
	}
	return map[string]any{"metadata": md}
}

func names(objs []map[string]any) []string {
	out := []string{}
	for _, o := range objs {
		md := o["metadata"].(map[string]any)
		out = append(out, md["namespace"].(string)+"/"+md["name"].(string))
	}
	return out
}

func newIndex(t *testing.T) *Index {
	t.Helper()
	ix, err := New([]Spec{
		{Type: "ingresses", IndexBy: []string{"metadata.namespace", "metadata.name"}},
		{Type: "endpoints", IndexBy: []string{"metadata.labels['kubernetes.io/service-name']"}},
		{Type: "plain"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return ix
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name  string
		specs []Spec
		want  []string
	}{
		{"bad expression", []Spec{{Type: "svc", IndexBy: []string{"metadata..name"}}}, []string{`type "svc"`, `"metadata..name"`, "column 10"}},
		{"unterminated key", []Spec{{Type: "eps", IndexBy: []string{"metadata.namespace", "metadata.labels['x"}}}, []string{`type "eps"`, `metadata.labels['x`}},
		{"empty type", []Spec{{Type: ""}}, []string{"empty type name"}},
		{"duplicate type", []Spec{{Type: "a"}, {Type: "a"}}, []string{`type "a" declared twice`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.specs)
			if err == nil {
				t.Fatal("New succeeded, want error")
			}
			if !errors.Is(err, ErrSpec) {
				t.Errorf("%v is not ErrSpec", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	_, err := New([]Spec{{Type: "svc", IndexBy: []string{"a."}}})
	if !errors.Is(err, fieldpath.ErrSyntax) {
		t.Errorf("syntax error not wrapped: %v", err)
	}
}

func TestGetIndexed(t *testing.T) {
	ix := newIndex(t)
	objs := []struct {
		typ, id string
		obj     map[string]any
	}{
		{"ingresses", "prod/web", slice("prod", "web", "")},
		{"ingresses", "prod/api", slice("prod", "api", "")},
		{"ingresses", "dev/web", slice("dev", "web", "")},
		{"endpoints", "prod/web-abc", slice("prod", "web-abc", "web")},
		{"endpoints", "prod/web-def", slice("prod", "web-def", "web")},
		{"endpoints", "prod/api-1", slice("prod", "api-1", "api")},
		{"endpoints", "prod/orphan", slice("prod", "orphan", "")},
	}
	for i, o := range objs {
		if !ix.Upsert(o.typ, o.id, uint64(i+1), o.obj) {
			t.Fatalf("Upsert %s %s ignored", o.typ, o.id)
		}
	}
	tests := []struct {
		typ  string
		keys []string
		want []string
	}{
		{"ingresses", []string{"prod", "web"}, []string{"prod/web"}},
		{"ingresses", []string{"prod"}, []string{"prod/api", "prod/web"}},
		{"ingresses", []string{"dev"}, []string{"dev/web"}},
		{"ingresses", []string{"prod", "nope"}, []string{}},
		{"ingresses", []string{"staging"}, []string{}},
		{"ingresses", nil, []string{"dev/web", "prod/api", "prod/web"}},
		{"ingresses", []string{"prod", "web", "extra"}, []string{}},
		{"endpoints", []string{"web"}, []string{"prod/web-abc", "prod/web-def"}},
		{"endpoints", []string{"api"}, []string{"prod/api-1"}},
		{"endpoints", []string{""}, []string{"prod/orphan"}},
		{"plain", nil, []string{}},
		{"plain", []string{"x"}, []string{}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.typ, tt.keys), func(t *testing.T) {
			got := names(ix.Store(tt.typ).GetIndexed(tt.keys...))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("GetIndexed(%q) = %q, want %q", tt.keys, got, tt.want)
			}
		})
	}
	if got := ix.Counts(); !reflect.DeepEqual(got, map[string]int{"ingresses": 3, "endpoints": 4, "plain": 0}) {
		t.Errorf("Counts = %v", got)
	}
	if ix.Revision() != uint64(len(objs)) {
		t.Errorf("Revision = %d", ix.Revision())
	}
	items := ix.Store("ingresses").Items()
	var ids []string
	for _, it := range items {
		ids = append(ids, it.ID)
	}
	if !reflect.DeepEqual(ids, []string{"dev/web", "prod/api", "prod/web"}) {
		t.Errorf("Items order = %q", ids)
	}
	if got := ix.Types(); !reflect.DeepEqual(got, []string{"endpoints", "ingresses", "plain"}) {
		t.Errorf("Types = %q", got)
	}
	if ix.Store("nope") != nil {
		t.Error("Store of unknown type is not nil")
	}
	if got := ix.Store("endpoints").IndexBy(); !reflect.DeepEqual(got, []string{"metadata.labels['kubernetes.io/service-name']"}) {
		t.Errorf("IndexBy = %q", got)
	}
}

func TestUpdatesAndRevisions(t *testing.T) {
	type op struct {
		del  bool
		id   string
		rev  uint64
		svc  string
		want bool
	}
	tests := []struct {
		name    string
		ops     []op
		lookups map[string][]string // service name -> ids
		rev     uint64
		count   int
	}{
		{
			name: "update moves object between keys",
			ops: []op{
				{id: "a", rev: 1, svc: "web", want: true},
				{id: "a", rev: 2, svc: "api", want: true},
			},
			lookups: map[string][]string{"web": {}, "api": {"ns/a"}},
			rev:     2, count: 1,
		},
		{
			name: "stale revision ignored",
			ops: []op{
				{id: "a", rev: 5, svc: "web", want: true},
				{id: "a", rev: 4, svc: "api", want: false},
				{id: "a", rev: 5, svc: "api", want: false},
			},
			lookups: map[string][]string{"web": {"ns/a"}, "api": {}},
			rev:     5, count: 1,
		},
		{
			name: "delete removes from every key",
			ops: []op{
				{id: "a", rev: 1, svc: "web", want: true},
				{id: "b", rev: 2, svc: "web", want: true},
				{del: true, id: "a", rev: 3, want: true},
			},
			lookups: map[string][]string{"web": {"ns/b"}},
			rev:     3, count: 1,
		},
		{
			name: "redelivered delete and late upsert change nothing",
			ops: []op{
				{id: "a", rev: 1, svc: "web", want: true},
				{del: true, id: "a", rev: 3, want: true},
				{del: true, id: "a", rev: 3, want: false},
				{id: "a", rev: 2, svc: "web", want: false},
			},
			lookups: map[string][]string{"web": {}},
			rev:     3, count: 0,
		},
		{
			name: "recreate after delete",
			ops: []op{
				{id: "a", rev: 1, svc: "web", want: true},
				{del: true, id: "a", rev: 2, want: true},
				{id: "a", rev: 3, svc: "api", want: true},
			},
			lookups: map[string][]string{"web": {}, "api": {"ns/a"}},
			rev:     3, count: 1,
		},
		{
			name: "delete of unknown id blocks older upsert",
			ops: []op{
				{del: true, id: "a", rev: 7, want: false},
				{id: "a", rev: 6, svc: "web", want: false},
				{id: "a", rev: 8, svc: "web", want: true},
			},
			lookups: map[string][]string{"web": {"ns/a"}},
			rev:     8, count: 1,
		},
		{
			name: "stale delete ignored",
			ops: []op{
				{id: "a", rev: 4, svc: "web", want: true},
				{del: true, id: "a", rev: 3, want: false},
			},
			lookups: map[string][]string{"web": {"ns/a"}},
			rev:     4, count: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix := newIndex(t)
			for i, o := range tt.ops {
				var got bool
				if o.del {
					got = ix.Delete("endpoints", o.id, o.rev)
				} else {
					got = ix.Upsert("endpoints", o.id, o.rev, slice("ns", o.id, o.svc))
				}
				if got != o.want {
					t.Fatalf("op %d (%+v) = %v, want %v", i, o, got, o.want)
				}
			}
			st := ix.Store("endpoints")
			for svc, want := range tt.lookups {
				if got := names(st.GetIndexed(svc)); !reflect.DeepEqual(got, want) {
					t.Errorf("GetIndexed(%q) = %q, want %q", svc, got, want)
				}
			}
			if ix.Revision() != tt.rev {
				t.Errorf("Revision = %d, want %d", ix.Revision(), tt.rev)
			}
			if st.Len() != tt.count || len(st.Items()) != tt.count {
				t.Errorf("Len = %d, Items = %d, want %d", st.Len(), len(st.Items()), tt.count)
			}
		})
	}
}

func TestUnknownTypeIgnored(t *testing.T) {
	ix := newIndex(t)
	if ix.Upsert("nope", "a", 1, slice("ns", "a", "")) {
		t.Error("Upsert of unknown type accepted")
	}
	if ix.Delete("nope", "a", 2) {
		t.Error("Delete of unknown type accepted")
	}
	if ix.Revision() != 0 {
		t.Errorf("Revision = %d", ix.Revision())
	}
}

func TestGetAndRevision(t *testing.T) {
	ix := newIndex(t)
	obj := slice("prod", "web", "")
	ix.Upsert("ingresses", "prod/web", 9, obj)
	st := ix.Store("ingresses")
	got, ok := st.Get("prod/web")
	if !ok || !reflect.DeepEqual(got, obj) {
		t.Errorf("Get = %v, %v", got, ok)
	}
	if _, ok := st.Get("prod/none"); ok {
		t.Error("Get of missing id found something")
	}
	if rev, ok := st.Revision("prod/web"); !ok || rev != 9 {
		t.Errorf("Revision = %d, %v", rev, ok)
	}
	if st.Type() != "ingresses" {
		t.Errorf("Type = %q", st.Type())
	}
}

func TestKeyString(t *testing.T) {
	tests := []struct {
		v     any
		found bool
		want  string
	}{
		{nil, false, ""},
		{nil, true, ""},
		{"x", true, "x"},
		{true, true, "true"},
		{float64(80), true, "80"},
		{1.5, true, "1.5"},
		{int64(-3), true, "-3"},
		{[]any{"a", 1.0}, true, `["a",1]`},
		{map[string]any{"k": "v"}, true, `{"k":"v"}`},
	}
	for _, tt := range tests {
		if got := KeyString(tt.v, tt.found); got != tt.want {
			t.Errorf("KeyString(%v, %v) = %q, want %q", tt.v, tt.found, got, tt.want)
		}
	}
}

func TestPrefixKeyUnambiguous(t *testing.T) {
	ix, err := New([]Spec{{Type: "t", IndexBy: []string{"a", "b"}}})
	if err != nil {
		t.Fatal(err)
	}
	ix.Upsert("t", "1", 1, map[string]any{"a": "x:", "b": "y"})
	ix.Upsert("t", "2", 2, map[string]any{"a": "x", "b": ":y"})
	st := ix.Store("t")
	if got := st.GetIndexed("x:", "y"); len(got) != 1 || got[0]["b"] != "y" {
		t.Errorf("GetIndexed(x:, y) = %v", got)
	}
	if got := st.GetIndexed("x", ":y"); len(got) != 1 || got[0]["b"] != ":y" {
		t.Errorf("GetIndexed(x, :y) = %v", got)
	}
}

// TestConcurrentReaders runs readers against one writer; run with -race.
func TestConcurrentReaders(t *testing.T) {
	ix := newIndex(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for r := 0; r < 4; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				ix.Read(func(rev uint64) {
					st := ix.Store("endpoints")
					n := len(st.GetIndexed())
					if n != st.Len() {
						t.Errorf("inside Read: GetIndexed() = %d, Len = %d", n, st.Len())
					}
					if ix.Revision() != rev {
						t.Errorf("revision moved inside Read")
					}
				})
				for _, it := range ix.Store("endpoints").Items() {
					_ = it.Object()["metadata"]
				}
				_ = ix.Store("endpoints").GetIndexed("web")
				_ = ix.Counts()
			}
		}()
	}
	for i := 1; i <= 2000; i++ {
		id := fmt.Sprint("e", i%50)
		if i%7 == 0 {
			ix.Delete("endpoints", id, uint64(i))
		} else {
			ix.Upsert("endpoints", id, uint64(i), slice("ns", id, []string{"web", "api"}[i%2]))
		}
	}
	close(stop)
	wg.Wait()
	st := ix.Store("endpoints")
	total := len(st.GetIndexed("web")) + len(st.GetIndexed("api"))
	if total != st.Len() {
		t.Errorf("indexed %d objects, stored %d", total, st.Len())
	}
}

func TestDecode(t *testing.T) {
	tests := []struct {
		name    string
		json    string
		want    map[string]any
		wantErr string
	}{
		{"integers stay integers", `{"port": 80, "ratio": 1.5, "big": 1e3, "neg": -7}`, map[string]any{"port": 80, "ratio": 1.5, "big": 1000.0, "neg": -7}, ""},
		{"nested", `{"a": [{"n": 1}, 2.25, "s", null, true]}`, map[string]any{"a": []any{map[string]any{"n": 1}, 2.25, "s", nil, true}}, ""},
		{"huge integer stays float", `{"n": 123456789012345678901234567890}`, map[string]any{"n": 1.2345678901234568e+29}, ""},
		{"not an object", `[1]`, nil, "decode object"},
		{"null", `null`, nil, "not a JSON object"},
		{"trailing data", `{} {}`, nil, "trailing data"},
		{"malformed", `{"a":`, nil, "decode object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode([]byte(tt.json))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func TestNormalize(t *testing.T) {
	in := map[string]any{"a": 80.0, "b": 0.5, "c": []any{3.0, map[string]any{"d": -2.0}}, "e": "x"}
	want := map[string]any{"a": 80, "b": 0.5, "c": []any{3, map[string]any{"d": -2}}, "e": "x"}
	if got := Normalize(in); !reflect.DeepEqual(got, want) {
		t.Errorf("got %#v", got)
	}
	if got := Normalize(1e300); got != 1e300 {
		t.Errorf("1e300 became %#v", got)
	}
}

// seen is a Change with its objects decoded, to compare.
type seen struct {
	Type, ID         string
	Rev              uint64
	Old, New         map[string]any
	OldKeys, NewKeys []string
}

func seenOf(c Change) seen {
	s := seen{Type: c.Type, ID: c.ID, Rev: c.Rev, OldKeys: c.OldKeys, NewKeys: c.NewKeys}
	if c.Old != nil {
		s.Old = c.Old.Map()
	}
	if c.New != nil {
		s.New = c.New.Map()
	}
	return s
}

func TestObserve(t *testing.T) {
	ix := newIndex(t)
	var got []seen
	ix.Observe(func(c Change) {
		// Observers see the change applied and may use Store methods.
		if _, ok := ix.Store(c.Type).Get(c.ID); ok != (c.New != nil) {
			t.Errorf("%s %s: Get disagrees with the change", c.Type, c.ID)
		}
		got = append(got, seenOf(c))
	})
	a1, a2 := slice("ns", "a", "web"), slice("ns", "a", "api")
	ix.Upsert("endpoints", "ns/a", 1, a1)
	ix.Upsert("endpoints", "ns/a", 1, a2) // stale: no change, no call
	ix.Upsert("endpoints", "ns/a", 2, a2)
	ix.Delete("endpoints", "ns/a", 3)
	ix.Delete("endpoints", "ns/a", 4) // nothing left to delete
	ix.Upsert("plain", "p", 5, map[string]any{})
	want := []seen{
		{Type: "endpoints", ID: "ns/a", Rev: 1, New: a1, NewKeys: []string{"web"}},
		{Type: "endpoints", ID: "ns/a", Rev: 2, Old: a1, New: a2, OldKeys: []string{"web"}, NewKeys: []string{"api"}},
		{Type: "endpoints", ID: "ns/a", Rev: 3, Old: a2, OldKeys: []string{"api"}},
		{Type: "plain", ID: "p", Rev: 5, New: map[string]any{}, NewKeys: []string{}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("changes:\n got %+v\nwant %+v", got, want)
	}
}

func TestItemsRevisionsAndKeys(t *testing.T) {
	ix := newIndex(t)
	ix.Upsert("ingresses", "ns/b", 7, slice("ns", "b", ""))
	ix.Upsert("ingresses", "ns/a", 9, slice("ns", "a", ""))
	items := ix.Store("ingresses").Items()
	if len(items) != 2 || items[0].ID != "ns/a" || items[0].Rev != 9 || items[1].ID != "ns/b" || items[1].Rev != 7 {
		t.Fatalf("items = %+v", items)
	}
	keys, ok := ix.Store("ingresses").Keys("ns/a")
	if !ok || !reflect.DeepEqual(keys, []string{"ns", "a"}) {
		t.Fatalf("Keys = %q %v", keys, ok)
	}
	keys[0] = "changed" // a copy: the index is untouched
	if again, _ := ix.Store("ingresses").Keys("ns/a"); again[0] != "ns" {
		t.Fatal("Keys returned the index's own slice")
	}
	if _, ok := ix.Store("ingresses").Keys("ns/none"); ok {
		t.Fatal("Keys of a missing id")
	}
}

// TestObserverRunsBeforeReaders checks that no Read section sees a change
// before the observers have run.
func TestObserverRunsBeforeReaders(t *testing.T) {
	ix := newIndex(t)
	var mu sync.Mutex
	observed := map[string]bool{}
	ix.Observe(func(c Change) {
		mu.Lock()
		observed[c.ID] = true
		mu.Unlock()
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 200 {
			ix.Upsert("plain", fmt.Sprint(i), uint64(i+1), map[string]any{})
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
		}
		ix.Read(func(uint64) {
			mu.Lock()
			defer mu.Unlock()
			for _, it := range ix.Store("plain").Items() {
				if !observed[it.ID] {
					t.Errorf("a reader saw %s before the observer", it.ID)
				}
			}
		})
	}
}

// TestSameContentIsNoChange: an object written again with the same
// content takes the newer revision (an older write stays ignored) but is
// no change: Upsert reports false, no observer runs, Changes stays.
func TestSameContentIsNoChange(t *testing.T) {
	ix := newIndex(t)
	calls := 0
	ix.Observe(func(Change) { calls++ })
	st := ix.Store("endpoints")
	if !ix.Upsert("endpoints", "ns/a", 1, slice("ns", "a", "web")) {
		t.Fatal("first upsert reported no change")
	}
	steps := []struct {
		name    string
		rev     uint64
		obj     map[string]any
		changed bool
		calls   int
		changes uint64
		stored  uint64 // the revision the object is stored at, and the Index's
	}{
		{"same content, newer revision", 2, slice("ns", "a", "web"), false, 1, 1, 2},
		{"older revision of other content", 1, slice("ns", "a", "api"), false, 1, 1, 2},
		{"other content", 3, slice("ns", "a", "api"), true, 2, 2, 3},
	}
	for _, s := range steps {
		if got := ix.Upsert("endpoints", "ns/a", s.rev, s.obj); got != s.changed {
			t.Errorf("%s: Upsert = %v, want %v", s.name, got, s.changed)
		}
		rev, _ := st.Revision("ns/a")
		if calls != s.calls || st.Changes() != s.changes || rev != s.stored || ix.Revision() != s.stored {
			t.Errorf("%s: observer calls %d, Changes %d, revision %d, index revision %d; want %d, %d, %d, %d",
				s.name, calls, st.Changes(), rev, ix.Revision(), s.calls, s.changes, s.stored, s.stored)
		}
	}
}

// TestUpsertManyMatchesUpsert applies the same puts (new ids, updates that
// move an object between keys, stale revisions, the same id twice in one
// call, ids deleted before) with UpsertMany in batches and with Upsert one
// by one: the stores, lookups and observed changes are the same.
func TestUpsertManyMatchesUpsert(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var puts []Put
	for i := range 3000 {
		id := fmt.Sprintf("ns%d/s%03d", rng.IntN(3), rng.IntN(400))
		svc := fmt.Sprintf("svc%d", rng.IntN(7))
		rev := uint64(i + 1)
		if rng.IntN(10) == 0 {
			rev = uint64(rng.IntN(i + 1)) // stale, most of the time
		}
		puts = append(puts, Put{Type: "endpoints", ID: id, Rev: rev, Object: slice("ns", id, svc)})
	}
	one, many := newIndex(t), newIndex(t)
	var seenOne, seenMany []seen
	one.Observe(func(c Change) { seenOne = append(seenOne, seenOf(c)) })
	many.Observe(func(c Change) { seenMany = append(seenMany, seenOf(c)) })
	for _, ix := range []*Index{one, many} {
		ix.Upsert("endpoints", "ns0/s001", 1, slice("ns", "ns0/s001", "svc0"))
		ix.Delete("endpoints", "ns1/s002", 2)
	}
	changed := 0
	for _, p := range puts {
		if one.Upsert(p.Type, p.ID, p.Rev, p.Object) {
			changed++
		}
	}
	got := 0
	for start := 0; start < len(puts); start += 700 {
		got += many.UpsertMany(puts[start:min(start+700, len(puts))])
	}
	if got != changed {
		t.Errorf("UpsertMany changed %d, Upsert %d", got, changed)
	}
	if !reflect.DeepEqual(seenOne, seenMany) {
		t.Errorf("observers saw %d changes from UpsertMany, %d from Upsert (or other ones)", len(seenMany), len(seenOne))
	}
	a, b := one.Store("endpoints"), many.Store("endpoints")
	if !reflect.DeepEqual(stored(a), stored(b)) || a.Changes() != b.Changes() || one.Revision() != many.Revision() {
		t.Errorf("stores differ: %d vs %d items, %d vs %d changes", len(a.Items()), len(b.Items()), a.Changes(), b.Changes())
	}
	for k := range 7 {
		svc := fmt.Sprintf("svc%d", k)
		if x, y := names(a.GetIndexed(svc)), names(b.GetIndexed(svc)); !slices.Equal(x, y) {
			t.Errorf("GetIndexed(%s): %v vs %v", svc, y, x)
		}
	}
}

// stored lists what st holds, comparably: id, revision and JSON.
func stored(st *Store) []string {
	var out []string
	for _, it := range st.Items() {
		out = append(out, fmt.Sprintf("%s@%d %s", it.ID, it.Rev, it.JSON()))
	}
	return out
}

// TestNormalizeInternsKeys: the same key decoded in two objects is one
// string in memory after Normalize.
func TestNormalizeInternsKeys(t *testing.T) {
	var a, b map[string]any
	if err := json.Unmarshal([]byte(`{"metadata":{"namespace":"x"}}`), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"metadata":{"namespace":"y"}}`), &b); err != nil {
		t.Fatal(err)
	}
	key := func(m map[string]any) *byte {
		for k := range m {
			return unsafe.StringData(k)
		}
		return nil
	}
	if key(a) == key(b) {
		t.Fatal("the decoder shared the keys already: nothing to check")
	}
	Normalize(a)
	Normalize(b)
	if key(a) != key(b) {
		t.Error("top-level keys not interned")
	}
	if key(a["metadata"].(map[string]any)) != key(b["metadata"].(map[string]any)) {
		t.Error("nested keys not interned")
	}
}
