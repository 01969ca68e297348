package config_test

import (
	"slices"
	"testing"
	"time"

	"github.com/weftio/weft/pkg/config"
)

// TestCanaryDefaultsAndInstances checks which instances are the canaries
// and the defaults of deploy.canary.
func TestCanaryDefaultsAndInstances(t *testing.T) {
	cases := []struct {
		canary string
		want   []string
		hold   time.Duration
		ratio  float64
	}{
		{"{}", []string{"a"}, time.Minute, 0.05},
		{"{instances: 2, hold: 5s}", []string{"a", "b"}, 5 * time.Second, 0.05},
		{"{names: [c], max_5xx_ratio_increase: 0}", []string{"c"}, time.Minute, 0},
	}
	for _, tc := range cases {
		cfg, err := config.Parse([]byte(`
targets:
  edge:
    base: /etc/haproxy
    deploy:
      driver: files
      instances: [{name: c, dest: c}, {name: a, dest: a}, {name: b, dest: b}]
      canary: `+tc.canary+`
    haproxy_config: {template: x}
`), "/tmp")
		if err != nil {
			t.Fatalf("%s: %v", tc.canary, err)
		}
		d := cfg.Targets["edge"].Deploy
		if got := d.CanaryInstances(); !slices.Equal(got, tc.want) {
			t.Errorf("%s: canaries %v, want %v", tc.canary, got, tc.want)
		}
		if d.Canary.Hold.D() != tc.hold || d.Canary.MaxRatioIncrease() != tc.ratio {
			t.Errorf("%s: hold %s, ratio %g", tc.canary, d.Canary.Hold.D(), d.Canary.MaxRatioIncrease())
		}
	}
}
