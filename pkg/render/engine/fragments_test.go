package engine

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/index"
)

// fragSpecs are the types of the fragment tests.
var fragSpecs = []index.Spec{
	{Type: "ingresses", IndexBy: []string{"metadata.namespace", "metadata.name"}},
	{Type: "services", IndexBy: []string{"metadata.namespace", "metadata.name"}},
	{Type: "endpoints", IndexBy: []string{"metadata.namespace", "metadata.labels['kubernetes.io/service-name']"}},
	{Type: "secrets", IndexBy: []string{"metadata.namespace"}},
	{Type: "configs"},
}

// fragSpec reads through every kind of dependency: the own object, objects
// by id (get and []), get_indexed with a full and a partial key tuple,
// whole types (length, items, keys), values by name and all values, and
// registers errors; it uses a macro and includes.
var fragSpec = Spec{
	Snippets: map[string]string{
		"servers": `{%- for ep in resources.endpoints.get_indexed(obj.metadata.namespace, obj.spec.service) %}
{%- for a in ep.addresses | default([], true) %} {{ server(a) }}{% part "addrs" %}{{ a }} {{ id }}
{% endpart %}{% endfor %}
{%- endfor %}`,
	},
	Fragments: map[string]Fragment{
		"backends": {ForEach: "ingresses", Text: `{%- macro server(a) %}server {{ a }}:{{ obj.spec.port }}{% endmacro -%}
backend {{ id }} port={{ obj.spec.port }}
{%- part "names" %}{{ id }} {{ obj.spec.service }}
{% endpart %}
{%- for s in resources.services.get_indexed(obj.metadata.namespace, obj.spec.service) %} svc={{ s.metadata.name }}:{{ s.spec.port }}{% endfor %}
{%- include "servers" %} ns-slices={{ resources.endpoints.get_indexed(obj.metadata.namespace) | length }}
{%- if obj.spec.tls %} tls={{ resources.secrets.get(obj.metadata.namespace ~ '/' ~ obj.spec.tls, {}).get('data', 'missing') }}{% endif %}
{%- if obj.spec.peer %} peer={{ resources.ingresses[obj.spec.peer].spec.port if resources.ingresses.get(obj.spec.peer) else 'gone' }}{% endif %}
{%- if obj.spec.port > 8000 %} configs={{ resources.configs | length }}{% endif %}
{%- if obj.spec.port % 3 == 0 %} all=[{% for k, v in values.items() %}{{ k }}={{ v }};{% endfor %}]{% endif %}
 timeout={{ values.get('timeout', 'none') }}
{%- if not obj.spec.service %}{% do register_error('ingresses', id, 'no service') %}{% endif %}
`},
		"hosts": {ForEach: "services", Text: `{{ id }} ingresses={{ resources.ingresses.len() }} keys={{ resources.configs.keys() | join(',') }}
{%- if values.mode %} mode={{ values.mode }}{% endif %}
`},
	},
	Outputs: []Template{
		{Kind: KindConfig, Name: "haproxy.cfg", Text: `# {{ values.get('title', 'edge') }}
{{ fragments("backends") }}--
{{ fragments("hosts") }}--
one={{ fragment("backends", "a/s1") }}
{%- for _, s in resources.services.items() %}{% if s.spec.port == 0 %}{% do register_error('services', s.metadata.name, 'port 0') %}{% endif %}{% endfor %}
`},
		{Kind: KindMap, Name: "hosts.map", Text: `{{ fragments("hosts") }}{% if values.mode %}{{ fragments("hosts") | length }} {% include "all-backends" %}{% endif %}`},
		{Kind: KindMap, Name: "parts.map", Text: `{{ fragments("backends", "names") }}--
{{ fragments("backends", "addrs") }}--{{ fragments("backends", "addrs").splitlines() | length }}
a/s1={{ fragment("backends", "a/s1", "names") }}`},
	},
}

func init() {
	// An include of fragments(): snippets get the same direct output.
	fragSpec.Snippets["all-backends"] = `{% for x in [1] %}{{ fragments("backends") }}{% endfor %}`
}

