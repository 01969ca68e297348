package engine

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

// outputsSpec has outputs that each read one kind of thing, so a change
// shows exactly which outputs run again.
var outputsSpec = Spec{
	Fragments: map[string]Fragment{
		"backends": {ForEach: "ingresses", Text: `backend {{ id }}
{%- for e in resources.endpoints.get_indexed(obj.metadata.namespace, obj.spec.service) %} eps={{ e.endpoints[0].addresses | join(',') }}{% endfor %}
{%- part "hosts" %}{{ obj.metadata.name }}.example {{ id }}
{% endpart %}
`},
	},
	Outputs: []Template{
		{Kind: KindConfig, Name: "backends", Text: `{{ fragments("backends") }}`},
		{Kind: KindMap, Name: "hosts", Text: `{{ fragments("backends", "hosts") }}`},
		{Kind: KindMap, Name: "one", Text: `{{ fragment("backends", "a/api", "hosts") }}`},
		{Kind: KindMap, Name: "services", Text: `{% for s in resources.services.get_indexed("a") %}{{ s.metadata.name }} {% endfor %}`},
		{Kind: KindFile, Name: "secret", Text: `{{ resources.secrets.get("a/cert", {}).get("data") }}`},
		{Kind: KindFile, Name: "count", Text: `{{ resources.ingresses | length }}`},
		{Kind: KindFile, Name: "timeout", Text: `{{ values.timeout }}`},
		{Kind: KindFile, Name: "values", Text: `{% for k, _ in values.items() %}{{ k }} {% endfor %}`},
		{Kind: KindFile, Name: "plain", Text: `nothing read{% do register_error("plain", "x", "always") %}`},
	},
}

func renderedNames(out *Output) []string {
	var names []string
	for _, o := range out.OutputsRendered {
		names = append(names, o.Name)
	}
	slices.Sort(names)
	return names
}

// TestOutputsRenderOnlyWhatChanged changes one thing at a time and checks
// exactly which outputs run again; the others are taken from the cache,
// and every render equals a render from scratch (world.render).
func TestOutputsRenderOnlyWhatChanged(t *testing.T) {
	cases := []struct {
		name   string
		change func(w *world)
		want   []string
	}{
		{"nothing", func(w *world) {}, nil},
		// The entry's main output changes, its hosts part does not.
		{"an EndpointSlice of one backend", func(w *world) {
			w.put("endpoints", "a/web-1", slice("a", "web-1", "web", "10.0.0.9"))
		}, []string{"backends"}},
		{"an EndpointSlice nothing reads", func(w *world) {
			w.put("endpoints", "c/x-1", slice("c", "x-1", "x", "10.9.0.1"))
		}, nil},
		// A new Ingress changes the order of the entries: every join.
		{"a new Ingress", func(w *world) {
			w.put("ingresses", "a/new", ingress("a", "new", "new", 8003, "", ""))
		}, []string{"backends", "count", "hosts", "one"}},
		{"an Ingress renamed in its hosts part only", func(w *world) {
			obj := ingress("a", "web", "web", 8001, "cert", "a/api")
			obj["metadata"].(map[string]any)["name"] = "www"
			w.put("ingresses", "a/web", obj)
		}, []string{"count", "hosts", "one"}},
		{"a Service in the namespace looked up", func(w *world) {
			w.put("services", "a/cache", service("a", "cache", 80))
		}, []string{"services"}},
		{"a Service in another namespace", func(w *world) {
			w.put("services", "c/cache", service("c", "cache", 80))
		}, nil},
		{"the Secret read by id", func(w *world) {
			w.put("secrets", "a/cert", secret("a", "cert", "new-pem"))
		}, []string{"secret"}},
		{"another Secret", func(w *world) {
			w.put("secrets", "a/other", secret("a", "other", "x"))
		}, nil},
		{"a value read by name", func(w *world) {
			w.setValue("timeout", "9s")
		}, []string{"timeout", "values"}},
		{"a value read only through items()", func(w *world) {
			w.setValue("mode", "tcp")
		}, []string{"values"}},
		{"a value changed without Invalidate", func(w *world) {
			w.values["timeout"] = "7s"
		}, []string{"timeout", "values"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := baseWorld(t, outputsSpec)
			first := w.render(outputsSpec)
			if got := len(first.OutputsRendered); got != len(outputsSpec.Outputs) {
				t.Fatalf("first render ran %d outputs, want all %d", got, len(outputsSpec.Outputs))
			}
			tc.change(w)
			out := w.render(outputsSpec)
			if got := renderedNames(out); !slices.Equal(got, tc.want) {
				t.Errorf("ran %v, want %v", got, tc.want)
			}
			if out.OutputsReused+len(out.OutputsRendered) != len(outputsSpec.Outputs) {
				t.Errorf("reused %d and ran %d of %d outputs", out.OutputsReused, len(out.OutputsRendered), len(outputsSpec.Outputs))
			}
			// The cached output's errors are still reported.
			if !slices.Contains(out.Errors, RegisteredError{Type: "plain", ID: "x", Message: "always"}) {
				t.Errorf("errors %v lack the cached output's", out.Errors)
			}
		})
	}
}

