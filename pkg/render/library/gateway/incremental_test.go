package gateway_test

import (
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"
)

// TestIncremental changes the objects an HTTPRoute's parse reads besides
// the route (a Namespace's labels, a ReferenceGrant, a Gateway's
// listeners, an EndpointSlice) and checks that the incremental render
// equals a render from scratch, that it shows the change, and that an
// endpoint change reuses the entries of the routes that do not use it.
func TestIncremental(t *testing.T) {
	fx := librarytest.Find(t, fixtures(t), "cross-namespace")
	ix := librarytest.NewIndex(t, watched(t), fx.Objects)
	renderOnce := librarytest.Incremental(t, gatewayTarget(librarytest.GoldenBase, nil), ix)
	first := renderOnce()
	routes := first.FragmentsRendered
	if routes == 0 || first.FragmentsReused != 0 {
		t.Fatalf("first render: %d rendered, %d reused", first.FragmentsRendered, first.FragmentsReused)
	}
	rev := uint64(1000)
	step := func(what, typ, ns, name string, change func(map[string]any), wantIn string, wantReused bool) {
		t.Helper()
		obj := fx.Object(t, typ, ns, name)
		if obj == nil {
			obj = map[string]any{"metadata": map[string]any{"namespace": ns, "name": name}}
		}
		change(obj)
		rev++
		if !ix.Upsert(typ, librarytest.ObjectID(typ, ns, name), rev, obj) {
			t.Fatalf("%s: upsert ignored", what)
		}
		r := renderOnce()
		fresh := librarytest.Render(t, gatewayTarget(librarytest.GoldenBase, nil), ix)
		for _, f := range fresh.Bundle.Files {
			if got := librarytest.FileContent(r.Bundle, f.Path); got != string(f.Content) {
				t.Errorf("%s: %s rendered incrementally differs from a render from scratch:\n%s\n--- from scratch ---\n%s", what, f.Path, got, f.Content)
			}
		}
		if !strings.Contains(librarytest.FileContent(r.Bundle, "haproxy.cfg"), wantIn) {
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