// world is the state the fragment tests change: an index and the values.
type world struct {
	t      testing.TB
	ix     *index.Index
	values map[string]any
	rev    uint64
	set    *Set // the incremental Set, fed every change
	// scratch renders the same spec with an empty cache each time.
	scratch *Set
	// affected is whether an Invalidate since it was last cleared said
	// its changes can alter the next render.
	affected bool
}

func newWorld(t testing.TB, spec Spec) *world {
	t.Helper()
	ix, err := index.New(fragSpecs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ix: ix, values: map[string]any{}, set: set}
	// As the renderer does: every index change reaches the cache from
	// inside the index write.
	ix.Observe(func(c index.Change) {
		if set.Invalidate([]Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}}) {
			w.affected = true
		}
	})
	return w
}

func (w *world) put(typ, id string, obj map[string]any) {
	w.rev++
	if !w.ix.Upsert(typ, id, w.rev, obj) {
		// The same content again is no change; anything else must be.
		if got, _ := w.ix.Store(typ).Get(id); !reflect.DeepEqual(got, obj) {
			w.t.Fatalf("upsert %s %s ignored", typ, id)
		}
	}
}

func (w *world) del(typ, id string) {
	w.rev++
	w.ix.Delete(typ, id, w.rev)
}

func (w *world) setValue(name string, v any) {
	if v == nil {
		delete(w.values, name)
	} else {
		w.values[name] = v
	}
	if w.set.Invalidate([]Change{{Value: name}}) {
		w.affected = true
	}
}

// forget empties everything s keeps between renders, as if just compiled.
func (s *Set) forget() {
	if s.cache != nil {
		s.cache = newFragmentCache(s.fragments)
	}
	s.outs = newOutputCache(s.outputs)
	s.lastValues, s.haveValues = nil, false
	s.errors, s.haveErrors = nil, false
}

func (w *world) input() Input {
	return Input{Resources: w.ix.Stores(), Values: w.values}
}

// render renders incrementally and from scratch (a fresh Set), fails on
// any difference, and returns the incremental output.
func (w *world) render(spec Spec) *Output {
	w.t.Helper()
	var got, want *Output
	var gotErr, wantErr error
	if w.scratch == nil {
		var err error
		if w.scratch, err = Compile(spec); err != nil {
			w.t.Fatal(err)
		}
	}
	// From scratch: the same compiled templates with an empty cache.
	w.scratch.forget()
	w.ix.Read(func(uint64) {
		got, gotErr = w.set.Render(context.Background(), w.input())
		want, wantErr = w.scratch.Render(context.Background(), w.input())
	})
	if gotErr != nil || wantErr != nil {
		w.t.Fatalf("incremental: %v\nfrom scratch: %v", gotErr, wantErr)
	}
	for i, f := range want.Files {
		if !bytes.Equal(got.Files[i].Content, f.Content) {
			w.t.Fatalf("%s: incremental output differs from scratch:\n%s", f.Name, firstDiff(string(f.Content), string(got.Files[i].Content)))
		}
	}
	if !reflect.DeepEqual(got.Errors, want.Errors) {
		w.t.Fatalf("errors: incremental %v, from scratch %v", got.Errors, want.Errors)
	}
	if !slices.Equal(got.ValuesRead, want.ValuesRead) || got.AllValues != want.AllValues {
		w.t.Fatalf("values read: incremental %v %v, from scratch %v %v", got.ValuesRead, got.AllValues, want.ValuesRead, want.AllValues)
	}
	return got
}

func ingress(ns, name, svc string, port int, tls, peer string) map[string]any {
	spec := map[string]any{"service": svc, "port": port}
	if tls != "" {
		spec["tls"] = tls
	}
	if peer != "" {
		spec["peer"] = peer
	}
	return map[string]any{"metadata": map[string]any{"namespace": ns, "name": name}, "spec": spec}
}

func service(ns, name string, port int) map[string]any {
	return map[string]any{"metadata": map[string]any{"namespace": ns, "name": name}, "spec": map[string]any{"port": port}}
}

