package runtime

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	weftconfig "github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/library/librarytest"
)

// gatewayREADME documents the watched resources the gateway library reads.
const gatewayREADME = "../../../../pkg/render/library/gateway/README.md"

// gatewayObjects is a Gateway of the gateway library's default class
// whose HTTPRoute apps/web sends every request to the Services stable
// (one endpoint, 10.1.0.1) and web, weight 1 each; the Services' port 80
// is port 8080 of their endpoints. The EndpointSlice of web is left to
// webSlice.
const gatewayObjects = `
apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: weft}
spec: {controllerName: weft.io/gateway-controller}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: web, namespace: apps}
spec:
  gatewayClassName: weft
  listeners: [{name: http, port: 80, protocol: HTTP}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: apps}
spec:
  parentRefs: [{name: web}]
  rules:
    - backendRefs: [{name: stable, port: 80}, {name: web, port: 80}]
---
apiVersion: v1
kind: Service
metadata: {name: stable, namespace: apps}
spec: {ports: [{name: http, port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: stable-1, namespace: apps, labels: {kubernetes.io/service-name: stable}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [{addresses: [10.1.0.1]}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: apps}
spec: {ports: [{name: http, port: 80, targetPort: 8080}]}
`

// webSlice is the EndpointSlice of the Service web with an endpoint per
// address of ready, and one with conditions.ready false per address of
// notReady.
func webSlice(ready, notReady []string) string {
	var eps []string
	for _, a := range ready {
		eps = append(eps, fmt.Sprintf("{addresses: [%s]}", a))
	}
	for _, a := range notReady {
		eps = append(eps, fmt.Sprintf("{addresses: [%s], conditions: {ready: false}}", a))
	}
	return `
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: web-1, namespace: apps, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
ports: [{name: http, port: 8080}]
endpoints: [` + strings.Join(eps, ", ") + `]
`
}

