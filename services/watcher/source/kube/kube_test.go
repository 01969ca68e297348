package kube_test

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"maps"
	"net"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/config/fieldpath"
	"github.com/weftio/weft/pkg/testkit"
	"github.com/weftio/weft/pkg/testkit/kubetest"
	"github.com/weftio/weft/services/watcher/source"
	"github.com/weftio/weft/services/watcher/source/kube"
	"github.com/weftio/weft/services/watcher/store"
)

const wait = 30 * time.Second

// recorder is a sink that keeps every call in order.
type recorder struct {
	mu    sync.Mutex
	calls []call
}

type call struct {
	op              string // replace, upsert, delete, synced, problem
	typ             string
	objects         []store.Object
	namespace, name string
	problems        []string
	err             error
}

func (r *recorder) add(c call) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, c)
}

func (r *recorder) Replace(_ context.Context, typ string, objects []store.Object) error {
	r.add(call{op: "replace", typ: typ, objects: objects})
	return nil
}

func (r *recorder) Upsert(_ context.Context, o store.Object) error {
	r.add(call{op: "upsert", typ: o.Type, objects: []store.Object{o}})
	return nil
}

func (r *recorder) Delete(_ context.Context, typ, namespace, name string) error {
	r.add(call{op: "delete", typ: typ, namespace: namespace, name: name})
	return nil
}

func (r *recorder) Synced(_ context.Context, typ string, problems []string) error {
	r.add(call{op: "synced", typ: typ, problems: problems})
	return nil
}

func (r *recorder) Problem(_ context.Context, err error) {
	r.add(call{op: "problem", err: err})
}

// of returns the calls about typ.
func (r *recorder) of(typ string) []call {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []call
	for _, c := range r.calls {
		if c.typ == typ {
			out = append(out, c)
		}
	}
	return out
}

// ops returns the operations of the calls about typ, in order.
func (r *recorder) ops(typ string) []string {
	var out []string
	for _, c := range r.of(typ) {
		out = append(out, c.op)
	}
	return out
}

// state replays the calls about typ: what the sink holds, by namespace/name.
func (r *recorder) state(typ string) map[string]store.Object {
	out := map[string]store.Object{}
	for _, c := range r.of(typ) {
		switch c.op {
		case "replace":
			clear(out)
			for _, o := range c.objects {
				out[o.Namespace+"/"+o.Name] = o
			}
		case "upsert":
			o := c.objects[0]
			out[o.Namespace+"/"+o.Name] = o
		case "delete":
			delete(out, c.namespace+"/"+c.name)
		}
	}
	return out
}

func (r *recorder) problems() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, c := range r.calls {
		if c.op == "problem" {
			out = append(out, c.err.Error())
		}
	}
	return out
}

// synced returns the problems of the last Synced of typ, and whether there
// was one.
func (r *recorder) synced(typ string) ([]string, bool) {
	calls := r.of(typ)
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].op == "synced" {
			return calls[i].problems, true
		}
	}
	return nil, false
}

func names(m map[string]store.Object) []string {
	return slices.Sorted(maps.Keys(m))
}

func nested(obj map[string]any, path ...string) any {
	var cur any = obj
	for _, k := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[k]
	}
	return cur
}

var (
	ingressGVR   = schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "ingresses"}
	serviceGVR   = schema.GroupVersionResource{Version: "v1", Resource: "services"}
	sliceGVR     = schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}
	secretGVR    = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	configMapGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

func obj(apiVersion, kind, namespace, name string, fields map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": apiVersion, "kind": kind}}
	maps.Copy(u.Object, fields)
	u.SetNamespace(namespace)
	u.SetName(name)
	return u
}

func ingress(ns, name string) *unstructured.Unstructured {
	return obj("networking.k8s.io/v1", "Ingress", ns, name, map[string]any{"spec": map[string]any{
		"rules": []any{map[string]any{"host": name + ".example.com", "http": map[string]any{"paths": []any{map[string]any{
			"path": "/", "pathType": "Prefix",
			"backend": map[string]any{"service": map[string]any{"name": "web", "port": map[string]any{"number": int64(80)}}},
		}}}}},
	}})
}

