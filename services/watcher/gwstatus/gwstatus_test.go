package gwstatus_test

import (
	"context"
	"errors"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher/gwstatus"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m, testkit.LeakOptions()...) }

// The gateway library's tls case: its objects, and the status the library
// renders for them (its golden file), so that the writer is tested on what
// the library really produces.
const (
	fixtureObjects = "../../../pkg/render/library/gateway/testdata/tls/objects.yaml"
	fixtureStatus  = "../../../pkg/render/library/gateway/testdata/tls/golden/files/gateway-status.json"
	controller     = "weft.io/gateway-controller"
)

func TestDecode(t *testing.T) {
	data, err := os.ReadFile(fixtureStatus)
	if err != nil {
		t.Fatal(err)
	}
	st, err := gwstatus.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.GatewayClasses) != 1 || len(st.Gateways) != 1 || len(st.Gateways[0].Listeners) != 8 || len(st.HTTPRoutes) != 2 {
		t.Errorf("decoded %+v", st)
	}
	for _, bad := range []string{"", "[]", `{"gateways": [{"nme": "x"}]}`} {
		if _, err := gwstatus.Decode([]byte(bad)); !errors.Is(err, gwstatus.ErrStatus) {
			t.Errorf("Decode(%q) = %v, want ErrStatus", bad, err)
		}
	}
}

// TestWrite writes the library's status of the tls case to its objects on
// a real API server with the Gateway API CRDs (testdata/crds), then again
// unchanged, then changed, and checks what the objects carry.
func TestWrite(t *testing.T) {
	k := kubetest.Start(t)
	k.InstallCRDs(t, "testdata/crds")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	client := dynamic.NewForConfigOrDie(k.Config)
	core := kubernetes.NewForConfigOrDie(k.Config)
	for _, ns := range []string{"infra", "certs", "secret-store"} {
		if _, err := core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createGatewayObjects(ctx, t, client)

	// Another controller's parents entry on a route, which must be kept.
	other := map[string]any{
		"parentRef":      map[string]any{"name": "elsewhere"},
		"controllerName": "example.com/other",
		"conditions": []any{map[string]any{"type": "Accepted", "status": "True", "reason": "Accepted", "message": "",
			"lastTransitionTime": "2024-01-01T00:00:00Z", "observedGeneration": int64(1)}},
	}
	route := get(ctx, t, client, gwstatus.HTTPRoutes, "infra", "https")
	if err := unstructured.SetNestedSlice(route.Object, []any{other}, "status", "parents"); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Resource(gwstatus.HTTPRoutes).Namespace("infra").UpdateStatus(ctx, route, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	data, err := os.ReadFile(fixtureStatus)
	if err != nil {
		t.Fatal(err)
	}
	st, err := gwstatus.Decode(data)
	if err != nil {
		t.Fatal(err)
	}
	t1 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	clock := t1
	w := &gwstatus.Writer{Client: client, ControllerName: controller, Now: func() time.Time { return clock }}
	res, err := w.Write(ctx, st)
	if err != nil || res != (gwstatus.Result{Written: 4}) {
		t.Fatalf("first write: %+v, %v", res, err)
	}

	class := get(ctx, t, client, gwstatus.GatewayClasses, "", "weft")
	wantCondition(t, "gatewayclass weft", conditionsAt(t, class.Object, "status", "conditions"), "Accepted", "True", "Accepted", t1)
	gw := get(ctx, t, client, gwstatus.Gateways, "infra", "https")
	wantCondition(t, "gateway", conditionsAt(t, gw.Object, "status", "conditions"), "Programmed", "True", "Programmed", t1)
	listeners, _, _ := unstructured.NestedSlice(gw.Object, "status", "listeners")
	if len(listeners) != 8 {
		t.Fatalf("gateway listeners: %v", listeners)
	}
	for _, l := range listeners {
		m := l.(map[string]any)
		switch m["name"] {
		case "foo":
			if m["attachedRoutes"] != int64(1) {
				t.Errorf("listener foo: attachedRoutes %v", m["attachedRoutes"])
			}
			wantCondition(t, "listener foo", conditionsAt(t, m, "conditions"), "Programmed", "True", "Programmed", t1)
		case "tcp":
			wantCondition(t, "listener tcp", conditionsAt(t, m, "conditions"), "Accepted", "False", "UnsupportedProtocol", t1)
		case "not-granted":
			wantCondition(t, "listener not-granted", conditionsAt(t, m, "conditions"), "ResolvedRefs", "False", "RefNotPermitted", t1)
		}
	}
	parents := routeParents(ctx, t, client, "https")
	if len(parents) != 4 || parents[0]["controllerName"] != "example.com/other" {
		t.Fatalf("route parents: %v", parents)
	}
	wantCondition(t, "route parent missing", conditionsAt(t, parents[3], "conditions"), "Accepted", "False", "NoMatchingParent", t1)
	wantCondition(t, "route parent foo", conditionsAt(t, parents[2], "conditions"), "Accepted", "True", "Accepted", t1)

	// The same status again: nothing is written.
	clock = t1.Add(time.Hour)
	rv := get(ctx, t, client, gwstatus.HTTPRoutes, "infra", "https").GetResourceVersion()
	if res, err := w.Write(ctx, st); err != nil || res != (gwstatus.Result{Unchanged: 4}) {
		t.Fatalf("second write: %+v, %v", res, err)
	}
	if got := get(ctx, t, client, gwstatus.HTTPRoutes, "infra", "https").GetResourceVersion(); got != rv {
		t.Errorf("an unchanged status was written: resourceVersion %s -> %s", rv, got)
	}

	// A parent accepted now: only its Accepted condition moves in time; a
	// route that is gone is counted missing.
	st.HTTPRoutes[0].Parents[2].Conditions[0] = gwstatus.Condition{Type: "Accepted", Status: "True", Reason: "Accepted"}
	st.HTTPRoutes = append(st.HTTPRoutes, gwstatus.RouteStatus{Namespace: "infra", Name: "deleted-meanwhile"})
	t2 := clock
	if res, err := w.Write(ctx, st); err != nil || res != (gwstatus.Result{Written: 1, Unchanged: 3, Missing: 1}) {
		t.Fatalf("third write: %+v, %v", res, err)
	}
	parents = routeParents(ctx, t, client, "https")
	wantCondition(t, "route parent missing", conditionsAt(t, parents[3], "conditions"), "Accepted", "True", "Accepted", t2)
	wantCondition(t, "route parent missing", conditionsAt(t, parents[3], "conditions"), "ResolvedRefs", "True", "ResolvedRefs", t1)
	wantCondition(t, "route parent foo", conditionsAt(t, parents[2], "conditions"), "Accepted", "True", "Accepted", t1)
	if parents[0]["controllerName"] != "example.com/other" {
		t.Errorf("the other controller's entry is gone: %v", parents)
	}

	// A route the status no longer lists loses this controller's entries,
	// and keeps the other controller's.
	var kept []gwstatus.RouteStatus
	for _, r := range st.HTTPRoutes {
		if r.Name != "https" {
			kept = append(kept, r)
		}
	}
	st.HTTPRoutes = kept
	if res, err := w.Write(ctx, st); err != nil || res.Written != 1 {
		t.Fatalf("write without the route: %+v, %v", res, err)
	}
	parents = routeParents(ctx, t, client, "https")
	if len(parents) != 1 || parents[0]["controllerName"] != "example.com/other" {
		t.Errorf("route parents after it left: %v, want the other controller's only", parents)
	}
}

// createGatewayObjects creates the Gateway API objects of the fixture.
func createGatewayObjects(ctx context.Context, t *testing.T, client dynamic.Interface) {
	t.Helper()
	data, err := os.ReadFile(fixtureObjects)
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]schema.GroupVersionResource{
		"GatewayClass":   gwstatus.GatewayClasses,
		"Gateway":        gwstatus.Gateways,
		"HTTPRoute":      gwstatus.HTTPRoutes,
		"ReferenceGrant": {Group: "gateway.networking.k8s.io", Version: "v1beta1", Resource: "referencegrants"},
	}
	n := 0
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		kind, _ := obj["kind"].(string)
		gvr, ok := resources[kind]
		if !ok || !strings.HasPrefix(obj["apiVersion"].(string), "gateway.networking.k8s.io/") {
			continue
		}
		u := &unstructured.Unstructured{Object: obj}
		if _, err := client.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s/%s: %v", kind, u.GetNamespace(), u.GetName(), err)
		}
		n++
	}
	if n != 6 {
		t.Fatalf("created %d Gateway API objects, want 6", n)
	}
}