func slice(ns, name, svc string, addrs ...string) map[string]any {
	a := make([]any, len(addrs))
	for i, s := range addrs {
		a[i] = s
	}
	return map[string]any{
		"metadata":  map[string]any{"namespace": ns, "name": name, "labels": map[string]any{"kubernetes.io/service-name": svc}},
		"endpoints": []any{map[string]any{"addresses": a}},
	}
}

func secret(ns, name, data string) map[string]any {
	return map[string]any{"metadata": map[string]any{"namespace": ns, "name": name}, "data": data}
}

// TestFragmentsMatchScratchRender applies random sequences of upserts,
// deletes and value changes and compares, after each batch, the
// incremental render with a render from scratch, byte for byte.
func TestFragmentsMatchScratchRender(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed=", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 42))
			w := newWorld(t, fragSpec)
			nss := []string{"a", "b", "c"}
			names := make([]string, 12)
			for i := range names {
				names[i] = fmt.Sprintf("s%d", i)
			}
			pick := func(s []string) string { return s[rng.IntN(len(s))] }
			id := func() (string, string) { ns, n := pick(nss), pick(names); return ns, n }
			randomOp := func() {
				switch r := rng.IntN(100); {
				case r < 30:
					ns, n := id()
					svc := pick(names)
					if rng.IntN(10) == 0 {
						svc = ""
					}
					tls, peer := "", ""
					if rng.IntN(3) == 0 {
						tls = pick(names)
					}
					if rng.IntN(3) == 0 {
						pns, pn := id()
						peer = pns + "/" + pn
					}
					w.put("ingresses", ns+"/"+n, ingress(ns, n, svc, 8000+rng.IntN(12), tls, peer))
				case r < 45:
					ns, n := id()
					w.put("services", ns+"/"+n, service(ns, n, rng.IntN(4)*80))
				case r < 65:
					ns, n := id()
					addrs := make([]string, rng.IntN(4))
					for i := range addrs {
						addrs[i] = fmt.Sprintf("10.0.%d.%d", rng.IntN(3), rng.IntN(9))
					}
					w.put("endpoints", ns+"/"+n+"-1", slice(ns, n+"-1", pick(names), addrs...))
				case r < 72:
					ns, n := id()
					w.put("secrets", ns+"/"+n, secret(ns, n, fmt.Sprint("d", rng.IntN(5))))
				case r < 76:
					n := pick(names)
					w.put("configs", n, map[string]any{"v": rng.IntN(3)})
				case r < 90:
					typ := pick([]string{"ingresses", "services", "endpoints", "secrets", "configs"})
					items := w.ix.Store(typ).Items()
					if len(items) > 0 {
						w.del(typ, items[rng.IntN(len(items))].ID)
					}
				default:
					name := pick([]string{"timeout", "mode", "title", "unread"})
					if rng.IntN(4) == 0 {
						w.setValue(name, nil)
					} else {
						w.setValue(name, fmt.Sprint(name, rng.IntN(3)))
					}
				}
			}
			// A populated start, so the first render renders many entries
			// (in parallel where there are processors).
			for range 150 {
				randomOp()
			}
			w.render(fragSpec)
			steps := 300
			if raceEnabled {
				steps = 60
			}
			rendered, reused := 0, 0
			for range steps {
				for range 1 + rng.IntN(3) {
					randomOp()
				}
				out := w.render(fragSpec)
				rendered += len(out.FragmentsRendered)
				reused += out.FragmentsReused
			}
			// The point of the cache: most entries are reused, even with
			// this template's many whole-type reads.
			if reused <= rendered {
				t.Errorf("rendered %d entries and reused %d; expected mostly reuse", rendered, reused)
			}
		})
	}
}