func service(ns, name string) *unstructured.Unstructured {
	return obj("v1", "Service", ns, name, map[string]any{"spec": map[string]any{
		"ports": []any{map[string]any{"port": int64(80), "targetPort": int64(8080)}},
	}})
}

func endpointSlice(ns, name string) *unstructured.Unstructured {
	return obj("discovery.k8s.io/v1", "EndpointSlice", ns, name, map[string]any{
		"addressType": "IPv4",
		"endpoints":   []any{map[string]any{"addresses": []any{"10.1.0.7"}}},
		"ports":       []any{map[string]any{"name": "http", "port": int64(8080), "protocol": "TCP"}},
	})
}

func secret(ns, name string, data map[string]string) *unstructured.Unstructured {
	d := map[string]any{}
	for k, v := range data {
		d[k] = base64.StdEncoding.EncodeToString([]byte(v))
	}
	return obj("v1", "Secret", ns, name, map[string]any{"type": "Opaque", "data": d})
}

func widget(ns, name string) *unstructured.Unstructured {
	return obj("example.weft.io/v1", "Widget", ns, name, map[string]any{"spec": map[string]any{"size": int64(3)}})
}

func configMap(ns, name string, labels map[string]string) *unstructured.Unstructured {
	u := obj("v1", "ConfigMap", ns, name, map[string]any{"data": map[string]any{"k": "v"}})
	u.SetLabels(labels)
	return u
}

// crd installs a namespaced custom resource kind with an open schema and
// waits until it is served.
func crd(t *testing.T, k *kubetest.Env, group, kind, plural string) {
	t.Helper()
	ctx := context.Background()
	cs, err := apiextensions.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	open := true
	def := &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: kind, Plural: plural, ListKind: kind + "List"},
			Scope: apiextensionsv1.NamespaceScoped,
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type:                   "object",
					XPreserveUnknownFields: &open,
				}},
			}},
		},
	}
	if _, err := cs.ApiextensionsV1().CustomResourceDefinitions().Create(ctx, def, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: plural}
	testkit.Eventually(t, wait, func() error {
		_, err := k.Client.Resource(gvr).List(ctx, metav1.ListOptions{})
		return err
	})
}