func get(ctx context.Context, t *testing.T, client dynamic.Interface, gvr schema.GroupVersionResource, ns, name string) *unstructured.Unstructured {
	t.Helper()
	u, err := client.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func routeParents(ctx context.Context, t *testing.T, client dynamic.Interface, name string) []map[string]any {
	t.Helper()
	ps, _, _ := unstructured.NestedSlice(get(ctx, t, client, gwstatus.HTTPRoutes, "infra", name).Object, "status", "parents")
	out := make([]map[string]any, len(ps))
	for i, p := range ps {
		out[i] = p.(map[string]any)
	}
	return out
}

func conditionsAt(t *testing.T, obj map[string]any, fields ...string) []any {
	t.Helper()
	cs, ok, err := unstructured.NestedSlice(obj, fields...)
	if err != nil || !ok {
		t.Fatalf("no conditions at %v: %v", fields, err)
	}
	return cs
}

// wantCondition checks the condition of type typ in cs.
func wantCondition(t *testing.T, what string, cs []any, typ, status, reason string, at time.Time) {
	t.Helper()
	for _, c := range cs {
		m := c.(map[string]any)
		if m["type"] != typ {
			continue
		}
		if m["status"] != status || m["reason"] != reason || m["lastTransitionTime"] != at.Format(time.RFC3339) {
			t.Errorf("%s: condition %s = %v, want status %s, reason %s, since %s", what, typ, m, status, reason, at.Format(time.RFC3339))
		}
		return
	}
	t.Errorf("%s: no condition %s in %v", what, typ, cs)
}
