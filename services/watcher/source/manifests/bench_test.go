package manifests

import (
	"fmt"
	"path/filepath"
	"testing"
)

// generateFolder writes n manifests of assorted kinds into dir, spread over
// a few subdirectories.
func generateFolder(tb testing.TB, dir string, n int) {
	tb.Helper()
	for i := range n {
		var content string
		switch i % 3 {
		case 0:
			content = configMap(fmt.Sprintf("cm-%d", i), fmt.Sprintf("value %d", i))
		case 1:
			content = fmt.Sprintf(`apiVersion: v1
kind: Service
metadata:
  name: svc-%d
  namespace: shop
  labels:
    app: shop
    tier: backend
spec:
  selector:
    app: shop
  ports:
  - name: http
    port: 80
    targetPort: 8080
  - name: https
    port: 443
    targetPort: 8443
`, i)
		default:
			content = fmt.Sprintf(`apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: ing-%d
  namespace: shop
  annotations:
    haproxy.org/timeout-client: 30s
spec:
  ingressClassName: haproxy
  rules:
  - host: host-%d.example.com
    http:
      paths:
      - path: /
        pathType: Prefix
        backend:
          service:
            name: svc-%d
            port:
              number: 80
`, i, i, i)
		}
		writeFile(tb, filepath.Join(dir, fmt.Sprintf("team-%d", i%10), fmt.Sprintf("obj-%04d.yaml", i)), content)
	}
}

func BenchmarkScan(b *testing.B) {
	dir := b.TempDir()
	generateFolder(b, dir, 1000)
	snap, err := Scan(dir)
	if err != nil {
		b.Fatal(err)
	}
	if len(snap.Objects) != 1000 || len(snap.Errors) != 0 {
		b.Fatalf("got %d objects and %v, want 1000 objects", len(snap.Objects), snap.Errors)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Scan(dir); err != nil {
			b.Fatal(err)
		}
	}
}