func namespace(t *testing.T, k *kubetest.Env, name string) {
	t.Helper()
	u := obj("v1", "Namespace", "", name, nil)
	if _, err := k.Client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func create(t *testing.T, k *kubetest.Env, gvr schema.GroupVersionResource, u *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	out, err := k.Client.Resource(gvr).Namespace(u.GetNamespace()).Create(context.Background(), u, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s %s/%s: %v", gvr.Resource, u.GetNamespace(), u.GetName(), err)
	}
	return out
}

func strip(t *testing.T, exprs ...string) []fieldpath.Path {
	t.Helper()
	var out []fieldpath.Path
	for _, e := range exprs {
		p, err := fieldpath.Parse(e)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// start runs a source on a new recorder until the test ends and checks
// that it leaves no goroutine behind.
func start(t *testing.T, o kube.Options) (*kube.Source, *recorder) {
	t.Helper()
	src, err := kube.New(o)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	ignore := goleak.IgnoreCurrent()
	stop := testkit.Run(t, func(ctx context.Context) error { return src.Run(ctx, rec) })
	t.Cleanup(func() {
		stop()
		goleak.VerifyNone(t, ignore)
	})
	return src, rec
}

func TestSource(t *testing.T) {
	k := kubetest.Start(t)
	crd(t, k, "example.weft.io", "Widget", "widgets")

	t.Run("follows changes", func(t *testing.T) { testFollows(t, k) })
	t.Run("selectors", func(t *testing.T) { testSelectors(t, k) })
	t.Run("on demand", func(t *testing.T) { testOnDemand(t, k) })
	t.Run("kind installed later", func(t *testing.T) { testLaterKind(t, k) })
	t.Run("resync", func(t *testing.T) { testResync(t, k) })
	t.Run("pages", func(t *testing.T) { testPages(t, k) })
}

func testFollows(t *testing.T, k *kubetest.Env) {
	const ns = "follow"
	namespace(t, k, ns)
	cases := []struct {
		typ  string
		res  config.Resource
		gvr  schema.GroupVersionResource
		make func(ns, name string) *unstructured.Unstructured
	}{
		{"ingresses", config.Resource{APIVersion: "networking.k8s.io/v1", Kind: "Ingress"}, ingressGVR, ingress},
		{"services", config.Resource{APIVersion: "v1", Kind: "Service"}, serviceGVR, service},
		{"endpointslices", config.Resource{APIVersion: "discovery.k8s.io/v1", Kind: "EndpointSlice"}, sliceGVR, endpointSlice},
		{"secrets", config.Resource{APIVersion: "v1", Kind: "Secret"}, secretGVR, func(ns, name string) *unstructured.Unstructured {
			return secret(ns, name, map[string]string{"password": "hunter2"})
		}},
		{"widgets", config.Resource{APIVersion: "example.weft.io/v1", Kind: "Widget"}, schema.GroupVersionResource{Group: "example.weft.io", Version: "v1", Resource: "widgets"}, widget},
	}
	types := map[string]config.Resource{}
	for _, c := range cases {
		c.res.Namespace = ns
		types[c.typ] = c.res
		create(t, k, c.gvr, c.make(ns, "before"))
	}
	_, rec := start(t, kube.Options{Config: k.Config, Types: types, Strip: strip(t, "metadata.managedFields")})

	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			testkit.Eventually(t, wait, func() error {
				if ops := rec.ops(c.typ); len(ops) < 2 || ops[0] != "replace" || ops[1] != "synced" {
					return fmt.Errorf("calls %v, want replace then synced first", ops)
				}
				return nil
			})
			first := rec.of(c.typ)
			if got := len(first[0].objects); got != 1 || first[0].objects[0].Name != "before" {
				t.Fatalf("first Replace holds %d objects (%v), want the one made before", got, first[0].objects)
			}
			if len(first[1].problems) != 0 {
				t.Errorf("synced with problems %v", first[1].problems)
			}
			o := first[0].objects[0]
			if o.Namespace != ns || o.ResourceVersion == "" || o.Origin != k.Config.Host {
				t.Errorf("object identity %q/%q rv %q origin %q", o.Namespace, o.Name, o.ResourceVersion, o.Origin)
			}
			if nested(o.Body, "metadata", "managedFields") != nil {
				t.Errorf("metadata.managedFields not stripped: %v", o.Body["metadata"])
			}
			if nested(o.Body, "metadata", "uid") == nil || o.Body["kind"] != c.res.Kind {
				t.Errorf("body is not the object: %v", o.Body)
			}

			ri := k.Client.Resource(c.gvr).Namespace(ns)
			ctx := context.Background()
			created := create(t, k, c.gvr, c.make(ns, "during"))
			testkit.Eventually(t, wait, func() error {
				got, ok := rec.state(c.typ)[ns+"/during"]
				if !ok {
					return errors.New("created object not reported")
				}
				if got.ResourceVersion != created.GetResourceVersion() {
					return fmt.Errorf("resource version %q, want %q", got.ResourceVersion, created.GetResourceVersion())
				}
				return nil
			})
			created.SetLabels(map[string]string{"rev": "2"})
			if _, err := ri.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, wait, func() error {
				got := rec.state(c.typ)[ns+"/during"]
				if v := nested(got.Body, "metadata", "labels", "rev"); v != "2" {
					return fmt.Errorf("label rev %v, want 2", v)
				}
				if nested(got.Body, "metadata", "managedFields") != nil {
					return errors.New("managedFields not stripped from an update")
				}
				return nil
			})
			if err := ri.Delete(ctx, "during", metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			testkit.Eventually(t, wait, func() error {
				if got := names(rec.state(c.typ)); !slices.Equal(got, []string{ns + "/before"}) {
					return fmt.Errorf("objects %v, want only %s/before", got, ns)
				}
				return nil
			})
			ops := rec.ops(c.typ)
			if slices.Index(ops, "upsert") < 0 || slices.Index(ops, "delete") < 0 {
				t.Errorf("changes not reported one by one: %v", ops)
			}
			if n := strings.Count(strings.Join(ops, " "), "replace"); n != 1 {
				t.Errorf("%d Replaces, want 1 (no resync configured to fire): %v", n, ops)
			}
		})
	}
}

