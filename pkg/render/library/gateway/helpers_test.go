package gateway_test

import (
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/render/library/librarytest"
)

// watched is the watched_resources block of README.md: the tests index
// objects exactly as the documentation tells users to declare them.
func watched(t testing.TB) map[string]config.Resource {
	t.Helper()
	return librarytest.Watched(t, "README.md")
}

// fixture is one case under testdata, with requests in the gateway
// routing test's format.
type fixture = librarytest.Fixture[request]

func fixtures(t testing.TB) []fixture {
	t.Helper()
	return librarytest.Fixtures[request](t, watched(t), "testdata")
}

// gatewayTarget is a target that uses the gateway library.
func gatewayTarget(base string, opts map[string]string) config.Target {
	return config.Target{Library: "gateway", LibraryOptions: opts, Base: base}
}
