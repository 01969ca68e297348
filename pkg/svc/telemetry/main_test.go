package telemetry_test

import (
	"testing"

	"go.uber.org/goleak"

	"github.com/weftio/weft/pkg/testkit"
)

// TestMain fails the package's tests when a goroutine outlives them: a
// Tracing shut down leaves neither its batch processors nor its
// exporter's connections behind.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, testkit.LeakOptions()...)
}
