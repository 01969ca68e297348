package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/testkit"
)

// TestRestartRepairsRemovedOutput: weft stopped, its output folder removed,
// weft started again on the same NATS state (which says everything is
// deployed): the deployer compares the instance with the last accepted
// bundle and delivers it again, and `weft status` says so.
func TestRestartRepairsRemovedOutput(t *testing.T) {
	s := startStack(t, "../../examples/quickstart", nil)
	before := s.deployedAsAccepted(t, time.Minute)
	want := s.read("haproxy.cfg")
	if want == "" || s.reloads() != 1 {
		t.Fatalf("first deploy: haproxy.cfg %q after %d reloads", want, s.reloads())
	}
	s.stop()
	if err := os.RemoveAll(filepath.Join(s.dir, "out")); err != nil {
		t.Fatal(err)
	}

	s.env = testkit.NewEnv(t, s.bus, "e2e-restarted")
	for _, sv := range Services {
		testkit.Run(t, func(ctx context.Context) error { return sv.Run(ctx, s.env.Env, s.cfg) })
	}
	testkit.Eventually(t, time.Minute, func() error {
		if got := s.read("haproxy.cfg"); got != want {
			return fmt.Errorf("haproxy.cfg = %q, want the deployed configuration again", got)
		}
		if s.reloads() != 1 {
			return fmt.Errorf("%d reloads logged in the new output folder, want 1", s.reloads())
		}
		st := s.deployStatus(t)
		if st.Deploys <= before.Deploys || st.BundleHash != before.BundleHash || st.LastError != "" {
			return fmt.Errorf("deploy status %+v, want a new deploy of %s", st, before.BundleHash)
		}
		return nil
	})
	for _, f := range []string{"maps/hosts.map", "maps/exact.map", "maps/prefix.map"} {
		if _, err := os.Stat(s.out(f)); err != nil {
			t.Errorf("%s not delivered again: %v", f, err)
		}
	}
	var out, errOut bytes.Buffer
	if err := statusCmd(t.Context(), []string{"--nats-url", s.bus.URL}, &out, &errOut); err != nil {
		t.Fatalf("weft status: %v %s", err, errOut.String())
	}
	if !strings.Contains(out.String(), "quickstart") || strings.Contains(out.String(), "deploy:") {
		t.Fatalf("weft status:\n%s", out.String())
	}
}
