package library_test

import (
	"flag"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/render/library/librarytest"
)

var update = flag.Bool("update", false, "rewrite the golden files under ingress/testdata/<case>/golden")

// TestGolden renders every fixture and compares the bundle's non-empty
// files and the registered errors with golden/ (go test -update rewrites
// them); every bundle must pass haproxy -c.
func TestGolden(t *testing.T) {
	g := librarytest.Golden{
		Resources: watched(t),
		Target:    ingressTarget,
		// Only unused certificate and backend CA slots and an empty
		// crt-list may be empty.
		MayBeEmpty: func(p string) bool {
			return strings.HasPrefix(p, "certs/ingress-tls-") || strings.HasPrefix(p, "files/ingress-backend-ca-") ||
				p == "files/ingress-crt-list"
		},
		Update: *update,
	}
	for _, f := range fixtures(t) {
		t.Run(f.Name, func(t *testing.T) {
			g.Check(t, f.Dir, f.Objects, f.Options)
		})
	}
}