// TestOutputsNoticeUnreportedChanges changes an object without Invalidate:
// every output that read its type runs again.
func TestOutputsNoticeUnreportedChanges(t *testing.T) {
	w := baseWorld(t, outputsSpec)
	w.render(outputsSpec)
	w.set.mu.Lock()
	w.set.outs.stores["services"].reported-- // as if the change were never reported
	w.set.mu.Unlock()
	w.put("services", "c/cache", service("c", "cache", 80))
	out := w.render(outputsSpec)
	if got, want := renderedNames(out), []string{"services"}; !slices.Equal(got, want) {
		t.Errorf("ran %v, want %v", got, want)
	}
}

// TestOutputsNotCached: with resources that are not stores, or an output
// that fetches, outputs run on every render.
func TestOutputsNotCached(t *testing.T) {
	spec := Spec{Outputs: []Template{
		{Kind: KindConfig, Name: "plain", Text: `{{ resources.hosts | join(",") }}`},
		{Kind: KindMap, Name: "fetched", Text: `{{ fetch("pods", "a", "p").spec.nodeName }}`},
	}}
	set, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	hosts := []any{"a", "b"}
	node := "n1"
	in := Input{
		Resources: map[string]any{"hosts": hosts},
		Fetch: func(context.Context, string, string, string) (map[string]any, error) {
			return map[string]any{"spec": map[string]any{"nodeName": node}}, nil
		},
	}
	for i, want := range []string{"a,b|n1", "a,b,c|n2"} {
		out, err := set.Render(context.Background(), in)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(out.Files[0].Content) + "|" + string(out.Files[1].Content); got != want {
			t.Errorf("render %d: %q, want %q", i, got, want)
		}
		if len(out.OutputsRendered) != 2 {
			t.Errorf("render %d ran %v, want both", i, out.OutputsRendered)
		}
		hosts = append(hosts, "c")
		in.Resources["hosts"] = hosts
		node = "n2"
	}
}

// TestOutputsFailingIsNotCached: an output that fails runs again on the
// next render, and one that recovers is cached again.
func TestOutputsFailingIsNotCached(t *testing.T) {
	spec := Spec{Outputs: []Template{
		{Kind: KindConfig, Name: "c", Text: `{% if values.n == "x" %}{{ values.missing.x() }}{% endif %}{{ values.n + 1 }}`},
		{Kind: KindMap, Name: "m", Text: `static`},
	}}
	set, err := Compile(spec)
	if err != nil {
		t.Fatal(err)
	}
	render := func(v any) (*Output, error) {
		return set.Render(context.Background(), Input{Values: map[string]any{"n": v}})
	}
	if _, err := render(1); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_, err := render("x")
		var te *Error
		if !errors.As(err, &te) || te.Template != "c" {
			t.Fatalf("want an error in c, got %v", err)
		}
	}
	out, err := render(2)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out.Files[0].Content); got != "3" {
		t.Errorf("c = %q, want 3", got)
	}
	if got := renderedNames(out); !slices.Equal(got, []string{"c"}) {
		t.Errorf("ran %v, want [c]", got)
	}
	out, err = render(2)
	if err != nil {
		t.Fatal(err)
	}
	if len(out.OutputsRendered) != 0 || strings.Join([]string{string(out.Files[0].Content), string(out.Files[1].Content)}, " ") != "3 static" {
		t.Errorf("ran %v, files %q %q; want everything cached", out.OutputsRendered, out.Files[0].Content, out.Files[1].Content)
	}
}

// TestInvalidateReportsWhatCanChange: Invalidate says a change can alter
// the next render exactly when an output or fragment entry read what
// changed, the change is of a fragment's own type, or nothing was rendered
// yet; the render after a change it calls harmless reuses every output.
func TestInvalidateReportsWhatCanChange(t *testing.T) {
	cases := []struct {
		name   string
		change func(w *world)
		want   bool
	}{
		{"an EndpointSlice of one backend", func(w *world) {
			w.put("endpoints", "a/web-1", slice("a", "web-1", "web", "10.0.0.9"))
		}, true},
		{"an EndpointSlice nothing reads", func(w *world) {
			w.put("endpoints", "c/x-1", slice("c", "x-1", "x", "10.9.0.1"))
		}, false},
		{"an Ingress (a fragment's own type)", func(w *world) {
			w.put("ingresses", "c/new", ingress("c", "new", "new", 8003, "", ""))
		}, true},
		{"a Service in the namespace looked up", func(w *world) {
			w.put("services", "a/cache", service("a", "cache", 80))
		}, true},
		{"a Service in another namespace", func(w *world) {
			w.put("services", "c/cache", service("c", "cache", 80))
		}, false},
		{"another Secret", func(w *world) {
			w.put("secrets", "a/other", secret("a", "other", "x"))
		}, false},
		{"a value read by name", func(w *world) { w.setValue("timeout", "9s") }, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := baseWorld(t, outputsSpec)
			if !w.affected {
				t.Error("changes before the first render: Invalidate said they cannot alter it")
			}
			w.render(outputsSpec)
			w.affected = false
			tc.change(w)
			if w.affected != tc.want {
				t.Fatalf("Invalidate said %v, want %v", w.affected, tc.want)
			}
			if out := w.render(outputsSpec); !tc.want && len(out.OutputsRendered) > 0 {
				t.Errorf("a change Invalidate called harmless ran %v", renderedNames(out))
			}
		})
	}
}
