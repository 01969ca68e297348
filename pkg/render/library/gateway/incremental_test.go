package gateway_test

import (
	"context"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
)

// TestIncremental changes the objects an HTTPRoute's parse reads besides
// the route (a Namespace's labels, a ReferenceGrant, a Gateway's
// listeners, an EndpointSlice) and checks that the incremental render
// equals a render from scratch, that it shows the change, and that an
// endpoint change reuses the entries of the routes that do not use it.
func TestIncremental(t *testing.T) {
	res := watched(t)
	var fx fixture
	for _, f := range fixtures(t) {
		if f.name == "cross-namespace" {
			fx = f
		}
	}
	if fx.name == "" {
		t.Fatal("no fixture cross-namespace")
	}
	ix := newIndex(t, res, fx.objects)
	tg, err := target.Compile("edge", gatewayTarget(goldenBase, nil))
	if err != nil {
		t.Fatal(err)
	}
	ix.Observe(func(c index.Change) {
		tg.Invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	renderOnce := func() target.Result {
		t.Helper()
		r, err := tg.Render(context.Background(), ix.Stores(), nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	first := renderOnce()
	routes := first.FragmentsRendered
	if routes == 0 || first.FragmentsReused != 0 {
		t.Fatalf("first render: %d rendered, %d reused", first.FragmentsRendered, first.FragmentsReused)
	}
	rev := uint64(1000)
	find := func(typ, ns, name string) map[string]any {
		for _, o := range fx.objects {
			if o.typ == typ && o.ns == ns && o.name == name {
				return roundTrip(t, o.body)
			}
		}
		return nil
	}
	step := func(what, typ, ns, name string, change func(map[string]any), wantIn string, wantReused bool) {
		t.Helper()
		obj := find(typ, ns, name)
		if obj == nil {
			obj = map[string]any{"metadata": map[string]any{"namespace": ns, "name": name}}
		}
		change(obj)
		rev++
		if !ix.Upsert(typ, msg.ResourceKey("test", typ, ns, name), rev, obj) {
			t.Fatalf("%s: upsert ignored", what)
		}
		r := renderOnce()
		fresh := render(t, gatewayTarget(goldenBase, nil), ix)
		for _, f := range fresh.Bundle.Files {
			if got := fileContent(r.Bundle, f.Path); got != string(f.Content) {
				t.Errorf("%s: %s rendered incrementally differs from a render from scratch:\n%s\n--- from scratch ---\n%s", what, f.Path, got, f.Content)
			}
		}
		if !strings.Contains(fileContent(r.Bundle, "haproxy.cfg"), wantIn) {
			t.Errorf("%s: haproxy.cfg lacks %q", what, wantIn)
		}
		if wantReused && r.FragmentsReused == 0 {
			t.Errorf("%s: no entry reused (%d rendered)", what, r.FragmentsRendered)
		}
	}
	step("a Namespace labelled for the Selector listener", "namespaces", "", "shop", func(o map[string]any) {
		o["metadata"].(map[string]any)["labels"] = map[string]any{"gateway-access": "true"}
	}, "use_backend gw_shop_shop-selected_r0m0 if { var(txn.host) -m str selected.example.com }", false)
	step("a ReferenceGrant added", "referencegrants", "shop", "web-routes", func(o map[string]any) {
		o["apiVersion"], o["kind"] = "gateway.networking.k8s.io/v1beta1", "ReferenceGrant"
		o["spec"] = map[string]any{
			"from": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "web"}},
			"to":   []any{map[string]any{"group": "", "kind": "Service", "name": "shop-backend"}},
		}
	}, "backend gw_web_web-selected_r3m0\n  server SRV_1_1 10.2.0.1:3000 weight 256\n", false)
	step("a listener opened to every namespace", "gateways", "infra", "shared", func(o map[string]any) {
		l := o["spec"].(map[string]any)["listeners"].([]any)[0].(map[string]any)
		l["allowedRoutes"] = map[string]any{"namespaces": map[string]any{"from": "All"}}
	}, "use_backend gw_web_web-same_r0m0 if { var(txn.host) -m str same.example.com }", false)
	step("an endpoint added", "endpoints", "shop", "shop-backend-a", func(o map[string]any) {
		o["endpoints"] = append(o["endpoints"].([]any), map[string]any{"addresses": []any{"10.2.0.2"}})
	}, "server SRV_1_2 10.2.0.2:3000 weight 256\n", true)
}
