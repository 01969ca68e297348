package msg_test

import (
	"testing"
	"time"

	"github.com/weftio/weft/pkg/msg"
)

// TestCanaryFor checks which bundle each instance should run in every
// phase of a canary, and under a record about an older bundle.
func TestCanaryFor(t *testing.T) {
	c := msg.Canary{Target: "t", Version: 5, BundleHash: "new", PreviousVersion: 4, PreviousHash: "old",
		Instances: []msg.CanaryInstance{{Instance: "a"}}}
	cases := []struct {
		phase, instance string
		version         uint64 // the last accepted version
		want            string
	}{
		{msg.CanaryDeploying, "a", 5, "new"},
		{msg.CanaryDeploying, "b", 5, "old"},
		{msg.CanaryHolding, "a", 5, "new"},
		{msg.CanaryHolding, "b", 5, "old"},
		{msg.CanaryPassed, "a", 5, "new"},
		{msg.CanaryPassed, "b", 5, "new"},
		{msg.CanaryRefused, "a", 5, "old"},
		{msg.CanaryRefused, "b", 5, "old"},
		// v6 accepted, its canary not started yet: what v5's released.
		{msg.CanaryHolding, "a", 6, "old"},
		{msg.CanaryPassed, "b", 6, "new"},
		{msg.CanaryRefused, "a", 6, "old"},
	}
	for _, tc := range cases {
		c.Phase = tc.phase
		if _, got := c.For(tc.instance, tc.version); got != tc.want {
			t.Errorf("%s, %s, last accepted v%d: %s, want %s", tc.phase, tc.instance, tc.version, got, tc.want)
		}
	}
	now := time.Now()
	c.Phase, c.Hold, c.HoldFrom = msg.CanaryHolding, time.Minute, now.Add(-20*time.Second)
	if left := c.HoldLeft(now); left != 40*time.Second {
		t.Errorf("hold left %s, want 40s", left)
	}
}