// baseWorld holds: ingresses a/web (service web, tls secret a/cert,
// peer a/api), a/api (service api), a/db (service db, no endpoints yet),
// b/web (service web in b); their services; slices for web and api in a
// and web in b; the secret a/cert; and the value timeout.
func baseWorld(t *testing.T, spec Spec) *world {
	w := newWorld(t, spec)
	w.put("ingresses", "a/web", ingress("a", "web", "web", 8001, "cert", "a/api"))
	w.put("ingresses", "a/api", ingress("a", "api", "api", 8002, "", ""))
	w.put("ingresses", "a/db", ingress("a", "db", "db", 7000, "", ""))
	w.put("ingresses", "b/web", ingress("b", "web", "web", 7001, "", ""))
	for _, s := range []struct{ ns, name string }{{"a", "web"}, {"a", "api"}, {"a", "db"}, {"b", "web"}} {
		w.put("services", s.ns+"/"+s.name, service(s.ns, s.name, 80))
	}
	w.put("endpoints", "a/web-1", slice("a", "web-1", "web", "10.0.0.1"))
	w.put("endpoints", "a/api-1", slice("a", "api-1", "api", "10.0.1.1"))
	w.put("endpoints", "b/web-1", slice("b", "web-1", "web", "10.1.0.1"))
	w.put("secrets", "a/cert", secret("a", "cert", "pem"))
	w.values["timeout"] = "5s"
	return w
}

