package main

import (
	"fmt"
	"os"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/weftio/weft/pkg/testkit"
	"go.uber.org/goleak"
)

// TestMain runs the tests, or runs the test binary as weft itself when
// asWeft is set (see startWeft).
func TestMain(m *testing.M) {
	if os.Getenv(asWeft) != "" {
		main()
		os.Exit(0)
	}
	// The demo's starter goroutine lives as long as the process, by design.
	goleak.VerifyTestMain(m, append(testkit.LeakOptions(), goleak.IgnoreAnyFunction("github.com/weftio/weft/cmd/weft/internal/demo.starter"))...)
}

// TestOneTraceFromChangeToDeploy edits a manifest and follows the trace: the
// watcher's relay, the renderer's change handler and render, the
// validator's gatherer and kinds, and the deployer's stages all carry one
// trace id.
func TestOneTraceFromChangeToDeploy(t *testing.T) {
	s := deployedOnce(t, nil)
	s.env.Spans.Reset()
	s.editManifest("endpoints.yaml", `"127.0.0.2"`, `"127.0.0.8"`)
	waitFor(t, "deployed", func() error { return contains(s.read("haproxy.cfg"), "127.0.0.8:8080") })
	var deploy sdktrace.ReadOnlySpan
	waitFor(t, "deploy span", func() error {
		for _, sp := range s.env.Spans.Ended() {
			if sp.Name() == "deployer orders" {
				deploy = sp
				return nil
			}
		}
		return errNotYet
	})
	trace := deploy.SpanContext().TraceID()
	want := []string{"watcher upsert manifests", "watcher relay", "renderer changes", "render quickstart", "validator renders", "validator validate-haproxy", "validator validate-template", "deployer verdicts", "deployer orders"}
	// A stage's span ends when its handler returns, which can be after
	// the next stage's: the deployer's verdict handler records the
	// history after it ordered the deploy.
	waitFor(t, "every stage's span in the deploy's trace", func() error {
		got := map[string]bool{}
		for _, sp := range s.env.Spans.Ended() {
			if sp.SpanContext().TraceID() == trace {
				got[sp.Name()] = true
			}
		}
		for _, name := range want {
			if !got[name] {
				return fmt.Errorf("span %q is not in the deploy's trace (trace holds %v)", name, keys(got))
			}
		}
		return nil
	})
	// The order's steps are spans of their own inside the order's.
	steps := map[string]bool{}
	for _, sp := range s.env.Spans.Ended() {
		if sp.Parent().SpanID() == deploy.SpanContext().SpanID() {
			steps[sp.Name()] = true
		}
	}
	for _, name := range []string{"deployer lease", "deployer read state", "deployer load bundle", "deployer apply " + s.cfg.Targets["quickstart"].Deploy.Driver} {
		if !steps[name] {
			t.Errorf("the order's span has no step %q (its steps: %v)", name, keys(steps))
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