func testSelectors(t *testing.T, k *kubetest.Env) {
	namespace(t, k, "sel-a")
	namespace(t, k, "sel-b")
	for _, ns := range []string{"sel-a", "sel-b"} {
		create(t, k, configMapGVR, configMap(ns, "web", map[string]string{"app": "web"}))
		create(t, k, configMapGVR, configMap(ns, "db", map[string]string{"app": "db"}))
		create(t, k, secretGVR, secret(ns, "opaque", map[string]string{"a": "b"}))
		tls := secret(ns, "cert", map[string]string{"tls.crt": "c", "tls.key": "k"})
		tls.Object["type"] = "weft.io/cert"
		create(t, k, secretGVR, tls)
	}
	cases := []struct {
		typ  string
		res  config.Resource
		want []string
	}{
		{"by-namespace", config.Resource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "sel-b"}, []string{"sel-b/db", "sel-b/web"}},
		{"by-label", config.Resource{APIVersion: "v1", Kind: "ConfigMap", LabelSelector: "app=web"}, []string{"sel-a/web", "sel-b/web"}},
		{"by-label-in-namespace", config.Resource{APIVersion: "v1", Kind: "ConfigMap", Namespace: "sel-a", LabelSelector: "app in (web, db)"}, []string{"sel-a/db", "sel-a/web"}},
		{"by-field", config.Resource{APIVersion: "v1", Kind: "Secret", FieldSelector: "type=weft.io/cert"}, []string{"sel-a/cert", "sel-b/cert"}},
		{"by-field-and-namespace", config.Resource{APIVersion: "v1", Kind: "Secret", Namespace: "sel-a", FieldSelector: "metadata.name!=cert"}, []string{"sel-a/opaque"}},
	}
	types := map[string]config.Resource{}
	for _, c := range cases {
		types[c.typ] = c.res
	}
	_, rec := start(t, kube.Options{Config: k.Config, Types: types})
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			testkit.Eventually(t, wait, func() error {
				if _, ok := rec.synced(c.typ); !ok {
					return errors.New("not synced")
				}
				if got := names(rec.state(c.typ)); !slices.Equal(got, c.want) {
					return fmt.Errorf("objects %v, want %v", got, c.want)
				}
				return nil
			})
		})
	}
	// A later object outside every selector is never reported.
	create(t, k, configMapGVR, configMap("sel-a", "cache", map[string]string{"app": "cache"}))
	create(t, k, configMapGVR, configMap("sel-b", "web2", map[string]string{"app": "web"}))
	testkit.Eventually(t, wait, func() error {
		if got := names(rec.state("by-namespace")); !slices.Equal(got, []string{"sel-b/db", "sel-b/web", "sel-b/web2"}) {
			return fmt.Errorf("by-namespace: %v", got)
		}
		return nil
	})
	for typ, want := range map[string][]string{
		"by-label":              {"sel-a/web", "sel-b/web", "sel-b/web2"},
		"by-label-in-namespace": {"sel-a/db", "sel-a/web"},
	} {
		testkit.Eventually(t, wait, func() error {
			if got := names(rec.state(typ)); !slices.Equal(got, want) {
				return fmt.Errorf("%s: objects %v, want %v", typ, got, want)
			}
			return nil
		})
	}
}