// TestFragmentDependencies changes one thing at a time and checks exactly
// which entries render again.
func TestFragmentDependencies(t *testing.T) {
	spec := Spec{
		Fragments: map[string]Fragment{
			"backends": {ForEach: "ingresses", Text: `{{ id }}
{%- for s in resources.services.get_indexed(obj.metadata.namespace, obj.spec.service) %} svc={{ s.spec.port }}{% endfor %}
{%- for e in resources.endpoints.get_indexed(obj.metadata.namespace, obj.spec.service) %} eps={{ e.endpoints[0].addresses | join(',') }}{% endfor %}
{%- if obj.spec.tls %} tls={{ resources.secrets.get(obj.metadata.namespace ~ '/' ~ obj.spec.tls, {}).get('data', 'missing') }}{% endif %}
{%- if obj.spec.port > 8001 %} timeout={{ values.timeout }}{% endif %}
`},
			"count": {ForEach: "services", Text: `{{ id }} of {{ resources.ingresses | length }}
`},
		},
		Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("backends") }}{{ fragments("count") }}`}},
	}
	all := func(frag string, ids ...string) []EntryRef {
		out := make([]EntryRef, len(ids))
		for i, id := range ids {
			out[i] = EntryRef{frag, id}
		}
		return out
	}
	counts := all("count", "a/api", "a/db", "a/web", "b/web")
	cases := []struct {
		name   string
		change func(w *world)
		want   []EntryRef
	}{
		{"nothing changed", func(*world) {}, nil},
		{"an EndpointSlice change re-renders the Ingress that looks up its Service", func(w *world) {
			w.put("endpoints", "a/web-1", slice("a", "web-1", "web", "10.0.0.1", "10.0.0.2"))
		}, all("backends", "a/web")},
		{"a new EndpointSlice matches a lookup that was empty", func(w *world) {
			w.put("endpoints", "a/db-1", slice("a", "db-1", "db", "10.0.2.1"))
		}, all("backends", "a/db")},
		{"an EndpointSlice moving to another Service re-renders both lookups", func(w *world) {
			w.put("endpoints", "a/web-1", slice("a", "web-1", "api", "10.0.0.1"))
		}, all("backends", "a/api", "a/web")},
		{"a deleted EndpointSlice re-renders its lookup", func(w *world) {
			w.del("endpoints", "b/web-1")
		}, all("backends", "b/web")},
		{"a Service renamed re-renders the lookups of its old name", func(w *world) {
			w.del("services", "a/db")
			w.put("services", "a/database", service("a", "database", 80))
		}, append(all("backends", "a/db"), EntryRef{"count", "a/database"})},
		{"a Service in a namespace no Ingress reads", func(w *world) {
			w.put("services", "c/web", service("c", "web", 80))
		}, all("count", "c/web")},
		{"a Secret read by id", func(w *world) {
			w.put("secrets", "a/cert", secret("a", "cert", "new-pem"))
		}, all("backends", "a/web")},
		{"a Secret created where a get found none", func(w *world) {
			w.put("ingresses", "a/api", ingress("a", "api", "api", 8002, "other", ""))
			w.set.Render(context.Background(), w.input()) // a/api now reads a/other, which is missing
			w.put("secrets", "a/other", secret("a", "other", "x"))
		}, all("backends", "a/api")},
		{"a value change re-renders its readers", func(w *world) {
			w.setValue("timeout", "9s")
		}, all("backends", "a/api")},
		{"a value nobody reads", func(w *world) {
			w.setValue("unread", "1")
		}, nil},
		{"a value changed without Invalidate is still noticed", func(w *world) {
			w.values["timeout"] = "7s"
		}, all("backends", "a/api")},
		{"an Ingress change re-renders itself and the whole-type readers", func(w *world) {
			w.put("ingresses", "b/web", ingress("b", "web", "web", 7002, "", ""))
		}, append(all("backends", "b/web"), counts...)},
		{"a deleted Ingress is dropped", func(w *world) {
			w.del("ingresses", "a/db")
		}, counts},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := baseWorld(t, spec)
			w.render(spec)
			tc.change(w)
			out := w.render(spec)
			got := slices.Clone(out.FragmentsRendered)
			slices.SortFunc(got, func(a, b EntryRef) int { return strings.Compare(a.Fragment+"\x00"+a.ID, b.Fragment+"\x00"+b.ID) })
			if !slices.Equal(got, tc.want) {
				t.Errorf("rendered %v, want %v", got, tc.want)
			}
		})
	}
}

// TestInvalidateMarks checks the marks Invalidate itself sets, without the
// checks Render makes on its own (revisions, value comparison).
func TestInvalidateMarks(t *testing.T) {
	spec := Spec{
		Fragments: map[string]Fragment{"b": {ForEach: "ingresses", Text: `{{ values.get(obj.spec.service) }}
{%- for e in resources.endpoints.get_indexed(obj.metadata.namespace) %}{% endfor %}
{%- if obj.spec.tls %}{{ resources.secrets[obj.metadata.namespace ~ '/' ~ obj.spec.tls] }}{% endif %}
{%- if obj.spec.peer %}{{ resources.configs.keys() }}{% endif %}`}},
		Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("b") }}`}},
	}
	w := newWorld(t, spec)
	w.put("ingresses", "a/x", ingress("a", "x", "vx", 1, "", ""))
	w.put("ingresses", "a/y", ingress("a", "y", "vy", 1, "cert", ""))
	w.put("ingresses", "b/z", ingress("b", "z", "vz", 1, "", "yes"))
	w.render(spec)
	dirtyIDs := func() []string {
		var ids []string
		for _, e := range w.set.cache.states[0].entries {
			if e.dirty {
				ids = append(ids, e.id)
			}
		}
		slices.Sort(ids)
		return ids
	}
	cases := []struct {
		change Change
		want   []string
	}{
		{Change{Type: "ingresses", ID: "a/x"}, []string{"a/x"}},
		{Change{Type: "endpoints", ID: "a/s", NewKeys: []string{"a", "web"}}, []string{"a/x", "a/y"}},
		{Change{Type: "endpoints", ID: "b/s", OldKeys: []string{"b", "web"}}, []string{"b/z"}},
		{Change{Type: "endpoints", ID: "c/s", OldKeys: []string{"c", "web"}, NewKeys: []string{"c", "api"}}, nil},
		{Change{Type: "secrets", ID: "a/cert"}, []string{"a/y"}},
		{Change{Type: "secrets", ID: "a/other"}, nil},
		{Change{Type: "configs", ID: "anything"}, []string{"b/z"}},
		{Change{Value: "vy"}, []string{"a/y"}},
		{Change{Value: "nobody"}, nil},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%+v", tc.change), func(t *testing.T) {
			w.set.Invalidate([]Change{tc.change})
			if got := dirtyIDs(); !slices.Equal(got, tc.want) {
				t.Errorf("dirty %v, want %v", got, tc.want)
			}
			w.render(spec) // clears the marks
			if got := dirtyIDs(); len(got) > 0 {
				t.Fatalf("still dirty after a render: %v", got)
			}
		})
	}
}

