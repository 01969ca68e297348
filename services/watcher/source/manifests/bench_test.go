package manifests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/services/watcher/store"
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

// upsertSink passes on the objects a Source upserts.
type upsertSink struct {
	recordingSink
	upserts chan store.Object
}

func (s *upsertSink) Upsert(_ context.Context, o store.Object) error {
	s.upserts <- o
	return nil
}

// BenchmarkEditOneDocument edits one document of a file of 300 (an
// Ingress-sized ConfigMap each) and measures the time from the write to
// the Source's upsert of the changed object: "known" parses the documents
// that changed, "whole" (the reference, in the same run) the whole file,
// as the source did before it kept the documents' sums. A document's
// edit reaches the sink alone in "known"; in "whole", every object of the
// file does (the store then skips the 299 unchanged), so the time runs to
// the last upsert of the file.
func BenchmarkEditOneDocument(b *testing.B) {
	for _, mode := range []string{"known", "whole"} {
		b.Run(mode, func(b *testing.B) {
			const n = 300
			dir := b.TempDir()
			file := filepath.Join(dir, "apps.yaml")
			content := func(v int) string {
				d := make([]string, n)
				for i := range d {
					d[i] = configMap(fmt.Sprintf("app-%03d", i), strings.Repeat("x", 600))
				}
				d[n/2] = configMap(fmt.Sprintf("app-%03d", n/2), fmt.Sprint(v))
				return docs(d...)
			}
			writeFile(b, file, content(0))
			opts := []Option{WithDebounce(0)}
			if mode == "whole" {
				opts = append(opts, withKnownDocs(nil))
			}
			sink := &upsertSink{upserts: make(chan store.Object, 2*n)}
			runSource(b, NewSource(dir, 0, []string{"configmaps", "services"}, typeOfTest, opts...), sink)
			for len(sink.since(0)) < 2 { // the two types' first listings
				time.Sleep(time.Millisecond)
			}
			want := 1
			if mode == "whole" {
				want = n
			}
			for i := 1; b.Loop(); i++ {
				writeFile(b, file+".tmp~", content(i))
				if err := os.Rename(file+".tmp~", file); err != nil {
					b.Fatal(err)
				}
				for range want {
					select {
					case <-sink.upserts:
					case <-time.After(time.Minute):
						b.Fatal("no upsert within a minute")
					}
				}
			}
		})
	}
}