func testOnDemand(t *testing.T, k *kubetest.Env) {
	const ns = "ondemand"
	namespace(t, k, ns)
	s := secret(ns, "big", map[string]string{"tls.key": "private", "tls.crt": "public"})
	s.SetAnnotations(map[string]string{
		"kubectl.kubernetes.io/last-applied-configuration": `{"data":{"tls.key":"cHJpdmF0ZQ=="}}`,
		"team": "edge",
	})
	create(t, k, secretGVR, s)
	cm := configMap(ns, "settings", nil)
	cm.Object["binaryData"] = map[string]any{"blob": base64.StdEncoding.EncodeToString([]byte{0, 1})}
	create(t, k, configMapGVR, cm)

	src, rec := start(t, kube.Options{
		Config: k.Config,
		Types: map[string]config.Resource{
			"secrets":    {APIVersion: "v1", Kind: "Secret", Namespace: ns, Store: config.StoreOnDemand},
			"configmaps": {APIVersion: "v1", Kind: "ConfigMap", Namespace: ns, Store: config.StoreOnDemand},
			"services":   {APIVersion: "v1", Kind: "Service", Namespace: ns},
		},
		Strip:    strip(t, "metadata.managedFields"),
		FetchTTL: 5 * time.Second,
	})
	ctx := context.Background()

	reported := func(typ, name string) (map[string]any, error) {
		o, ok := rec.state(typ)[ns+"/"+name]
		if !ok {
			return nil, fmt.Errorf("%s %s not reported", typ, name)
		}
		return o.Body, nil
	}
	cases := []struct {
		typ, name string
		want      map[string]any
	}{
		{"secrets", "big", map[string]any{"type": "Opaque", "dataKeys": []any{"tls.crt", "tls.key"}}},
		{"configmaps", "settings", map[string]any{"dataKeys": []any{"blob", "k"}}},
	}
	for _, c := range cases {
		t.Run(c.typ, func(t *testing.T) {
			var body map[string]any
			testkit.Eventually(t, wait, func() (err error) {
				body, err = reported(c.typ, c.name)
				return err
			})
			var keys []string
			for k := range body {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			wantKeys := append([]string{"apiVersion", "kind", "metadata"}, slices.Collect(maps.Keys(c.want))...)
			sort.Strings(wantKeys)
			if !slices.Equal(keys, wantKeys) {
				t.Fatalf("reported fields %v, want %v", keys, wantKeys)
			}
			for f, v := range c.want {
				if fmt.Sprint(body[f]) != fmt.Sprint(v) {
					t.Errorf("%s = %v, want %v", f, body[f], v)
				}
			}
			if nested(body, "metadata", "name") != c.name || nested(body, "metadata", "managedFields") != nil {
				t.Errorf("metadata %v", body["metadata"])
			}
		})
	}
	body, _ := reported("secrets", "big")
	if nested(body, "metadata", "annotations", "kubectl.kubernetes.io/last-applied-configuration") != nil {
		t.Errorf("last-applied annotation (a copy of the data) reported: %v", nested(body, "metadata", "annotations"))
	}
	if nested(body, "metadata", "annotations", "team") != "edge" {
		t.Errorf("other annotations lost: %v", nested(body, "metadata", "annotations"))
	}

	full, err := src.Fetch(ctx, "secrets", ns, "big")
	if err != nil {
		t.Fatal(err)
	}
	if got := nested(full, "data", "tls.key"); got != base64.StdEncoding.EncodeToString([]byte("private")) {
		t.Errorf("Fetch data tls.key = %v", got)
	}
	if nested(full, "metadata", "managedFields") != nil {
		t.Error("Fetch did not strip metadata.managedFields")
	}
	// The caller owns what Fetch returns.
	full["data"].(map[string]any)["tls.key"] = "changed"

	// A new key shows in dataKeys at once; Fetch serves its cached copy
	// until the TTL passes.
	cur, err := k.Client.Resource(secretGVR).Namespace(ns).Get(ctx, "big", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	data := cur.Object["data"].(map[string]any)
	data["tls.key"] = base64.StdEncoding.EncodeToString([]byte("rotated"))
	data["ca.crt"] = base64.StdEncoding.EncodeToString([]byte("ca"))
	if _, err := k.Client.Resource(secretGVR).Namespace(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	cached, err := src.Fetch(ctx, "secrets", ns, "big")
	if err != nil {
		t.Fatal(err)
	}
	if got := nested(cached, "data", "tls.key"); got != base64.StdEncoding.EncodeToString([]byte("private")) {
		t.Errorf("Fetch within the TTL = %v, want the cached value", got)
	}
	testkit.Eventually(t, wait, func() error {
		body, err := reported("secrets", "big")
		if err != nil {
			return err
		}
		if got := fmt.Sprint(body["dataKeys"]); got != "[ca.crt tls.crt tls.key]" {
			return fmt.Errorf("dataKeys %s", got)
		}
		return nil
	})
	testkit.Eventually(t, wait, func() error {
		fresh, err := src.Fetch(ctx, "secrets", ns, "big")
		if err != nil {
			return err
		}
		if got := nested(fresh, "data", "tls.key"); got != base64.StdEncoding.EncodeToString([]byte("rotated")) {
			return fmt.Errorf("Fetch tls.key = %v", got)
		}
		return nil
	})
	for _, c := range fetchErrors {
		t.Run(c.name, func(t *testing.T) {
			_, err := src.Fetch(ctx, c.typ, ns, c.obj)
			if !c.is(err) {
				t.Errorf("Fetch(%s, %s) = %v", c.typ, c.obj, err)
			}
		})
	}
	for _, typ := range []string{"secrets", "configmaps"} {
		for _, c := range rec.of(typ) {
			for _, o := range c.objects {
				if _, ok := o.Body["data"]; ok {
					t.Errorf("%s %s reported with data (%s)", typ, o.Name, c.op)
				}
			}
		}
	}
}

var fetchErrors = []struct {
	name, typ, obj string
	is             func(error) bool
}{
	{"missing object", "secrets", "absent", apierrors.IsNotFound},
	{"unknown type", "nodes", "x", func(err error) bool { return errors.Is(err, kube.ErrUnknownType) }},
}

func testLaterKind(t *testing.T, k *kubetest.Env) {
	const ns = "later"
	namespace(t, k, ns)
	_, rec := start(t, kube.Options{
		Config: k.Config,
		Types: map[string]config.Resource{
			"gadgets":  {APIVersion: "later.weft.io/v1", Kind: "Gadget", Namespace: ns},
			"services": {APIVersion: "v1", Kind: "Service", Namespace: ns},
		},
		Retry: 200 * time.Millisecond,
	})
	testkit.Eventually(t, wait, func() error {
		if ops := rec.ops("gadgets"); !slices.Equal(ops, []string{"replace", "synced"}) {
			return fmt.Errorf("gadgets calls %v, want replace, synced", ops)
		}
		return nil
	})
	calls := rec.of("gadgets")
	if len(calls[0].objects) != 0 {
		t.Errorf("unknown kind replaced with %v", calls[0].objects)
	}
	if len(calls[1].problems) != 1 || !strings.Contains(calls[1].problems[0], "Gadget") || !strings.Contains(calls[1].problems[0], "gadgets") {
		t.Errorf("synced problems %q, want one naming type gadgets and kind Gadget", calls[1].problems)
	}
	if ps := rec.problems(); !slices.ContainsFunc(ps, func(p string) bool { return strings.Contains(p, "kind Gadget of later.weft.io/v1") }) {
		t.Errorf("problems %q name no Gadget", ps)
	}
	testkit.Eventually(t, wait, func() error {
		if _, ok := rec.synced("services"); !ok {
			return errors.New("a known type waits for an unknown one")
		}
		return nil
	})

	crd(t, k, "later.weft.io", "Gadget", "gadgets")
	gvr := schema.GroupVersionResource{Group: "later.weft.io", Version: "v1", Resource: "gadgets"}
	g := obj("later.weft.io/v1", "Gadget", ns, "g1", map[string]any{"spec": map[string]any{"on": true}})
	create(t, k, gvr, g)
	testkit.Eventually(t, wait, func() error {
		if _, ok := rec.state("gadgets")[ns+"/g1"]; !ok {
			return errors.New("gadget not reported")
		}
		if problems, _ := rec.synced("gadgets"); len(problems) != 0 {
			return fmt.Errorf("still synced with problems %q", problems)
		}
		return nil
	})

	// When the kind goes away again, so do its objects, and the type is
	// looked up again.
	cs, err := apiextensions.NewForConfig(k.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.ApiextensionsV1().CustomResourceDefinitions().Delete(context.Background(), "gadgets.later.weft.io", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, func() error {
		if got := names(rec.state("gadgets")); len(got) != 0 {
			return fmt.Errorf("gadgets %v still reported", got)
		}
		if problems, _ := rec.synced("gadgets"); len(problems) != 1 || !strings.Contains(problems[0], "kind Gadget") {
			return fmt.Errorf("synced problems %q, want the unknown kind", problems)
		}
		return nil
	})
}

func testResync(t *testing.T, k *kubetest.Env) {
	const ns = "resync"
	namespace(t, k, ns)
	for _, n := range []string{"a", "b", "c"} {
		create(t, k, configMapGVR, configMap(ns, n, nil))
	}
	typ := "configmaps"
	src, rec := start(t, kube.Options{
		Config: k.Config,
		Types:  map[string]config.Resource{typ: {APIVersion: "v1", Kind: "ConfigMap", Namespace: ns}},
		Resync: 300 * time.Millisecond,
	})
	want := []string{ns + "/a", ns + "/b", ns + "/c"}
	replaces := func() [][]store.Object {
		var out [][]store.Object
		for _, c := range rec.of(typ) {
			if c.op == "replace" {
				out = append(out, c.objects)
			}
		}
		return out
	}
	testkit.Eventually(t, wait, func() error {
		if n := len(replaces()); n < 3 {
			return fmt.Errorf("%d Replaces, want the first and two resyncs", n)
		}
		return nil
	})
	for i, objs := range replaces() {
		var got []string
		for _, o := range objs {
			got = append(got, o.Namespace+"/"+o.Name)
			if o.ResourceVersion == "" || o.Body["data"] == nil {
				t.Errorf("replace %d: object %s incomplete: %v", i, o.Name, o.Body)
			}
		}
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("replace %d holds %v, want the full listing %v", i, got, want)
		}
	}

	// Resync on request lists at once and reports to the sink it is given.
	other := &recorder{}
	if err := src.Resync(context.Background(), other); err != nil {
		t.Fatal(err)
	}
	if ops := other.ops(typ); !slices.Equal(ops, []string{"replace"}) {
		t.Fatalf("Resync reported %v, want one replace", ops)
	}
	if got := names(other.state(typ)); !slices.Equal(got, want) {
		t.Errorf("Resync listing %v, want %v", got, want)
	}
}

func TestNewRejects(t *testing.T) {
	cases := []struct {
		name string
		res  config.Resource
		want string
	}{
		{"no kind", config.Resource{APIVersion: "v1"}, "api_version and kind are required"},
		{"bad api version", config.Resource{APIVersion: "a/b/c", Kind: "X"}, "api_version"},
		{"bad label selector", config.Resource{APIVersion: "v1", Kind: "Pod", LabelSelector: "a in (b"}, "label_selector"},
		{"bad field selector", config.Resource{APIVersion: "v1", Kind: "Pod", FieldSelector: "a"}, "field_selector"},
		{"bad store", config.Resource{APIVersion: "v1", Kind: "Pod", Store: "lazy"}, "store"},
	}
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := kube.New(kube.Options{Config: cfg, Types: map[string]config.Resource{"t": c.res}})
			if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "type t") {
				t.Errorf("New = %v, want an error about %s of type t", err, c.want)
			}
		})
	}
	if _, err := kube.New(kube.Options{}); err == nil {
		t.Error("New without a config succeeded")
	}
}