func TestFragmentErrors(t *testing.T) {
	ok := Fragment{ForEach: "ingresses", Text: "{{ id }}\n"}
	compileCases := []struct {
		name string
		spec Spec
		want string
	}{
		{"syntax error", Spec{Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: "a\n{% if %}"}}}, `fragment "f" line 2`},
		{"no type", Spec{Fragments: map[string]Fragment{"f": {Text: "x"}}}, `fragment "f": fragment without a type`},
		{"fragments inside a fragment", Spec{Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: `{{ fragments("f") }}`}}}, `fragments() cannot be used inside a fragment`},
		{"unknown fragment in an output", Spec{Fragments: map[string]Fragment{"f": ok}, Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("g") }}`}}}, `template "c" line 1: no fragment named "g"`},
		{"unknown fragment in fragment()", Spec{Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragment("g", "a/x") }}`}}}, `no fragment named "g"`},
	}
	for _, tc := range compileCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrTemplate) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}

	t.Run("an object that breaks a fragment is named, and fixing it recovers", func(t *testing.T) {
		spec := Spec{
			Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: "{{ id }} {{ obj.spec.port + 1 }}{% if obj.spec.port == 0 %}{{ 0 | log }}{% endif %}\n"}},
			Outputs:   []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("f") }}`}},
		}
		w := newWorld(t, spec)
		w.put("ingresses", "a/x", ingress("a", "x", "s", 1, "", ""))
		w.render(spec)
		w.put("ingresses", "a/y", ingress("a", "y", "s", 0, "", ""))
		_, err := w.set.Render(context.Background(), w.input())
		var te *Error
		if err == nil || !errors.As(err, &te) || te.Kind != KindFragment || te.Template != "f" || te.Object != "a/y" {
			t.Fatalf("err = %v (%+v), want a fragment error for a/y", err, te)
		}
		if !strings.Contains(err.Error(), `fragment "f" object "a/y"`) {
			t.Errorf("message %q does not name the fragment and object", err)
		}
		w.put("ingresses", "a/y", ingress("a", "y", "s", 2, "", ""))
		out := w.render(spec)
		if got := string(out.Files[0].Content); got != "a/x 2\na/y 3\n" {
			t.Errorf("after the fix: %q", got)
		}
	})

	t.Run("dynamic name", func(t *testing.T) {
		spec := Spec{Fragments: map[string]Fragment{"f": ok}, Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{% set n = "g" %}{{ fragments(n) }}`}}}
		w := newWorld(t, spec)
		_, err := w.set.Render(context.Background(), w.input())
		if err == nil || !strings.Contains(err.Error(), `no fragment named "g"`) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("a template that rebinds fragments gets its own", func(t *testing.T) {
		spec := Spec{Fragments: map[string]Fragment{"f": ok}, Outputs: []Template{{Kind: KindConfig, Name: "c",
			Text: `{% macro fragments(n) %}mine:{{ n }}{% endmacro %}{{ fragments("f") }}|{% set fragments = 1 %}{% if true %}{{ fragments }}{% endif %}`}}}
		w := newWorld(t, spec)
		w.put("ingresses", "a/x", ingress("a", "x", "s", 1, "", ""))
		out := w.render(spec)
		if got := string(out.Files[0].Content); got != "mine:f|1" {
			t.Errorf("got %q", got)
		}
	})

	t.Run("fragment of a missing object is empty", func(t *testing.T) {
		spec := Spec{Fragments: map[string]Fragment{"f": ok}, Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `[{{ fragment("f", "a/x") }}][{{ fragment("f", "a/nope") }}]`}}}
		w := newWorld(t, spec)
		w.put("ingresses", "a/x", ingress("a", "x", "s", 1, "", ""))
		out := w.render(spec)
		if got := string(out.Files[0].Content); got != "[a/x\n][]" {
			t.Errorf("got %q", got)
		}
	})

	t.Run("a type that is not a store", func(t *testing.T) {
		set, err := Compile(Spec{Fragments: map[string]Fragment{"f": ok}, Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("f") }}`}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = set.Render(context.Background(), Input{Resources: map[string]any{"ingresses": map[string]any{}}})
		if err == nil || !strings.Contains(err.Error(), "resources.ingresses is not an indexed store") {
			t.Fatalf("err = %v", err)
		}
	})
}

// TestFragmentsReplacedStore renders from a second index: the cache starts
// over instead of serving entries of the first.
func TestFragmentsReplacedStore(t *testing.T) {
	spec := Spec{
		Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: "{{ id }}={{ obj.spec.port }}\n"}},
		Outputs:   []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("f") }}`}},
	}
	w1 := newWorld(t, spec)
	w1.put("ingresses", "a/x", ingress("a", "x", "s", 1, "", ""))
	w1.render(spec)
	w2 := newWorld(t, spec)
	w2.set = w1.set
	w2.put("ingresses", "a/x", ingress("a", "x", "s", 2, "", ""))
	out := w2.render(spec)
	if got := string(out.Files[0].Content); got != "a/x=2\n" {
		t.Fatalf("got %q", got)
	}
}

