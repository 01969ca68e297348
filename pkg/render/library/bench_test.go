package library_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/weftio/weft/pkg/render/engine"
	"github.com/weftio/weft/pkg/render/index"
	"github.com/weftio/weft/pkg/render/library/librarytest"
	"github.com/weftio/weft/pkg/render/target"
)

// benchObjects is n Ingresses of one host and three paths each, each with
// its own Service and an EndpointSlice of four endpoints, and a TLS entry
// for every tenth.
func benchObjects(t testing.TB, n int) []librarytest.Object {
	var docs string
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%50)
		tls := ""
		if i%10 == 0 {
			tls = fmt.Sprintf("\n  tls:\n    - hosts: [app%d.example]\n      secretName: tls%d", i, i)
		}
		docs += fmt.Sprintf(`---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: app%[1]d, namespace: %[2]s}
spec:
  ingressClassName: weft%[3]s
  rules:
    - host: app%[1]d.example
      http:
        paths:
          - {path: /, pathType: Prefix, backend: {service: {name: svc%[1]d, port: {number: 80}}}}
          - {path: /api, pathType: Prefix, backend: {service: {name: svc%[1]d, port: {number: 80}}}}
          - {path: /healthz, pathType: Exact, backend: {service: {name: svc%[1]d, port: {number: 80}}}}
---
apiVersion: v1
kind: Service
metadata: {name: svc%[1]d, namespace: %[2]s}
spec: {ports: [{port: 80, targetPort: 8080}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: svc%[1]d-1, namespace: %[2]s, labels: {kubernetes.io/service-name: svc%[1]d}}
addressType: IPv4
ports: [{port: 8080}]
endpoints:
  - addresses: ["10.%[4]d.%[5]d.1"]
  - addresses: ["10.%[4]d.%[5]d.2"]
  - addresses: ["10.%[4]d.%[5]d.3"]
  - addresses: ["10.%[4]d.%[5]d.4"]
`, i, ns, tls, i/256, i%256)
	}
	return librarytest.ParseObjects(t, watched(t), []byte(docs))
}

// BenchmarkFullRender renders 1000 Ingresses from an empty fragment cache.
func BenchmarkFullRender(b *testing.B) {
	res := watched(b)
	ix := librarytest.NewIndex(b, res, benchObjects(b, 1000))
	for b.Loop() {
		tg, err := target.Compile("edge", ingressTarget(librarytest.GoldenBase, nil))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := tg.Render(context.Background(), ix.Stores(), nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEndpointChange renders 1000 Ingresses after one EndpointSlice
// changed: one fragment entry is rendered again, the outputs join.
func BenchmarkEndpointChange(b *testing.B) {
	res := watched(b)
	objs := benchObjects(b, 1000)
	ix := librarytest.NewIndex(b, res, objs)
	tg, err := target.Compile("edge", ingressTarget(librarytest.GoldenBase, nil))
	if err != nil {
		b.Fatal(err)
	}
	ix.Observe(func(c index.Change) {
		tg.Invalidate([]engine.Change{{Type: c.Type, ID: c.ID, OldKeys: c.OldKeys, NewKeys: c.NewKeys}})
	})
	if _, err := tg.Render(context.Background(), ix.Stores(), nil); err != nil {
		b.Fatal(err)
	}
	var slice librarytest.Object
	for _, o := range objs {
		if o.Type == "endpoints" && o.Name == "svc7-1" {
			slice = o
		}
	}
	rev := uint64(len(objs))
	for b.Loop() {
		rev++
		body := librarytest.RoundTrip(b, slice.Body)
		body["endpoints"] = append(body["endpoints"].([]any), map[string]any{"addresses": []any{fmt.Sprintf("10.99.%d.%d", rev/256%256, rev%256)}})
		ix.Upsert("endpoints", librarytest.ObjectID("endpoints", slice.Namespace, slice.Name), rev, body)
		r, err := tg.Render(context.Background(), ix.Stores(), nil)
		if err != nil {
			b.Fatal(err)
		}
		if r.FragmentsRendered != 1 {
			b.Fatalf("%d entries rendered", r.FragmentsRendered)
		}
	}
}
