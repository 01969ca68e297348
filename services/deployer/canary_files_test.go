package deployer_test

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/weftio/weft/pkg/config"
	"github.com/weftio/weft/pkg/msg"
	"github.com/weftio/weft/pkg/testkit"
)

const canaryFilesYAML = `
targets:
  edge:
    base: /etc/haproxy
    deploy:
      driver: files
      check_cmd: "! grep -q BROKEN {{.src}}"
      instances: [{name: a, dest: a}, {name: b, dest: b}, {name: c, dest: c}]
      canary: {names: [b], hold: 3s}
    haproxy_config: {template: unused}
`

// TestCanaryWithoutRuntimeViewAndPinned runs a canary (instance b) with the
// files driver, which has no view of HAProxy: the canary says so and is
// judged by the deploy outcome. A pin during the hold overrides it (b gets
// the pinned bundle, nothing is judged); lifting the pin starts the hold
// again and the bundle then passes. A bundle the canary's check_cmd
// refuses is refused by the canary, and a and c keep the previous one.
func TestCanaryWithoutRuntimeViewAndPinned(t *testing.T) {
	dir := t.TempDir()
	bus := testkit.NATS(t)
	cfg, err := config.Parse([]byte(canaryFilesYAML), dir)
	if err != nil {
		t.Fatal(err)
	}
	r := &canaryRig{t: t, bus: bus, cfg: cfg}
	r.startDeployer("d1")
	r.accept(1, "global # v1\n")
	r.waitCanary(1, msg.CanaryPassed)
	for _, name := range []string{"a", "b", "c"} {
		status(t, bus, name, 1)
	}

	r.accept(2, "global # v2\n")
	holding := r.waitCanary(2, msg.CanaryHolding)
	if u := holding.Instances[0].Unobserved; holding.Instances[0].Instance != "b" || !strings.Contains(u, "files driver has no Runtime API view") {
		t.Errorf("canary instances %+v", holding.Instances)
	}
	if got := read(t, filepath.Join(dir, "b", "haproxy.cfg")); got != "global # v2\n" {
		t.Errorf("b has %q", got)
	}
	var rb msg.RollbackReply
	if err := ask(t, bus, msg.APIRollbackSubject("edge"), msg.RollbackRequest{To: "1", By: "alice"}, &rb); err != nil {
		t.Fatal(err)
	}
	status(t, bus, "b", 1)
	c := r.waitCanary(2, msg.CanaryDeploying)
	if !c.HoldFrom.IsZero() || c.Decided() {
		t.Errorf("canary under a pin: %+v", c)
	}
	var up msg.UnpinReply
	if err := ask(t, bus, msg.APIUnpinSubject("edge"), msg.UnpinRequest{By: "bob"}, &up); err != nil {
		t.Fatal(err)
	}
	status(t, bus, "b", 2)
	passed := r.waitCanary(2, msg.CanaryPassed)
	if !passed.HoldFrom.After(holding.HoldFrom) {
		t.Errorf("the hold did not start again after the pin: %s, was %s", passed.HoldFrom, holding.HoldFrom)
	}
	for _, name := range []string{"a", "c"} {
		if st := status(t, bus, name, 2); st.At.Before(passed.DecidedAt) {
			t.Errorf("%s got v2 before the canary passed", name)
		}
	}

	r.accept(3, "global # v3 BROKEN\n")
	refused := r.waitCanary(3, msg.CanaryRefused)
	if !strings.HasPrefix(refused.Reason, "canary: instance b: deploy refused: ") {
		t.Errorf("refusal %q", refused.Reason)
	}
	for _, name := range []string{"a", "b", "c"} {
		if got := read(t, filepath.Join(dir, name, "haproxy.cfg")); got != "global # v2\n" {
			t.Errorf("%s has %q after v3's canary was refused", name, got)
		}
		if vs := r.deployedVersions(name); slices.Contains(vs, 3) {
			t.Errorf("%s deployed %v", name, vs)
		}
	}
}