// TestFragmentsNoticeUnreportedChangesOfTheirType: changes of the
// fragment's own type that Invalidate never heard of are found by
// comparing the store's change count and rescanning.
func TestFragmentsNoticeUnreportedChangesOfTheirType(t *testing.T) {
	spec := Spec{
		Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: "{{ id }}={{ obj.spec.port }}\n"}},
		Outputs:   []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("f") }}`}},
	}
	ix, err := index.New(fragSpecs)
	if err != nil {
		t.Fatal(err)
	}
	set, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	w := &world{t: t, ix: ix, values: map[string]any{}, set: set} // no observer
	for i := range 5 {
		w.put("ingresses", fmt.Sprintf("a/%d", i), ingress("a", fmt.Sprint(i), "s", i, "", ""))
	}
	w.render(spec)
	w.put("ingresses", "a/1", ingress("a", "1", "s", 10, "", ""))
	w.del("ingresses", "a/3")
	w.put("ingresses", "a/9", ingress("a", "9", "s", 9, "", ""))
	out := w.render(spec)
	if got := string(out.Files[0].Content); got != "a/0=0\na/1=10\na/2=2\na/4=4\na/9=9\n" {
		t.Fatalf("got %q", got)
	}
	// One reported change and one not: the counts disagree, so it rescans.
	w.put("ingresses", "a/2", ingress("a", "2", "s", 20, "", ""))
	w.put("ingresses", "a/4", ingress("a", "4", "s", 40, "", ""))
	set.Invalidate([]Change{{Type: "ingresses", ID: "a/2"}})
	out = w.render(spec)
	if got := string(out.Files[0].Content); got != "a/0=0\na/1=10\na/2=20\na/4=40\na/9=9\n" {
		t.Fatalf("got %q", got)
	}
}

func TestFragmentsRenderCanceled(t *testing.T) {
	spec := Spec{
		Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: "{{ id }}\n"}},
		Outputs:   []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("f") }}`}},
	}
	w := newWorld(t, spec)
	for i := range 40 {
		w.put("ingresses", fmt.Sprintf("a/%02d", i), ingress("a", fmt.Sprint(i), "s", i, "", ""))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := w.set.Render(ctx, w.input())
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrTemplate) {
		t.Fatalf("err = %v", err)
	}
	// Nothing was cached from the canceled render; the next one is whole.
	out := w.render(spec)
	if len(out.FragmentsRendered) != 40 {
		t.Fatalf("rendered %d entries after the canceled render, want 40", len(out.FragmentsRendered))
	}
}

// TestFragmentsConcurrentChanges renders under the index's read lock while
// a writer changes the index, as the renderer does (run with -race): every
// render must equal a render from scratch of the same state.
func TestFragmentsConcurrentChanges(t *testing.T) {
	w := baseWorld(t, fragSpec)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			rev := uint64(1000 + i)
			w.ix.Upsert("endpoints", "a/web-1", rev, slice("a", "web-1", "web", fmt.Sprintf("10.9.0.%d", i%7)))
		}
	}()
	for {
		select {
		case <-done:
			w.render(fragSpec)
			return
		default:
			w.render(fragSpec)
		}
	}
}