// closedAddress is an address nothing listens on.
func closedAddress(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return addr
}

func TestUnreachable(t *testing.T) {
	_, rec := start(t, kube.Options{
		Config: &rest.Config{Host: "https://" + closedAddress(t), TLSClientConfig: rest.TLSClientConfig{Insecure: true}},
		Types:  map[string]config.Resource{"services": {APIVersion: "v1", Kind: "Service"}},
	})
	testkit.Eventually(t, wait, func() error {
		if ps := rec.problems(); !slices.ContainsFunc(ps, func(p string) bool {
			return strings.Contains(p, "type services") && strings.Contains(p, "connection refused")
		}) {
			return fmt.Errorf("problems %q", ps)
		}
		return nil
	})
	if ops := rec.ops("services"); len(ops) != 0 {
		t.Errorf("an unreachable server gave %v; a type must not sync before it lists", ops)
	}
}

// pager is a recorder that takes listings page by page (source.PageSink):
// each page is recorded as a "page" call, the listing's end as "end".
type pager struct{ *recorder }

var _ source.PageSink = pager{}

func (p pager) ReplacePages(_ context.Context, types []string, pages iter.Seq2[[]store.Object, error]) error {
	typ := types[0]
	for page, err := range pages {
		if err != nil {
			return err
		}
		p.add(call{op: "page", typ: typ, objects: page})
	}
	p.add(call{op: "end", typ: typ})
	return nil
}