// TestGatewayLibraryEndpointChanges renders the gateway library (server
// slots 4) over the objects of gatewayObjects, incrementally as the
// renderer does, while the endpoints of the Service web change, and
// compares each bundle with the one before as Apply does. An address
// replaced, one added within the slots, one removed and one no longer
// ready change only server lines, with these runtime commands, and no
// other file; growing beyond the slots, and losing the last ready
// endpoint, are structural changes: a reload.
func TestGatewayLibraryEndpointChanges(t *testing.T) {
	res := librarytest.Watched(t, gatewayREADME)
	objs := librarytest.ParseObjects(t, res, []byte(gatewayObjects+"---"+webSlice([]string{"10.2.0.1", "10.2.0.2"}, nil)))
	ix := librarytest.NewIndex(t, res, objs)
	tc := weftconfig.Target{Library: "gateway", Base: "/etc/haproxy", LibraryOptions: map[string]string{"server_slots": "4"}}
	render := librarytest.Incremental(t, tc, ix)
	rev := uint64(len(objs))

	const be = "gw_apps_web_r0m0"
	set := func(slot int, what string) string {
		return fmt.Sprintf("set server %s/SRV_2_%d %s", be, slot, what)
	}
	steps := []struct {
		name            string
		ready, notReady []string
		// ops are the runtime commands, in order; with structure set,
		// the change is structural instead, for the reason it names.
		ops       []string
		structure string
	}{
		{
			name:  "address replaced",
			ready: []string{"10.2.0.1", "10.2.0.3"},
			ops:   []string{set(2, "addr 10.2.0.3 port 8080")},
		},
		{
			// web gets a third of its share per address: weight 85
			// (stable's one address keeps 256) on every slot of web.
			name:  "address added within the slots",
			ready: []string{"10.2.0.1", "10.2.0.3", "10.2.0.4"},
			ops: []string{
				set(1, "weight 85"),
				set(2, "weight 85"),
				set(3, "addr 10.2.0.4 port 8080"), set(3, "weight 85"), set(3, "state ready"),
				set(4, "weight 85"),
			},
		},
		{
			// The addresses left move up a slot.
			name:  "address removed",
			ready: []string{"10.2.0.3", "10.2.0.4"},
			ops: []string{
				set(1, "addr 10.2.0.3 port 8080"), set(1, "weight 128"),
				set(2, "addr 10.2.0.4 port 8080"), set(2, "weight 128"),
				set(3, "state maint"), set(3, "addr 127.0.0.1 port 1"), set(3, "weight 128"),
				set(4, "weight 128"),
			},
		},
		{
			name:     "endpoint not ready",
			ready:    []string{"10.2.0.3"},
			notReady: []string{"10.2.0.4"},
			ops: []string{
				set(1, "weight 256"),
				set(2, "state maint"), set(2, "addr 127.0.0.1 port 1"), set(2, "weight 256"),
				set(3, "weight 256"),
				set(4, "weight 256"),
			},
		},
		{
			name:      "grown beyond the slots",
			ready:     []string{"10.2.0.1", "10.2.0.2", "10.2.0.3", "10.2.0.4", "10.2.0.5"},
			structure: "backend " + be + ": lines added or removed",
		},
		{
			name:  "address added within the grown slots",
			ready: []string{"10.2.0.1", "10.2.0.2", "10.2.0.3", "10.2.0.4", "10.2.0.5", "10.2.0.6"},
			ops: func() []string {
				var ops []string
				for s := 1; s <= 8; s++ {
					if s == 6 {
						ops = append(ops, set(6, "addr 10.2.0.6 port 8080"), set(6, "weight 43"), set(6, "state ready"))
						continue
					}
					ops = append(ops, set(s, "weight 43"))
				}
				return ops
			}(),
		},
		{
			name:      "no ready endpoint left",
			notReady:  []string{"10.2.0.1"},
			structure: "backend " + be,
		},
	}

	prev := render()
	if len(prev.Errors) > 0 {
		t.Fatalf("registered errors: %+v", prev.Errors)
	}
	for _, st := range steps {
		slice := librarytest.ParseObjects(t, res, []byte(webSlice(st.ready, st.notReady)))[0]
		rev++
		if !ix.Upsert(slice.Type, librarytest.ObjectID(slice.Type, slice.Namespace, slice.Name), rev, librarytest.RoundTrip(t, slice.Body)) {
			t.Fatalf("%s: upsert of the EndpointSlice ignored", st.name)
		}
		cur := render()
		oldCfg := []byte(librarytest.FileContent(prev.Bundle, "haproxy.cfg"))
		newCfg := []byte(librarytest.FileContent(cur.Bundle, "haproxy.cfg"))
		changes, err := diffConfig(oldCfg, newCfg)
		var se *structureError
		switch {
		case st.structure != "":
			if !errors.As(err, &se) || !strings.Contains(se.detail, st.structure) {
				t.Errorf("%s: diff = %v, %v; want a structural change mentioning %q", st.name, changes, err, st.structure)
			}
		case err != nil:
			t.Errorf("%s: %v\nbefore:\n%s\nnow:\n%s", st.name, err, oldCfg, newCfg)
		case len(cur.Errors) > 0:
			t.Errorf("%s: registered errors: %+v", st.name, cur.Errors)
		default:
			var ops []string
			for _, c := range changes {
				for _, o := range c.ops() {
					ops = append(ops, o.show)
				}
			}
			if !slices.Equal(ops, st.ops) {
				t.Errorf("%s: runtime commands\n  %s\nwant\n  %s", st.name, strings.Join(ops, "\n  "), strings.Join(st.ops, "\n  "))
			}
			// A runtime-only deploy needs every other file unchanged
			// (the gateway library has no map; its status file is not
			// one HAProxy reads).
			for _, f := range cur.Bundle.Files {
				if f.Path != "haproxy.cfg" && !bytes.Equal(f.Content, []byte(librarytest.FileContent(prev.Bundle, f.Path))) {
					t.Errorf("%s: %s changed", st.name, f.Path)
				}
			}
			if len(cur.Bundle.Files) != len(prev.Bundle.Files) {
				t.Errorf("%s: %d files, before %d", st.name, len(cur.Bundle.Files), len(prev.Bundle.Files))
			}
		}
		prev = cur
	}
}