// TestFragmentParts checks named parts: one entry feeds several outputs,
// each joining its part over the entries in id order; a part declared in
// an included snippet counts; parts follow changes and deletions; the body
// runs in a child scope; and misuse is reported.
func TestFragmentParts(t *testing.T) {
	spec := Spec{
		Snippets: map[string]string{"port": `{% part "ports" %}{{ obj.spec.port }}
{% endpart %}`},
		Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: `{%- set ns = namespace(n=0) %}
{%- for p in [1, 2] %}{% part "hosts" %}{{ id }}#{{ p }}
{% set ns.n = ns.n + p %}{% set hidden = 1 %}{% endpart %}{% endfor %}
{%- include "port" %}main {{ id }} {{ ns.n }} {{ hidden is defined }}
`}},
		Outputs: []Template{
			{Kind: KindMap, Name: "hosts", Text: `{{ fragments("f", "hosts") }}`},
			{Kind: KindMap, Name: "ports", Text: `{{ fragments("f", "ports") | replace("\n", ",") }}|{{ fragment("f", "a/y", "ports") }}|{{ fragment("f", "a/y", "no" ~ "pe") }}`},
			{Kind: KindConfig, Name: "main", Text: `{{ fragments("f") }}`},
		},
	}
	w := newWorld(t, spec)
	w.put("ingresses", "a/y", ingress("a", "y", "s", 2, "", ""))
	w.put("ingresses", "a/x", ingress("a", "x", "s", 1, "", ""))
	check := func(want ...string) {
		t.Helper()
		out := w.render(spec)
		for i, f := range out.Files {
			if got := string(f.Content); got != want[i] {
				t.Errorf("%s = %q, want %q", f.Name, got, want[i])
			}
		}
	}
	check("a/x#1\na/x#2\na/y#1\na/y#2\n", "1,2,|2\n|", "main a/x 3 False\nmain a/y 3 False\n")
	w.put("ingresses", "a/x", ingress("a", "x", "s", 5, "", ""))
	check("a/x#1\na/x#2\na/y#1\na/y#2\n", "5,2,|2\n|", "main a/x 3 False\nmain a/y 3 False\n")
	w.del("ingresses", "a/y")
	check("a/x#1\na/x#2\n", "5,||", "main a/x 3 False\n")

	errCases := []struct {
		name string
		spec Spec
		want string
	}{
		{"unknown part", Spec{Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: `{% part "a" %}{% endpart %}`}},
			Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("f", "b") }}`}}}, `template "c" line 1: fragment "f" has no part "b"`},
		{"unknown part of fragment()", Spec{Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: `x`}},
			Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragment("f", ids[0] ~ "x", "b") }}`}}}, `fragment "f" has no part "b"`},
		{"part in an output", Spec{Outputs: []Template{{Kind: KindConfig, Name: "c", Text: "\n{% part \"a\" %}{% endpart %}"}}}, `template "c" line 2: part can only be used in a fragment`},
		{"part without a name", Spec{Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: `{% part %}{% endpart %}`}}}, `part takes one literal name`},
		{"part by expression", Spec{Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: `{% part "a" ~ "b" %}{% endpart %}`}}}, `part takes one literal name`},
	}
	for _, tc := range errCases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Compile(tc.spec)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrTemplate) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}

	t.Run("a part through a snippet an output includes fails the render", func(t *testing.T) {
		set, err := Compile(Spec{Snippets: map[string]string{"s": `{% part "a" %}x{% endpart %}`}, Outputs: []Template{{Kind: KindConfig, Name: "c", Text: `{% include "s" %}`}}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = set.Render(context.Background(), Input{})
		if err == nil || !strings.Contains(err.Error(), "part can only be used in a fragment") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("an include by expression allows any part", func(t *testing.T) {
		_, err := Compile(Spec{Snippets: map[string]string{"s": `{% part "a" %}x{% endpart %}`},
			Fragments: map[string]Fragment{"f": {ForEach: "ingresses", Text: `{% include "s" ~ "" %}`}},
			Outputs:   []Template{{Kind: KindConfig, Name: "c", Text: `{{ fragments("f", "a") }}{{ fragments("f", "b") }}`}}})
		if err != nil {
			t.Fatal(err)
		}
	})
}
