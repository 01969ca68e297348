package librarytest

import (
	"path/filepath"
	"reflect"
	"runtime"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/target"
)

// WatchedOf is the watched_resources block of the README of the library
// named library, for tests outside the library's folder (a driver's test
// that runs the library's bundle).
func WatchedOf(t testing.TB, library string) map[string]config.Resource {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the librarytest source to find the library READMEs")
	}
	return Watched(t, filepath.Join(filepath.Dir(file), "..", library, "README.md"))
}

// Scene is a target rendered over objects that a test changes as a
// cluster would, rendered as the renderer renders it: the objects are
// indexed, and each render after a change is incremental. A render that
// registers errors fails the test.
type Scene struct {
	t      testing.TB
	ix     *index.Index
	render func() target.Result
	rev    uint64
	// objs are the objects indexed, by index id, as last synced.
	objs map[string]Object
}

// NewScene indexes objs (typed by res) for tc.
func NewScene(t testing.TB, tc config.Target, res map[string]config.Resource, objs ...Object) *Scene {
	t.Helper()
	ix := NewIndex(t, res, objs)
	s := &Scene{t: t, ix: ix, render: Incremental(t, tc, ix), rev: uint64(len(objs)), objs: map[string]Object{}}
	for _, o := range objs {
		s.objs[ObjectID(o.Type, o.Namespace, o.Name)] = Object{Type: o.Type, Namespace: o.Namespace, Name: o.Name, Body: RoundTrip(t, o.Body)}
	}
	return s
}

// Sync makes objs the scene's objects, as a watcher would see the cluster
// change: objects that are new or whose body changed are upserted, those
// no longer in objs deleted, the others left as they are.
func (s *Scene) Sync(objs ...Object) {
	s.t.Helper()
	keep := map[string]bool{}
	for _, o := range objs {
		id := ObjectID(o.Type, o.Namespace, o.Name)
		keep[id] = true
		body := RoundTrip(s.t, o.Body)
		if old, ok := s.objs[id]; ok && reflect.DeepEqual(old.Body, body) {
			continue
		}
		s.rev++
		if !s.ix.Upsert(o.Type, id, s.rev, body) {
			s.t.Fatalf("upsert %s %s/%s ignored", o.Type, o.Namespace, o.Name)
		}
		s.objs[id] = Object{Type: o.Type, Namespace: o.Namespace, Name: o.Name, Body: body}
	}
	for id, o := range s.objs {
		if keep[id] {
			continue
		}
		s.rev++
		if !s.ix.Delete(o.Type, id, s.rev) {
			s.t.Fatalf("delete %s %s/%s ignored", o.Type, o.Namespace, o.Name)
		}
		delete(s.objs, id)
	}
}

// Bundle renders the target over the scene's objects.
func (s *Scene) Bundle() msg.Bundle {
	s.t.Helper()
	r := s.render()
	if len(r.Errors) > 0 {
		s.t.Fatalf("registered errors: %+v", r.Errors)
	}
	return r.Bundle
}

// IngressRule is one rule of an Ingress built by Ingress: requests for
// Host with a path under Path (pathType Prefix) go to port Port of the
// Service named Service.
type IngressRule struct {
	Host, Path, Service string
	Port                int
}

// Ingress is the Ingress ns/name of the ingress library's default class
// (weft) with annotations (none when nil) and one rule per item of rules.
func Ingress(ns, name string, annotations map[string]string, rules ...IngressRule) Object {
	meta := map[string]any{"namespace": ns, "name": name}
	if len(annotations) > 0 {
		ann := map[string]any{}
		for k, v := range annotations {
			ann[k] = v
		}
		meta["annotations"] = ann
	}
	var rs []any
	for _, r := range rules {
		rs = append(rs, map[string]any{"host": r.Host, "http": map[string]any{"paths": []any{map[string]any{
			"path": r.Path, "pathType": "Prefix",
			"backend": map[string]any{"service": map[string]any{"name": r.Service, "port": map[string]any{"number": r.Port}}},
		}}}})
	}
	return Object{Type: "ingresses", Namespace: ns, Name: name, Body: map[string]any{
		"apiVersion": "networking.k8s.io/v1", "kind": "Ingress", "metadata": meta,
		"spec": map[string]any{"ingressClassName": "weft", "rules": rs},
	}}
}

// Service is the Service ns/name with one unnamed port, port, to
// targetPort.
func Service(ns, name string, port, targetPort int) Object {
	return Object{Type: "services", Namespace: ns, Name: name, Body: map[string]any{
		"apiVersion": "v1", "kind": "Service", "metadata": map[string]any{"namespace": ns, "name": name},
		"spec": map[string]any{"ports": []any{map[string]any{"port": port, "targetPort": targetPort}}},
	}}
}

// EndpointSlice is the IPv4 EndpointSlice ns/name of the Service service,
// with one unnamed port, port, and one ready endpoint per address of
// addrs.
func EndpointSlice(ns, name, service string, port int, addrs ...string) Object {
	eps := []any{}
	for _, a := range addrs {
		eps = append(eps, map[string]any{"addresses": []any{a}})
	}
	return Object{Type: "endpoints", Namespace: ns, Name: name, Body: map[string]any{
		"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
		"metadata":    map[string]any{"namespace": ns, "name": name, "labels": map[string]any{"kubernetes.io/service-name": service}},
		"addressType": "IPv4",
		"ports":       []any{map[string]any{"port": port}},
		"endpoints":   eps,
	}}
}