// testPages lists a type of 1,001 objects in pages of at most 500, each
// handed to the sink as it comes, and then follows changes from the
// listing's version.
func testPages(t *testing.T, k *kubetest.Env) {
	const ns, n = "pages", 1001
	namespace(t, k, ns)
	var next atomic.Int32
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if _, err := k.Client.Resource(configMapGVR).Namespace(ns).Create(context.Background(), configMap(ns, fmt.Sprintf("cm-%04d", i), nil), metav1.CreateOptions{}); err != nil {
					t.Errorf("create cm-%04d: %v", i, err)
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	typ := "configmaps"
	src, err := kube.New(kube.Options{Config: k.Config, Types: map[string]config.Resource{typ: {APIVersion: "v1", Kind: "ConfigMap", Namespace: ns}}})
	if err != nil {
		t.Fatal(err)
	}
	p := pager{&recorder{}}
	stop := testkit.Run(t, func(ctx context.Context) error { return src.Run(ctx, p) })
	defer stop()
	testkit.Eventually(t, wait, func() error {
		if _, ok := p.synced(typ); !ok {
			return errors.New("not synced")
		}
		return nil
	})
	var sizes []int
	seen := map[string]bool{}
	for _, c := range p.of(typ) {
		if c.op == "page" {
			sizes = append(sizes, len(c.objects))
			for _, o := range c.objects {
				seen[o.Name] = true
			}
		}
	}
	if !slices.Equal(sizes, []int{500, 500, 1}) || len(seen) != n {
		t.Fatalf("listing came in pages of %v holding %d distinct objects, want pages of [500 500 1] holding %d", sizes, len(seen), n)
	}
	if ops := p.ops(typ); ops[len(ops)-2] != "end" || ops[len(ops)-1] != "synced" {
		t.Errorf("calls end with %v, want the listing's end and then synced", ops[len(ops)-2:])
	}

	u := configMap(ns, "cm-0000", nil)
	u.Object["data"] = map[string]any{"k": "changed"}
	if _, err := k.Client.Resource(configMapGVR).Namespace(ns).Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, wait, func() error {
		if got := nested(p.state(typ)[ns+"/cm-0000"].Body, "data", "k"); got != "changed" {
			return fmt.Errorf("cm-0000 data.k = %v after the update", got)
		}
		return nil
	})
}
