package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/renderer"
	"github.com/weftio/weft/services/validator"
	"github.com/weftio/weft/services/watcher"
	"github.com/weftio/weft/services/watcher/gwstatus"
)

var referenceGrants = schema.GroupVersionResource{Group: "gateway.networking.k8s.io", Version: "v1beta1", Resource: "referencegrants"}

// TestGatewayStatus runs the watcher (two replicas), the renderer and the
// validator on a real API server with the Gateway API CRDs and a target of
// the gateway library with gateway_status: the class, the Gateway (with
// the configured addresses, Programmed) and the routes get the status the
// spec asks for (an accepted route; RefNotPermitted for a backendRef in
// another namespace without a ReferenceGrant; NoMatchingParent for a
// listener that does not exist); a ReferenceGrant makes the second route's
// refs resolved; only the lease holder writes, and when it stops the other
// replica takes over, sets back a status changed behind weft's back and
// keeps writing; the NATS server, with the
// generated permissions, refuses nothing.
func TestGatewayStatus(t *testing.T) {
	k := kubetest.Start(t)
	k.InstallCRDs(t, filepath.Join("..", "..", "services", "watcher", "gwstatus", "testdata", "crds"))
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(k.Config)
	for _, ns := range []string{"infra", "apps", "data"} {
		if _, err := k.Clientset.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range []struct {
		ns, name string
		port     int32
	}{{"apps", "web", 80}, {"data", "db", 5432}} {
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.ns},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "p", Port: s.port}}}}
		if _, err := k.Clientset.CoreV1().Services(s.ns).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createObjects(ctx, t, dyn, filepath.Join("testdata", "gatewaystatus", "objects.yaml"))

	dir := t.TempDir()
	cfg, err := config.Parse(fmt.Appendf(nil, `
sources: [{name: k, type: kubernetes, kubeconfig: %s}]
watched_resources:
  gatewayclasses: {api_version: gateway.networking.k8s.io/v1, kind: GatewayClass, index_by: ["metadata.name"]}
  gateways: {api_version: gateway.networking.k8s.io/v1, kind: Gateway, index_by: ["metadata.namespace", "metadata.name"]}
  httproutes: {api_version: gateway.networking.k8s.io/v1, kind: HTTPRoute, index_by: ["metadata.namespace", "metadata.name"]}
  referencegrants: {api_version: gateway.networking.k8s.io/v1beta1, kind: ReferenceGrant, index_by: ["metadata.namespace"]}
  services: {api_version: v1, kind: Service, index_by: ["metadata.namespace", "metadata.name"]}
  endpoints: {api_version: discovery.k8s.io/v1, kind: EndpointSlice, index_by: ["metadata.namespace", "metadata.labels['kubernetes.io/service-name']"]}
targets:
  gateway:
    library: gateway
    render: {debounce: 50ms}
    validate: {kinds: [template]}
    deploy: {driver: files, dest: out}
    gateway_status:
      resync: 1h
      from: {addresses: [192.0.2.7, lb.example.com]}
`, k.Kubeconfig), dir)
	if err != nil {
		t.Fatal(err)
	}
	// Every service on its own NATS user, as generated from the access
	// table: the server must refuse nothing the watchers do.
	url, keys, v := usersServer(t)
	bus := roleBus(t, url, keys, msg.RoleAdmin, v)
	venv := testkit.NewEnv(t, roleBus(t, url, keys, msg.RoleValidator, v), "v")
	testkit.Run(t, func(ctx context.Context) error { return validator.Run(ctx, venv.Env, cfg) })
	renv := testkit.NewEnv(t, roleBus(t, url, keys, msg.RoleRenderer, v), "r")
	testkit.Run(t, func(ctx context.Context) error { return renderer.Run(ctx, renv.Env, cfg) })
	envs := []*testkit.Env{
		testkit.NewEnv(t, roleBus(t, url, keys, msg.RoleWatcher, v), "w1"),
		testkit.NewEnv(t, roleBus(t, url, keys, msg.RoleWatcher, v), "w2"),
	}
	stops := make([]func(), len(envs))
	for i, env := range envs {
		stops[i] = testkit.Run(t, func(ctx context.Context) error { return watcher.Run(ctx, env.Env, cfg) })
	}
	writes := func(i int) float64 {
		return testkit.LabeledValue(t, envs[i].Registry, "weft_watcher_gateway_status_writes_total", map[string]string{"result": gwstatus.ResultWritten})
	}

	get := func(gvr schema.GroupVersionResource, ns, name string) map[string]any {
		u, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return u.Object
	}
	// status waits until the object's conditions at fields have the
	// wanted "type=status/reason" entries.
	status := func(what string, gvr schema.GroupVersionResource, ns, name string, fields []string, want ...string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() error {
			obj := get(gvr, ns, name)
			cs, _, _ := unstructured.NestedSlice(obj, fields...)
			have := map[string]bool{}
			for _, c := range cs {
				m, _ := c.(map[string]any)
				have[fmt.Sprintf("%v=%v/%v", m["type"], m["status"], m["reason"])] = true
			}
			for _, w := range want {
				if !have[w] {
					return fmt.Errorf("%s: %s not in %v", what, w, cs)
				}
			}
			return nil
		})
	}
	parentStatus := func(name string, want ...string) {
		t.Helper()
		testkit.Eventually(t, 30*time.Second, func() error {
			ps, _, _ := unstructured.NestedSlice(get(gwstatus.HTTPRoutes, "apps", name), "status", "parents")
			if len(ps) != 1 {
				return fmt.Errorf("route %s: parents %v, want one", name, ps)
			}
			p := ps[0].(map[string]any)
			if p["controllerName"] != config.DefaultGatewayController {
				return fmt.Errorf("route %s: controllerName %v", name, p["controllerName"])
			}
			cs, _ := p["conditions"].([]any)
			var have []string
			for _, c := range cs {
				m := c.(map[string]any)
				have = append(have, fmt.Sprintf("%v=%v/%v", m["type"], m["status"], m["reason"]))
			}
			for _, w := range want {
				if !strings.Contains(strings.Join(have, " "), w) {
					return fmt.Errorf("route %s: %s not in %v", name, w, have)
				}
			}
			return nil
		})
	}

	status("class", gwstatus.GatewayClasses, "", "weft", []string{"status", "conditions"}, "Accepted=True/Accepted")
	status("gateway", gwstatus.Gateways, "infra", "gw", []string{"status", "conditions"}, "Accepted=True/Accepted", "Programmed=True/Programmed")
	parentStatus("ok", "Accepted=True/Accepted", "ResolvedRefs=True/ResolvedRefs")
	parentStatus("cross", "Accepted=True/Accepted", "ResolvedRefs=False/RefNotPermitted")
	parentStatus("lost", "Accepted=False/NoMatchingParent")
	gw := get(gwstatus.Gateways, "infra", "gw")
	addrs, _, _ := unstructured.NestedSlice(gw, "status", "addresses")
	if fmt.Sprint(addrs) != "[map[type:IPAddress value:192.0.2.7] map[type:Hostname value:lb.example.com]]" {
		t.Errorf("gateway addresses %v", addrs)
	}
	listeners, _, _ := unstructured.NestedSlice(gw, "status", "listeners")
	if len(listeners) != 1 || listeners[0].(map[string]any)["attachedRoutes"] != int64(2) {
		t.Errorf("gateway listeners %v, want http with 2 attached routes", listeners)
	}

	leases, err := bus.JS.KeyValue(ctx, msg.BucketLeases)
	if err != nil {
		t.Fatal(err)
	}
	lease, err := leases.Get(ctx, msg.GatewayStatusLeaseKey("gateway"))
	if err != nil {
		t.Fatal(err)
	}
	holder := 0
	if string(lease.Value()) == "w2" {
		holder = 1
	}
	standby := 1 - holder
	// the count follows the writes, whose results are already visible
	testkit.Eventually(t, 10*time.Second, func() error {
		if w := writes(holder); w == 0 {
			return fmt.Errorf("the lease holder counted no writes")
		}
		return nil
	})
	if w := writes(standby); w != 0 {
		t.Errorf("the replica without the lease counted %v writes", w)
	}

	grant := map[string]any{
		"apiVersion": "gateway.networking.k8s.io/v1beta1", "kind": "ReferenceGrant",
		"metadata": map[string]any{"name": "apps-to-db", "namespace": "data"},
		"spec": map[string]any{
			"from": []any{map[string]any{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "apps"}},
			"to":   []any{map[string]any{"group": "", "kind": "Service"}},
		},
	}
	if _, err := dyn.Resource(referenceGrants).Namespace("data").Create(ctx, &unstructured.Unstructured{Object: grant}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parentStatus("cross", "Accepted=True/Accepted", "ResolvedRefs=True/ResolvedRefs")

	// A status changed behind weft's back is not looked at until the next
	// bundle or resync; the replica taking over writes at once, setting it
	// back. Then it writes the next change.
	testkit.Eventually(t, 10*time.Second, func() error {
		u, err := dyn.Resource(gwstatus.GatewayClasses).Get(ctx, "weft", metav1.GetOptions{})
		if err != nil {
			return err
		}
		bogus := []any{map[string]any{"type": "Accepted", "status": "False", "reason": "Tampered", "message": "",
			"lastTransitionTime": "2024-01-01T00:00:00Z"}}
		if err := unstructured.SetNestedSlice(u.Object, bogus, "status", "conditions"); err != nil {
			return err
		}
		_, err = dyn.Resource(gwstatus.GatewayClasses).UpdateStatus(ctx, u, metav1.UpdateOptions{})
		return err
	})
	stops[holder]()
	status("class after takeover", gwstatus.GatewayClasses, "", "weft", []string{"status", "conditions"}, "Accepted=True/Accepted")
	before := writes(holder)
	if err := dyn.Resource(referenceGrants).Namespace("data").Delete(ctx, "apps-to-db", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	parentStatus("cross", "Accepted=True/Accepted", "ResolvedRefs=False/RefNotPermitted")
	testkit.Eventually(t, 30*time.Second, func() error {
		if w := writes(standby); w == 0 {
			return fmt.Errorf("the new holder counted no writes")
		}
		return nil
	})
	if w := writes(holder); w != before {
		t.Errorf("the stopped replica wrote: %v writes, had %v", w, before)
	}
}

// createObjects creates the Gateway API objects of a YAML file.
func createObjects(ctx context.Context, t *testing.T, client dynamic.Interface, file string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]schema.GroupVersionResource{
		"GatewayClass": gwstatus.GatewayClasses, "Gateway": gwstatus.Gateways,
		"HTTPRoute": gwstatus.HTTPRoutes, "ReferenceGrant": referenceGrants,
	}
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		var obj map[string]any
		if err := yaml.Unmarshal([]byte(doc), &obj); err != nil {
			t.Fatal(err)
		}
		kind, _ := obj["kind"].(string)
		gvr, ok := resources[kind]
		if !ok {
			t.Fatalf("%s: unknown kind %q", file, kind)
		}
		u := &unstructured.Unstructured{Object: obj}
		if _, err := client.Resource(gvr).Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s/%s: %v", kind, u.GetNamespace(), u.GetName(), err)
		}
	}
}
